"""Plain-words search over the text in photos: a content search's ranking joined with what the photos say.

The words read in photos (:mod:`imagent.index.text`) are evidence no vector holds: a sign that says SINTRA, a menu,
a ticket to Kyoto. A question read by the query reader (:mod:`imagent.tools.query_reader`) is matched against them
after the content method ranked it (:func:`with_text`, on the request path of a plain-words search; a method named
explicitly answers on its own, as its paper describes):

- **quoted words** (``"Cafe Sol"``, :attr:`QueryReading.texts`) match exactly: the photos whose text holds the
  phrase as whole words, in order (across lines too; case and accents aside) rank first, every one of them a strong
  match (lifted together by one offset, so they keep their own order and stay above every other photo);
- **the content words** (less words too common to be evidence: :func:`~imagent.index.text.clue_words`) match the
  text and the content together: a photo is lifted by ``ocr.search_boost_z`` robust z-units (the spread of the
  query's scores over the gallery, as the match levels measure it, :mod:`imagent.index.levels`) times the share of
  the words its text holds, above its content score. The share counts the words some photo's text holds at all,
  weighted by their rarity (:meth:`~imagent.index.text.PhotoTexts.share`): in "the restaurant called Sol" only
  "sol" is text evidence, "restaurant" is the content search's. With the default, a photo whose text holds them all
  is a strong match from the median; one holding half of them rises half as far. A photo the content method did
  not rank comes in at the median of the query's scores (the typical photo's: its own is not known here).

Each result says what matched it (``Result.text_matches``: the words its text holds; the result rows' ``matched_by``
is ``text`` when the text alone made it a match, ``text+<space>`` when both did). The trace has a ``text`` step with
the phrases, words, the photos lifted and added, and the boost. The filter restricts this as every search
(``--where``, and the reader's filters): a photo outside it is never added.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from imagent.core.config import OcrOptions
from imagent.core.types import Query, Ranking, Result
from imagent.index.gallery import Gallery
from imagent.index.levels import robust_spread
from imagent.index.text import clue_words, lift
from imagent.tools.album import Album

# How far above the best other photo the quoted matches start (in spreads), so the order says they are first.
QUOTED_MARGIN = 1.0


def _allowed(gallery: Gallery, query: Query) -> np.ndarray:
    """Rows the query may return, as a mask: the gallery's own candidate rows for its filter, candidates and
    exclusions (:meth:`~imagent.index.gallery.Gallery.candidate_rows`, what every search ranks)."""
    rows = gallery.candidate_rows(query.constraints, query.candidates, query.exclude)
    if rows is None:
        return np.ones(len(gallery), dtype=bool)
    mask = np.zeros(len(gallery), dtype=bool)
    mask[rows] = True
    return mask


def with_text(result: Result, gallery: Gallery, query: Query, reading: Any, top_k: int,
              options: OcrOptions | None = None) -> Result:
    """``result`` (a content method's ranking) joined with the text in the photos for the question ``reading`` read
    (module doc). Returned as it is for an answer set, a question with no words, or a library without text (a quoted
    phrase then gets a warning: nothing can match it)."""
    options = options or OcrOptions()
    phrases = list(getattr(reading, "texts", []) or [])
    words = clue_words(getattr(reading, "content", "") or "")
    if result.answer_set is not None or (not phrases and not words):
        return result
    texts = Album(gallery).meta.text
    if not texts.with_text:
        if phrases:
            result = replace(result, warnings=[*result.warnings, "no photo in this library has text read from it: "
                                               "the quoted words were searched as content only"])
        return result
    allowed = _allowed(gallery, query)
    quoted = np.ones(texts.size, dtype=bool)
    for phrase in phrases:
        quoted &= texts.phrase(phrase)
    quoted &= allowed if phrases else False
    share = texts.share(words) * allowed if options.search_boost_z > 0 else np.zeros(texts.size)
    hits = np.flatnonzero(quoted | (share > 0))
    with result.trace.step("text", phrases=phrases, words=words, boost_z=options.search_boost_z) as step:
        if not len(hits):
            step.outputs.update({"quoted": 0, "lifted": [], "added": []})
            if phrases:
                step.note("no photo's text holds " + " and ".join(f'"{p}"' for p in phrases))
            return result
        out = _rank(result, gallery, texts, hits, quoted, share, options.search_boost_z, top_k, phrases, words)
        step.outputs.update({"quoted": int(quoted.sum()), "lifted": [i for i in out.text_matches
                                                                     if i in result.ranking.ids],
                             "added": [i for i in out.text_matches if i not in result.ranking.ids],
                             "top": out.ranking.head()})
    return out


def _rank(result: Result, gallery: Gallery, texts: Any, hits: np.ndarray, quoted: np.ndarray, share: np.ndarray,
          boost_z: float, top_k: int, phrases: list[str], words: list[str]) -> Result:
    """The joined ranking (module doc): content scores lifted by the text's share of the words, the quoted
    matches first."""
    r = result.ranking
    cut = r.cut
    ranked = np.asarray(r.scores, dtype=np.float64)
    unit = cut.spread if cut is not None else robust_spread(ranked)
    typical = cut.median if cut is not None else (float(ranked.min()) if len(ranked) else 0.0)
    ids = list(r.ids)
    known = {i: n for n, i in enumerate(ids)}
    for row in hits:
        i = gallery.ids[int(row)]
        if i not in known:
            known[i] = len(ids)
            ids.append(i)
    base = np.append(ranked, np.full(len(ids) - len(ranked), typical))
    rows = np.array([gallery.row(i) for i in ids], dtype=np.int64)
    scores = lift(base, share[rows], unit, boost_z)
    first = quoted[rows]
    if first.any():
        floor = max(scores[~first].max() + QUOTED_MARGIN * unit if (~first).any() else -np.inf,
                    cut.strong if cut is not None else -np.inf)
        scores[first] += max(0.0, floor - scores[first].min())
    order = np.argsort(-scores, kind="stable")[:top_k]
    matches: dict[str, dict[str, Any]] = {}
    for n in order:
        row = int(rows[n])
        if first[n] or share[row] > 0:
            matches[ids[n]] = {"words": [*(phrases if first[n] else []), *texts.matched(row, words)],
                               "quoted": bool(first[n]), "share": round(float(share[row]), 3),
                               "content_score": float(ranked[n]) if n < len(ranked) else None}
    ranking = Ranking([ids[n] for n in order], [float(scores[n]) for n in order], cut)
    return replace(result, ranking=ranking, text_matches=matches)


__all__ = ["QUOTED_MARGIN", "with_text"]
