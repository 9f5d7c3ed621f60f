"""Addressing measures of a memory layer, from what it recorded: the numbers training logs.

These are the quantities that show an addressing collapse while it happens — how far the writes
spread, how wide they are, whether reads land near earlier writes, how many coordinates tanh has
pinned at a face of the grid, the read gate and the ConvLSTM gates. ``analysis.measures.addressing`` builds
its report and verdict on the same functions. Distances are in voxels (the spacing between voxel
centres), so the numbers read the same for every grid.

    with record(model) as rec:
        model(inputs)
    layer_measures(rec["backbone.blocks.1.memory"], grid)   # {"write_spread_voxels": …, …}
"""

from __future__ import annotations

import math
from typing import Any

import torch

from .geometry import gaussian_profiles, in_voxels, spanning_axes, voxel_spacing

BOUNDARY_EPS = 0.98  # |coordinate| above this (of 1) counts as pinned at a face: tanh' < 0.04 there
OCCUPIED_WEIGHT = math.exp(-2.0)  # a voxel is occupied when some write reaches it at ≥ e^-2 (within 2σ of it)
OCCUPANCY_BLOCK = 256  # writes weighed at a time: (256, D, H, W) in float64


def write_spread_voxels(mu_write: torch.Tensor, grid: tuple[int, int, int]) -> float:
    """How far writes (…, 3) spread around their mean: √(Σ per-axis variance), in voxels."""
    points = in_voxels(mu_write, grid).reshape(-1, 3)
    return float(points.var(0, unbiased=False).sum().sqrt()) if len(points) else 0.0


def boundary_fraction(*coordinates: torch.Tensor, grid: tuple[int, int, int]) -> float:
    """Share of coordinate triples (…, 3), pooled, with some spanning axis beyond ±BOUNDARY_EPS."""
    counted = torch.tensor(spanning_axes(grid), device=coordinates[0].device)
    pinned = torch.cat([((c.reshape(-1, 3).abs() > BOUNDARY_EPS) & counted).any(-1) for c in coordinates])
    return float(pinned.double().mean()) if len(pinned) else 0.0


def median(values: torch.Tensor) -> float:
    """The median as numpy defines it (the mean of the two middle values for an even count)."""
    return float(values.double().reshape(-1).quantile(0.5))


def sigma_unit(grid: tuple[int, int, int]) -> float:
    """The voxel a write spread σ is counted in: the mean spacing of the spanning axes (of all three if none spans)."""
    spacing = voxel_spacing(grid)
    spanned = [s for s, spans in zip(spacing, spanning_axes(grid), strict=True) if spans] or spacing
    return sum(spanned) / len(spanned)


def median_sigma_voxels(sigma: torch.Tensor, grid: tuple[int, int, int]) -> float:
    """Median write spread σ in voxels (:func:`sigma_unit`)."""
    return median(sigma) / sigma_unit(grid)


def read_write_distances(mu_read: torch.Tensor, mu_write: torch.Tensor, grid: tuple[int, int, int]) -> torch.Tensor:
    """Each read's distance (voxels) to the nearest write of an earlier chunk of the same sample.

    mu_read (S, K, 3), mu_write (S, Kw, 3) → (S·(K'−1),) for chunks 1 … K'−1, K' = min(K, Kw + 1).
    """
    r, w = in_voxels(mu_read, grid), in_voxels(mu_write, grid)  # (S, K, 3), (S, Kw, 3)
    K = min(r.shape[1], w.shape[1] + 1)
    if K < 2:
        return torch.empty(0, dtype=torch.float64)
    d = torch.cdist(r[:, 1:K], w[:, : K - 1])  # (S, K−1, K−1): read k+1 against write j
    earlier = torch.ones(K - 1, K - 1, dtype=torch.bool, device=d.device).tril()  # write j < read k+1, i.e. j ≤ k
    return d.masked_fill(~earlier, float("inf")).min(-1).values.reshape(-1)


def occupancy(mu_write: torch.Tensor, sigma: torch.Tensor, grid: tuple[int, int, int]) -> float:
    """Share of the grid's voxels that some write reaches at ≥ :data:`OCCUPIED_WEIGHT`; writes (…, 3), σ (…)."""
    mu, width = mu_write.reshape(-1, 3).double(), sigma.reshape(-1).double()
    reached = torch.zeros(grid, dtype=torch.bool, device=mu.device)
    for start in range(0, len(mu), OCCUPANCY_BLOCK):
        part = slice(start, start + OCCUPANCY_BLOCK)
        gz, gy, gx = gaussian_profiles(mu[part], width[part], grid)  # (m, D), (m, H), (m, W)
        weight = gz[:, :, None, None] * gy[:, None, :, None] * gx[:, None, None, :]  # (m, D, H, W)
        reached |= (weight >= OCCUPIED_WEIGHT).any(0)
    return float(reached.double().mean())


def layer_measures(record: Any, grid: tuple[int, int, int]) -> dict[str, float | None]:
    """The addressing measures of one layer's :class:`~tensor_memory.memory.recording.MemoryRecord`.

    ``gate_i``/``gate_f``/``gate_o`` means are included when the recording kept the gates.
    """
    distances = read_write_distances(record.mu_read, record.mu_write, grid)
    out: dict[str, float | None] = {
        "write_spread_voxels": write_spread_voxels(record.mu_write, grid),
        "sigma_voxels": median_sigma_voxels(record.sigma, grid),
        "read_write_distance_voxels": median(distances) if len(distances) else None,
        "boundary_fraction": boundary_fraction(record.mu_read, record.mu_write, grid=grid),
        "gate_scale": float(record.gate_scale.reshape(-1)[-1]),
    }
    for name in ("gate_i", "gate_f", "gate_o"):
        value = getattr(record, name)
        if value is not None:
            out[f"{name}_mean"] = float(value.double().mean())
    return out


__all__ = [
    "BOUNDARY_EPS",
    "OCCUPIED_WEIGHT",
    "occupancy",
    "write_spread_voxels",
    "boundary_fraction",
    "sigma_unit",
    "median_sigma_voxels",
    "median",
    "read_write_distances",
    "layer_measures",
]
