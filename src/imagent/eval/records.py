"""The run folder's records: what an eval run writes and what reports, comparisons and packs read back.

A run folder (see :mod:`imagent.eval.runner` for how one is made)::

    config.json     the run's identity (:mod:`imagent.eval.identity`) and resolved configuration
    results.jsonl   one :class:`RunRecord` per finished query, appended (flushed, then fsync'ed: :class:`ResultsLog`)
    metrics.json    the scores and run statistics written by :mod:`imagent.eval.report`

Use :class:`RunFolder` to open one (``RunFolder(path).records()``, ``.config()``, ``.metrics()``) and
:func:`predictions_from_results` to turn its records into the rankings a benchmark scores. Every JSON file is
written with :func:`write_json_atomic` (a temporary file, fsync, rename; secrets masked), so a kill never
leaves half a file. This module knows nothing of methods or of how a run is orchestrated.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from imagent.core.inputs import jsonl_objects
from imagent.core.redact import redact
from imagent.eval.datasets.base import Predictions
from imagent.eval.runlock import run_lock

RESULTS = "results.jsonl"
CONFIG = "config.json"
METRICS = "metrics.json"
REPORT_MD = "report.md"
INDEX_MARKER = "eval_index.json"
USAGE = "run_usage.json"  # what the run's search used, where the benchmark's report needs it (DISBench's track)
CALL_KEYS = "call_keys.txt"  # every model and tool call the run made or read from the cache: "namespace<TAB>key"
INDEX_INFO = "index.json"  # the gallery index the run searched: its folder and build marker
# The one-writer lock of a run folder (taken by the runner while it appends to results.jsonl).
LOCK = ".run.lock"


class RunError(RuntimeError):
    """The run directory belongs to another configuration, or the run cannot start."""


# --------------------------------------------------------------------------- writing files


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


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` (secrets masked) to ``path`` through a temporary file, fsync'ed, then renamed."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")  # per process: two writers never share one
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(redact(text))  # no key in a file
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=json_default, ensure_ascii=False))


# --------------------------------------------------------------------------- one query's record


@dataclass
class RunRecord:
    """One line of ``results.jsonl``: a finished query (or its error).

    ``ids``/``scores`` are the final top-k; ``stages`` the top-k of each named stage; ``extras`` and
    ``stage_extras`` a benchmark's own data beside them (CIRR: the ranked subset); ``answer_set`` the set a
    set-valued method answered, with who chose it (``answer_origin``, ``code_selected_share``); ``trace`` the
    search's trace as a dict. Keys this version does not know are kept in ``other`` and written back unchanged.
    Reading by key (``rec["ids"]``, ``rec.get("error")``) is kept for code written against the JSON lines."""

    qid: str
    group: str | None = None
    ids: list[str] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    stages: dict[str, list[str]] = field(default_factory=dict)
    stage_extras: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: float = 0.0
    model_calls: int = 0
    answer_set: list[str] | None = None
    # Who chose a set answer (core/types.py:Result, decision 10): "model", "code" or "mixed", and the share of the
    # set that equals a list computed by code (None: no set answer, or a method that does not say).
    answer_origin: str = ""
    code_selected_share: float | None = None
    # Whose answer it is (``core/types.py:Source``: method, fallback:<name>, error), why when it is not the
    # method's own, and the method's own behaviour counts (summed by :mod:`imagent.eval.behaviour`).
    source: str = "method"
    source_reason: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # the method's preflight warnings (Result.warnings)
    trace: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    finished: str | None = None
    other: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def steps(self) -> list[dict[str, Any]]:
        return list((self.trace or {}).get("steps", []) or [])

    @property
    def counters(self) -> dict[str, Any]:
        return dict((self.trace or {}).get("counters", {}) or {})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunRecord:
        known = {f.name for f in fields(cls)} - {"other"}
        kw = {k: v for k, v in data.items() if k in known}
        kw["qid"] = str(data.get("qid", ""))
        for key in ("extras", "stages", "stage_extras", "trace", "counts", "warnings"):
            if kw.get(key) is None:
                kw.pop(key, None)
        for key in ("ids", "scores"):
            if kw.get(key) is None:
                kw.pop(key, None)
        if kw.get("seconds") is None:
            kw.pop("seconds", None)
        if kw.get("model_calls") is None:
            kw.pop("model_calls", None)
        return cls(**kw, other={k: v for k, v in data.items() if k not in known})

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "other"}
        if self.error is not None and not self.ids:  # a failed query: what went wrong, how long it took
            out = {"qid": self.qid, "group": self.group, "error": self.error, "seconds": self.seconds,
                   "source": "error"}
        return {**out, **self.other}

    # read access by the JSON key, for code written against results.jsonl's lines
    def get(self, key: str, default: Any = None) -> Any:
        if key in self.other:
            return self.other[key]
        if key == "other" or not hasattr(self, key):
            return default
        return getattr(self, key)

    def __getitem__(self, key: str) -> Any:
        if key in self.other:
            return self.other[key]
        if key == "other" or not hasattr(self, key):
            raise KeyError(key)
        return getattr(self, key)


# --------------------------------------------------------------------------- results log


class ResultsLog:
    """``results.jsonl``: append-only, one line per query, later lines win.

    Each line is written and flushed as soon as it is appended: a killed process loses no appended line (it is in
    the system's page cache). :meth:`sync` makes every line so far durable (fsync); :meth:`append` syncs at once
    unless told to wait, so a run that appends a batch of lines (the queries its workers finished together) pays
    one fsync for the batch (:meth:`write`). Used as a context manager the file stays open for the whole run and
    is synced on exit; otherwise each append opens it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file: Any = None  # open while the log is used as a context manager
        self._unsynced = False
        self._repair()

    def __enter__(self) -> ResultsLog:
        with self._lock:
            if self._file is None:
                self._file = open(self.path, "a", encoding="utf-8")
        return self

    def __exit__(self, *exc: object) -> None:
        self.sync()
        with self._lock:
            if self._file is not None:
                self._file.close()
                self._file = None

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

    def load(self) -> dict[str, RunRecord]:
        """Every query's record, by query id (a success is never replaced by a later failure)."""
        out: dict[str, RunRecord] = {}
        for raw in jsonl_objects(self.path):  # a torn line: that query simply runs again
            if str(raw.get("qid", "")):
                rec = RunRecord.from_dict(raw)
                prev = out.get(rec.qid)
                if prev is None or rec.error is None or prev.error is not None:
                    out[rec.qid] = rec
        return out

    @staticmethod
    def line(record: RunRecord | dict[str, Any]) -> str:
        """The line a record is stored as: its JSON, secrets masked (a trace or error may quote a model server's
        reply, which may echo the API key). Any thread may build it (the runner's workers do)."""
        data = record.to_dict() if isinstance(record, RunRecord) else record
        return redact(json.dumps(data, default=json_default, ensure_ascii=False)) + "\n"

    def append(self, record: RunRecord | dict[str, Any], sync: bool = True) -> None:
        """Write one record's line (flushed); ``sync``: fsync it now, else at the next :meth:`sync`."""
        self.write([self.line(record)], sync)

    def write(self, lines: Iterable[str], sync: bool = True) -> None:
        """Write lines made by :meth:`line` (flushed together); ``sync``: one fsync for all of them."""
        with self._lock:
            if self._file is not None:
                self._file.writelines(lines)
                self._file.flush()
                self._unsynced = True
                if sync:
                    self._fsync()
                return
            with open(self.path, "a", encoding="utf-8") as f:
                f.writelines(lines)
                f.flush()
                if sync:
                    os.fsync(f.fileno())
                else:
                    self._unsynced = True

    def sync(self) -> None:
        """Make every line written so far durable."""
        with self._lock:
            if not self._unsynced:
                return
            if self._file is not None:
                self._fsync()
                return
            with open(self.path, "a", encoding="utf-8") as f:
                os.fsync(f.fileno())
            self._unsynced = False

    def _fsync(self) -> None:
        os.fsync(self._file.fileno())
        self._unsynced = False


# --------------------------------------------------------------------------- the calls a run made


class CallRecorder:
    """Appends each call-cache key it is told of to a file, once (``namespace<TAB>key`` lines): attached to
    the call cache while a run works (:meth:`imagent.core.cache.DiskCache.add_listener`), it lists every model
    and tool call the run's answers depend on, which ``imagent pack`` copies out of the cache."""

    def __init__(self, *paths: Path) -> None:
        self.paths = list(paths)
        self._lock = threading.Lock()
        self._seen: set[str] = set()
        for p in self.paths:
            self._seen.update(k for _, k in read_call_keys(p))

    def __call__(self, key: str, namespace: str) -> None:
        with self._lock:
            if key in self._seen:
                return
            self._seen.add(key)
            for p in self.paths:
                with open(p, "a", encoding="utf-8") as f:
                    f.write(f"{namespace}\t{key}\n")
                    f.flush()
                    os.fsync(f.fileno())


def read_call_keys(path: Path) -> list[tuple[str, str]]:
    """``(namespace, key)`` pairs of a :data:`CALL_KEYS` file, in first-use order (none when absent)."""
    if not path.is_file():
        return []
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        ns, sep, key = line.partition("\t")
        if sep and len(key) == 64 and key not in seen:
            seen.add(key)
            out.append((ns, key))
    return out


# --------------------------------------------------------------------------- a run folder


class RunFolder:
    """A run directory: its configuration, its results log and its metrics, read and written here only."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    @property
    def config_path(self) -> Path:
        return self.path / CONFIG

    @property
    def metrics_path(self) -> Path:
        return self.path / METRICS

    def exists(self) -> bool:
        return self.config_path.is_file()

    def config(self) -> dict[str, Any]:
        """The run's config.json ({} when there is none); an unreadable one is a :class:`RunError`."""
        if not self.config_path.is_file():
            return {}
        try:
            return json.loads(self.config_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise RunError(f"{self.config_path} is unreadable ({exc}); use another --run-dir") from exc

    def write_config(self, config: dict[str, Any]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        write_json_atomic(self.config_path, config)

    @contextmanager
    def writer(self) -> Iterator[RunFolder]:
        """Hold the folder as its one writer while a run appends to it and rewrites its reports (the lock file
        is :data:`LOCK`); every write to a run folder happens inside this block."""
        with run_lock(self.path, LOCK):  # a second eval is refused (RunLocked); a dead owner's lock is taken over
            yield self

    def call_keys(self) -> list[tuple[str, str]]:
        return read_call_keys(self.path / CALL_KEYS)

    def index_info(self) -> dict[str, Any]:
        path = self.path / INDEX_INFO
        return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}

    def results(self) -> ResultsLog:
        return ResultsLog(self.path / RESULTS)

    def records(self) -> dict[str, RunRecord]:
        return self.results().load()

    def metrics(self) -> dict[str, Any]:
        """metrics.json; a :class:`RunError` when the run has not been scored."""
        if not self.metrics_path.is_file():
            raise RunError(f"{self.path} has no {METRICS}: not a finished eval run")
        return json.loads(self.metrics_path.read_text(encoding="utf-8"))

    def run_id(self) -> str:
        """The run's id (its identity's hash), else the folder's name for runs made before ids."""
        cfg = self.config()
        return str(cfg.get("run_id") or cfg.get("fingerprint") or self.path.name)


# --------------------------------------------------------------------------- predictions from a run


def predictions_from_results(records: dict[str, RunRecord], stage: str | None = None) -> Predictions:
    """Rankings (final, or one named stage) from a run's records; failed queries are left out
    (scored as empty rankings). A query without that stage falls back to its final ranking. The final
    predictions also carry the answer sets of set-valued methods."""
    rankings: dict[str, list[str]] = {}
    subset: dict[str, list[str]] = {}
    sets: dict[str, list[str]] = {}
    for qid, rec in records.items():
        rec = rec if isinstance(rec, RunRecord) else RunRecord.from_dict(rec)
        if rec.error is not None:
            continue
        if stage is None or stage not in rec.stages:
            rankings[qid] = list(rec.ids)
            extras = rec.extras or {}
            if rec.answer_set is not None:
                sets[qid] = list(rec.answer_set)
        else:
            rankings[qid] = list(rec.stages[stage])
            extras = (rec.stage_extras or {}).get(stage) or {}
        if "subset" in extras:
            subset[qid] = list(extras["subset"])
    return Predictions(rankings, subset, sets=sets)


def stage_names(records: Iterable[RunRecord]) -> list[str]:
    seen: dict[str, None] = {}
    for rec in records:
        for k in rec.stages or {}:
            seen.setdefault(k, None)
    return list(seen)


def ok_records(records: Iterable[RunRecord]) -> Iterator[RunRecord]:
    return (r for r in records if r.error is None)


__all__ = [
    "CALL_KEYS",
    "CONFIG",
    "INDEX_INFO",
    "INDEX_MARKER",
    "LOCK",
    "METRICS",
    "REPORT_MD",
    "RESULTS",
    "USAGE",
    "CallRecorder",
    "ResultsLog",
    "RunError",
    "RunFolder",
    "RunRecord",
    "json_default",
    "predictions_from_results",
    "read_call_keys",
    "stage_names",
    "write_json_atomic",
    "write_text_atomic",
]
