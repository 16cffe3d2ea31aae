"""Vector helpers shared by the encoders (models) and the scoring code (index)."""

from __future__ import annotations

import numpy as np


def l2_normalize(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Unit-length rows as float32; an all-zero row stays zero (no division by zero)."""
    x = np.asarray(x, dtype=np.float32)
    norm = np.linalg.norm(x, axis=axis, keepdims=True)
    return x / np.maximum(norm, 1e-12)
