"""State volumes reduced to one value per voxel, and over a whole trace with one colour scale.

:func:`volume_values` reduces a (C, D, H, W) volume — the norm over channels, one channel, or a
principal component (:func:`pca_basis`). Stepping through chunks should change what the volumes
show, not how they are coloured, so :func:`state_series` reduces every chunk's ``h`` or ``c`` the
same way, with a basis fitted over all chunks at once, and gives one value range for the whole
sequence.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from analysis.measures.checks import check_array, check_index
from analysis.traces.trace import LayerTrace

FIELDS = {"h": "hidden state h", "c": "cell state c"}
MODES = {"norm": "norm over channels", "channel": "one channel", "pca": "principal component"}


def colour_range(values: np.ndarray, value_range: Sequence[float] | None = None) -> tuple[float, float]:
    """(low, high) for colours: ``value_range`` when given (high > low), else the data's range.

    Constant data gets (value, value + 1), so it shows as the low end rather than an arbitrary colour.
    """
    if value_range is not None:
        low, high = (float(v) for v in value_range)
        if not high > low:
            raise ValueError(f"value_range must be (low, high) with high > low, got {tuple(value_range)}")
        return low, high
    low, high = float(values.min()), float(values.max())
    return (low, high) if high > low else (low, low + 1.0)


def _state_volume(volume: np.ndarray) -> np.ndarray:
    return check_array(volume, 4, "volume", "(C, D, H, W)")


def _sign_fixed(components: np.ndarray) -> np.ndarray:
    """Rows flipped so that each row's largest-|loading| entry is positive (a deterministic sign)."""
    largest = components[np.arange(len(components)), np.abs(components).argmax(axis=1)]
    return components * np.where(largest < 0, -1.0, 1.0)[:, None]


def pca_basis(volumes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Principal components over channels of (N, C, D, H, W) or (C, D, H, W) volumes.

    Every voxel of every volume is a sample of C channels, centred per channel. Returns
    ``components`` (C, C) float64, row ``k`` the k-th principal direction (largest variance
    first, its largest-|loading| entry positive), and ``explained_ratio`` (C,), each component's
    share of the variance (all zero for constant volumes). Pass ``components`` as ``basis`` to
    :func:`volume_values` to keep one basis across chunks.
    """
    array = np.asarray(volumes)
    if array.ndim == 4:
        array = array[None]
    if array.ndim != 5:
        raise ValueError(f"volumes must have shape (N, C, D, H, W) or (C, D, H, W), got {tuple(np.shape(volumes))}")
    channels = array.shape[1]
    samples = np.moveaxis(array, 1, -1).reshape(-1, channels).astype(np.float64)
    samples -= samples.mean(axis=0)
    variances, vectors = np.linalg.eigh(samples.T @ samples)
    order = np.argsort(-variances, kind="stable")
    variances = np.clip(variances[order], 0.0, None)
    components = _sign_fixed(vectors[:, order].T)
    total = variances.sum()
    explained = variances / total if total > 0 else np.zeros(channels)
    return components, explained


def volume_values(
    volume: np.ndarray, mode: str = "norm", channel: int = 0, component: int = 0, basis: np.ndarray | None = None
) -> np.ndarray:
    """(D, H, W) float32 values to draw from a (C, D, H, W) state volume.

    ``mode``: ``"norm"`` the L2 norm over channels; ``"channel"`` channel ``channel``; ``"pca"`` the
    projection of each voxel, centred per channel over this volume's voxels, on principal component
    ``component`` — of this volume, or row ``component`` of ``basis`` (k, C) from :func:`pca_basis`.
    """
    array = _state_volume(volume)
    channels = array.shape[0]
    if mode == "norm":
        return np.sqrt(np.square(array.astype(np.float32)).sum(axis=0))
    if mode == "channel":
        return array[check_index(channel, channels, "channel")].astype(np.float32)
    if mode != "pca":
        raise ValueError(f"mode must be one of {', '.join(map(repr, MODES))}, got {mode!r}")
    components = pca_basis(array)[0] if basis is None else check_array(basis, 2, "basis", f"(k, {channels})")
    if components.shape[1] != channels:
        raise ValueError(
            f"basis must have shape (k, {channels}) for a volume of {channels} channels, got {tuple(components.shape)}"
        )
    direction = components[check_index(component, len(components), "component")]
    samples = np.moveaxis(array, 0, -1).astype(np.float64)  # (D, H, W, C)
    centred = samples - samples.reshape(-1, channels).mean(axis=0)
    return (centred @ direction).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class VolumeSeries:
    """Every chunk's volume (of a span: chunks ``first`` … ``first + len(values) - 1``) reduced to (D, H, W) values,
    with the range to colour them by."""

    values: np.ndarray  # (K, D, H, W) float32, chunk first + k at k
    value_range: tuple[float, float]  # (low, high) over every chunk held
    label: str  # what the values are, e.g. "‖h‖ over 16 channels" or "h, PC 1 (38% of variance)"
    field: str
    mode: str
    index: int  # the channel or component shown (0 for the norm)
    first: int = 0  # the trace's chunk at values[0]

    def at(self, chunk: int) -> np.ndarray:
        """(D, H, W) values of the trace's chunk ``chunk``, which the series must hold."""
        if not self.first <= chunk < self.first + len(self.values):
            raise ValueError(
                f"chunk {chunk} is not held: the series holds {self.first}…{self.first + len(self.values) - 1}"
            )
        return self.values[chunk - self.first]


def state_series(
    layer: LayerTrace, field: str = "h", mode: str = "norm", index: int = 0, span: tuple[int, int] | None = None
) -> VolumeSeries:
    """``field`` (``"h"`` or ``"c"``) of every chunk reduced by ``mode`` (``"norm"``, ``"channel"``, ``"pca"``).

    ``index`` is the channel (mode ``"channel"``) or the principal component (mode ``"pca"``, fitted
    over the voxels of all chunks together). The norm's range starts at 0. ``span`` (first, last): those chunks
    only, the basis and the colour range theirs (a page of a long trace reads no volume outside it).
    """
    if field not in FIELDS:
        raise ValueError(f"field must be one of {', '.join(FIELDS)}, got {field!r}")
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    volumes = getattr(layer, field)
    if volumes is None:
        raise ValueError(f"the trace holds no {FIELDS[field]} (captured with cell_state=False)")
    first = 0 if span is None else int(span[0])
    volumes = (volumes if span is None else volumes[first : int(span[1]) + 1]).astype(np.float32)  # (K, C, D, H, W)
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
    return VolumeSeries(
        values=np.ascontiguousarray(values, dtype=np.float32),
        value_range=(low, high),
        label=label,
        field=field,
        mode=mode,
        index=int(index),
        first=first,
    )


__all__ = ["VolumeSeries", "state_series", "colour_range", "pca_basis", "volume_values", "FIELDS", "MODES"]
