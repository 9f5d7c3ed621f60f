"""Grid geometry shared by the measures and the figures: normalised coordinates ↔ voxel units.

Coordinates ``mu`` are ``(x, y, z)`` in ``[-1, 1]`` (x along W, y along H, z along D) and voxel
centres sit at ``linspace(-1, 1, n)`` per axis, so a coordinate lies at voxel ``(mu + 1)(n - 1)/2``
and a spread σ covers ``σ(n - 1)/2`` voxel spacings.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from tensor_memory.addressing import in_voxels


def grid_sizes(grid: Sequence[int]) -> tuple[int, int, int]:
    """``(D, H, W)`` as ints of at least 2 (as a memory's grid is), or a ValueError."""
    sizes = tuple(int(n) for n in grid)
    if len(sizes) != 3 or min(sizes) < 2:
        raise ValueError(f"grid must be (D, H, W) with every size >= 2, got {tuple(grid)}")
    return sizes  # type: ignore[return-value]


def _per_axis(grid: Sequence[int]) -> np.ndarray:
    """(3,) voxel spacings per normalised unit along x, y, z: (n - 1) / 2."""
    D, H, W = grid_sizes(grid)
    return (np.array([W, H, D], dtype=np.float64) - 1.0) / 2.0


def voxel_coordinates(mu: np.ndarray, grid: Sequence[int]) -> np.ndarray:
    """(…, 3) coordinates ``(x, y, z)`` in [-1, 1] → voxel indices (x along W, y along H, z along D).

    The model package's :func:`tensor_memory.addressing.in_voxels` (the one conversion), on numpy arrays.
    """
    mu = np.asarray(mu, dtype=np.float64)
    if mu.shape[-1:] != (3,):
        raise ValueError(f"coordinates must have shape (..., 3), got {tuple(mu.shape)}")
    return in_voxels(torch.from_numpy(mu), grid_sizes(grid)).numpy()


def normalised_coordinates(voxels: np.ndarray, grid: Sequence[int]) -> np.ndarray:
    """(…, 3) voxel positions (x along W, y along H, z along D) → coordinates ``(x, y, z)`` in [-1, 1]."""
    voxels = np.asarray(voxels, dtype=np.float64)
    if voxels.shape[-1:] != (3,):
        raise ValueError(f"voxel positions must have shape (..., 3), got {tuple(voxels.shape)}")
    return voxels / _per_axis(grid) - 1.0


def sigma_in_voxels(sigma: float, grid: Sequence[int]) -> np.ndarray:
    """(3,) a spread σ in normalised units as voxel spacings along x, y and z."""
    return float(sigma) * _per_axis(grid)


def voxel_spacing(grid: Sequence[int]) -> np.ndarray:
    """(3,) the distance between neighbouring voxel centres along x, y, z, in normalised units."""
    return 1.0 / _per_axis(grid)
