"""The per-query worker of an eval run: open the gallery and build the method once, then answer one benchmark
query at a time and return its :class:`~imagent.eval.records.RunRecord`.

Each query runs through the request path every interface uses: a :class:`~imagent.api.SearchRequest` carrying
the benchmark's query, :meth:`Workspace.prepare <imagent.api.Workspace.prepare>` with the run's
:class:`~imagent.api.PreparedMethod` (its config validated and the method built once per run, not per query),
then :meth:`Workspace.run <imagent.api.Workspace.run>`. Every way of running a benchmark uses it: the runner's
loop and thread pool (:mod:`imagent.eval.runner`) and each Ray actor (:mod:`imagent.eval.distributed`)::

    one = query_runner(ws, ws.prepare_method("cirevl", index=index_dir), 50, bench, "cir", run_dir, print)
    record = one(item)   # never raises: a failed query is a record with its error
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from imagent.api import PreparedMethod, SearchRequest, Workspace
from imagent.core.redact import redact
from imagent.core.types import Query, Result
from imagent.eval.datasets.base import Benchmark, BenchmarkError, EvalItem
from imagent.eval.records import USAGE, RunRecord, write_json_atomic
from imagent.index.gallery import Gallery


def query_runner(ws: Workspace, prepared: PreparedMethod, top_k: int, bench: Benchmark, split: str,
                 run_dir: Path, say: Callable[[str], None]) -> Callable[[EvalItem], RunRecord]:
    """Open the gallery and build the prepared method once and return ``one(item) -> RunRecord``."""
    gallery = ws.gallery(prepared.index)
    gallery.reload()
    method = prepared.method
    method.start_run(run_dir)  # a method that learns across queries keeps it there (PhotoCraft's skills)
    for warning in method.preflight():  # raises (the run stops) when the method cannot run on this index
        say(f"warning: {warning}")
    usage = bench.run_usage(method, bool(getattr(ws.settings.indexing, "caption_missing", False)))
    if usage is not None:  # what the search used (DISBench: its derived track); the report states it
        write_json_atomic(run_dir / USAGE, usage)
    depth = bench.search_depth(split, len(gallery), top_k)
    name = prepared.method_class.name

    def one(item: EvalItem) -> RunRecord:
        t0 = time.perf_counter()
        try:
            query = _with_gallery_records(bench.adapt_query(item, method.tasks), gallery)
            request = SearchRequest(method=name, top_k=depth, index=prepared.index, query=query)
            result = ws.run(ws.prepare(request, method=prepared))
            _learn(method.learn_from_outcome, bench, item, query, result)
        except Exception as exc:  # one failing query must not end a long run; it is retried next time
            return RunRecord(qid=item.id, group=item.group, error=redact(f"{type(exc).__name__}: {exc}"),
                             seconds=round(time.perf_counter() - t0, 4))
        ids = list(result.ranking.ids)
        return RunRecord(
            qid=item.id,
            group=item.group,
            ids=ids[:top_k],
            scores=[round(float(s), 6) for s in result.ranking.scores[:top_k]],
            extras=bench.record_extras(item, ids),
            stages={k: list(v.ids[:top_k]) for k, v in result.stages.items()},
            stage_extras={k: bench.record_extras(item, list(v.ids)) for k, v in result.stages.items()},
            seconds=round(time.perf_counter() - t0, 4),
            model_calls=result.trace.model_calls,
            answer_set=list(result.answer_set) if result.answer_set is not None else None,
            answer_origin=result.answer_origin,
            code_selected_share=result.code_selected_share,
            source=result.source,
            source_reason=result.source_reason,
            counts=dict(result.counts),
            warnings=list(result.warnings),
            trace=result.trace.to_dict(),
            # A result whose model calls failed is a query error (scored empty, retried next run), not an answer.
            error=redact(f"model calls failed: {result.source_reason}") if result.is_error else None,
            finished=datetime.now(UTC).isoformat(),
        )

    return one


def _learn(learn: Callable[..., Any], bench: Benchmark, item: EvalItem, query: Query, result: Result) -> None:
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


def _with_gallery_records(query: Query, gallery: Gallery) -> Query:
    """Replace the loader's bare reference (id only) with the gallery's full record (path, caption)."""
    ref = query.reference
    if ref is not None and not ref.path:
        if ref.id not in gallery:
            raise BenchmarkError(f"reference image {ref.id!r} is not in the gallery index (missing image?)")
        query.reference = gallery.record(ref.id)
    return query


__all__ = ["query_runner"]
