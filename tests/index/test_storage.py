"""Storage that grows: identical spaces stored once, one scan for one query over them, pools scored without
copying the matrix, and the BLAS thread policy."""

from __future__ import annotations

import numpy as np

from imagent.core.types import ImageRecord
from imagent.index import scoring
from imagent.index.embedding import gallery_from_records
from imagent.index.gallery import SPACE_CAPTION_DUAL, SPACE_CAPTION_TEXT, SPACE_IMAGE, Gallery
from testkit import CaptionModeEncoder


def _gallery(tmp_path, n: int = 50) -> Gallery:
    enc = CaptionModeEncoder()
    recs = [ImageRecord(id=f"r{i}", path=f"/x/{i}.jpg", captions=[f"caption {i}"]) for i in range(n)]
    return gallery_from_records(str(tmp_path / "g"), recs, enc, enc)


def test_identical_spaces_are_stored_once_and_shared(tmp_path):
    g = _gallery(tmp_path)
    files = sorted((tmp_path / "g" / "vectors").rglob("*.npy"))
    assert len(files) == 1, files  # one space's one shard; the other two spaces alias it
    assert g.snapshot_is_current()
    g2 = Gallery(tmp_path / "g")
    assert g2.vectors(SPACE_IMAGE) is g2.vectors(SPACE_CAPTION_DUAL) is g2.vectors(SPACE_CAPTION_TEXT)
    assert np.allclose(g2.vectors(SPACE_IMAGE)[3], CaptionModeEncoder().encode_texts(["caption 3"])[0])


def test_one_query_over_shared_spaces_is_scanned_once(tmp_path, monkeypatch):
    g = Gallery(_gallery(tmp_path).root)
    q = CaptionModeEncoder().encode_texts(["caption 7"])[0]
    calls = []
    real = scoring.cosine_scores

    def counting(matrix, query):
        calls.append(matrix.shape)
        return real(matrix, query)

    monkeypatch.setattr("imagent.index.shards.cosine_scores", counting)
    a = g.scores(q, SPACE_CAPTION_DUAL)
    b = g.scores(q, SPACE_IMAGE)
    assert len(calls) == 1 and np.array_equal(a, b)
    a[0] = 99.0  # callers own what they get: the memo keeps its own copy
    assert g.scores(q, SPACE_CAPTION_TEXT)[0] != 99.0


def test_a_large_pool_is_scored_without_gathering_rows(tmp_path, monkeypatch):
    g = Gallery(_gallery(tmp_path, 40).root)
    q = CaptionModeEncoder().encode_texts(["caption 1"])[0]
    full = g.scores(q, SPACE_IMAGE)
    shapes = []
    real = scoring.cosine_scores

    def spy(matrix, query):
        shapes.append(matrix.shape[0])
        return real(matrix, query)

    monkeypatch.setattr("imagent.index.shards.cosine_scores", spy)
    rows = g.candidate_rows(exclude=["r1"])  # 39 of 40 rows: scan all, then index
    assert np.allclose(g.scores(q + 0, SPACE_IMAGE, rows), full[rows])
    small = np.array([2, 5, 9])  # a small pool: its rows are gathered
    g._score_memo.clear()
    assert np.allclose(g.scores(q, SPACE_IMAGE, small), full[small])
    assert shapes == [40, 3]


def test_blas_thread_policy():
    assert scoring.blas_threads(10_000 * 384) == 1
    big = scoring.blas_threads(scoring.PARALLEL_MIN_ELEMENTS)
    assert big >= 1
    scoring.blas_threads(1)  # back to one thread for the rest of the session


def test_float16_snapshot_option(tmp_path):
    from imagent.core.config import IndexOptions

    g = _gallery(tmp_path)
    full = g.vectors(SPACE_IMAGE).copy()
    g2 = Gallery(tmp_path / "g")
    g2.configure(IndexOptions(vectors_dtype="float16"))
    v = g2.vectors(SPACE_IMAGE)  # the float32 snapshot does not match: rewritten as float16
    assert v.dtype == np.float16 and np.allclose(v, full, atol=1e-3)
    (shard,) = (tmp_path / "g" / "vectors").rglob("shard-*.npy")
    assert np.load(shard, mmap_mode="r").dtype == np.float16
    q = CaptionModeEncoder().encode_texts(["caption 4"])[0]
    assert g2.search(q, SPACE_IMAGE, 1).ids == ["r4"]
