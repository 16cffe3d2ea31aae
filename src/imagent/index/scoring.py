"""Scoring helpers every method composes: exact cosine top-k, normalisation, fusion, rank utilities.

All functions are numpy (float16 matrices are multiplied by torch when it is installed). Scores
are ``float32`` arrays aligned with a list of ids; ties are broken by position (a stable order), so
every ranking is deterministic.
"""

from __future__ import annotations

import itertools
import threading
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np


def cosine_scores(matrix: np.ndarray, query: np.ndarray, scan_elements: int | None = None) -> np.ndarray:
    """Cosine of each row of ``matrix`` with ``query`` (rows and query assumed L2-normalised).
    ``query`` of shape (d,) gives (n,); of shape (q, d) gives (q, n). Returned as float32.
    ``scan_elements``: the size of the scan whose thread count :func:`blas_threads` sets, when it is not
    ``matrix.size`` (0: one thread, for a shard scanned beside others in threads of its own).

    A float32 (or float64) matrix goes through BLAS, with the thread policy of :func:`blas_threads`.
    A float16 matrix (half-size galleries) uses torch's float16 product when torch is installed: numpy has
    no BLAS for float16 and its own loop is 10-20x slower than a float32 scan. Both float16 paths round
    each score to float16."""
    q = np.asarray(query, dtype=np.float32)
    if matrix.dtype == np.float16:
        return _half_scores(matrix, q)
    if q.ndim == 2 and 1 < q.shape[0] <= FEW_QUERIES and matrix.dtype == np.float32 and matrix.shape[0] > CHUNK_ROWS:
        return _few_queries(matrix, q)
    elements = matrix.size if scan_elements is None else scan_elements
    if q.ndim == 1 and matrix.dtype == np.float32 and matrix.shape[0] >= 2 * ONE_QUERY_BLOCK:
        threads = scan_threads(elements)
        if threads > 1:
            return _one_query(matrix, q, threads)
    blas_threads(elements)
    return np.asarray(q @ matrix.T, dtype=np.float32)


# One query over a large float32 matrix on several cores: blocks of ONE_QUERY_BLOCK rows, each a one-thread BLAS
# matrix-vector product, shared out to imagent's own scan threads (:func:`_shared_scan`) instead of OpenBLAS's:
# (1) OpenBLAS's threads never run, so none spins afterwards against a torch scan (they spin ~0.1 s after a
# threaded product unless OPENBLAS_THREAD_TIMEOUT is set before numpy loads; imagent/__init__.py), whatever the
# import order of a program; (2) every row's score is the one-thread product's, whatever the thread count:
# blocks start at multiples of ONE_QUERY_BLOCK, where the kernel's row grouping starts anyway, while OpenBLAS
# splits the rows where the thread count falls (measured: 70,001 x 512 on 2 threads differs from 1 thread in the
# last bit). The price: 5-10% over OpenBLAS's own threads (100,000 x 384 with a torch scan between products,
# alternating in one process: 3.64 against 3.43 ms; benchmarks/thread_spin.py prints both; claims of 2 blocks
# instead of CLAIM_BLOCKS took 2.9-4.2 ms where these took 2.7).
ONE_QUERY_BLOCK = 2048


def _one_query(matrix: np.ndarray, q: np.ndarray, threads: int) -> np.ndarray:
    return _blockwise(matrix, q[None, :], ONE_QUERY_BLOCK, threads)[0]


def _blockwise(matrix: np.ndarray, q: np.ndarray, block: int, threads: int, lone_last_row: bool = False
               ) -> np.ndarray:
    """``(len(q), n)`` scores, one one-thread matrix-vector product per query and block of ``block`` rows, the
    blocks shared out to ``threads`` threads (:func:`_shared_scan`). numpy takes a one-row block for a dot product
    (rounded differently from the same row in a matrix-vector product): a last row alone joins the block before
    it unless ``lone_last_row`` (where a scan this one must equal scanned it alone)."""
    matrix = np.asarray(matrix)  # a memmap as a plain view: slicing a memmap subclass costs per block
    blas_threads(0)  # each block is a one-thread product
    n = matrix.shape[0]
    out = np.empty((q.shape[0], n), dtype=np.float32)
    vectors = list(q)
    starts = list(range(0, n, block))
    if not lone_last_row and len(starts) > 1 and n - starts[-1] == 1:
        starts.pop()
    bounds = list(zip(starts, [*starts[1:], n], strict=True))

    def scan(first: int, last: int) -> None:
        for start, stop in bounds[first:last]:
            part = matrix[start:stop]
            for j, v in enumerate(vectors):
                np.dot(part, v, out=out[j, start:stop])

    threads = min(threads, len(bounds))
    if threads <= 1:
        scan(0, len(bounds))
    else:
        _shared_scan(scan, len(bounds), threads)
    return out


