"""Input checks the measures and figures share: arrays of the right rank, indices in range."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def check_array(value: ArrayLike, ndim: int, name: str, expected: str) -> np.ndarray:
    """``value`` as an array with ``ndim`` dimensions, or a ValueError naming the expected shape."""
    array = np.asarray(value)
    if array.ndim != ndim:
        raise ValueError(f"{name} must have shape {expected}, got shape {tuple(array.shape)}")
    return array


def check_index(value: int, size: int, name: str) -> int:
    """``value`` as an index into ``size`` items, or a ValueError giving the valid range."""
    index = int(value)
    if not 0 <= index < size:
        raise ValueError(f"{name} must be in 0..{size - 1}, got {value}")
    return index


__all__ = ["check_array", "check_index"]
