"""A memory layer's state volumes over a whole trace, reduced for drawing with one colour scale.

Stepping through chunks should change what the volumes show, not how they are coloured, so
:func:`state_series` reduces every chunk's ``h`` or ``c`` the same way — the norm over channels,
one channel, or a principal component of a basis fitted over all chunks at once — and gives one
value range for the whole sequence.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from analysis.figures import colour_range, pca_basis, volume_values
from analysis.measures.grid import voxel_coordinates
from analysis.traces.trace import LayerTrace

FIELDS = {"h": "hidden state h", "c": "cell state c"}
MODES = {"norm": "norm over channels", "channel": "one channel", "pca": "principal component"}


@dataclasses.dataclass(frozen=True)
class VolumeSeries:
    """Every chunk's volume reduced to (D, H, W) values, with the range to colour them by."""

    values: np.ndarray  # (K, D, H, W) float32
    value_range: tuple[float, float]  # (low, high) over every chunk
    label: str  # what the values are, e.g. "‖h‖ over 16 channels" or "h, PC 1 (38% of variance)"
    field: str
    mode: str
    index: int  # the channel or component shown (0 for the norm)


def state_series(layer: LayerTrace, field: str = "h", mode: str = "norm", index: int = 0) -> VolumeSeries:
    """``field`` (``"h"`` or ``"c"``) of every chunk reduced by ``mode`` (``"norm"``, ``"channel"``, ``"pca"``).

    ``index`` is the channel (mode ``"channel"``) or the principal component (mode ``"pca"``, fitted
    over the voxels of all chunks together). The norm's range starts at 0.
    """
    if field not in FIELDS:
        raise ValueError(f"field must be one of {', '.join(FIELDS)}, got {field!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    volumes = getattr(layer, field)
    if volumes is None:
        raise ValueError(f"the trace holds no {FIELDS[field]} (captured with cells=False)")
    volumes = volumes.astype(np.float32)  # (K, C, D, H, W)
    channels = volumes.shape[1]
    if not 0 <= index < channels:
        raise ValueError(f"index must be in 0..{channels - 1} for {channels} channels, got {index}")
    if mode == "pca":
        basis, explained = pca_basis(volumes)
        values = np.stack([volume_values(v, "pca", component=index, basis=basis) for v in volumes])
        label = f"{field}, principal component {index + 1} ({explained[index]:.0%} of the variance)"
    elif mode == "channel":
        values = volumes[:, index]
        label = f"{field}, channel {index}"
    else:
        values = np.sqrt(np.square(volumes).sum(axis=1))
        label = f"‖{field}‖ over {channels} channels"
    low, high = colour_range(values)
    if mode == "norm":
        low, high = colour_range(values, (0.0, high)) if high > 0 else (0.0, 1.0)
    return VolumeSeries(values=np.ascontiguousarray(values, dtype=np.float32), value_range=(low, high),
                        label=label, field=field, mode=mode, index=int(index))


def nearest_voxel(mu: np.ndarray, grid: tuple[int, int, int]) -> tuple[int, int, int]:
    """The voxel (z, y, x) whose centre is nearest the coordinate ``mu`` = (x, y, z) in [-1, 1]."""
    x, y, z = voxel_coordinates(np.clip(np.asarray(mu, dtype=np.float64), -1.0, 1.0), grid)
    return int(round(z)), int(round(y)), int(round(x))


__all__ = ["VolumeSeries", "state_series", "nearest_voxel", "FIELDS", "MODES"]