# A handful of queries over a large float32 matrix: BLAS's skinny matrix product reads the matrix at a fraction
# of memory speed (measured 2 queries x 100,000 x 384: 2.3x the time of one, not ~1x). Scanning it in blocks
# that stay in cache, one matrix-vector product per query and block, reads it once from memory. Matrices of at
# most CHUNK_ROWS rows take the plain product (its scores are the ones such galleries always had: a matrix
# product rounds differently from a matrix-vector one). A block of BLOCK_ROWS rows (768 KB at 384 dimensions)
# stays in a core's L2 cache for the second query: measured here, a matrix-vector product over a block in L2
# reads at ~90 GB/s, over a 2048-row block (3 MB, in L3) at ~50 GB/s. Each row's score is the same whatever
# block it is in (the same dot product), so the block size never changes a score.
FEW_QUERIES = 8
CHUNK_ROWS = 2048
BLOCK_ROWS = 512


def _few_queries(matrix: np.ndarray, q: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix)  # a memmap as a plain view: slicing a memmap subclass costs per block
    if FEW_QUERIES_BACKEND == "torch":
        out = _few_queries_torch(matrix, q)
        if out is not None:
            return out
    # The last row is a block of its own only where it was with CHUNK_ROWS-row blocks (the scores such scans
    # always gave).
    return _blockwise(matrix, q, BLOCK_ROWS, scan_threads(matrix.size), lone_last_row=matrix.shape[0] % CHUNK_ROWS == 1)


# Which library scans a few queries over a large float32 matrix: "torch" when it is installed (its product with
# a transposed query block reads the matrix once for all of them: measured here at 100,000 x 384, 2 queries in
# 3.0 ms, as fast as numpy's 1-query scan, against 5.2 ms for the blockwise numpy scan; 8 queries 6.3 against
# 9.3 ms), else "numpy" (the blockwise scan below). Each row's score from torch is the same wherever the row
# sits and whatever torch's thread count (checked in tests/index/test_scan_exact.py), so a pool's scores are the
# whole gallery's; it may differ in the last bit from numpy's 1-query scan of the same row, or with another
# number of queries (another kernel, another summation order): only exact ties can order differently there.
FEW_QUERIES_BACKEND = "torch"


def _few_queries_torch(matrix: np.ndarray, q: np.ndarray) -> np.ndarray | None:
    torch = _torch()
    if torch is None or not matrix.dtype.isnative or any(st < 0 for st in matrix.strides):
        return None
    try:
        with warnings.catch_warnings():
            # A read-only memmap: torch warns that writes would be undefined; it only reads here.
            warnings.simplefilter("ignore", UserWarning)
            tm = torch.from_numpy(matrix)
        tq = torch.from_numpy(np.ascontiguousarray(q, dtype=np.float32))
        with torch.inference_mode():
            scores = (tm @ tq.T).numpy()  # (n, q): the matrix is read once
        return np.ascontiguousarray(scores.T)
    except (RuntimeError, TypeError, ValueError):
        return None  # a layout torch refuses: the numpy scan


# A parallel scan hands out this many blocks at a time.
CLAIM_BLOCKS = 8


