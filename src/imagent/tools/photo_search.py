"""What a photo app adds to any search: a ``--where`` filter, time order, a filter-only listing, more like this.

``imagent search TEXT --where EXPR --sort score|time`` (and the same fields in the Python API and the web API)
go through :func:`apply_filter` before the method runs and :func:`finish` after it:

- the expression (the album filter language of :mod:`imagent.tools.filter_lang`: time ranges and prefixes,
  ``place``/``address`` contains, ``device``, ``near(lat, lon, km)``, ``near('Vienna', km)``) is evaluated once,
  vectorised over the gallery's metadata columns, into the rows it allows; they ride on the query's
  :class:`~imagent.core.types.MetadataConstraints`, so every method ranks inside them in the store itself
  (the exact scan of the pool, or the approximate store's filtered search);
- ``sort="time"`` lists the method's results in the order they were taken (photos without a time last);
- a search with a filter and no text lists the matching photos in time order (:func:`listing`);
- ``--like ID|FILE|NAME`` ranks by the photo itself (:func:`more_like`: its visual features when the pixel model
  has seen the photos, else its image vector; its caption vector with ``--method caption``), the photo left out of
  its own results; a file name the index knows (``IMG_0053.jpg``) names it from any folder (:func:`records_named`).

A bad expression raises :class:`~imagent.tools.filter_lang.FilterError` saying where and what is allowed; a filter
that matches no photo says why when a near miss explains it (:func:`empty_hint`: ``place = 'Kyoto'`` where places
are stored as ``Kyoto, Japan``), in ``Result.warnings``.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from imagent.core.config import ResultOptions
from imagent.core.text import display_path
from imagent.core.trace import Trace
from imagent.core.types import ImageRecord, MetadataConstraints, Query, Ranking, Result
from imagent.index.embedding import embedding_text
from imagent.index.gallery import SPACE_CAPTION_TEXT, SPACE_IMAGE, Gallery
from imagent.index.levels import gallery_cut
from imagent.index.pixels import SPACE_VISUAL
from imagent.tools.album import Album
from imagent.tools.filter_lang import BoolOp, Compare, FilterError, Not, parse_filter, quote_string

SORTS = ("score", "time")


def check_sort(sort: str) -> str:
    if sort not in SORTS:
        raise FilterError(f"unknown sort {sort!r}; use one of: {', '.join(SORTS)}")
    return sort


def where_rows(gallery: Gallery, where: str, time_order: bool = True) -> np.ndarray:
    """The gallery rows ``where`` allows, in time order (else in row order) (:class:`FilterError` when it does
    not parse)."""
    if not where or not where.strip():
        raise FilterError("the --where expression is empty; e.g. --where \"place ~ 'Vienna' and time >= '2019'\"")
    meta = Album(gallery).meta
    if time_order:
        return meta.filter_rows(where)
    return np.flatnonzero(meta.evaluate(parse_filter(where)))


def apply_filter(query: Query, gallery: Gallery, where: str | None) -> Query:
    """``query`` restricted to the photos ``where`` allows (unchanged when ``where`` is None)."""
    if where is None:
        return query
    rows = where_rows(gallery, where, time_order=False)  # row order, as the store reads them
    base = query.constraints or MetadataConstraints()
    if base.rows is not None:  # already filtered: both must hold
        rows = np.intersect1d(rows, np.asarray(base.rows, dtype=np.int64))
    return replace(query, constraints=replace(base, where=where, rows=rows))


def allowed_ids(ids: list[str], gallery: Gallery, query: Query) -> list[bool]:
    """For each id, whether the query's filter allows it (every id when there is no filter)."""
    c = query.constraints
    if c is None or c.rows is None:
        return [True] * len(ids)
    rows = np.asarray(c.rows, dtype=np.int64)  # sorted (apply_filter)
    out = []
    for i in ids:
        if i not in gallery:
            out.append(False)
            continue
        r = gallery.row(i)
        at = int(np.searchsorted(rows, r))
        out.append(at < len(rows) and int(rows[at]) == r)
    return out


def allowed(result: Result, gallery: Gallery, query: Query) -> Result:
    """``result`` without any photo the filter does not allow: a method that ranks outside the pool (an agent
    answering from memory) never shows one."""
    mask = allowed_ids(result.ranking.ids, gallery, query)
    if all(mask) and (result.answer_set is None or all(allowed_ids(result.answer_set, gallery, query))):
        return result
    ranking = Ranking([i for i, m in zip(result.ranking.ids, mask, strict=True) if m],
                      [s for s, m in zip(result.ranking.scores, mask, strict=True) if m], result.ranking.cut)
    answer = None if result.answer_set is None else [
        i for i, m in zip(result.answer_set, allowed_ids(result.answer_set, gallery, query), strict=True) if m]
    return replace(result, ranking=ranking, answer_set=answer)


