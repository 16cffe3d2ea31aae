"""What a photo app adds to any search: a ``--where`` filter, time order, and a filter-only listing.

``imagent search TEXT --where EXPR --sort score|time`` (and the same fields in the Python API and the web API)
go through :func:`apply_filter` before the method runs and :func:`finish` after it:

- the expression (the album filter language of :mod:`imagent.tools.filter_lang`: time ranges and prefixes,
  ``place``/``address`` contains, ``device``, ``near(lat, lon, km)``, ``near('Vienna', km)``) is evaluated once,
  vectorised over the gallery's metadata columns, into the rows it allows; they ride on the query's
  :class:`~imagent.core.types.MetadataConstraints`, so every method ranks inside them in the store itself
  (the exact scan of the pool, or the approximate store's filtered search);
- ``sort="time"`` lists the method's results in the order they were taken (photos without a time last);
- a search with a filter and no text lists the matching photos in time order (:func:`listing`).

A bad expression raises :class:`~imagent.tools.filter_lang.FilterError` saying where and what is allowed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from imagent.core.trace import Trace
from imagent.core.types import MetadataConstraints, Query, Ranking, Result
from imagent.index.gallery import Gallery
from imagent.tools.album import Album
from imagent.tools.filter_lang import FilterError

SORTS = ("score", "time")


def check_sort(sort: str) -> str:
    if sort not in SORTS:
        raise FilterError(f"unknown sort {sort!r}; use one of: {', '.join(SORTS)}")
    return sort


def where_rows(gallery: Gallery, where: str) -> np.ndarray:
    """The gallery rows ``where`` allows, in time order (:class:`FilterError` when it does not parse)."""
    if not where or not where.strip():
        raise FilterError("the --where expression is empty; e.g. --where \"place ~ 'Vienna' and time >= '2019'\"")
    return Album(gallery).meta.filter_rows(where)


def apply_filter(query: Query, gallery: Gallery, where: str | None) -> Query:
    """``query`` restricted to the photos ``where`` allows (unchanged when ``where`` is None)."""
    if where is None:
        return query
    rows = where_rows(gallery, where)
    base = query.constraints or MetadataConstraints()
    if base.rows is not None:  # already filtered: both must hold
        rows = np.intersect1d(rows, np.asarray(base.rows, dtype=np.int64))
    return replace(query, constraints=replace(base, where=where, rows=np.sort(rows)))


def allowed(result: Result, gallery: Gallery, query: Query) -> Result:
    """``result`` without any photo the filter does not allow: a method that ranks outside the pool (an agent
    answering from memory) never shows one."""
    c = query.constraints
    if c is None or c.rows is None:
        return result
    ok = np.zeros(len(gallery), dtype=bool)
    ok[np.asarray(c.rows, dtype=np.int64)] = True

    def keep(ids: list[str]) -> list[bool]:
        return [i in gallery and bool(ok[gallery.row(i)]) for i in ids]

    mask = keep(result.ranking.ids)
    if all(mask):
        return result
    ranking = Ranking([i for i, m in zip(result.ranking.ids, mask, strict=True) if m],
                      [s for s, m in zip(result.ranking.scores, mask, strict=True) if m])
    answer = None if result.answer_set is None else [i for i, m in zip(result.answer_set,
                                                                          keep(result.answer_set), strict=True) if m]
    return replace(result, ranking=ranking, answer_set=answer)


def time_sorted(ranking: Ranking, gallery: Gallery) -> Ranking:
    """The same photos in the order they were taken (ties and photos without a time keep their rank order,
    the ones without a time last)."""
    def key(n: int) -> tuple[int, str, int]:
        t = gallery.record(ranking.ids[n]).taken_time
        return (0, t.isoformat(), n) if t is not None else (1, "", n)

    order = sorted(range(len(ranking.ids)), key=key)
    return Ranking([ranking.ids[n] for n in order], [ranking.scores[n] for n in order])


def finish(result: Result, gallery: Gallery, query: Query, sort: str) -> Result:
    """The method's result as the user asked for it: only allowed photos, in score or time order."""
    result = allowed(result, gallery, query)
    c = query.constraints
    if c is not None and c.where:
        result.trace.counters.setdefault("where_matches", len(c.rows))
    if sort == "time":
        result = replace(result, ranking=time_sorted(result.ranking, gallery))
    return result


def listing(gallery: Gallery, query: Query, top_k: int, trace: Trace | None = None) -> Result:
    """A filter with no text: the first ``top_k`` matching photos in the order they were taken (score 1.0:
    each matches). The trace names the filter and how many photos match."""
    c = query.constraints
    assert c is not None and c.rows is not None
    rows = where_rows(gallery, c.where or "")  # time order (the constraint rows are sorted by row)
    keep = np.ones(len(rows), dtype=bool)
    for i in query.exclude:
        if i in gallery:
            keep &= rows != gallery.row(i)
    rows = rows[keep]
    trace = trace or Trace()
    trace.method = "filter"
    with trace.step("filter", where=c.where) as step:
        ids = gallery.id_array[rows[:top_k]].tolist()
        step.outputs.update({"matches": len(rows), "photos": ids})
    trace.counters["where_matches"] = len(rows)
    return Result(Ranking(ids, [1.0] * len(ids)), trace)


def describe(where: str | None, sort: str) -> dict[str, Any]:
    """What the results are restricted to and ordered by (shown with them)."""
    return {"where": where, "sort": sort}
