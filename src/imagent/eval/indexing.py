"""A benchmark's gallery index for an eval or a library build: built once through :meth:`Workspace.index` (the
composition every index build goes through, so a benchmark index and ``imagent index`` of the same manifest build
the same index), keyed by the encoders and the per-photo stages (:func:`index_encoders`), in one shared folder per
benchmark, split, image folder and that key (:func:`shared_index_dir`) unless the caller names another."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imagent.api import Workspace
from imagent.core.config import PIXEL_MODEL_NAMES, Settings
from imagent.eval.datasets import Benchmark
from imagent.eval.records import INDEX_MARKER, json_default, write_json_atomic
from imagent.index.parts import stages_key

# Progress callbacks: (phase, done, total, label).
ProgressFn = Callable[[str, int, int, str], None]


def ensure_index(
    ws: Workspace,
    bench: Benchmark,
    split: str,
    images_root: Path | None,
    index_dir: Path,
    work_dir: Path,
    allow_missing: bool = False,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Build the benchmark's gallery index with :meth:`Workspace.index`, once: a marker records the manifest,
    encoders and stages it was built from, and a matching marker skips the build (the builder itself is
    incremental, so an interrupted build resumes too)."""
    encoders = index_encoders(ws.settings)
    marker_path = index_dir / INDEX_MARKER
    old: dict[str, Any] = {}
    if marker_path.is_file():
        try:
            old = json.loads(marker_path.read_text())
        except (OSError, json.JSONDecodeError):
            old = {}
    # No images given: an index built earlier for this benchmark split with these encoders is reused as is.
    same_build = (old.get("benchmark"), old.get("split"), old.get("encoders")) == (bench.name, split, encoders)
    if images_root is None and bench.images_root is None and same_build:
        return {"built": False, **old}
    rows = bench.gallery_manifest(split, images_root, work_dir, allow_missing)
    manifest_blob = "\n".join(json.dumps(r, sort_keys=True, default=json_default) for r in rows)
    marker = {
        "benchmark": bench.name,
        "split": split,
        "images": len(rows),
        "manifest_sha256": hashlib.sha256(manifest_blob.encode()).hexdigest(),
        "encoders": encoders,
    }
    if old and {k: old.get(k) for k in marker} == marker:
        return {"built": False, **marker}
    # The manifest lives in the index folder: the builder ties records to their source file, so one
    # stable path per index keeps a shared --index consistent across run directories.
    index_dir.mkdir(parents=True, exist_ok=True)
    manifest = index_dir / "eval_manifest.jsonl"
    tmp = manifest.with_name(f".{manifest.name}.tmp")
    tmp.write_text(manifest_blob + "\n", encoding="utf-8")
    os.replace(tmp, manifest)

    def on_progress(done: int, total: int, path: str) -> None:
        if progress is not None:
            progress("index", done, total, Path(path).name)

    report = ws.index(manifest, index_dir, progress=on_progress)
    info = {"built": True, **marker, "report": report.to_dict()}
    write_json_atomic(marker_path, {**marker, "built_at": datetime.now(UTC).isoformat()})
    return info


def index_encoders(settings: Settings) -> dict[str, Any]:
    """What a benchmark index is built with (its cache key and marker): the dual encoder, the text embedder, when any
    are configured the extra encoders (``[encoders.*]``; left out when there are none), and the per-photo stages a
    manifest's build runs besides the embedding, with their versions (``stages``: the pixel model when
    ``pixels.model`` is set; the text in photos with ``ocr.enabled``; faces with ``faces.mode = "on"``), so an index
    cached without a stage is not reused."""
    out: dict[str, Any] = {
        "dual_encoder": settings.dual_encoder.model_dump(mode="json"),
        "text_embedder": settings.text_embedder.model_dump(mode="json"),
    }
    if settings.encoders:
        out["encoders"] = {n: e.model_dump(mode="json") for n, e in sorted(settings.encoders.items())}
    stages = stages_key(settings, from_folder=False)
    if stages:  # left out when a manifest's build runs no stage besides the embedding (the key indexes had before)
        out["stages"] = stages
    backend = settings.dual_encoder.backend
    # T, template and parents shape the ConSE vectors: every image vector with a pixel dual encoder, the captionless
    # photos' in caption mode with the pixel model
    if backend in PIXEL_MODEL_NAMES or (backend == "caption" and "pixels" in stages):
        keep = ("conse_top", "template", "parent_depth", "parent_min_count", "labels_top_k")
        out["pixels"] = {k: v for k, v in settings.pixels.model_dump(mode="json").items() if k in keep}
    return out


def shared_index_dir(ws: Workspace, bench: Benchmark, split: str, images_root: Path | None) -> Path:
    """Where a benchmark's gallery index lives when ``--index`` is not given: one folder per benchmark,
    split, image folder and encoders under the cache directory, so every run with the same models
    (any method, any parameters) reuses it instead of indexing the benchmark again."""
    root = images_root or bench.images_root
    key = {"images_root": str(Path(root).expanduser().resolve()) if root else "", **index_encoders(ws.settings),
           **bench.index_key()}  # loader options that change the gallery (stamps' captions=withheld)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return Path(ws.settings.cache_dir) / "eval-indexes" / f"{bench.name}-{split}-{digest}"


__all__ = ["ensure_index", "index_encoders", "shared_index_dir"]
