"""Figures of masked patch reconstruction: the four panels, the memory laid over the image, writes against patches.

Pictures are drawn in pixel coordinates with y pointing down (row 0 on top), as images are; a grey
picture (S, S, 1) as a grey heatmap, an RGB one (S, S, 3) as an image. Inputs come from
:mod:`analysis.measures.images`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.figures.base import COLORSCALE, CURRENT_COLOUR, PREDICTION_COLOUR, TRUTH_COLOUR, WRITE_COLOUR, finish, rgb
from analysis.measures.checks import check_array
from analysis.measures.images import Reconstruction
from analysis.measures.volumes import colour_range

GREY = [[0.0, "black"], [1.0, "white"]]
HIDDEN_GREY = 0.5  # what a hidden patch shows in the "mask" panel
PANELS = ("image", "what the model sees", "reconstruction", "error |reconstruction − image|")


def picture(image: np.ndarray, name: str = "image", opacity: float = 1.0) -> go.BaseTraceType:
    """A trace drawing ``image`` (S, S, 1) grey or (S, S, 3) RGB in [0, 1], pixel (row, col) at (x=col, y=row)."""
    image = check_array(image, 3, name, "(S, S, channels)")
    if image.shape[-1] == 1:
        return go.Heatmap(
            z=image[..., 0],
            colorscale=GREY,
            zmin=0.0,
            zmax=1.0,
            showscale=False,
            name=name,
            opacity=opacity,
            hovertemplate="x %{x}, y %{y}<br>%{z:.2f}<extra>" + name + "</extra>",
        )
    return go.Image(z=np.clip(image * 255.0, 0, 255).astype(np.uint8), name=name, opacity=opacity)


def _image_axes(fig: go.Figure, size: int, row: int | None = None, col: int | None = None, anchor: str = "x") -> None:
    where = {} if row is None else dict(row=row, col=col)
    fig.update_xaxes(range=[-0.5, size - 0.5], showticklabels=False, constrain="domain", **where)
    fig.update_yaxes(range=[size - 0.5, -0.5], showticklabels=False, scaleanchor=anchor, constrain="domain", **where)


def patch_box(index: int, patch: int, grid: int, colour: str = CURRENT_COLOUR, width: int = 3) -> dict:
    """A rectangle shape around patch ``index`` (raster order) of a ``grid × grid`` patch layout."""
    row, col = divmod(int(index), grid)
    return dict(
        type="rect",
        x0=col * patch - 0.5,
        x1=(col + 1) * patch - 0.5,
        y0=row * patch - 0.5,
        y1=(row + 1) * patch - 0.5,
        line=dict(color=colour, width=width),
    )


def reconstruction_figure(rec: Reconstruction, current_patch: int | None = None) -> go.Figure:
    """The image, what the model sees (hidden patches grey), the reconstruction (visible pixels as given,
    hidden ones predicted) and the error map, side by side; the current patch outlined in each."""
    size = rec.image.shape[0]
    seen = np.where(rec.hidden[..., None], HIDDEN_GREY, rec.image)
    fig = make_subplots(rows=1, cols=4, subplot_titles=PANELS, horizontal_spacing=0.02)
    for col, (image, name) in enumerate(((rec.image, "image"), (seen, "seen"), (rec.composite, "reconstruction")), 1):
        fig.add_trace(picture(image, name), row=1, col=col)
    error_high = max(float(rec.error.max()), 1e-6)
    fig.add_trace(
        go.Heatmap(
            z=rec.error,
            colorscale="Reds",
            zmin=0.0,
            zmax=error_high,
            name="error",
            colorbar=dict(title="|error|", len=0.9, thickness=12),
            hovertemplate="x %{x}, y %{y}<br>|error| %{z:.3f}<extra></extra>",
        ),
        row=1,
        col=4,
    )
    for col in range(1, 5):
        _image_axes(fig, size, 1, col, anchor=f"x{col if col > 1 else ''}")
        if current_patch is not None:
            fig.add_shape(patch_box(current_patch, rec.patch, rec.patch_grid, TRUTH_COLOUR, 2), row=1, col=col)
    title = (
        f"{rec.mask_rate:.0%} of the patches hidden · PSNR {rec.psnr:.2f} dB, SSIM {rec.ssim:.3f} on the hidden "
        f"pixels (filling them with the visible mean: {rec.psnr_mean_fill:.2f} dB, {rec.ssim_mean_fill:.3f})"
    )
    return finish(fig, title, height=300)


def memory_overlay_figure(
    image: np.ndarray,
    values: np.ndarray,
    patch: int,
    current_patch: int | None = None,
    value_range: Sequence[float] | None = None,
    label: str = "‖h‖",
    title: str = "",
) -> go.Figure:
    """The memory's (n, n) values laid over the image, voxel (r, c) over patch (r, c), current patch outlined."""
    values = check_array(values, 2, "values", "(n, n)").astype(np.float32)
    size, n = image.shape[0], values.shape[0]
    if values.shape != (n, n) or n * patch != size:
        raise ValueError(
            f"values must be (n, n) with n · patch = the image's {size} pixels, got {values.shape} and patch {patch}"
        )
    low, high = colour_range(values, value_range)
    fig = go.Figure(picture(image))
    fig.add_trace(
        go.Heatmap(
            z=values,
            x0=(patch - 1) / 2.0,
            dx=patch,
            y0=(patch - 1) / 2.0,
            dy=patch,
            colorscale=COLORSCALE,
            zmin=low,
            zmax=high,
            opacity=0.55,
            name=label,
            colorbar=dict(title=label, thickness=12),
            hovertemplate="patch row %{y}, col %{x}<br>" + label + " %{z:.3f}<extra></extra>",
        )
    )
    if current_patch is not None:
        fig.add_shape(patch_box(current_patch, patch, n))
    _image_axes(fig, size)
    return finish(fig, title, height=340)


