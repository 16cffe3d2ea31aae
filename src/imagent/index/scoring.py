"""Scoring helpers every method composes: exact cosine top-k, normalisation, fusion, rank utilities.

All functions are pure numpy. Scores are ``float32`` arrays aligned with a list of ids; ties are
broken by position (a stable order), so every ranking is deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def l2_normalize(x: np.ndarray, axis: int = -1) -> np.ndarray:
    x = np.asarray(x, dtype=np.float32)
    norm = np.linalg.norm(x, axis=axis, keepdims=True)
    return x / np.maximum(norm, 1e-12)


def cosine_scores(matrix: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Cosine of each row of ``matrix`` with ``query`` (rows and query assumed L2-normalised).
    ``query`` of shape (d,) gives (n,); of shape (q, d) gives (q, n). Computed in float32."""
    q = np.asarray(query, dtype=matrix.dtype if matrix.dtype == np.float16 else np.float32)
    return np.asarray(q @ matrix.T, dtype=np.float32)


def top_k(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` highest scores, best first; equal scores keep index order.

    Uses ``argpartition`` (O(n)) then a stable sort of the k survivors, so it costs what a bare
    ``argpartition`` costs plus O(k log k)."""
    n = scores.shape[0]
    if k <= 0 or n == 0:
        return np.empty(0, dtype=np.int64)
    if k >= n:
        return np.argsort(-scores, kind="stable")
    part = np.argpartition(-scores, k - 1)[:k]
    # Ties at the boundary: argpartition may pick any of the equal scores; take the lowest indices.
    kth = scores[part].min()
    above = np.flatnonzero(scores > kth)
    equal = np.flatnonzero(scores == kth)[: k - above.size]
    chosen = np.concatenate([above, equal])
    order = np.lexsort((chosen, -scores[chosen]))
    return chosen[order]


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
