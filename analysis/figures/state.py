"""State volumes as pictures: one value per voxel (``analysis.measures.volumes`` reduces a volume to it),
drawn in 3D or as three slices."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.figures.base import AXIS_TITLES, COLORSCALE, finish, voxel_scene
from analysis.figures.stepped import Leaves, Path
from analysis.measures.checks import check_array, check_index
from analysis.measures.volumes import colour_range


def _values(values: np.ndarray) -> np.ndarray:
    return check_array(values, 3, "values", "(D, H, W)").astype(np.float32)


VOLUME_KINDS = {"points": "point cloud", "isosurface": "isosurfaces", "volume": "volume"}  # the app opens on the first
POINT_FLOOR = 0.2  # the point cloud leaves out voxels below this share of the colour range (as the volume fades them)


def volume_figure(
    values: np.ndarray,
    kind: str = "volume",
    title: str = "",
    opacity: float | None = None,
    value_range: Sequence[float] | None = None,
) -> go.Figure:
    """A 3D rendering of (D, H, W) ``values`` in voxel-index axes.

    ``kind`` ``"volume"`` (go.Volume: 15 surfaces, default opacity 0.2), ``"isosurface"`` (go.Isosurface: 4
    surfaces, default opacity 0.6) or ``"points"`` (go.Scatter3d: a marker at every voxel holding at least
    :data:`POINT_FLOOR` of the range above its low end, or of the largest magnitude when the range takes in
    negative values, larger for larger values, default opacity 0.8; the lightest to draw).
    ``value_range`` (low, high) fixes the colours and levels, so that stepping through chunks does not
    rescale them; by default the data's range is used. The axes span the whole grid whatever is drawn.
    """
    array, low, high, data = _volume_data(values, kind, value_range)
    colours = dict(cmin=low, cmax=high, colorscale=COLORSCALE, colorbar=dict(thickness=12, len=0.8))
    hover = "x %{x}, y %{y}, z %{z}<br>value %{customdata:.3f}<extra></extra>"
    if kind == "points":
        trace = go.Scatter3d(
            x=data["x",],
            y=data["y",],
            z=data["z",],
            mode="markers",
            customdata=data["customdata",],
            marker=dict(
                color=data["marker", "color"],
                size=data["marker", "size"],
                opacity=0.8 if opacity is None else opacity,
                line=dict(width=0),
                **colours,
            ),
            hovertemplate=hover,
        )
    else:
        z, y, x = np.meshgrid(*(np.arange(n) for n in array.shape), indexing="ij")
        common = dict(
            x=x.ravel(),
            y=y.ravel(),
            z=z.ravel(),
            value=data["value",],
            isomin=low,
            isomax=high,
            hovertemplate=hover.replace("customdata", "value"),
            **colours,
        )
        if kind == "volume":
            trace = go.Volume(**common, opacity=0.2 if opacity is None else opacity, surface_count=15)
        else:
            trace = go.Isosurface(
                **common,
                opacity=0.6 if opacity is None else opacity,
                surface_count=4,
                caps=dict(x_show=False, y_show=False, z_show=False),
            )
    return finish(go.Figure(trace), title, scene=voxel_scene(array.shape))


def _volume_data(
    values: np.ndarray, kind: str, value_range: Sequence[float] | None
) -> tuple[np.ndarray, float, float, dict[Path, np.ndarray]]:
    """(the values as float32, the colour range, the arrays of :func:`volume_figure`'s trace that hold the values,
    by their path in the trace)."""
    array = _values(values)
    low, high = colour_range(array, value_range)
    if kind in ("volume", "isosurface"):
        return array, low, high, {("value",): array.ravel()}
    if kind != "points":
        raise ValueError(f"kind must be one of {', '.join(map(repr, VOLUME_KINDS))}, got {kind!r}")
    if low < 0:  # a signed field (one channel, a principal component): a voxel holds its value either way
        share = np.abs(array) / max(-low, abs(high))
    else:
        share = (array - low) / (high - low)  # colour_range keeps high > low
    shown = share >= POINT_FLOOR  # (D, H, W) mask
    z, y, x = np.meshgrid(*(np.arange(n) for n in array.shape), indexing="ij")
    return (
        array,
        low,
        high,
        {
            ("x",): x[shown],
            ("y",): y[shown],
            ("z",): z[shown],
            ("customdata",): array[shown],
            ("marker", "color"): array[shown],
            ("marker", "size"): 3 + 9 * np.clip(share[shown], 0, 1),
        },
    )


def volume_leaves(
    values: np.ndarray, kind: str = "volume", title: str = "", value_range: Sequence[float] | None = None
) -> Leaves:
    """What differs in :func:`volume_figure` of ``values`` from the same figure (kind, grid, ``value_range``) of
    other values: the trace's arrays, its colour range and the title (see ``analysis.figures.stepped``)."""
    _, low, high, data = _volume_data(values, kind, value_range)
    ranges = {("marker", "cmin"): low, ("marker", "cmax"): high}
    if kind != "points":
        ranges = {("cmin",): low, ("cmax",): high, ("isomin",): low, ("isomax",): high}
    shown = data | ranges
    return Leaves({("data", 0, *path): value for path, value in shown.items()} | {("layout", "title", "text"): title})