def _shared_scan(scan: Any, blocks: int, threads: int) -> None:
    """Run ``scan(first, last)`` over ``range(blocks)`` on this thread and ``threads - 1`` pool threads, each
    claiming CLAIM_BLOCKS blocks at a time (one BLAS thread each; numpy releases the GIL in dot). This thread
    works from the start, and a pool thread that the scheduler starts late (a busy machine) takes fewer
    claims, or none, instead of holding up the scan with a fixed half."""
    claims = itertools.count()  # next() on a count is atomic under the GIL
    total = -(-blocks // CLAIM_BLOCKS)
    lock = threading.Lock()
    done = threading.Event()
    state: dict[str, Any] = {"finished": 0, "error": None}

    def work() -> None:
        while not done.is_set():
            i = next(claims)
            if i >= total:
                return
            try:
                scan(i * CLAIM_BLOCKS, min((i + 1) * CLAIM_BLOCKS, blocks))
            except BaseException as exc:  # re-raised by the caller's thread
                state["error"] = exc
                done.set()
                return
            with lock:
                state["finished"] += 1
                if state["finished"] == total:
                    done.set()

    for _ in range(threads - 1):
        _scan_pool().submit(work)
    work()
    done.wait()
    if state["error"] is not None:
        raise state["error"]


_POOL: list[Any] = []


def _scan_pool() -> Any:
    """One small thread pool for parallel scans, made on first use."""
    if not _POOL:
        import os
        from concurrent.futures import ThreadPoolExecutor

        _POOL.append(ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1), thread_name_prefix="imagent-scan"))
    return _POOL[0]


# Scans below this many matrix elements run on one BLAS thread (see blas_threads).
PARALLEL_MIN_ELEMENTS = 16_000_000
_BLAS: list[Any] | None = None
_BLAS_STATE = {"threads": -1}


def _blas_controllers() -> list[Any]:
    global _BLAS
    if _BLAS is None:
        try:
            from threadpoolctl import ThreadpoolController

            _BLAS = list(ThreadpoolController().select(user_api="blas").lib_controllers)
        except Exception:  # threadpoolctl missing or a BLAS it cannot drive: numpy's own default stays
            _BLAS = []
    return _BLAS


def scan_threads(elements: int) -> int:
    """The thread count :func:`blas_threads` gives a scan of ``elements`` entries, without setting it (a
    sharded scan runs that many shards at once, each on one BLAS thread)."""
    if elements < PARALLEL_MIN_ELEMENTS:
        return 1
    import os

    return int(os.environ.get("IMAGENT_BLAS_THREADS") or os.cpu_count() or 1)


def blas_threads(elements: int) -> int:
    """numpy's BLAS thread count for a scan of ``elements`` matrix entries: one thread below
    :data:`PARALLEL_MIN_ELEMENTS`, else ``IMAGENT_BLAS_THREADS`` or every core.

    A gallery scan for one query is a matrix-vector product, bound by memory bandwidth, which one core
    nearly saturates; extra BLAS threads only add wake-up cost, and they spin against torch's own threads
    (an encode just before) and any other busy thread: measured here, a 10,000 x 384 scan took 41 ms on two
    BLAS threads on a loaded machine and 3.2 ms on one. Large scans (a million rows) still use every core: a
    one-query scan through imagent's own threads (:func:`_one_query`), a many-query product through BLAS's.
    Setting the count costs about a microsecond (threadpoolctl's library handle, looked up once)."""
    want = scan_threads(elements)
    if want != _BLAS_STATE["threads"]:
        for lib in _blas_controllers():
            lib.set_num_threads(want)
        _BLAS_STATE["threads"] = want
    return want


# torch module once looked up; False when it cannot be imported (numpy then does the float16 product).
_TORCH: Any = None


def _torch() -> Any:
    global _TORCH
    if _TORCH is None:
        try:
            import torch

            _TORCH = torch
        except Exception:  # not installed, or a broken install: numpy still works
            _TORCH = False
    return _TORCH or None


def half_backend() -> str:
    """Which library computes float16 scores here: ``torch`` or ``numpy``."""
    return "torch" if _torch() is not None else "numpy"