def time_sorted(ranking: Ranking, gallery: Gallery) -> Ranking:
    """The same photos in the order they were taken (ties and photos without a time keep their rank order,
    the ones without a time last)."""
    def key(n: int) -> tuple[int, str, int]:
        t = gallery.record(ranking.ids[n]).taken_time
        return (0, t.isoformat(), n) if t is not None else (1, "", n)

    order = sorted(range(len(ranking.ids)), key=key)
    return Ranking([ranking.ids[n] for n in order], [ranking.scores[n] for n in order], ranking.cut)


def finish(result: Result, gallery: Gallery, query: Query, sort: str) -> Result:
    """The method's result as the user asked for it: only allowed photos, in score or time order."""
    result = allowed(result, gallery, query)
    c = query.constraints
    if c is not None and c.where:
        result.trace.counters.setdefault("where_matches", len(c.rows))
        hint = empty_hint(gallery, c.where) if c.rows is not None and len(c.rows) == 0 else None
        if hint is not None:
            result = replace(result, warnings=[*result.warnings, hint])
    if sort == "time":
        result = replace(result, ranking=time_sorted(result.ranking, gallery))
    return result


def _comparisons(node: Any) -> list[Compare]:
    if isinstance(node, BoolOp):
        return [c for item in node.items for c in _comparisons(item)]
    if isinstance(node, Not):
        return _comparisons(node.item)
    return [node] if isinstance(node, Compare) else []


def empty_hint(gallery: Gallery, where: str) -> str | None:
    """Why ``where`` matched no photo, when a near miss says it: a place or device compared with ``=`` that no
    photo has exactly but some contain ("no photo's place is exactly 'Kyoto'; places containing it: 'Kyoto,
    Japan' (12 photos): use place ~ 'Kyoto'"). None when no such comparison explains it."""
    meta = Album(gallery).meta
    hints = []
    for node in _comparisons(parse_filter(where)):
        if node.field == "text":
            hints.extend(text_hint(meta, node))
            continue
        if node.field not in ("address", "device") or node.op != "=" or meta.evaluate(node).any():
            continue
        near = getattr(meta, node.field).containing(node.value)
        if not near:
            continue
        word = "place" if node.field == "address" else "device"
        at = near[0][0].lower().find(node.value)  # the user's word as the library spells it: 'Kyoto'
        typed = near[0][0][at: at + len(node.value)] if at >= 0 else node.value
        listed = ", ".join(f"{quote_string(v)} ({n} photo{'' if n == 1 else 's'})" for v, n in near[:5])
        more = f" and {len(near) - 5} more" if len(near) > 5 else ""
        hints.append(f"no photo's {word} is exactly {quote_string(typed)}; {word}s containing it: {listed}{more}: "
                     f"use {word} ~ {quote_string(typed)}")
    return "; ".join(hints) or None


def text_hint(meta: Any, node: Compare) -> list[str]:
    """Why a ``text`` comparison matched nothing, when it can be said: no photo has text read from it (the OCR pass
    did not run, or found none), or a whole-word match missed words that contain it."""
    if node.op == "!=" or meta.evaluate(node).any():
        return []
    if not meta.text.with_text:
        return ["no photo in this library has text read from it (imagent index reads the text in photos unless "
                "ocr.enabled = false; a photo indexed before that is read by the next imagent index)"]
    if node.op == "=" and meta.text.contains(node.value).any():
        words = ", ".join(quote_string(w) for w in meta.text.near(node.value))
        return [f"no photo's text holds {quote_string(node.value)} as a whole word; words containing it: {words}: use "
                f"text ~ {quote_string(node.value)}"]
    return []


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


def collapse_duplicates(result: Result, gallery: Gallery, groups: Any, top_k: int) -> Result:
    """``result`` with one photo per duplicate group (the best ranked), cut to ``top_k``; the trace counts the
    photos dropped (:mod:`imagent.index.duplicates`; nothing is deleted)."""
    from imagent.index.duplicates import collapse

    keep, dropped = collapse(result.ranking.ids, groups)
    keep = keep[:top_k]
    ranking = Ranking([result.ranking.ids[k] for k in keep], [result.ranking.scores[k] for k in keep],
                      result.ranking.cut)
    result.trace.counters["duplicates_collapsed"] = dropped
    return replace(result, ranking=ranking)


