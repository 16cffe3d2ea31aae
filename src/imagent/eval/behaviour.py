"""Behaviour accounting of an eval run: whose answer each number is (issue 27).

Every query's record carries its result's ``source`` (``method``, ``fallback:<name>`` or ``error``, see
:class:`imagent.core.types.Source`), the reason when it is not the method's own, and the method's own behaviour
``counts`` (flat names to integers: an agent's turns and tool calls by tool, OSCAR's plans and set operations...).
:func:`behaviour` sums them over a run without knowing the names; ``metrics.json`` keeps it under ``behaviour``
and ``report.md`` shows the fallback rate beside the headline metrics, the metrics over the queries the method
answered itself (:func:`own_items`), and a per-query ``source`` column.

``fallback_rate`` is the share of the run's queries (those with a record, errors included) whose result came
from any fallback path; ``error_rate`` the share whose model calls failed (an error, scored as an empty answer);
``method_rate`` the rest: the three add up to 1.

``code_selected_share`` (decision 10) is the mean, over the queries whose method answered a set and said who chose
it, of the share of the set that equals a list computed by code (clear matches, a trip's photos, a fallback's
candidates); ``answer_origins`` counts those answers by origin (``model``, ``code``, ``mixed``). None and {} for a
method that answers no set.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from imagent.core.types import Source


def record_source(rec: Any) -> str:
    """The source of one results.jsonl record: its stored ``source``; a record that failed outright (the method
    raised) or was written before sources existed: ``error`` when it has an error, else ``method``."""
    if rec.get("error") is not None:
        return Source.ERROR
    return str(rec.get("source") or Source.METHOD)


def behaviour(records: Iterable[Any]) -> dict[str, Any]:
    """``{"queries", "fallback_rate", "error_rate", "method_rate", "sources", "fallback_reasons", "error_reasons",
    "counts", "code_selected_share", "answer_origins"}`` over ``records``; ``counts`` sums every query's counts
    (errors included: their work happened)."""
    recs = list(records)
    n = len(recs)
    sources: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    fallback_reasons: Counter[str] = Counter()
    error_reasons: Counter[str] = Counter()
    origins: Counter[str] = Counter()
    shares: list[float] = []
    for rec in recs:
        src = record_source(rec)
        sources[src] += 1
        counts.update({str(k): int(v) for k, v in (rec.get("counts") or {}).items()})
        share = rec.get("code_selected_share")
        if src != Source.ERROR and isinstance(share, (int, float)):
            shares.append(float(share))
            origins[str(rec.get("answer_origin") or "unknown")] += 1
        reason = str(rec.get("source_reason") or rec.get("error") or "")
        if src == Source.ERROR:
            error_reasons[_short(reason) or "unknown"] += 1
        elif Source.is_fallback(src):
            fallback_reasons[f"{src}: {_short(reason)}" if reason else src] += 1
    fallbacks = sum(v for k, v in sources.items() if Source.is_fallback(k))
    errors = sources.get(Source.ERROR, 0)
    return {
        "queries": n,
        "fallback_rate": fallbacks / n if n else 0.0,
        "error_rate": errors / n if n else 0.0,
        "method_rate": (n - fallbacks - errors) / n if n else 0.0,
        "sources": dict(sorted(sources.items())),
        "fallback_reasons": dict(fallback_reasons.most_common(10)),
        "error_reasons": dict(error_reasons.most_common(10)),
        "counts": dict(sorted(counts.items())),
        "code_selected_share": sum(shares) / len(shares) if shares else None,
        "answer_origins": dict(sorted(origins.items())),
    }


def own_ids(records: dict[str, Any]) -> set[str]:
    """The query ids whose result is the method's own (neither a fallback nor an error)."""
    return {q for q, rec in records.items() if record_source(rec) == Source.METHOD}


def own_items(items: Sequence[Any], records: dict[str, Any]) -> list[Any]:
    """The benchmark items the method answered itself: what "metrics over the method's own answers" score."""
    own = own_ids(records)
    return [it for it in items if it.id in own]


def _short(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


__all__ = ["behaviour", "own_ids", "own_items", "record_source"]
