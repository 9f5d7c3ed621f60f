"""Addressing over time: read and write trajectories with their Gaussian footprints, σ, and the gates."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from analysis.figures.base import (
    CURRENT_COLOUR,
    READ_COLOUR,
    WRITE_COLOUR,
    chunk_span,
    finish,
    mark_current,
    rgb,
    voxel_scene,
)
from analysis.measures.checks import check_array, check_index
from analysis.traces.trace import LayerTrace
from tensor_memory.memory.geometry import grid_sizes, in_voxels, sigma_voxels_per_axis


def _box_trace(grid: Sequence[int]) -> go.Scatter3d:
    """The 12 edges of the box spanned by the voxel centres, as one line with gaps."""
    D, H, W = grid_sizes(grid)
    corners = np.array([[x, y, z] for z in (0, D - 1) for y in (0, H - 1) for x in (0, W - 1)], dtype=float)
    edges = [(a, b) for a in range(8) for b in range(a + 1, 8) if bin(a ^ b).count("1") == 1]
    xs, ys, zs = [], [], []
    for a, b in edges:
        for axis, out in enumerate((xs, ys, zs)):
            out.extend([corners[a, axis], corners[b, axis], None])
    return go.Scatter3d(
        x=xs,
        y=ys,
        z=zs,
        mode="lines",
        name="grid",
        line=dict(color="#999999", width=2),
        hoverinfo="skip",
        showlegend=False,
    )


def _path_trace(name: str, points: np.ndarray, colour: tuple[int, int, int], tail: int) -> go.Scatter3d:
    """(n, 3) voxel points of chunks 0..n-1 as a line whose older points fade towards white.

    The last ``tail`` points keep most of their colour and larger markers; the newest is largest.
    """
    age = np.arange(len(points))[::-1]
    recency = np.where(age < tail, 1.0 - 0.5 * age / tail, 0.15)
    size = np.where(age == 0, 9, np.where(age < tail, 5, 3))
    scale = [[0.0, rgb(colour, white=0.85)], [1.0, rgb(colour)]]
    return go.Scatter3d(
        x=points[:, 0],
        y=points[:, 1],
        z=points[:, 2],
        mode="lines+markers",
        name=name,
        customdata=np.arange(len(points)),
        line=dict(color=recency, colorscale=scale, cmin=0.0, cmax=1.0, width=4),
        marker=dict(color=recency, colorscale=scale, cmin=0.0, cmax=1.0, size=size),
        hovertemplate=f"{name}, chunk %{{customdata}}<br>x %{{x:.2f}}, y %{{y:.2f}}, z %{{z:.2f}}<extra></extra>",
    )


def _unit_sphere(rings: int = 12, segments: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """A latitude-longitude sphere: vertices (V, 3) and triangles (F, 3), symmetric about the origin."""
    theta = np.linspace(0.0, np.pi, rings + 1)  # from pole to pole
    phi = np.linspace(0.0, 2 * np.pi, segments, endpoint=False)
    t, p = np.meshgrid(theta, phi, indexing="ij")
    vertices = np.stack([np.sin(t) * np.cos(p), np.sin(t) * np.sin(p), np.cos(t)], axis=-1).reshape(-1, 3)
    ring, seg = np.meshgrid(np.arange(rings), np.arange(segments), indexing="ij")
    a = ring * segments + seg
    b = ring * segments + (seg + 1) % segments
    c, d = a + segments, b + segments
    triangles = np.concatenate([np.stack([a, b, c], -1).reshape(-1, 3), np.stack([b, d, c], -1).reshape(-1, 3)])
    return vertices, triangles


def _ellipsoid_trace(
    name: str, centre: np.ndarray, radii: np.ndarray, colour: tuple[int, int, int], opacity: float, hover: str
) -> go.Mesh3d:
    """An ellipsoid mesh with semi-axes ``radii`` (x, y, z) around ``centre``."""
    vertices, triangles = _unit_sphere()
    points = centre + vertices * radii
    return go.Mesh3d(
        x=points[:, 0],
        y=points[:, 1],
        z=points[:, 2],
        i=triangles[:, 0],
        j=triangles[:, 1],
        k=triangles[:, 2],
        name=name,
        color=rgb(colour),
        opacity=opacity,
        showlegend=True,
        hovertemplate=f"{hover}<extra></extra>",
    )


def trajectory_figure(layer: LayerTrace, upto: int, tail: int = 8, since: int = 0) -> go.Figure:
    """Read and write coordinates of chunks ``since``..``upto`` in voxel units, with the write's footprint.

    Two lines, ``"read"`` (blue) and ``"write"`` (red), whose points older than ``tail`` chunks fade;
    the grid's box through the voxel centres; and the Gaussian of chunk ``upto``'s write as its
    1σ and 2σ isosurfaces (``"1σ"``, ``"2σ"``): ellipsoids centred on the write coordinate with
    semi-axes σ(n - 1)/2 voxels along each axis (the spread is isotropic in normalised units).
    """
    count = layer.mu_write.shape[0]
    upto = check_index(upto, count, "upto (a chunk index)")
    if tail < 1:
        raise ValueError(f"tail must be at least 1, got {tail}")
    since = check_index(since, upto + 1, "since (a chunk index up to upto)")
    grid = layer.grid
    fig = go.Figure(_box_trace(grid))
    for name, mu, colour in (("read", layer.mu_read, READ_COLOUR), ("write", layer.mu_write, WRITE_COLOUR)):
        mu = check_array(mu, 2, f"mu_{name}", "(K, 3)")
        fig.add_trace(_path_trace(name, in_voxels(mu[since : upto + 1], grid), colour, tail))
    centre = in_voxels(layer.mu_write[upto], grid)
    radii = sigma_voxels_per_axis(layer.sigma[upto], grid)
    for level, opacity in ((1, 0.5), (2, 0.18)):
        hover = (
            f"{level}σ of chunk {upto}'s write: σ = {float(layer.sigma[upto]):.3f} normalised, "
            f"semi-axes {', '.join(f'{r:.2f}' for r in level * radii)} voxels"
        )
        fig.add_trace(_ellipsoid_trace(f"{level}σ", centre, level * radii, WRITE_COLOUR, opacity, hover))
    return finish(
        fig,
        f"read and write coordinates, chunks {since}–{upto}",
        scene=voxel_scene(),
        legend=dict(itemsizing="constant"),
    )


def sigma_figure(
    sigma: np.ndarray, current: int, grid: Sequence[int], span: tuple[int, int] | None = None
) -> go.Figure:
    """Write spread σ (K,) over chunks in voxel spacings, the normalised value in the hover.

    One line when every axis of ``grid`` (D, H, W) has the same size, else one per axis size.
    The current chunk gets a marker and a dashed line. ``span`` (first, last): only those chunks.
    """
    values = check_array(sigma, 1, "sigma", "(K,)").astype(np.float64)
    current = check_index(current, len(values), "current (a chunk index)")
    chunks = chunk_span(span, len(values), current)
    values = values[chunks]
    D, H, W = grid_sizes(grid)
    axes_by_size: dict[int, list[str]] = {}
    for axis, n in (("x", W), ("y", H), ("z", D)):
        if n > 1:
            axes_by_size.setdefault(n, []).append(axis)
    if not axes_by_size:
        raise ValueError(f"σ in voxel spacings needs an axis with more than one voxel, grid is {(D, H, W)}")
    fig = go.Figure()
    in_voxels_along = sigma_voxels_per_axis(values, (D, H, W))  # (K, 3) along x, y, z
    for axes in axes_by_size.values():
        name = "σ" if len(axes_by_size) == 1 else f"σ along {', '.join(axes)}"
        spread = in_voxels_along[:, "xyz".index(axes[0])]  # σ in voxel spacings along these axes
        fig.add_trace(
            go.Scatter(
                x=chunks,
                y=spread,
                customdata=values,
                mode="lines+markers",
                name=name,
                hovertemplate="chunk %{x}<br>σ = %{y:.3f} voxel spacings<br>"
                "%{customdata:.4f} normalised<extra></extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=[current],
                y=[spread[current - chunks[0]]],
                mode="markers",
                name="current",
                marker=dict(size=11, color=CURRENT_COLOUR, symbol="circle-open", line=dict(width=2)),
                showlegend=False,
                hoverinfo="skip",
            )
        )
    mark_current(fig, current)
    return finish(fig, "write spread σ", xaxis_title="chunk", yaxis_title="σ (voxel spacings)")


# ---------------------------------------------------------------------------------------
# Gates
# ---------------------------------------------------------------------------------------

GATE_LINES = (
    ("i (input)", "gate_i", False),
    ("f (forget)", "gate_f", False),
    ("o (output)", "gate_o", False),
    ("|g| (candidate)", "gate_g", True),
)


def gates_figure(layer: LayerTrace, current: int, span: tuple[int, int] | None = None) -> go.Figure:
    """Per chunk, the mean over the volume of gates i, f, o and of |g|, and σ(γ) as a flat line.

    Without gate volumes in the layer, only σ(γ) and a note that they were not captured. ``span`` (first, last):
    only those chunks.
    """
    count = layer.sigma.shape[0]
    current = check_index(current, count, "current (a chunk index)")
    chunks = chunk_span(span, count, current)
    fig = go.Figure()
    if layer.has_gates:
        for name, field, absolute in GATE_LINES:
            volumes = getattr(layer, field)  # int8 codes stay codes until the span is cut out of them
            if len(volumes.shape) != 5 or volumes.shape[0] != count:
                raise ValueError(
                    f"{field} must have shape (K, C, D, H, W) with K = {count} chunks, got shape {tuple(volumes.shape)}"
                )
            gate = np.asarray(volumes[chunks[0] : chunks[-1] + 1])
            means = (np.abs(gate) if absolute else gate).mean(axis=(1, 2, 3, 4), dtype=np.float64)
            fig.add_trace(
                go.Scatter(
                    x=chunks,
                    y=means,
                    mode="lines+markers",
                    name=name,
                    hovertemplate=f"chunk %{{x}}<br>mean {name} = %{{y:.3f}}<extra></extra>",
                )
            )
    else:
        fig.add_annotation(
            text="gate volumes were not captured",
            xref="paper",
            yref="paper",
            x=0.5,
            y=0.5,
            showarrow=False,
            font=dict(color="#777777"),
        )
    fig.add_trace(
        go.Scatter(
            x=chunks,
            y=np.full(len(chunks), layer.gate_scale),
            mode="lines",
            name="σ(γ) read gate",
            line=dict(dash="dot", color="black"),
            hovertemplate="σ(γ) = %{y:.4f}<extra></extra>",
        )
    )
    mark_current(fig, current)
    return finish(fig, "gates", xaxis_title="chunk", yaxis_title="mean gate value", yaxis_range=[0, 1.05])
