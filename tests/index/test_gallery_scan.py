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
