"""OSCAR's golden library built from a benchmark's training queries: the one build path of ``imagent oscar
build-library`` and of an eval that finds no library.

:func:`build_benchmark_library` indexes the split's images (shared with the eval when the index folder is the
same), runs the atomic retrievals and both MIPs on each query with ground truth (composed or text-to-image, never a
dialogue) and appends each optimal trajectory, resumably (:func:`imagent.methods.oscar.library.build_library`).

:func:`ensure_library` is what ``imagent eval BENCH --method oscar`` runs first: with demonstrations on (the paper's
default) and no entry at the library path, a benchmark with a ``train`` split of at most :data:`AUTO_BUILD_MAX`
usable queries (the stamps mini benchmark's 33) gets its library built from that split before the first query, and
the eval says where and what it cost; a larger one (CIRR's 28k) is left to ``imagent oscar build-library`` with the
paper's ``--fraction``, and the method's preflight refuses with that command. A library is never built from the
evaluated split, and an entry is never shown to the query it was built from (decision 7).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from imagent.api import Workspace
from imagent.eval.datasets.base import Benchmark

# A training split of at most this many usable queries is built into a library when an eval needs one.
AUTO_BUILD_MAX = 500
ProgressFn = Callable[[str, int, int, str], None]


@dataclass
class LibraryBuild:
    """What a build did: the library, the index it searched, the queries it learned from and the build report."""

    library: Path
    index: Path
    queries: int
    report: Any  # imagent.methods.oscar.library.BuildReport
    entries: int

    def summary(self) -> dict[str, Any]:
        return {"library": str(self.library), "index": str(self.index), "queries": self.queries,
                **self.report.to_dict(), "entries": self.entries}


def oscar_config(ws: Workspace) -> Any:
    """The workspace's OSCAR configuration (``methods.oscar``), validated (:meth:`Workspace.method_config`)."""
    from imagent.methods.base import get_method

    return ws.method_config(get_method("oscar"))


def training_items(bench: Benchmark, split: str, fraction: float = 1.0, seed: int = 0,
                   limit: int | None = None) -> list[Any]:
    """The split's queries a library learns from (ground truth, no dialogue), sampled by ``fraction`` and cut to
    ``limit``, in the split's order."""
    items = [it for it in bench.queries(split) if it.positives and not it.query.dialogue]
    if not items:
        raise ValueError(f"{bench.name} {split} has no composed or text-to-image queries with ground truth to "
                         "learn from")
    if fraction < 1.0:
        n = max(1, round(fraction * len(items)))
        items = sorted(random.Random(seed).sample(items, n), key=items.index)
    return items[:limit] if limit is not None else items


def build_benchmark_library(ws: Workspace, bench: Benchmark, split: str, path: Path, items: list[Any], *,
                            images_root: Path | None = None, index_dir: Path | None = None,
                            allow_missing: bool = False, progress: ProgressFn | None = None,
                            cfg: Any = None) -> LibraryBuild:
    """Index ``split`` (default folder: beside the library) and add each item's trajectory to the library at
    ``path``. ``progress(phase, done, total, label)``: phases of the index, then ``trajectories``; ``cfg``: the
    OSCAR configuration (default: the workspace's, :func:`oscar_config`)."""
    from imagent.eval.indexing import ensure_index
    from imagent.eval.worker import _with_gallery_records
    from imagent.methods.oscar.library import GoldenLibrary, build_library

    cfg = cfg or oscar_config(ws)
    index = index_dir or path.with_name(f"{path.stem}-index-{bench.name}")
    ensure_index(ws, bench, split, images_root, index, index, allow_missing, progress)
    gallery = ws.gallery(index)
    gallery.reload()
    ctx = ws.context(index)
    triples = ((f"{bench.name}/{split}/{it.id}", _with_gallery_records(it.query, gallery), list(it.positives))
               for it in items)
    total = len(items)

    def on_item(done: int, key: str) -> None:
        if progress is not None:
            progress("trajectories", done, total, key)

    report = build_library(ctx, cfg, triples, GoldenLibrary(path), progress=on_item)
    return LibraryBuild(path, index, total, report, len(GoldenLibrary(path).entries()))


def ensure_library(ws: Workspace, method: str, bench: Benchmark, split: str, images_root: Path | None,
                   allow_missing: bool, say: Callable[[str], None],
                   progress: ProgressFn | None = None, cfg: Any = None) -> LibraryBuild | None:
    """Before an eval of ``method``: build OSCAR's missing library from the benchmark's small ``train`` split (see
    the module doc). None when nothing was built (another method, demonstrations off, a library with entries, or no
    small training split: the method's preflight then refuses with the build command). ``cfg``: the run's OSCAR
    configuration, validated already (default: :func:`oscar_config`)."""
    if method != "oscar":
        return None
    from imagent.methods.oscar.library import GoldenLibrary

    cfg = cfg or oscar_config(ws)
    path = cfg.library_path()
    if not cfg.demonstrations or "train" not in bench.splits or split == "train":
        return None
    lib = GoldenLibrary(path)
    if lib.exists() and lib.entries():
        return None
    try:
        items = training_items(bench, "train")
    except ValueError:  # nothing to learn from: the preflight's refusal names the fixes
        return None
    if len(items) > AUTO_BUILD_MAX:
        return None
    say(f"OSCAR: no golden library at {path}: building one from {bench.name} train ({len(items)} queries; "
        "atomic retrievals, two MIPs and one rewriter call each)")
    built = build_benchmark_library(ws, bench, "train", path, items, images_root=images_root,
                                    allow_missing=allow_missing, progress=progress, cfg=cfg)
    rep = built.report
    say(f"OSCAR: library {path}: {rep.added} added, {rep.no_target} without a reachable target, "
        f"{len(rep.errors)} failed, {built.entries} entries ({rep.seconds:.1f} s)")
    return built


__all__ = ["AUTO_BUILD_MAX", "LibraryBuild", "build_benchmark_library", "ensure_library", "oscar_config",
           "training_items"]
