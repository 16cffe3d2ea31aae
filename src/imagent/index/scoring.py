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


def cosine_scores(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosine of each row of ``matrix`` with ``query`` (rows and query assumed L2-normalised).
    ``query`` of shape (d,) gives (n,); of shape (q, d) gives (q, n). Returned as float32.

    A float32 (or float64) matrix goes through BLAS, with the thread policy of :func:`blas_threads`.
    A float16 matrix (half-size galleries) uses torch's float16 product when torch is installed: numpy has
    no BLAS for float16 and its own loop is 10-20x slower than a float32 scan. Both float16 paths round
    each score to float16."""
    q = np.asarray(query, dtype=np.float32)
    if matrix.dtype == np.float16:
        return _half_scores(matrix, q)
    blas_threads(matrix.size)
    return np.asarray(q @ matrix.T, dtype=np.float32)


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


def blas_threads(elements: int) -> int:
    """numpy's BLAS thread count for a scan of ``elements`` matrix entries: one thread below
    :data:`PARALLEL_MIN_ELEMENTS`, else ``IMAGENT_BLAS_THREADS`` or every core.

    A gallery scan for one query is a matrix-vector product, bound by memory bandwidth, which one core
    nearly saturates; extra BLAS threads only add wake-up cost, and they spin against torch's own threads
    (an encode just before) and any other busy thread: measured here, a 10,000 x 384 scan took 41 ms on two
    BLAS threads on a loaded machine and 3.2 ms on one. Large scans (a million rows) still use every core.
    Setting the count costs about a microsecond (threadpoolctl's library handle, looked up once)."""
    want = 1
    if elements >= PARALLEL_MIN_ELEMENTS:
        import os

        want = int(os.environ.get("IMAGENT_BLAS_THREADS") or os.cpu_count() or 1)
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


def haversine_km(lat1: float, lon1: float, lat2: np.ndarray, lon2: np.ndarray) -> np.ndarray:
    r = 6371.0088
    p1, p2 = np.radians(lat1), np.radians(lat2)
    dphi = p2 - p1
    dl = np.radians(lon2) - np.radians(lon1)
    a = np.sin(dphi / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * r * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))
