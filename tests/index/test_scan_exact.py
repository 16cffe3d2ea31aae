"""The fast paths of the scan and of the top-k / RRF helpers give exactly what the straightforward computation
gives (same positions, same scores to the last bit, same ties), on arrays large enough to take them."""

from __future__ import annotations

import numpy as np
import pytest

from imagent.index import scoring
from imagent.index.scoring import (
    cosine_scores,
    ranks_from_scores,
    reciprocal_rank_fusion,
    rrf_top_k,
    stable_order,
    top_k,
)
from imagent.index.shards import take_last


def _scores(rng: np.random.Generator, n: int, kind: int) -> np.ndarray:
    """Score vectors of several shapes: plain, heavily tied, masked (-inf), sorted, signed zeros."""
    if kind == 0:
        s = rng.standard_normal(n)
    elif kind == 1:
        s = np.round(rng.standard_normal(n), int(rng.integers(0, 3)))  # many ties, at the boundary too
    elif kind == 2:
        s = rng.integers(0, int(rng.integers(1, 40)), n).astype(np.float64)
    elif kind == 3:
        s = rng.standard_normal(n)
        s[rng.random(n) < rng.random()] = -np.inf  # rows outside a pool
    elif kind == 4:
        s = np.sort(rng.standard_normal(n))[:: int(rng.choice([1, -1]))].copy()  # a strided sample sees a ramp
    else:
        s = np.round(rng.standard_normal(n), 1)
        s[rng.random(n) < 0.3] = -0.0
    return s.astype(np.float32 if rng.random() < 0.7 else np.float64)


# --------------------------------------------------------------------------- top_k


