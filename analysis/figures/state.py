"""State volumes as pictures: a volume reduced to one value per voxel, drawn in 3D or as three slices."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.figures.base import (AXIS_TITLES, COLORSCALE, VOLUME_MODES, check_array, check_index, colour_range,
                                   finish, voxel_scene)

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


def volume_values(volume: np.ndarray, mode: str = "norm", channel: int = 0, component: int = 0,
                  basis: Optional[np.ndarray] = None) -> np.ndarray:
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
        raise ValueError(f"mode must be one of {', '.join(map(repr, VOLUME_MODES))}, got {mode!r}")
    components = pca_basis(array)[0] if basis is None else check_array(basis, 2, "basis", f"(k, {channels})")
    if components.shape[1] != channels:
        raise ValueError(f"basis must have shape (k, {channels}) for a volume of {channels} channels, "
                         f"got {tuple(components.shape)}")
    direction = components[check_index(component, len(components), "component")]
    samples = np.moveaxis(array, 0, -1).astype(np.float64)  # (D, H, W, C)
    centred = samples - samples.reshape(-1, channels).mean(axis=0)
    return (centred @ direction).astype(np.float32)


def _values(values: np.ndarray) -> np.ndarray:
    return check_array(values, 3, "values", "(D, H, W)").astype(np.float32)


def volume_figure(values: np.ndarray, kind: str = "volume", title: str = "", opacity: Optional[float] = None,
                  value_range: Optional[Sequence[float]] = None) -> go.Figure:
    """A 3D rendering of (D, H, W) ``values`` in voxel-index axes.

    ``kind`` ``"volume"`` (go.Volume, default opacity 0.2) or ``"isosurface"`` (go.Isosurface,
    default opacity 0.6). ``value_range`` (low, high) fixes the colours and iso levels, so that
    stepping through chunks does not rescale them; by default the data's range is used.
    """
    array = _values(values)
    low, high = colour_range(array, value_range)
    z, y, x = np.meshgrid(*(np.arange(n) for n in array.shape), indexing="ij")
    common = dict(x=x.ravel(), y=y.ravel(), z=z.ravel(), value=array.ravel(), isomin=low, isomax=high,
                  cmin=low, cmax=high, colorscale=COLORSCALE, colorbar=dict(thickness=12, len=0.8),
                  hovertemplate="x %{x}, y %{y}, z %{z}<br>value %{value:.3f}<extra></extra>")
    if kind == "volume":
        trace = go.Volume(**common, opacity=0.2 if opacity is None else opacity, surface_count=15)
    elif kind == "isosurface":
        trace = go.Isosurface(**common, opacity=0.6 if opacity is None else opacity, surface_count=4,
                              caps=dict(x_show=False, y_show=False, z_show=False))
    else:
        raise ValueError(f"kind must be 'volume' or 'isosurface', got {kind!r}")
    return finish(go.Figure(trace), title, scene=voxel_scene())


def slices_figure(values: np.ndarray, index: Optional[Sequence[int]] = None, title: str = "",
                  value_range: Optional[Sequence[float]] = None) -> go.Figure:
    """Three axis-aligned slices of (D, H, W) ``values`` through voxel ``index`` = (z, y, x).

    Left to right: the z-slice (y against x), the y-slice (z against x), the x-slice (z against y),
    on one colour scale (``value_range`` or the whole volume's range). ``index`` defaults to the
    centre voxel.
    """
    array = _values(values)
    D, H, W = array.shape
    if index is None:
        index = (D // 2, H // 2, W // 2)
    if len(index) != 3:
        raise ValueError(f"index must be (z, y, x), got {tuple(index)}")
    z, y, x = (check_index(i, n, name) for i, n, name in zip(index, (D, H, W), ("z index", "y index", "x index")))
    low, high = colour_range(array, value_range)
    panels = ((array[z], "x", "y"), (array[:, y, :], "x", "z"), (array[:, :, x], "y", "z"))
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.08,
                        subplot_titles=(f"z = {z}: y against x", f"y = {y}: z against x", f"x = {x}: z against y"))
    for col, (plane, across, up) in enumerate(panels, start=1):
        fig.add_trace(go.Heatmap(z=plane, coloraxis="coloraxis",
                                 hovertemplate=f"{across} %{{x}}, {up} %{{y}}<br>value %{{z:.3f}}<extra></extra>"),
                      row=1, col=col)
        fig.update_xaxes(title_text=AXIS_TITLES[across], constrain="domain", row=1, col=col)
        fig.update_yaxes(title_text=AXIS_TITLES[up], scaleanchor="x" if col == 1 else f"x{col}",
                         constrain="domain", row=1, col=col)
    return finish(fig, title, coloraxis=dict(colorscale=COLORSCALE, cmin=low, cmax=high,
                                              colorbar=dict(thickness=12)))