def write_places_figure(places: dict[str, np.ndarray], current: int, grid: Sequence[int], title: str = "") -> go.Figure:
    """Each chunk's write (x, y) against its patch's place, in voxels of the memory's W × H plane.

    ``places`` from :func:`analysis.measures.images.write_places`; a line joins each patch (grey square)
    to its write (red: a hidden patch's, pale: a visible one's); the current chunk is drawn larger.
    A memory that lays the image out writes near the squares.
    """
    patch = check_array(places["patch"], 2, "places['patch']", "(K, 2)")
    write = check_array(places["write"], 2, "places['write']", "(K, 2)")
    hidden = np.asarray(places["hidden"], dtype=bool)
    K = len(patch)
    fig = go.Figure()
    xs, ys = [], []
    for k in range(K):
        xs += [patch[k, 0], write[k, 0], None]
        ys += [patch[k, 1], write[k, 1], None]
    fig.add_trace(
        go.Scatter(
            x=xs, y=ys, mode="lines", line=dict(color="#bbbbbb", width=1), hoverinfo="skip", name="patch → write"
        )
    )
    fig.add_trace(
        go.Scatter(
            x=patch[:, 0],
            y=patch[:, 1],
            mode="markers",
            name="patch place",
            marker=dict(symbol="square-open", size=12, color="#777777"),
            text=[f"chunk {k}" for k in range(K)],
            hovertemplate="%{text}: patch at (%{x:.1f}, %{y:.1f})<extra></extra>",
        )
    )
    for name, flags, colour in (
        ("write of a hidden patch", hidden, rgb(WRITE_COLOUR)),
        ("write of a visible patch", ~hidden, rgb(WRITE_COLOUR, 0.6)),
    ):
        chunks = np.flatnonzero(flags)
        fig.add_trace(
            go.Scatter(
                x=write[chunks, 0],
                y=write[chunks, 1],
                mode="markers",
                name=name,
                marker=dict(size=7, color=colour),
                text=[f"chunk {k}" for k in chunks],
                hovertemplate="%{text}: write at (%{x:.2f}, %{y:.2f})<extra></extra>",
            )
        )
    if 0 <= current < K:
        fig.add_trace(
            go.Scatter(
                x=[patch[current, 0], write[current, 0]],
                y=[patch[current, 1], write[current, 1]],
                mode="lines+markers",
                name=f"chunk {current}",
                line=dict(color=PREDICTION_COLOUR, width=3),
                marker=dict(size=[14, 12], color=PREDICTION_COLOUR, symbol=["square-open", "circle"]),
            )
        )
    D, H, W = grid
    fig.update_xaxes(range=[-0.5, W - 0.5], title_text="x (W), voxels", dtick=1, zeroline=False, constrain="domain")
    fig.update_yaxes(
        range=[H - 0.5, -0.5], title_text="y (H), voxels", dtick=1, zeroline=False, scaleanchor="x", constrain="domain"
    )
    return finish(fig, title, height=380, legend=dict(orientation="h", y=-0.2))


__all__ = ["reconstruction_figure", "memory_overlay_figure", "write_places_figure", "picture", "patch_box", "PANELS"]
