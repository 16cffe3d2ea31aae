"""Gallery.scan: several queries scored in one product, the pool as a mask (what OSCAR's tool calls use)."""

from __future__ import annotations

import numpy as np

from imagent.index.gallery import SPACE_CAPTION_TEXT


def test_scan_equals_one_query_at_a_time_and_masks_the_pool(stamps_gallery, minilm):
    g = stamps_gallery
    queries = minilm.encode_texts(["a red coin", "a blue ship at sea", "a red coin"])
    full = g.scan(queries, SPACE_CAPTION_TEXT)
    assert full.shape == (3, len(g))
    for q, row in zip(queries, full, strict=True):
        np.testing.assert_allclose(row, g.scores(q, SPACE_CAPTION_TEXT), rtol=1e-5, atol=1e-6)
    excluded = [g.ids[0], g.ids[7]]
    pool = g.candidate_rows(exclude=excluded)
    masked = g.scan(queries, SPACE_CAPTION_TEXT, pool)
    assert np.isneginf(masked[:, [0, 7]]).all() and np.isfinite(masked[:, pool]).all()
    np.testing.assert_array_equal(masked[:, pool], full[:, pool])
    # the masked row ranks as the filtered search does
    best = np.argsort(-masked[1], kind="stable")[:10]
    assert [g.ids[int(r)] for r in best] == g.search(queries[1], SPACE_CAPTION_TEXT, 10, exclude=excluded).ids


def test_scores_memo_tells_pools_of_one_size_apart(stamps_gallery, minilm):
    """The memo of Gallery.scores keys a pool by its size and ends and compares it whole: two pools with the
    same size and ends but other rows in between get their own scores, and a repeated pool its memo."""
    g = stamps_gallery
    q = minilm.encode_texts(["a red coin", "a blue ship at sea"])
    full = g.scores(q, SPACE_CAPTION_TEXT)
    n = len(g)
    first = np.flatnonzero(np.arange(n) != 3)
    second = np.flatnonzero(np.arange(n) != 4)
    for rows in (first, second, first, second.tolist(), second.astype(np.int32)):
        np.testing.assert_array_equal(g.scores(q, SPACE_CAPTION_TEXT, rows), full[:, rows])
    again = g.scores(q, SPACE_CAPTION_TEXT, first)
    again[:] = 0.0  # a caller's copy: the memo keeps its own
    np.testing.assert_array_equal(g.scores(q, SPACE_CAPTION_TEXT, first), full[:, first])
