"""Scoring helpers on cases small enough to work out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from imagent.core.vectors import l2_normalize
from imagent.index import scoring
from imagent.index.scoring import (
    cosine_scores,
    haversine_km,
    minmax,
    ranks_at,
    ranks_from_scores,
    reciprocal_rank_fusion,
    rrf_top_k,
    stable_order,
    top_k,
    weighted_sum,
)

# --------------------------------------------------------------------------- top_k


@pytest.mark.parametrize(
    ("scores", "k", "expected"),
    [
        ([0.5, 0.9, 0.5, 0.9, 0.1], 3, [1, 3, 0]),  # equal scores: lower index first
        ([0.5, 0.9, 0.5, 0.9, 0.1], 2, [1, 3]),
        ([0.5, 0.9, 0.5, 0.9, 0.1], 1, [1]),
        ([0.5, 0.9, 0.5, 0.9, 0.1], 5, [1, 3, 0, 2, 4]),
        ([0.5, 0.9, 0.5, 0.9, 0.1], 9, [1, 3, 0, 2, 4]),  # k > n: everything, sorted
        ([0.5, 0.9, 0.5, 0.9, 0.1], 0, []),
        ([0.2] * 6, 3, [0, 1, 2]),  # all tied
        ([1.0, 0.5, 0.5, 0.5, 0.2], 2, [0, 1]),  # tie across the k-th place
        ([0.2, 0.5, 0.5, 0.5, 1.0], 3, [4, 1, 2]),
        ([0.5, 0.5, 0.5, 1.0, 0.5], 2, [3, 0]),
        ([-0.3, -0.1, -0.2], 2, [1, 2]),  # negative cosines
        ([3, 1, 3, 2], 2, [0, 2]),  # integer scores
        ([], 3, []),
    ],
)
def test_top_k_by_hand(scores: list[float], k: int, expected: list[int]) -> None:
    got = top_k(np.asarray(scores, dtype=np.float32), k)
    assert got.tolist() == expected
    assert got.dtype == np.int64


def test_top_k_equals_a_stable_full_sort() -> None:
    rng = np.random.default_rng(0)
    for trial in range(500):
        n = int(rng.integers(1, 200))
        k = int(rng.integers(1, n + 2))
        if trial % 2:
            s = rng.integers(0, int(rng.integers(1, 8)), n).astype(np.float32)  # many ties
        else:
            s = rng.standard_normal(n).astype(np.float32)
        want = np.argsort(-s, kind="stable")[:k]
        np.testing.assert_array_equal(top_k(s, k), want)


def test_stable_order_and_ranks() -> None:
    s = np.array([0.3, 0.9, 0.3, 0.1], dtype=np.float32)
    assert stable_order(s).tolist() == [1, 0, 2, 3]
    assert ranks_from_scores(s).tolist() == [2, 1, 3, 4]
    assert ranks_from_scores(np.array([5.0, 5.0, 5.0])).tolist() == [1, 2, 3]
    assert ranks_from_scores(np.array([])).tolist() == []


# --------------------------------------------------------------------------- cosine


def test_cosine_scores_by_hand() -> None:
    m = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [-0.6, -0.8]], dtype=np.float32)
    s = cosine_scores(m, np.array([0.6, 0.8]))
    assert s.dtype == np.float32
    np.testing.assert_allclose(s, [0.6, 0.8, 1.0, -1.0], atol=1e-6)
    batch = cosine_scores(m, np.array([[0.6, 0.8], [1.0, 0.0]]))
    assert batch.shape == (2, 4)
    np.testing.assert_allclose(batch[1], [1.0, 0.0, 0.6, -0.6], atol=1e-6)
    assert cosine_scores(m[:0], np.array([1.0, 0.0])).shape == (0,)


def _unit_rows(n: int, d: int, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    return l2_normalize(x)


@pytest.mark.parametrize("use_torch", [True, False])
def test_cosine_scores_float16(monkeypatch: pytest.MonkeyPatch, use_torch: bool) -> None:
    if use_torch:
        pytest.importorskip("torch")
    else:
        monkeypatch.setattr(scoring, "_TORCH", False)  # as if torch were not installed
    assert scoring.half_backend() == ("torch" if use_torch else "numpy")
    m = _unit_rows(300, 32)
    q = m[:2]
    exact = q @ m.T
    half = cosine_scores(m.astype(np.float16), q)
    assert half.dtype == np.float32 and half.shape == (2, 300)
    # float16 storage and a float16-rounded result: a few 1e-4 at most for unit vectors.
    np.testing.assert_allclose(half, exact, atol=2e-3)
    single = cosine_scores(m.astype(np.float16), q[0])
    assert single.shape == (300,)
    np.testing.assert_allclose(single, half[0], atol=1e-3)
    assert top_k(single, 1).tolist() == [0]  # a row is its own nearest neighbour


def test_float16_paths_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    m = _unit_rows(500, 48, seed=1).astype(np.float16)
    q = _unit_rows(1, 48, seed=2)[0]
    fast = cosine_scores(m, q)
    monkeypatch.setattr(scoring, "_TORCH", False)
    slow = cosine_scores(m, q)
    np.testing.assert_allclose(fast, slow, atol=2.5e-4)  # at most one float16 step apart


def test_cosine_scores_on_memory_maps(tmp_path) -> None:
    m = _unit_rows(64, 16, seed=3)
    q = m[5]
    for dtype in (np.float32, np.float16):
        path = tmp_path / f"v_{np.dtype(dtype).name}.npy"
        np.save(path, m.astype(dtype))
        mm = np.load(path, mmap_mode="r")
        s = cosine_scores(mm, q)
        np.testing.assert_allclose(s, m @ q, atol=2e-3)
        assert top_k(s, 1).tolist() == [5]
        # a row subset (what Gallery.search scores under filters) and a reversed view
        np.testing.assert_allclose(cosine_scores(mm[[7, 2]], q), s[[7, 2]], atol=1e-3)
        np.testing.assert_allclose(cosine_scores(mm[::-1], q), s[::-1], atol=1e-3)


def test_l2_normalize_leaves_zero_rows_zero() -> None:
    x = l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]]))
    np.testing.assert_allclose(x, [[0.6, 0.8], [0.0, 0.0]])
    assert np.isfinite(x).all() and x.dtype == np.float32


# --------------------------------------------------------------------------- normalisation and fusion


def test_minmax_by_hand() -> None:
    np.testing.assert_allclose(minmax(np.array([2.0, 4.0, 6.0])), [0.0, 0.5, 1.0])
    np.testing.assert_allclose(minmax(np.array([-1.0, 1.0, 0.0])), [0.0, 1.0, 0.5])
    np.testing.assert_array_equal(minmax(np.array([3.0, 3.0, 3.0])), [1.0, 1.0, 1.0])  # constant -> ones
    np.testing.assert_array_equal(minmax(np.array([7.0])), [1.0])
    assert minmax(np.array([])).size == 0
    assert minmax(np.array([1, 2, 3])).dtype == np.float32


def test_weighted_sum_by_hand() -> None:
    out = weighted_sum([np.array([1.0, 2.0]), np.array([3.0, 4.0])], [0.5, 2.0])
    np.testing.assert_allclose(out, [0.5 + 6.0, 1.0 + 8.0])
    assert out.dtype == np.float32
    with pytest.raises(ValueError, match="differ in length"):
        weighted_sum([np.array([1.0])], [0.5, 0.5])


def test_reciprocal_rank_fusion_by_hand() -> None:
    s1 = np.array([0.9, 0.5, 0.1])  # ranks 1, 2, 3
    s2 = np.array([0.2, 0.8, 0.5])  # ranks 3, 1, 2
    fused = reciprocal_rank_fusion([s1, s2], z=60)
    want = [1 / 61 + 1 / 63, 1 / 62 + 1 / 61, 1 / 63 + 1 / 62]
    np.testing.assert_allclose(fused, want, rtol=1e-12)
    assert stable_order(fused).tolist() == [1, 0, 2]
    # z defaults to 60; a single list keeps its own order.
    np.testing.assert_allclose(reciprocal_rank_fusion([s1]), [1 / 61, 1 / 62, 1 / 63], rtol=1e-12)
    # Ties inside a list are ranked by position: [0.5, 0.5] -> ranks 1, 2.
    np.testing.assert_allclose(reciprocal_rank_fusion([np.array([0.5, 0.5])], z=1), [1 / 2, 1 / 3])


# --------------------------------------------------------------------------- geography


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(1, 1500), lists=st.integers(1, 3), decimals=st.integers(0, 3), k=st.integers(0, 1600),
    z=st.sampled_from([0.0, 1.0, 60.0]), seed=st.integers(0, 2**31),
)
def test_rrf_top_k_equals_a_full_fusion(n: int, lists: int, decimals: int, k: int, z: float, seed: int) -> None:
    """The top-k fusion gives the full fusion's first k positions, scores and ranks (coarse rounding: many
    ties, at the boundary too)."""
    rng = np.random.default_rng(seed)
    scores = [np.round(rng.standard_normal(n), decimals).astype(np.float32) for _ in range(lists)]
    idx, fused, ranks = rrf_top_k(scores, k, z)
    full = reciprocal_rank_fusion(scores, z)
    expected = stable_order(full)[: min(k, n)]
    assert idx.tolist() == expected.tolist()
    assert fused.tolist() == full[expected].tolist()
    for row, s in zip(ranks, scores, strict=True):
        assert row.tolist() == ranks_from_scores(s)[expected].tolist()
        assert ranks_at(s, expected).tolist() == row.tolist()


def test_cosine_scores_few_queries_read_in_blocks() -> None:
    """A handful of queries over a large matrix (the block path) equals one product per query."""
    rng = np.random.default_rng(3)
    m = rng.standard_normal((scoring.CHUNK_ROWS * 2 + 5, 16)).astype(np.float32)
    q = rng.standard_normal((3, 16)).astype(np.float32)
    out = cosine_scores(m, q)
    assert out.shape == (3, m.shape[0])
    np.testing.assert_allclose(out, np.stack([m @ v for v in q]), rtol=1e-5, atol=1e-6)


def test_haversine_known_distances() -> None:
    paris, london = (48.8566, 2.3522), (51.5074, -0.1278)
    d = haversine_km(*paris, np.array([london[0]]), np.array([london[1]]))
    assert d[0] == pytest.approx(343.5, abs=1.0)  # Paris - London great-circle distance
    nyc, la = (40.7128, -74.0060), (34.0522, -118.2437)
    assert haversine_km(*nyc, np.array([la[0]]), np.array([la[1]]))[0] == pytest.approx(3936, abs=5)
    many = haversine_km(0.0, 0.0, np.array([0.0, 0.0, 90.0]), np.array([0.0, 180.0, 0.0]))
    np.testing.assert_allclose(many, [0.0, math.pi * 6371.0088, math.pi / 2 * 6371.0088], rtol=1e-9)
    with np.errstate(invalid="ignore"):
        assert np.isnan(haversine_km(0.0, 0.0, np.array([np.nan]), np.array([np.nan]))[0])  # no GPS -> NaN


# --------------------------------------------------------------------------- the benchmark script


def test_search_scan_benchmark_runs(tmp_path) -> None:
    """The benchmark in benchmarks/ keeps working (tiny sizes: this checks it runs, not its numbers)."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "search_scan.py"
    out = subprocess.run(
        [sys.executable, str(script), "--sizes", "2000", "--dim", "32", "--repeats", "3", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=True,
    ).stdout
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("2,000")]
    assert [(r[1], r[2]) for r in rows] == [("float32", "10"), ("float32", "100"), ("float16", "10"),
                                             ("float16", "100")]
    assert all(float(r[3]) > 0 and float(r[4]) > 0 for r in rows)
