"""Run a method over a benchmark, resumably, and write the run directory.

Run directory (its files are read and written through :mod:`imagent.eval.records`)::

    config.json        the run's id, identity and resolved configuration (benchmark, split, the queries and
                       how they were chosen, method parameters, models, images root, index)
    results.jsonl      one line per finished query: top-k ids and scores, stage rankings, timing, the trace
    metrics.json       official metrics of the final ranking and of every named stage
    run_usage.json     what the search used, where the report needs it (DISBench: the derived track and why)
    report.md          metrics table, per-stage latency and model calls, plots
    recall_at_k.png    recall-at-k curve (any ground truth in the top k)
    time_per_stage.png mean seconds per trace step
    submissions/       CIRR / CIRCO server files for the split

The default folder is ``runs/<benchmark>-<split>-<method>[-n<limit>]-<run id>``; the run id hashes everything
that changes results (:mod:`imagent.eval.identity`), so a run with other settings (another ``--limit``,
``--images-root`` or parameter) gets another folder, and ``--run-dir`` naming the folder of another run is
refused with the difference named.

The gallery index itself is shared: ``<cache_dir>/eval-indexes/<benchmark>-<split>-<hash>`` (the hash covers
the image folder and the encoders), built once and reused by every run with the same models, unless
``--index`` names another.

Resuming: every finished query is appended to ``results.jsonl`` as soon as it is done (written and flushed: a
killed run loses at most the queries in flight) and fsync'ed with the others that finished with it (one fsync per
batch of concurrent workers' results, :class:`~imagent.eval.records.ResultsLog`; the run ends synced). The same
command again finds the same folder and skips the queries already there; a half-written last line (a kill
mid-write) is cut off first. Queries that
raised are recorded with their error, scored as empty rankings, and tried again on the next run. Each query
is answered by :func:`imagent.eval.worker.query_runner` on the request path every interface uses
(:meth:`imagent.api.Workspace.prepare` / :meth:`~imagent.api.Workspace.run`); the method's config is validated
once per run (:meth:`~imagent.api.Workspace.prepare_method`) and the method built once. OSCAR with no golden
library gets one built first from a small training split of the benchmark
(:func:`imagent.eval.oscar_library.ensure_library`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imagent import __version__ as version
from imagent.api import PreparedMethod, Workspace
from imagent.eval.datasets import Benchmark, BenchmarkError, EvalItem, load_benchmark
from imagent.eval.identity import check_same_run, folder_name, queries_digest, run_id, select_items
from imagent.eval.indexing import ensure_index, shared_index_dir
from imagent.eval.records import (
    CALL_KEYS,
    CONFIG,
    INDEX_INFO,
    METRICS,
    RESULTS,
    CallRecorder,
    ResultsLog,
    RunError,
    RunFolder,
    RunRecord,
    predictions_from_results,
    stage_names,
    write_json_atomic,
)
from imagent.eval.worker import query_runner


@dataclass
class RunSpec:
    benchmark: str
    method: str
    split: str | None = None
    annotations: Path | None = None
    images_root: Path | None = None
    bench_options: dict[str, Any] = field(default_factory=dict)
    top_k: int = 50
    limit: int | None = None
    sample: str = "stratified"  # how --limit chooses its queries: "stratified" (seeded) or "first"
    seed: int = 0
    run_dir: Path | None = None
    index: Path | None = None
    workers: int = 1
    ray: str | None = None  # run the queries as tasks on a Ray cluster: "local", "auto" or an address
    allow_missing: bool = False
    runs_root: Path = Path("runs")


@dataclass
class RunSummary:
    run_dir: Path
    benchmark: str
    split: str
    method: str
    total: int
    already_done: int
    new: int
    errors: int
    metrics: dict[str, Any]
    files: dict[str, str] = field(default_factory=dict)
    run_id: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
            "run_id": self.run_id,
            "benchmark": self.benchmark,
            "split": self.split,
            "method": self.method,
            "queries": self.total,
            "already_done": self.already_done,
            "new": self.new,
            "errors": self.errors,
            "metrics": self.metrics,
            "files": self.files,
        }


# Progress callbacks: (phase, done, total, label). Phases: "index", "queries".
ProgressFn = Callable[[str, int, int, str], None]


def limit_items(items: Sequence[EvalItem], limit: int | None) -> list[EvalItem]:
    """The first ``limit`` groups (a dialogue's rounds stay together); see :func:`select_items`."""
    return select_items(items, limit, "first")


# --------------------------------------------------------------------------- the run


def check_images_root(bench: Benchmark, images_root: Path | None) -> None:
    """A given ``--images-root`` must be a folder with something in it: refused before any model loads."""
    if images_root is None:
        return
    root = Path(images_root).expanduser()
    layout = f"\nExpected layout: {bench.layout}" if bench.layout else ""
    if not root.exists():
        raise RunError(f"--images-root {images_root} does not exist{layout}")
    if not root.is_dir():
        raise RunError(f"--images-root {images_root} is not a folder{layout}")
    if next(root.iterdir(), None) is None:
        raise RunError(f"--images-root {images_root} is empty{layout}")


def _resolved(path: Path | None) -> str | None:
    return str(Path(path).expanduser().resolve()) if path else None


def resolve_config(ws: Workspace, spec: RunSpec, bench: Benchmark, split: str,
                   items: Sequence[EvalItem] = (), prepared: PreparedMethod | None = None) -> dict[str, Any]:
    """The run's configuration as config.json stores it; :func:`imagent.eval.identity.identity` picks the
    part of it that decides the results. ``prepared``: the run's method (else prepared here)."""
    prepared = prepared or ws.prepare_method(spec.method, index=spec.index)
    cls, params = prepared.method_class, prepared.config
    root = spec.images_root or bench.images_root
    selection: dict[str, Any] = {"limit": spec.limit, "queries": len(items), "digest": queries_digest(items)}
    if spec.limit is not None:
        selection["sample"] = spec.sample
        if spec.sample == "stratified":
            selection["seed"] = spec.seed
    return {
        "benchmark": bench.name,
        "split": split,
        "bench_options": bench.options.model_dump(mode="json"),
        "method": {"name": spec.method, "params": params.model_dump(mode="json"), "tasks": sorted(cls.tasks)},
        "top_k": spec.top_k,
        "selection": selection,
        "images": {"root": _resolved(root)},
        "index": {"dir": _resolved(spec.index)} if spec.index else {"dir": None, "shared": True},
        "annotations": _resolved(spec.annotations),
        "images_root": str(spec.images_root) if spec.images_root else None,
        "settings": ws.settings.model_dump(mode="json"),
        "imagent_version": version,
    }


def fingerprint(config: dict[str, Any]) -> str:
    """The run's id (kept under its old name): see :func:`imagent.eval.identity.run_id`."""
    return run_id(config)


def prepare_run_dir(spec: RunSpec, config: dict[str, Any]) -> Path:
    """The run's folder: ``--run-dir`` or the default one; a new folder gets config.json, an existing one must
    hold a run of the same identity."""
    rid = run_id(config)
    run_dir = spec.run_dir or spec.runs_root / folder_name(config, rid)
    folder = RunFolder(run_dir)
    if folder.exists():
        check_same_run(run_dir, folder.config(), config)
    else:
        folder.write_config({"run_id": rid, **config, "fingerprint": rid,
                             "created": datetime.now(UTC).isoformat()})
    return run_dir


def run_eval(ws: Workspace, spec: RunSpec, progress: ProgressFn | None = None,
             log: Callable[[str], None] | None = None) -> RunSummary:
    """Run (or resume) ``spec`` and write every output file; see the module doc."""
    say = log or (lambda _msg: None)
    bench = load_benchmark(spec.benchmark, spec.annotations, spec.images_root, **spec.bench_options)
    check_images_root(bench, spec.images_root)
    split = bench.check_split(spec.split)
    all_items = bench.queries(split)
    items = select_items(all_items, spec.limit, spec.sample, spec.seed, bench.stratum)
    if not items:
        raise BenchmarkError(f"{bench.name} {split}: no queries")
    index_dir = spec.index or shared_index_dir(ws, bench, split, spec.images_root)
    prepared = ws.prepare_method(spec.method, index=index_dir)  # the run's one config validation
    config = resolve_config(ws, spec, bench, split, items, prepared)
    _check_tasks(bench, split, items, spec.method, set(config["method"]["tasks"]))
    run_dir = prepare_run_dir(spec, config)
    folder = RunFolder(run_dir)
    with folder.writer(), _recording_calls(ws, folder.path / CALL_KEYS), folder.results() as results:
        done = {q: r for q, r in results.load().items() if r.error is None}
        extra = bench.subset_items(items)  # CIRR subset mode: every query again inside its members
        pending = [it for it in [*items, *extra] if it.id not in done]
        already = len(items) + len(extra) - len(pending)
        runs = f"{len(items)} queries" + (f" + {len(extra)} subset-mode runs" if extra else "")
        say(f"{bench.name} {split}: {runs}, {already} done, {len(pending)} to run -> {run_dir}")
        errors = 0
        if pending:
            from imagent.eval.oscar_library import ensure_library

            ensure_library(ws, spec.method, bench, split, spec.images_root, spec.allow_missing, say, progress,
                           cfg=prepared.config)
            errors = _run_pending(ws, spec, prepared, bench, split, pending, run_dir, results, progress, say)
        elif progress is not None:
            progress("queries", len(items), len(items), "")
        from imagent.eval.report import write_outputs

        metrics, files = write_outputs(run_dir, bench, split, items, results.load(), config, spec.top_k,
                                       split_size=len(all_items))
    return RunSummary(run_dir, bench.name, split, spec.method, len(items), already, len(pending), errors,
                      metrics, files, run_id=run_id(config))


@contextmanager
def _recording_calls(ws: Workspace, *paths: Path) -> Iterator[None]:
    """While the block runs, every call-cache key the workspace serves or computes is appended to ``paths``
    (what ``imagent pack`` later copies out of the cache). No call cache: nothing to record."""
    cache = ws.call_cache
    if cache is None:
        yield
        return
    recorder = CallRecorder(*paths)
    cache.add_listener(recorder)
    try:
        yield
    finally:
        cache.remove_listener(recorder)


def _run_pending(ws: Workspace, spec: RunSpec, prepared: PreparedMethod, bench: Benchmark, split: str,
                 pending: list[EvalItem], run_dir: Path, results: ResultsLog, progress: ProgressFn | None,
                 say: Callable[[str], None]) -> int:
    index_dir = Path(prepared.index) if prepared.index is not None else shared_index_dir(ws, bench, split,
                                                                                       spec.images_root)
    index_dir.mkdir(parents=True, exist_ok=True)
    with _recording_calls(ws, index_dir / CALL_KEYS):  # a captioner's calls belong to the index (and to packs)
        # Files a loader writes for its gallery (crops, neutral names) live with the index every run shares.
        info = ensure_index(ws, bench, split, spec.images_root, index_dir, index_dir, spec.allow_missing, progress)
    write_json_atomic(run_dir / INDEX_INFO, {"dir": str(Path(index_dir).resolve()),
                                             **{k: v for k, v in info.items() if k not in ("built", "report")}})
    if info.get("built"):
        rep = info.get("report", {})
        say(f"gallery index {index_dir}: {info['images']} images ({rep.get('added', 0)} added, "
            f"{len(rep.get('skipped', []))} skipped)")
    total, finished, errors = len(pending), 0, 0

    def counted(rec: RunRecord) -> None:  # the main thread's bookkeeping, after the record's line is written
        nonlocal finished, errors
        finished += 1
        if rec.error:
            errors += 1
            say(f"query {rec.qid} failed: {rec.error}")
        if progress is not None:
            progress("queries", finished, total, rec.qid)

    if progress is not None:
        progress("queries", 0, total, "")
    if spec.ray:
        from imagent.eval.distributed import run_on_ray

        for rec in run_on_ray(ws, spec, split, index_dir, run_dir, pending):
            results.append(rec)
            counted(rec)
        return errors
    one = query_runner(ws, prepared, spec.top_k, bench, split, run_dir, say)
    for rec in _answered(one, pending, spec.workers, results):
        counted(rec)
    return errors


def _answered(one: Callable[[EvalItem], RunRecord], pending: Sequence[EvalItem], workers: int,
              results: ResultsLog) -> Iterator[RunRecord]:
    """Answer ``pending`` with ``workers`` threads, yielding each record once its line is written. The serial
    part is kept small: a worker builds its record's line itself (JSON, redaction), and the records that finished
    together are written with one fsync (:meth:`ResultsLog.write`)."""
    if workers <= 1:
        for item in pending:
            rec = one(item)
            results.append(rec)
            yield rec
        return

    def answer(item: EvalItem) -> tuple[RunRecord, str]:
        rec = one(item)
        return rec, ResultsLog.line(rec)

    with ThreadPoolExecutor(max_workers=workers) as pool:
        running = {pool.submit(answer, item) for item in pending}
        while running:
            done, running = wait(running, return_when=FIRST_COMPLETED)
            batch = [fut.result() for fut in done]
            results.write([line for _, line in batch])
            for rec, _ in batch:
                yield rec


def _check_tasks(bench: Benchmark, split: str, items: Sequence[EvalItem], method: str, tasks: set[str]) -> None:
    """Refuse up front when the method cannot answer some of the split's queries (scoring only the
    ones it can would silently change what the numbers mean)."""
    unsupported = Counter(q.task for q in (bench.adapt_query(it, tasks) for it in items) if q.task not in tasks)
    if unsupported:
        kinds = ", ".join(f"{n} {t}" for t, n in sorted(unsupported.items()))
        hint = ""
        if any(t in bench.splits for t in tasks):
            hint = f"; try --split {next(t for t in sorted(tasks) if t in bench.splits)}"
        raise RunError(f"method {method!r} handles {', '.join(sorted(tasks))} queries, but {bench.name} {split} "
                       f"has {kinds} queries{hint}")


__all__ = [
    "CONFIG",
    "METRICS",
    "RESULTS",
    "ResultsLog",
    "RunError",
    "RunSpec",
    "RunSummary",
    "check_images_root",
    "ensure_index",
    "fingerprint",
    "limit_items",
    "predictions_from_results",
    "run_eval",
    "shared_index_dir",
    "stage_names",
]
