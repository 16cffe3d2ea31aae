"""Scoring helpers every method composes: exact cosine top-k, normalisation, fusion, rank utilities.

All functions are numpy (float16 matrices are multiplied by torch when it is installed). Scores
are ``float32`` arrays aligned with a list of ids; ties are broken by position (a stable order), so
every ranking is deterministic.
"""

from __future__ import annotations

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
    blas_threads(matrix.size if scan_elements is None else scan_elements)
    return np.asarray(q @ matrix.T, dtype=np.float32)


# A handful of queries over a large float32 matrix: BLAS's skinny matrix product reads the matrix at a fraction
# of memory speed (measured 2 queries x 100,000 x 384: 2.3x the time of one, not ~1x). Scanning it in blocks
# that stay in cache, one matrix-vector product per query and block, reads it once.
FEW_QUERIES = 8
CHUNK_ROWS = 2048


def _few_queries(matrix: np.ndarray, q: np.ndarray) -> np.ndarray:
    matrix = np.asarray(matrix)  # a memmap as a plain view: slicing a memmap subclass costs per block
    blas_threads(CHUNK_ROWS * matrix.shape[1])  # each block is a small product: one BLAS thread
    n = matrix.shape[0]
    out = np.empty((q.shape[0], n), dtype=np.float32)

    def part(bounds: tuple[int, int]) -> None:
        for start in range(bounds[0], bounds[1], CHUNK_ROWS):
            block = matrix[start:min(start + CHUNK_ROWS, bounds[1])]
            for j in range(q.shape[0]):
                np.dot(block, q[j], out=out[j, start:start + block.shape[0]])

    threads = min(scan_threads(matrix.size), -(-n // CHUNK_ROWS))
    if threads <= 1:
        part((0, n))
        return out
    # A large scan: contiguous parts on our own threads, one BLAS thread each (numpy releases the GIL in dot).
    step = -(-n // threads // CHUNK_ROWS) * CHUNK_ROWS
    list(_scan_pool().map(part, [(a, min(a + step, n)) for a in range(0, n, step)]))
    return out


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
    BLAS threads on a loaded machine and 3.2 ms on one. Large scans (a million rows) still use every core.
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
    k-th place."""
    scores = np.asarray(scores)
    n = scores.shape[0]
    if k <= 0 or n == 0:
        return np.empty(0, dtype=np.int64)
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

    Only the top ``m`` of each list are fused exactly; a position outside all of them ranks below ``m``
    everywhere, so its fused score is at most ``L / (z + m + 1)``. When the k-th best fused score beats that
    bound the answer is exact; otherwise ``m`` grows (at worst to a full fusion)."""
    lists = [np.asarray(s) for s in score_lists]
    n = lists[0].shape[0]
    k = max(0, min(k, n))
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