def like_space(gallery: Gallery, method: str) -> str:
    """The space "more like this" ranks in: the caption space for ``--method caption`` (the photo's text), else
    the pixel model's ``visual`` space when the index has it (looks: the classifier's features), else the image
    space (pixels; in caption mode the captions encoded as images)."""
    if method == "caption" and gallery.has_space(SPACE_CAPTION_TEXT):
        return SPACE_CAPTION_TEXT
    if gallery.has_space(SPACE_VISUAL):
        return SPACE_VISUAL
    return SPACE_IMAGE


def like_vector(gallery: Gallery, record: ImageRecord, space: str, dual: Any, text: Any,
                pixel_model: Any = None) -> np.ndarray:
    """``record``'s vector in ``space``: stored when it is in the gallery, else encoded (a file given by path;
    ``pixel_model()`` gives the classifier for the ``visual`` space)."""
    if record.id in gallery and gallery.has_space(space):
        return gallery.vector(space, record.id)
    if space == SPACE_VISUAL:
        if pixel_model is None:
            raise FilterError("more like a file by looks needs the pixel model (pixels.model = \"effnet-lite0\")")
        out = pixel_model().analyze([record])
        if out.failed:
            raise FilterError(next(iter(out.failed.values())))
        return np.asarray(out.features[0], dtype=np.float32)
    if space == SPACE_IMAGE and getattr(dual, "sees_pixels", True):
        return np.asarray(dual.encode_images([record])[0], dtype=np.float32)
    # A caption space, or caption mode's image space: the photo's text, embedded as the index embeds it.
    words = embedding_text(record)
    if not words:
        raise FilterError(f"{record.path or record.id} has no caption, file-name words, date or place to compare "
                          "by, and the image space is captions (caption mode); index it, or configure a dual "
                          "encoder that sees pixels")
    encoder = text if space == SPACE_CAPTION_TEXT else dual
    return np.asarray(encoder.encode_texts([words])[0], dtype=np.float32)


def more_like(gallery: Gallery, record: ImageRecord, vector: np.ndarray, space: str, query: Query, top_k: int,
              trace: Trace | None = None, results: ResultOptions | None = None) -> Result:
    """The photos most like ``record`` (cosine of its vector in ``space``), the photo itself left out, inside
    the query's filter; with ``results``, where its matches stop (``Ranking.cut``, :mod:`imagent.index.levels`)."""
    trace = trace or Trace()
    trace.method = "like"
    exclude = list(dict.fromkeys([*query.exclude, *([record.id] if record.id in gallery else [])]))
    with trace.step("like", photo=record.id, space=space) as step:
        ranking = gallery.search(vector, space, top_k, query.constraints, query.candidates, exclude)
        if results is not None:
            ranking.cut = gallery_cut(gallery, vector, space, results, leave_out=[record.id])
        step.outputs["top"] = ranking.head()
    return Result(ranking, trace)


def records_named(gallery: Gallery, name: str) -> list[ImageRecord]:
    """The photos whose file name is ``name`` (``IMG_0053.jpg``), or whose path ends with it (``2019/IMG_0053.jpg``):
    exact first, else ignoring case."""
    text = str(name).strip().replace("\\", "/")
    if not text or text in (".", ".."):
        return []
    tail = "/" + text.lstrip("/")
    exact = [r for r in gallery.records() if r.path and ("/" + r.path.replace("\\", "/")).endswith(tail)]
    if exact:
        return exact
    low = tail.casefold()
    return [r for r in gallery.records() if r.path and ("/" + r.path.replace("\\", "/")).casefold().endswith(low)]


class UnknownReference(ValueError):
    """A reference that is neither an image id in the gallery, nor a file, nor the name of one photo the index holds;
    the message names the closest file names of the index (or ids), never a path it did not resolve."""

    def __init__(self, ref: str, gallery: Gallery, matches: list[ImageRecord] | None = None) -> None:
        import difflib

        if matches:  # a name several photos have: which one is meant
            shown = "; ".join(f"{r.id} ({display_path(r.path)})" for r in matches[:5])
            more = f" and {len(matches) - 5} more" if len(matches) > 5 else ""
            super().__init__(f"reference {ref!r} names {len(matches)} photos in the gallery: {shown}{more}; give "
                             "one of their ids")
            self.reference = ref
            return
        close = difflib.get_close_matches(ref, [str(i) for i in gallery.ids], n=1, cutoff=0.6)
        guess = f" (did you mean {close[0]!r}?)" if close else ""
        if not close:
            names = {display_path(Path(r.path).name) for r in gallery.records() if r.path}
            near = difflib.get_close_matches(display_path(Path(ref).name), sorted(names), n=3, cutoff=0.6)
            if near:
                guess = f" (files in the index with a similar name: {', '.join(near)})"
        super().__init__(f"reference {ref!r} is neither an image id in the gallery nor a file{guess}")
        self.reference = ref
