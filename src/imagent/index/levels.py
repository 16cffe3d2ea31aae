"""Match levels: where a content search's results stop matching.

A cosine ranking orders every photo, matches or not: on a library of 71 photos a text search lists 60, most of them
no match. What separates a match from the rest is not the cosine itself (its scale differs between a caption space,
the pixel model's ConSE vectors and the visual features, and between queries) but how far a photo's score stands
out from the query's scores over the whole gallery. So the cut is computed from that distribution:

- the robust z-score of a score ``s`` is ``(s - median) / spread``, ``spread = 1.4826 * MAD`` (the median absolute
  deviation, scaled to a normal's standard deviation; at least :data:`MIN_SPREAD`), over every photo of the gallery
  (an even sample of ``sample_photos`` on a larger one);
- **strong**: z at least ``strong_z``, or above the largest gap of at least ``gap_z`` (in z) among the photos of z at
  least ``possible_z`` and the best one below them (a lone clear match, even when its z is modest; not on a
  sampled gallery, whose gaps a sample widens);
- **possible**: z at least ``possible_z``; below it, no match.

The thresholds are turned into scores once per query (:class:`~imagent.core.types.MatchCut`, carried by the
ranking), so every interface reads the same level for a result row (``match`` in
:func:`imagent.index.result_rows.result_rows`). The defaults (``[results]``,
:class:`~imagent.core.config.ResultOptions`) are imagent's own, chosen on half of the shipped stamps' category words
over an index with captions and one with pixels only, reported on the other half (``benchmarks/match_levels.py``).
A gallery of fewer than ``min_photos`` photos gets no cut: too few scores to tell a match from the rest.

Rankings that are not cosines over the gallery (a method's re-ranking, fused ranks, an album answer) carry no cut,
and benchmark rankings are never cut: a ranking stays a ranking for its metrics.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from imagent.core.config import ResultOptions
from imagent.core.types import MatchCut

# The least spread a cut assumes (in cosine): a gallery whose scores are nearly all equal (zero vectors of photos
# nothing was known about) would otherwise make any small difference look like a match.
MIN_SPREAD = 0.01


def robust_spread(scores: np.ndarray, least: float = MIN_SPREAD) -> float:
    """The robust spread of ``scores`` (their finite values): 1.4826 x the median absolute deviation, at least
    ``least``."""
    s = np.asarray(scores, dtype=np.float64).ravel()
    s = s[np.isfinite(s)]
    if not len(s):
        return least
    return max(1.4826 * float(np.median(np.abs(s - np.median(s)))), least)


def match_cut(scores: np.ndarray, options: ResultOptions | None = None, sampled: bool = False) -> MatchCut | None:
    """The cut of one query from its scores over the gallery (or an even sample of it: ``sampled``); None when
    fewer than ``options.min_photos`` scores are finite."""
    options = options or ResultOptions()
    s = np.asarray(scores, dtype=np.float64).ravel()
    s = s[np.isfinite(s)]
    if len(s) < options.min_photos:
        return None
    median = float(np.median(s))
    spread = robust_spread(s)
    strong = median + options.strong_z * spread
    possible = median + options.possible_z * spread
    if not sampled:
        above = np.sort(s[s >= possible])[::-1]
        if len(above):
            below = s[s < possible]
            seg = np.append(above, below.max() if len(below) else above[-1])
            gaps = (seg[:-1] - seg[1:]) / spread
            i = int(np.argmax(gaps))
            if gaps[i] >= options.gap_z:
                strong = min(strong, float(above[i]))
    return MatchCut(strong=strong, possible=possible, median=median, spread=spread, photos=len(s),
                    sampled=sampled)


def gallery_cut(gallery: Any, vector: np.ndarray, space: str, options: ResultOptions | None = None,
                leave_out: Iterable[str] = ()) -> MatchCut | None:
    """The cut of the query ``vector`` (one, 1-D) in ``space`` of ``gallery``: its cosine with every photo (the
    scan a search without a filter has just made is not repeated: :meth:`Gallery.scores` keeps it) but those of
    ``leave_out`` (the photo "more like this" starts from), or with an even sample of ``sample_photos`` of a larger
    gallery."""
    options = options or ResultOptions()
    n = len(gallery)
    if n < options.min_photos or np.ndim(vector) != 1:
        return None
    if n <= options.sample_photos:
        scores = gallery.scores(vector, space)
        out = gallery.rows([i for i in leave_out if i in gallery])
        if len(out):
            scores = np.delete(scores, out)
        return match_cut(scores, options)
    rows = np.unique(np.linspace(0, n - 1, options.sample_photos).astype(np.int64))
    return match_cut(gallery.scores(vector, space, rows), options, sampled=True)


__all__ = ["MIN_SPREAD", "gallery_cut", "match_cut"]