def test_top_k_pre_selection_equals_a_stable_full_sort() -> None:
    rng = np.random.default_rng(11)
    for trial in range(120):
        n = int(rng.choice([scoring.PREFILTER_MIN_ROWS, 20_000, 50_000]))
        s = _scores(rng, n, trial % 6)
        for k in (1, 7, 50, 400, int(rng.integers(1, n // 16))):
            np.testing.assert_array_equal(top_k(s, k), np.argsort(-s, kind="stable")[:k])


def test_top_k_pre_selection_with_nan_matches_the_partition() -> None:
    """NaN ranks last in both paths (the pre-selection never keeps it; argpartition puts it at the end)."""
    rng = np.random.default_rng(12)
    for frac in (1e-4, 0.01, 0.5, 0.999, 1.0):
        s = rng.standard_normal(30_000).astype(np.float32)
        s[rng.random(s.size) < frac] = np.nan
        for k in (1, 10, 300, 1500):
            np.testing.assert_array_equal(top_k(s, k), scoring._partition_top_k(s, k))


# --------------------------------------------------------------------------- rrf_top_k


@pytest.mark.parametrize("counts_max", [None, 0, 10**9])  # default, always sort, always count
def test_rrf_top_k_bounded_equals_a_full_fusion(monkeypatch: pytest.MonkeyPatch, counts_max: int | None) -> None:
    if counts_max is not None:
        monkeypatch.setattr(scoring, "RANK_COUNTS_MAX", counts_max)
    rng = np.random.default_rng(13 if counts_max is None else 14 + min(counts_max, 1))
    for trial in range(40):
        n = int(rng.choice([3_000, 9_000, 20_000]))
        lists = [_scores(rng, n, int(rng.integers(0, 6))) for _ in range(int(rng.integers(1, 4)))]
        if len(lists) > 1 and trial % 3 == 0:  # correlated lists: candidates high in both
            lists[1] = (lists[0] + 0.05 * rng.standard_normal(n)).astype(lists[0].dtype)
        z = float(rng.choice([0.0, 1.0, 60.0]))
        full = reciprocal_rank_fusion(lists, z)
        for k in (1, 20, 100, int(rng.integers(0, n))):
            idx, fused, ranks = rrf_top_k(lists, k, z)
            expected = stable_order(full)[:k]
            assert idx.tolist() == expected.tolist()
            assert fused.tolist() == full[expected].tolist()  # the same floats, summed in the same order
            assert ranks.dtype == np.int64 and ranks.shape == (len(lists), len(expected))
            for row, s in zip(ranks, lists, strict=True):
                assert row.tolist() == ranks_from_scores(s)[expected].tolist()


def test_rank_by_count_equals_a_stable_sort() -> None:
    rng = np.random.default_rng(15)
    for kind in range(6):
        s = _scores(rng, 5_000, kind)
        positions = rng.choice(s.size, 300, replace=False)
        assert scoring._ranks_by_count(s, positions).tolist() == ranks_from_scores(s)[positions].tolist()


def test_rrf_top_k_with_nan_keeps_the_sorted_route() -> None:
    rng = np.random.default_rng(16)
    a = rng.standard_normal(5_000).astype(np.float32)
    b = rng.standard_normal(5_000).astype(np.float32)
    a[::97] = np.nan
    got = rrf_top_k([a, b], 30)
    want = scoring._rrf_top_k_sorted([a, b], 30, 60.0)
    for x, y in zip(got, want, strict=True):
        np.testing.assert_array_equal(x, y)


def test_the_nan_check_reads_the_sum_but_never_trusts_it_alone() -> None:
    """``_has_nan`` sums first: a NaN anywhere makes the sum NaN; +inf and -inf (or an overflowing sum) make
    it NaN or inf without any NaN, and the element test then decides."""
    s = np.linspace(-1, 1, 1000, dtype=np.float32)
    assert not scoring._has_nan(s)
    assert not scoring._has_nan(np.arange(10))  # integers hold no NaN
    for bad in (np.nan, -np.nan):
        t = s.copy()
        t[517] = bad
        assert scoring._has_nan(t)
    t = s.copy()
    t[3], t[9] = np.inf, -np.inf  # the sum is NaN, no entry is
    assert not scoring._has_nan(t)
    big = np.full(1000, np.finfo(np.float32).max, dtype=np.float32)  # the sum overflows to inf
    assert not scoring._has_nan(big)
    big[-1] = np.nan
    assert scoring._has_nan(big)


def test_rrf_top_k_empty_and_zero() -> None:
    s = np.arange(1000, dtype=np.float32)
    for lists in ([s], [s, s[::-1].copy()]):
        idx, fused, ranks = rrf_top_k(lists, 0)
        assert idx.shape == (0,) and fused.shape == (0,) and ranks.shape == (len(lists), 0)
        assert idx.dtype == np.int64 and fused.dtype == np.float64 and ranks.dtype == np.int64


# --------------------------------------------------------------------------- the few-queries scan


def _blockwise_reference(m: np.ndarray, q: np.ndarray, rows: int = 2048) -> np.ndarray:
    """What the few-queries scan always returned: one matrix-vector product per query and 2048-row block."""
    scoring.blas_threads(0)
    return np.stack([np.concatenate([m[a:a + rows] @ v for a in range(0, m.shape[0], rows)]) for v in q])


@pytest.mark.parametrize("threaded", [False, True])
def test_few_queries_scan_is_bit_identical_to_2048_row_blocks(monkeypatch: pytest.MonkeyPatch, threaded: bool) -> None:
    """Smaller blocks and shared claims change no score: every block starts at a multiple of 4 rows, and the
    last row is scanned alone (a dot product, rounded differently) exactly where 2048-row blocks did."""
    rng = np.random.default_rng(17)
    big = rng.standard_normal((4 * 2048 + 600, 24)).astype(np.float32)
    sizes = {2049, 2050, 2051, 2052, 2053, 2560, 2561, 2562, 3073, 4097, 4609, 6145, 6657, 8193, 8705}
    sizes |= {int(x) for x in rng.integers(2049, big.shape[0], 12)}
    for n in sorted(sizes):
        for nq in (2, 3, 8):
            q = rng.standard_normal((nq, 24)).astype(np.float32)
            want = _blockwise_reference(big[:n], q)
            with monkeypatch.context() as mp:
                mp.setattr(scoring, "FEW_QUERIES_BACKEND", "numpy")  # the blockwise numpy scan (no torch)
                if threaded:  # scanned in parts by two threads (the blocks' own products stay on one BLAS thread)
                    mp.setattr(scoring, "scan_threads", lambda elements: 2 if elements > scoring.BLOCK_ROWS * 24 else 1)
                    mp.setattr(scoring, "CLAIM_BLOCKS", 1)
                got = cosine_scores(big[:n], q)
            np.testing.assert_array_equal(got, want, err_msg=f"n={n} q={nq}")


@pytest.mark.parametrize("threads", [2, 3])
def test_one_query_scan_on_own_threads_is_the_one_thread_product(monkeypatch: pytest.MonkeyPatch, threads: int) -> None:
    """A large one-query scan runs as blocks on imagent's threads, each a one-thread BLAS product: every score is
    the one-thread product's whatever the thread count (OpenBLAS's own split depends on it), a last block of one
    row included, and OpenBLAS is left on one thread (so none of its threads spins after the scan)."""
    rng = np.random.default_rng(31)
    block = scoring.ONE_QUERY_BLOCK
    big = rng.standard_normal((5 * block + 300, 40)).astype(np.float32)
    sizes = {2 * block, 2 * block + 1, 2 * block + 2, 3 * block + 1, 4 * block + 17, big.shape[0]}
    sizes |= {int(x) for x in rng.integers(2 * block, big.shape[0], 8)}
    monkeypatch.setattr(scoring, "scan_threads", lambda elements: threads if elements > 0 else 1)
    calls: list[int] = []
    real = scoring._one_query
    monkeypatch.setattr(scoring, "_one_query", lambda m, q, t: calls.append(t) or real(m, q, t))
    for n in sorted(sizes):
        q = rng.standard_normal(40).astype(np.float32)
        scoring.blas_threads(0)
        want = big[:n] @ q  # one BLAS thread
        got = cosine_scores(big[:n], q)
        np.testing.assert_array_equal(got, want, err_msg=f"n={n}")
        assert got.dtype == np.float32 and scoring._BLAS_STATE["threads"] == 1
    assert calls == [threads] * len(sizes)  # the blockwise path ran every time
    small = big[: 2 * block - 1]  # below two blocks: the plain product
    np.testing.assert_array_equal(cosine_scores(small, q), small @ q)
    assert len(calls) == len(sizes)


def test_shared_scan_runs_every_block_once_and_reraises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scoring, "CLAIM_BLOCKS", 3)
    seen: list[int] = []
    scoring._shared_scan(lambda a, b: seen.extend(range(a, b)), 50, 2)
    assert sorted(seen) == list(range(50))

    def boom(a: int, b: int) -> None:
        raise RuntimeError("block failed")

    with pytest.raises(RuntimeError, match="block failed"):
        scoring._shared_scan(boom, 10, 2)


# --------------------------------------------------------------------------- gathering a pool's scores


def test_take_last_equals_fancy_indexing() -> None:
    rng = np.random.default_rng(18)
    s = rng.standard_normal((3, 500)).astype(np.float32)
    rows = np.flatnonzero(rng.random(500) < 0.8)
    for idx in (rows, rows.astype(np.int32), rows.tolist(), [], np.array([-1, 0, 499]), rows[::-1].copy()):
        np.testing.assert_array_equal(take_last(s, idx), s[..., idx])
        np.testing.assert_array_equal(take_last(s[0], idx), s[0][..., idx])
    mask = rng.random(500) < 0.5
    np.testing.assert_array_equal(take_last(s, mask), s[..., mask])


def test_few_queries_torch_scan_gives_each_row_one_score() -> None:
    """The torch path of the few-queries scan: a row's score does not depend on where the row sits or on torch's
    thread count, and it is the cosine (numpy's, up to float32 rounding; another number of queries may take
    another kernel, so only up to rounding too)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(29)
    m = rng.standard_normal((3 * scoring.CHUNK_ROWS + 77, 48)).astype(np.float32)
    q = rng.standard_normal((5, 48)).astype(np.float32)
    got = cosine_scores(m, q)
    assert got.shape == (5, m.shape[0]) and got.dtype == np.float32 and got.flags.c_contiguous
    np.testing.assert_allclose(got, q @ m.T, rtol=0, atol=1e-4)
    np.testing.assert_allclose(cosine_scores(m, q[:2]), got[:2], rtol=0, atol=1e-5)
    np.testing.assert_array_equal(cosine_scores(m[101:], q), got[:, 101:])  # shifted rows: the same scores
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        np.testing.assert_array_equal(cosine_scores(m, q), got)
    finally:
        torch.set_num_threads(threads)
    readonly = np.lib.stride_tricks.as_strided(m)  # a read-only view, like a memory-mapped snapshot
    readonly.flags.writeable = False
    np.testing.assert_array_equal(cosine_scores(readonly, q), got)