def _half_scores(matrix: np.ndarray, q: np.ndarray) -> np.ndarray:
    q16 = q.astype(np.float16)
    torch = _torch()
    m = np.asarray(matrix)  # a memmap as a plain ndarray view (no copy)
    if torch is not None and m.dtype.isnative and all(st >= 0 for st in m.strides):
        try:
            with warnings.catch_warnings():
                # A read-only memmap: torch warns that writes would be undefined; it only reads here.
                warnings.simplefilter("ignore", UserWarning)
                tm = torch.from_numpy(m)
            tq = torch.from_numpy(q16)
            with torch.inference_mode():
                out = tm @ tq if q.ndim == 1 else tq @ tm.T
            return out.float().numpy()
        except (RuntimeError, TypeError, ValueError):
            pass  # an exotic layout torch refuses: the numpy path below gives the same scores
    return np.asarray(m @ q16 if q.ndim == 1 else q16 @ m.T, dtype=np.float32)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` highest scores, best first; equal scores keep index order.

    Uses ``argpartition`` (O(n)) then a stable sort of the k survivors, so it costs what a bare
    ``argpartition`` costs plus O(k log k); two more O(n) passes only when scores tie across the
    k-th place. A long array with a short top (a gallery's scores) is first cut to the entries at or
    above a threshold read from a strided sample (:func:`_at_or_above_sample`): one comparison pass in place
    of the partition of every entry, with the same result (NaN ranks last, as ``argpartition`` puts it)."""
    scores = np.asarray(scores)
    n = scores.shape[0]
    if k <= 0 or n == 0:
        return np.empty(0, dtype=np.int64)
    if k >= n:
        return np.argsort(-scores, kind="stable")
    if n >= PREFILTER_MIN_ROWS and k * 16 <= n:
        keep = _at_or_above_sample(scores, k)
        if keep is not None:
            # Every entry left out scores below all of ``keep`` (at least k entries), and ``keep`` is in index
            # order, so its top k with ties by index is the whole array's.
            return keep[_partition_top_k(scores[keep], k)]
    return _partition_top_k(scores, k)


# top_k's pre-selection: arrays at least this long, a strided sample of about this many entries.
PREFILTER_MIN_ROWS = 16_384
PREFILTER_SAMPLE = 1024


def _at_or_above_sample(scores: np.ndarray, k: int) -> np.ndarray | None:
    """The indices (ascending) of the entries at or above a value chosen from a strided sample of ``scores``
    so that about ``2k`` of them pass, or None when fewer than ``k`` pass (or a quarter of the array or more:
    no saving) and the caller must partition everything."""
    n = scores.shape[0]
    sample = scores[:: n // PREFILTER_SAMPLE]
    size = sample.shape[0]
    j = min(size, 2 * (k * size // n + 1) + 8)  # the j-th best of the sample: ~j * n / size entries pass
    threshold = np.partition(sample, size - j)[size - j]
    if np.isnan(threshold):  # NaN: nothing compares at or above it
        return None
    passed = np.flatnonzero(scores >= threshold)
    if passed.shape[0] < k or passed.shape[0] * 4 >= n:
        return None
    return passed


def _partition_top_k(scores: np.ndarray, k: int) -> np.ndarray:
    n = scores.shape[0]
    if k >= n:
        return np.argsort(-scores, kind="stable")
    neg = -scores
    # Partition around position k (not k - 1): the element there is the best one left out, which
    # tells without another pass whether it ties with the worst one kept.
    part = np.argpartition(neg, k)
    chosen = part[:k]
    if not neg[part[k]] > neg[chosen].max():
        # Ties at the boundary: argpartition may pick any of the equal scores; take the lowest indices.
        kth = scores[chosen].min()
        above = np.flatnonzero(scores > kth)
        equal = np.flatnonzero(scores == kth)[: k - above.size]
        chosen = np.concatenate([above, equal])
    order = np.lexsort((chosen, -scores[chosen]))
    return chosen[order].astype(np.int64, copy=False)


def stable_order(scores: np.ndarray) -> np.ndarray:
    """Indices sorted by descending score, ties by index."""
    return np.argsort(-np.asarray(scores), kind="stable")


def minmax(x: np.ndarray) -> np.ndarray:
    """Min-max scale to [0, 1]; a constant vector maps to all ones (nothing to tell apart)."""
    x = np.asarray(x, dtype=np.float32)
    if x.size == 0:
        return x
    lo, hi = float(x.min()), float(x.max())
    if hi - lo <= 1e-12:
        return np.ones_like(x)
    return (x - lo) / (hi - lo)


def weighted_sum(parts: Sequence[np.ndarray], weights: Sequence[float]) -> np.ndarray:
    if len(parts) != len(weights):
        raise ValueError("weighted_sum: parts and weights differ in length")
    out = np.zeros_like(np.asarray(parts[0], dtype=np.float32))
    for p, w in zip(parts, weights, strict=True):
        out += np.float32(w) * np.asarray(p, dtype=np.float32)
    return out


def ranks_from_scores(scores: np.ndarray) -> np.ndarray:
    """1-based rank of each position under a stable descending sort."""
    order = stable_order(scores)
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[order] = np.arange(1, len(order) + 1)
    return ranks


def reciprocal_rank_fusion(score_lists: Sequence[np.ndarray], z: float = 60.0) -> np.ndarray:
    """RRF over aligned score vectors: sum_j 1 / (z + rank_j), ranks 1-based, stable."""
    total = np.zeros(len(score_lists[0]), dtype=np.float64)
    for s in score_lists:
        total += 1.0 / (z + ranks_from_scores(np.asarray(s)))
    return total


def ranks_at(scores: np.ndarray, positions: np.ndarray, ascending: np.ndarray | None = None) -> np.ndarray:
    """The 1-based ranks :func:`ranks_from_scores` gives ``positions``, without sorting indices: one
    value sort (``ascending``, pass it to reuse) and a binary search per position; equal scores rank by
    position, counted only for positions that tie."""
    scores = np.asarray(scores)
    positions = np.asarray(positions, dtype=np.int64)
    xs = np.sort(scores) if ascending is None else ascending
    values = scores[positions]
    right = np.searchsorted(xs, values, side="right")
    left = np.searchsorted(xs, values, side="left")
    ranks = (scores.shape[0] - right + 1).astype(np.int64)
    for j in np.flatnonzero(right - left > 1):  # ties: equal scores at lower positions rank first
        p = int(positions[j])
        ranks[j] += int(np.count_nonzero(scores[:p] == values[j]))
    return ranks


def rrf_top_k(score_lists: Sequence[np.ndarray], k: int, z: float = 60.0
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``k`` best positions under :func:`reciprocal_rank_fusion` followed by :func:`stable_order`, their
    fused scores and their rank in each list (shape ``(len(score_lists), k)``): the same numbers, without
    ranking every position.

    Only the top ``m`` of each list are ranked (:func:`top_k`: its order is the list's rank order); a
    position outside all of them ranks below ``m`` everywhere, so its fused score is at most
    ``L / (z + m + 1)``. A candidate below ``m`` in some list gets bounds from rank ``m + 1`` and rank ``n``
    there, and only the candidates whose upper bound reaches the k-th best lower bound get their exact rank,
    counted (:func:`_ranks_by_count`) where there are few, else read from a sorted copy of the list. When
    the k-th best lower bound does not beat every position outside the candidates, ``m`` grows (at worst to
    a full fusion). Scores with NaN take the sorted-copy route for every candidate."""
    lists = [np.asarray(s) for s in score_lists]
    n = lists[0].shape[0]
    k = max(0, min(k, n))
    if k == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64), np.empty((len(lists), 0), np.int64)
    if any(_has_nan(s) for s in lists):
        return _rrf_top_k_sorted(lists, k, z)
    m = max(8 * k, 512)
    while m < n:
        found = _rrf_top_k_bounded(lists, k, z, m)
        if found is not None:
            return found
        m *= 4
    fused_all = reciprocal_rank_fusion(lists, z=z)
    best = top_k(fused_all, k)
    return best, fused_all[best], np.stack([ranks_at(s, best) for s in lists])


def _has_nan(scores: np.ndarray) -> bool:
    """Whether ``scores`` holds a NaN: its sum first (one pass, no temporary array), which is NaN whenever one
    is; only then (or for inf - inf) the element test."""
    if scores.dtype.kind not in "fc":
        return False
    with np.errstate(all="ignore"):
        total = np.add.reduce(scores, axis=None)
    return bool(np.isnan(total)) and bool(np.isnan(scores).any())


def _rrf(ranks: np.ndarray, z: float) -> np.ndarray:
    """:func:`reciprocal_rank_fusion` of given ranks (one row per list), summed in the same order."""
    total = np.zeros(ranks.shape[1], dtype=np.float64)
    for r in ranks:
        total += 1.0 / (z + r)
    return total


# rrf_top_k: up to this many exact ranks to find in one list are counted (one pass over the list each, ~10 us
# at 100,000 scores); more are read from a sorted copy (one sort, ~2.2 ms here: ~200 counting passes' time).
RANK_COUNTS_MAX = 160


def _rrf_top_k_bounded(lists: list[np.ndarray], k: int, z: float, m: int
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """:func:`rrf_top_k` from each list's top ``m``, or None when ``m`` is too small to decide.

    The computed fused score is non-increasing in every rank (IEEE division and addition are monotone), so
    the scores computed with rank ``n`` (lower bound) and rank ``m + 1`` (upper bound) in place of an unknown
    rank bound the computed score itself: no rounding margin is needed."""
    n = lists[0].shape[0]
    tops = [top_k(s, m) for s in lists]
    cand = np.unique(np.concatenate(tops))
    ranks = np.zeros((len(lists), cand.shape[0]), dtype=np.int64)  # 0: below the list's top m (not known)
    for row, best in zip(ranks, tops, strict=True):
        row[np.searchsorted(cand, best)] = np.arange(1, best.shape[0] + 1)
    known = ranks > 0
    lower = _rrf(np.where(known, ranks, n), z)
    floor = np.partition(lower, cand.shape[0] - k)[cand.shape[0] - k]  # the k-th best lower bound
    outside = _rrf(np.full((len(lists), 1), m + 1, dtype=np.int64), z)[0]
    if not outside < floor:
        return None  # a position outside every top m might belong to the first k
    # At least k candidates score >= floor; one whose upper bound is below it cannot be among the first k.
    keep = np.flatnonzero(_rrf(np.where(known, ranks, m + 1), z) >= floor)
    cand, ranks = cand[keep], ranks[:, keep]
    for s, row in zip(lists, ranks, strict=True):
        todo = np.flatnonzero(row == 0)
        if todo.size > RANK_COUNTS_MAX:
            row[todo] = ranks_at(s, cand[todo])
        elif todo.size:
            row[todo] = _ranks_by_count(s, cand[todo])
    fused = _rrf(ranks, z)
    order = np.lexsort((cand, -fused))[:k]
    return cand[order], fused[order], ranks[:, order]


def _ranks_by_count(scores: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The 1-based ranks :func:`ranks_from_scores` gives ``positions`` (scores without NaN), one counting pass
    each: the entries before a position that score at least as much, and those after it that score more."""
    out = np.empty(positions.shape[0], dtype=np.int64)
    for i, p in enumerate(positions.tolist()):
        v = scores[p]
        out[i] = np.count_nonzero(scores[:p] >= v) + np.count_nonzero(scores[p + 1:] > v) + 1
    return out


def _rrf_top_k_sorted(lists: list[np.ndarray], k: int, z: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`rrf_top_k` with every candidate's rank read from a sorted copy of each list."""
    n = lists[0].shape[0]
    m = max(4 * k, 256)
    sorted_lists = [np.sort(s) for s in lists] if m < n else []
    while True:
        if m >= n:
            fused_all = reciprocal_rank_fusion(lists, z=z)
            best = top_k(fused_all, k)
            ranks = np.stack([ranks_at(s, best) for s in lists]) if lists else np.empty((0, k), np.int64)
            return best, fused_all[best], ranks
        cand = np.unique(np.concatenate([top_k(s, m) for s in lists]))
        ranks = np.stack([ranks_at(s, cand, xs) for s, xs in zip(lists, sorted_lists, strict=True)])
        fused = np.zeros(cand.shape[0], dtype=np.float64)
        for r in ranks:
            fused += 1.0 / (z + r)
        order = np.lexsort((cand, -fused))[:k]
        if k == 0 or fused[order[-1]] > len(lists) / (z + m + 1) * (1 + 1e-12):  # margin: float rounding
            return cand[order], fused[order], ranks[:, order]
        m *= 4


def haversine_km(lat1: float, lon1: float, lat2: np.ndarray, lon2: np.ndarray) -> np.ndarray:
    r = 6371.0088
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dphi = p2 - p1
    dl = np.radians(lon2) - np.radians(lon1)
    a = np.sin(dphi / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * r * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))
