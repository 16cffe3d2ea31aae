"""Run a method over a benchmark, resumably, and write the run directory.

Run directory::

    config.json        the resolved configuration (benchmark, split, options, method parameters, models)
    results.jsonl      one line per finished query: top-k ids and scores, stage rankings, timing, the trace
    metrics.json       official metrics of the final ranking and of every named stage
    run_usage.json     what the search used, where the report needs it (DISBench: the derived track and why)
    report.md          metrics table, per-stage latency and model calls, plots
    recall_at_k.png    recall-at-k curve (any ground truth in the top k)
    time_per_stage.png mean seconds per trace step
    submissions/       CIRR / CIRCO server files for the split
    gallery_manifest.jsonl           the benchmark gallery's manifest

The gallery index itself is shared: ``<cache_dir>/eval-indexes/<benchmark>-<split>-<hash>`` (the hash covers
the image folder and the encoders), built once and reused by every run with the same models, unless
``--index`` names another.

Resuming: every finished query is appended to ``results.jsonl`` and fsync'ed before the next starts,
so a killed run loses at most the query in flight. A rerun with the same run directory (the default
directory is derived from the configuration, so the same command finds it) skips the queries already
there; a half-written last line (a kill mid-write) is cut off first. Queries that raised are recorded
with their error, scored as empty rankings, and tried again on the next run.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imagent import __version__ as version
from imagent.core.redact import redact
from imagent.core.types import Query
from imagent.eval.datasets import Benchmark, BenchmarkError, EvalItem, Predictions, load_benchmark

RESULTS = "results.jsonl"
CONFIG = "config.json"
METRICS = "metrics.json"
INDEX_MARKER = "eval_index.json"
USAGE = "run_usage.json"  # what the run's search used, where the benchmark's report needs it (DISBench's track)

# Settings that do not change what a run computes (where things live, logging): left out of the hash.
_NOT_IN_FINGERPRINT = {"index", "cache_dir", "log_level", "cache_calls"}


class RunError(RuntimeError):
    """The run directory belongs to another configuration, or the run cannot start."""


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

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_dir": str(self.run_dir),
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


# --------------------------------------------------------------------------- small helpers


def json_default(obj: Any) -> Any:
    """Traces may hold numpy scalars/arrays, paths, datetimes: store them readably, never fail."""
    try:
        import numpy as np

        if isinstance(obj, np.generic):
            return obj.item()
        if isinstance(obj, np.ndarray):
            return obj.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(obj, (Path, datetime)):
        return str(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    return repr(obj)


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(redact(json.dumps(data, indent=2, default=json_default, ensure_ascii=False)))  # no key in a file
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fingerprint_core(config: dict[str, Any]) -> dict[str, Any]:
    core = {k: v for k, v in config.items() if k in ("benchmark", "split", "bench_options", "method", "top_k")}
    core["settings"] = {k: v for k, v in config.get("settings", {}).items() if k not in _NOT_IN_FINGERPRINT}
    core["settings"].pop("methods", None)  # the chosen method's resolved params are in core["method"]
    if not core["settings"].get("encoders"):
        core["settings"].pop("encoders", None)  # no extra encoder: the same fingerprint as runs made before them
    return core


def fingerprint(config: dict[str, Any]) -> str:
    """What identifies a run's results: benchmark, split, loader options, method and its resolved
    parameters, depth, models and encoders (not paths, limits or workers)."""
    blob = json.dumps(_fingerprint_core(config), sort_keys=True, default=json_default)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def limit_items(items: Sequence[EvalItem], limit: int | None) -> list[EvalItem]:
    """The first ``limit`` groups (a dialogue's rounds stay together)."""
    if limit is None:
        return list(items)
    keep: list[EvalItem] = []
    groups: set[str] = set()
    for it in items:
        g = it.group or it.id
        if g not in groups:
            if len(groups) >= limit:
                break
            groups.add(g)
        keep.append(it)
    return keep


# --------------------------------------------------------------------------- results log


class ResultsLog:
    """``results.jsonl``: append-only, one fsync'ed line per query, later lines win."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._repair()

    def _repair(self) -> None:
        """Cut a partial last line (a kill mid-write) so the next append starts on a fresh line."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            cut = data.rfind(b"\n") + 1
            with open(self.path, "r+b") as f:
                f.truncate(cut)
                f.flush()
                os.fsync(f.fileno())

    def load(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        if not self.path.exists():
            return out
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn line: that query simply runs again
                qid = str(rec.get("qid", ""))
                if not qid:
                    continue
                prev = out.get(qid)
                # A success is never replaced by a later failure of the same query.
                if prev is None or rec.get("error") is None or prev.get("error") is not None:
                    out[qid] = rec
        return out

    def append(self, record: dict[str, Any]) -> None:
        # Redacted: a trace or error may quote a model server's reply, which may echo the API key.
        line = redact(json.dumps(record, default=json_default, ensure_ascii=False)) + "\n"
        with self._lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())


# --------------------------------------------------------------------------- index


def ensure_index(
    ws: Any,
    bench: Benchmark,
    split: str,
    images_root: Path | None,
    index_dir: Path,
    work_dir: Path,
    allow_missing: bool = False,
    progress: ProgressFn | None = None,
) -> dict[str, Any]:
    """Build the benchmark's gallery index with the index builder, once: a marker records the manifest
    and encoders it was built from, and a matching marker skips the build (the builder itself is
    incremental, so an interrupted build resumes too)."""
    from imagent.index.builder import build_index

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
    options = ws.settings.indexing
    captioner = ws.roles["captioner"] if options.caption_missing else None

    def on_progress(done: int, total: int, path: str) -> None:
        if progress is not None:
            progress("index", done, total, Path(path).name)

    report = build_index(manifest, index_dir, ws.dual_encoder, ws.text_embedder, options,
                         captioner=captioner, progress=on_progress, extras=ws.extra_encoders)
    info = {"built": True, **marker, "report": report.to_dict()}
    write_json_atomic(marker_path, {**marker, "built_at": datetime.now(UTC).isoformat()})
    return info


def index_encoders(settings: Any) -> dict[str, Any]:
    """The encoders a benchmark index is built with (its cache key and marker): the dual encoder, the text
    embedder and, when any are configured, the extra encoders (``[encoders.*]``; left out when there are none,
    so indexes built before extra encoders existed keep their folder)."""
    out: dict[str, Any] = {
        "dual_encoder": settings.dual_encoder.model_dump(mode="json"),
        "text_embedder": settings.text_embedder.model_dump(mode="json"),
    }
    if settings.encoders:
        out["encoders"] = {n: e.model_dump(mode="json") for n, e in sorted(settings.encoders.items())}
    return out


def shared_index_dir(ws: Any, bench: Benchmark, split: str, images_root: Path | None) -> Path:
    """Where a benchmark's gallery index lives when ``--index`` is not given: one folder per benchmark,
    split, image folder and encoders under the cache directory, so every run with the same models
    (any method, any parameters) reuses it instead of indexing the benchmark again."""
    root = images_root or bench.images_root
    key = {"images_root": str(Path(root).expanduser().resolve()) if root else "", **index_encoders(ws.settings)}
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return Path(ws.settings.cache_dir) / "eval-indexes" / f"{bench.name}-{split}-{digest}"


# --------------------------------------------------------------------------- the run


def resolve_config(ws: Any, spec: RunSpec, bench: Benchmark, split: str) -> dict[str, Any]:
    from imagent.methods.base import get_method

    cls = get_method(spec.method)
    params = cls.Config.model_validate(dict(ws.settings.methods.get(spec.method, {})))
    return {
        "benchmark": bench.name,
        "split": split,
        "bench_options": bench.options.model_dump(mode="json"),
        "method": {"name": spec.method, "params": params.model_dump(mode="json"), "tasks": sorted(cls.tasks)},
        "top_k": spec.top_k,
        "annotations": str(spec.annotations) if spec.annotations else None,
        "images_root": str(spec.images_root) if spec.images_root else None,
        "settings": ws.settings.model_dump(mode="json"),
        "imagent_version": version,
    }


def default_run_dir(spec: RunSpec, split: str, fp: str) -> Path:
    return spec.runs_root / f"{spec.benchmark}-{split}-{spec.method}-{fp[:8]}"


def prepare_run_dir(spec: RunSpec, config: dict[str, Any], split: str) -> Path:
    fp = fingerprint(config)
    run_dir = spec.run_dir or default_run_dir(spec, split, fp)
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg_path = run_dir / CONFIG
    if cfg_path.is_file():
        try:
            old = json.loads(cfg_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise RunError(f"{cfg_path} is unreadable ({exc}); use another --run-dir") from exc
        if old.get("fingerprint") != fp:
            old_core, new_core = _fingerprint_core(old), _fingerprint_core(config)
            changed = sorted(k for k in new_core if old_core.get(k) != new_core.get(k))
            raise RunError(
                f"{run_dir} holds a run with a different configuration (differs in: {', '.join(changed) or '?'}); "
                "resuming would mix results. Use another --run-dir, or delete that directory."
            )
    else:
        write_json_atomic(cfg_path, {**config, "fingerprint": fp, "created": datetime.now(UTC).isoformat()})
    return run_dir


def run_eval(ws: Any, spec: RunSpec, progress: ProgressFn | None = None,
             log: Callable[[str], None] | None = None) -> RunSummary:
    """Run (or resume) ``spec`` and write every output file; see the module doc."""
    say = log or (lambda _msg: None)
    bench = load_benchmark(spec.benchmark, spec.annotations, spec.images_root, **spec.bench_options)
    split = bench.check_split(spec.split)
    all_items = bench.queries(split)
    items = limit_items(all_items, spec.limit)
    if not items:
        raise BenchmarkError(f"{bench.name} {split}: no queries")
    config = resolve_config(ws, spec, bench, split)
    _check_tasks(bench, split, items, spec.method, set(config["method"]["tasks"]))
    run_dir = prepare_run_dir(spec, config, split)
    results = ResultsLog(run_dir / RESULTS)
    done = {q: r for q, r in results.load().items() if r.get("error") is None}
    extra = bench.subset_items(items)  # CIRR subset mode: every query again inside its members
    pending = [it for it in [*items, *extra] if it.id not in done]
    already = len(items) + len(extra) - len(pending)
    runs = f"{len(items)} queries" + (f" + {len(extra)} subset-mode runs" if extra else "")
    say(f"{bench.name} {split}: {runs}, {already} done, {len(pending)} to run -> {run_dir}")
    errors = 0
    if pending:
        errors = _run_pending(ws, spec, bench, split, pending, run_dir, results, progress, say)
    elif progress is not None:
        progress("queries", len(items), len(items), "")
    from imagent.eval.report import write_outputs

    metrics, files = write_outputs(run_dir, bench, split, items, results.load(), config, spec.top_k,
                                   split_size=len(all_items))
    return RunSummary(run_dir, bench.name, split, spec.method, len(items), already, len(pending), errors,
                      metrics, files)


def _run_pending(ws: Any, spec: RunSpec, bench: Benchmark, split: str, pending: list[EvalItem], run_dir: Path,
                 results: ResultsLog, progress: ProgressFn | None, say: Callable[[str], None]) -> int:
    index_dir = spec.index or shared_index_dir(ws, bench, split, spec.images_root)
    info = ensure_index(ws, bench, split, spec.images_root, index_dir, run_dir, spec.allow_missing, progress)
    if info.get("built"):
        rep = info.get("report", {})
        say(f"gallery index {index_dir}: {info['images']} images ({rep.get('added', 0)} added, "
            f"{len(rep.get('skipped', []))} skipped)")
    one = query_runner(ws, spec, bench, split, index_dir, run_dir, say)
    total, finished, errors = len(pending), 0, 0
    lock = threading.Lock()

    def record(rec: dict[str, Any]) -> None:
        nonlocal finished, errors
        results.append(rec)
        with lock:
            finished += 1
            if rec.get("error"):
                errors += 1
                say(f"query {rec['qid']} failed: {rec['error']}")
        if progress is not None:
            progress("queries", finished, total, rec["qid"])

    if progress is not None:
        progress("queries", 0, total, "")
    if spec.ray:
        from imagent.eval.distributed import run_on_ray

        for rec in run_on_ray(ws, spec, split, index_dir, run_dir, pending):
            record(rec)
    elif spec.workers <= 1:
        for item in pending:
            record(one(item))
    else:
        with ThreadPoolExecutor(max_workers=spec.workers) as pool:
            futures = [pool.submit(one, it) for it in pending]
            for fut in as_completed(futures):
                record(fut.result())
    return errors


def query_runner(ws: Any, spec: RunSpec, bench: Benchmark, split: str, index_dir: Path, run_dir: Path,
                 say: Callable[[str], None]) -> Callable[[EvalItem], dict[str, Any]]:
    """Open the gallery and the method once and return ``one(item) -> results.jsonl record``: what every
    worker runs, a thread here or a Ray actor (:mod:`imagent.eval.distributed`)."""
    gallery = ws.gallery(index_dir)
    gallery.reload()
    method = ws.method(spec.method, index_dir)
    start_run = getattr(method, "start_run", None)  # a method that learns across queries (PhotoCraft's skills)
    if start_run is not None:
        start_run(run_dir)
    learn = getattr(method, "learn_from_outcome", None)
    for warning in method.preflight():  # raises (the run stops) when the method cannot run on this index
        say(f"warning: {warning}")
    usage = bench.run_usage(method, bool(getattr(ws.settings.indexing, "caption_missing", False)))
    if usage is not None:  # what the search used (DISBench: its derived track); the report states it
        write_json_atomic(run_dir / USAGE, usage)
    depth = bench.search_depth(split, len(gallery), spec.top_k)

    def one(item: EvalItem) -> dict[str, Any]:
        t0 = time.perf_counter()
        try:
            query = _with_gallery_records(bench.adapt_query(item, method.tasks), gallery)
            result = method.search(query, top_k=depth)
            if learn is not None:
                _learn(learn, bench, item, query, result)
        except Exception as exc:  # one failing query must not end a long run; it is retried next time
            return {"qid": item.id, "group": item.group, "error": redact(f"{type(exc).__name__}: {exc}"),
                    "seconds": round(time.perf_counter() - t0, 4)}
        ids = list(result.ranking.ids)
        rec: dict[str, Any] = {
            "qid": item.id,
            "group": item.group,
            "ids": ids[: spec.top_k],
            "scores": [round(float(s), 6) for s in result.ranking.scores[: spec.top_k]],
            "extras": bench.record_extras(item, ids),
            "stages": {k: list(v.ids[: spec.top_k]) for k, v in result.stages.items()},
            "stage_extras": {k: bench.record_extras(item, list(v.ids)) for k, v in result.stages.items()},
            "seconds": round(time.perf_counter() - t0, 4),
            "model_calls": result.trace.model_calls,
            "answer_set": list(result.answer_set) if result.answer_set is not None else None,
            "source": result.source,
            "source_reason": result.source_reason,
            "counts": dict(result.counts),
            "trace": result.trace.to_dict(),
            # A result whose model calls failed is a query error (scored empty, retried next run), not an answer.
            "error": redact(f"model calls failed: {result.source_reason}") if result.is_error else None,
            "finished": datetime.now(UTC).isoformat(),
        }
        return rec

    return one


def _learn(learn: Callable[..., Any], bench: Benchmark, item: EvalItem, query: Query, result: Any) -> None:
    """Tell a learning method how its answer scored (DISBench: the episode's F1); a failure to learn is
    noted in the query's trace and never fails the query."""
    if result.source != "method":  # a fallback or an error is no outcome of the method's own to learn from
        return
    score = bench.outcome_score(item, list(result.ranking.ids), result.answer_set) if item.has_truth else None
    if score is None:
        return
    try:
        learn(query, result, score)
    except Exception as exc:
        result.trace.count("learning_failed")
        with result.trace.step("learning.failed") as step:
            step.note(f"learning from this query failed: {type(exc).__name__}: {exc}")


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


def _with_gallery_records(query: Query, gallery: Any) -> Query:
    """Replace the loader's bare reference (id only) with the gallery's full record (path, caption)."""
    ref = query.reference
    if ref is not None and not ref.path:
        if ref.id not in gallery:
            raise BenchmarkError(f"reference image {ref.id!r} is not in the gallery index (missing image?)")
        query.reference = gallery.record(ref.id)
    return query


# --------------------------------------------------------------------------- predictions from a run


def predictions_from_results(records: dict[str, dict[str, Any]], stage: str | None = None) -> Predictions:
    """Rankings (final, or one named stage) from results.jsonl records; failed queries are left out
    (scored as empty rankings). A query without that stage falls back to its final ranking. The final
    predictions also carry the answer sets of set-valued methods."""
    rankings: dict[str, list[str]] = {}
    subset: dict[str, list[str]] = {}
    sets: dict[str, list[str]] = {}
    for qid, rec in records.items():
        if rec.get("error") is not None:
            continue
        if stage is None or stage not in rec.get("stages", {}):
            rankings[qid] = list(rec.get("ids", []))
            extras = rec.get("extras") or {}
            if rec.get("answer_set") is not None:
                sets[qid] = list(rec["answer_set"])
        else:
            rankings[qid] = list(rec["stages"][stage])
            extras = (rec.get("stage_extras") or {}).get(stage) or {}
        if "subset" in extras:
            subset[qid] = list(extras["subset"])
    return Predictions(rankings, subset, sets=sets)


def stage_names(records: Iterable[dict[str, Any]]) -> list[str]:
    seen: dict[str, None] = {}
    for rec in records:
        for k in rec.get("stages", {}) or {}:
            seen.setdefault(k, None)
    return list(seen)


__all__ = [
    "ResultsLog",
    "RunError",
    "RunSpec",
    "RunSummary",
    "ensure_index",
    "fingerprint",
    "limit_items",
    "predictions_from_results",
    "run_eval",
    "shared_index_dir",
]