def slices_figure(
    values: np.ndarray, index: Sequence[int] | None = None, title: str = "", value_range: Sequence[float] | None = None
) -> go.Figure:
    """Three axis-aligned slices of (D, H, W) ``values`` through voxel ``index`` = (z, y, x).

    Left to right: the z-slice (y against x), the y-slice (z against x), the x-slice (z against y),
    on one colour scale (``value_range`` or the whole volume's range). ``index`` defaults to the
    centre voxel.
    """
    low, high, panels, titles = _slices(values, index, value_range)
    fig = make_subplots(rows=1, cols=3, horizontal_spacing=0.14, subplot_titles=titles)  # room for each y title
    for col, (plane, across, up) in enumerate(panels, start=1):
        fig.add_trace(
            go.Heatmap(
                z=plane,
                coloraxis="coloraxis",
                hovertemplate=f"{across} %{{x}}, {up} %{{y}}<br>value %{{z:.3f}}<extra></extra>",
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(title_text=AXIS_TITLES[across], constrain="domain", row=1, col=col)
        fig.update_yaxes(
            title_text=AXIS_TITLES[up],
            scaleanchor="x" if col == 1 else f"x{col}",
            constrain="domain",
            constraintoward="top",  # each plane just under its title
            row=1,
            col=col,
        )
    fig.update_annotations(font_size=12)  # the three titles fit their panels' widths
    return finish(fig, title, coloraxis=dict(colorscale=COLORSCALE, cmin=low, cmax=high, colorbar=dict(thickness=12)))


def _slices(
    values: np.ndarray, index: Sequence[int] | None, value_range: Sequence[float] | None
) -> tuple[float, float, list[tuple[np.ndarray, str, str]], tuple[str, str, str]]:
    """(the colour range, the three (plane, across, up) panels of :func:`slices_figure`, their titles)."""
    array = _values(values)
    D, H, W = array.shape
    if index is None:
        index = (D // 2, H // 2, W // 2)
    if len(index) != 3:
        raise ValueError(f"index must be (z, y, x), got {tuple(index)}")
    z, y, x = (
        check_index(i, n, name) for i, n, name in zip(index, (D, H, W), ("z index", "y index", "x index"), strict=True)
    )
    low, high = colour_range(array, value_range)
    panels = [(array[z], "x", "y"), (array[:, y, :], "x", "z"), (array[:, :, x], "y", "z")]
    return low, high, panels, (f"z = {z}: y against x", f"y = {y}: z against x", f"x = {x}: z against y")


def slices_leaves(
    values: np.ndarray, index: Sequence[int] | None = None, title: str = "", value_range: Sequence[float] | None = None
) -> Leaves:
    """What differs in :func:`slices_figure` of ``values`` from the same figure (grid, ``value_range``) of other
    values or through another voxel: the planes, their titles, the colour range and the title (see
    ``analysis.figures.stepped``)."""
    low, high, panels, titles = _slices(values, index, value_range)
    leaves = Leaves(
        {
            ("layout", "title", "text"): title,
            ("layout", "coloraxis", "cmin"): low,
            ("layout", "coloraxis", "cmax"): high,
        }
    )
    for col, ((plane, _, _), text) in enumerate(zip(panels, titles, strict=True)):
        leaves["data", col, "z"] = plane
        leaves["layout", "annotations", col, "text"] = text
    return leaves
