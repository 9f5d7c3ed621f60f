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
    marker_leaves,
    rgb,
    voxel_scene,
)
from analysis.figures.stepped import Leaves, Path
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


def _path_arrays(points: np.ndarray, tail: int) -> dict[Path, np.ndarray]:
    """A path trace's arrays by their path in the trace: the (n, 3) points, each one's chunk (0..n-1), and the
    colours and sizes that fade the older ones (the last ``tail`` keep most colour; the newest is largest)."""
    age = np.arange(len(points))[::-1]
    recency = np.where(age < tail, 1.0 - 0.5 * age / tail, 0.15)
    size = np.where(age == 0, 9, np.where(age < tail, 5, 3))
    return {
        ("x",): points[:, 0],
        ("y",): points[:, 1],
        ("z",): points[:, 2],
        ("customdata",): np.arange(len(points)),
        ("line", "color"): recency,
        ("marker", "color"): recency,
        ("marker", "size"): size,
    }


def _path_trace(name: str, points: np.ndarray, colour: tuple[int, int, int], tail: int) -> go.Scatter3d:
    """(n, 3) voxel points of chunks 0..n-1 as a line whose older points fade towards white (:func:`_path_arrays`)."""
    arrays = _path_arrays(points, tail)
    scale = [[0.0, rgb(colour, white=0.85)], [1.0, rgb(colour)]]
    return go.Scatter3d(
        x=arrays["x",],
        y=arrays["y",],
        z=arrays["z",],
        mode="lines+markers",
        name=name,
        customdata=arrays["customdata",],
        line=dict(color=arrays["line", "color"], colorscale=scale, cmin=0.0, cmax=1.0, width=4),
        marker=dict(
            color=arrays["marker", "color"], colorscale=scale, cmin=0.0, cmax=1.0, size=arrays["marker", "size"]
        ),
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


def _ellipsoid_points(centre: np.ndarray, radii: np.ndarray) -> np.ndarray:
    """(V, 3) vertices of :func:`_unit_sphere` stretched by ``radii`` (x, y, z) around ``centre``."""
    return centre + _unit_sphere()[0] * radii


def _ellipsoid_trace(
    name: str, centre: np.ndarray, radii: np.ndarray, colour: tuple[int, int, int], opacity: float, hover: str
) -> go.Mesh3d:
    """An ellipsoid mesh with semi-axes ``radii`` (x, y, z) around ``centre``."""
    points = _ellipsoid_points(centre, radii)
    _, triangles = _unit_sphere()
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
    upto, since, paths, footprints = _trajectory_parts(layer, upto, tail, since)
    fig = go.Figure(_box_trace(layer.grid))
    for (name, colour), points in zip((("read", READ_COLOUR), ("write", WRITE_COLOUR)), paths, strict=True):
        fig.add_trace(_path_trace(name, points, colour, tail))
    for (level, opacity), (centre, radii, hover) in zip(FOOTPRINTS, footprints, strict=True):
        fig.add_trace(_ellipsoid_trace(f"{level}σ", centre, radii, WRITE_COLOUR, opacity, hover))
    return finish(
        fig,
        _trajectory_title(since, upto),
        scene=voxel_scene(),
        legend=dict(itemsizing="constant"),
    )


FOOTPRINTS = ((1, 0.5), (2, 0.18))  # the write's footprint: (σ multiple, opacity) of each ellipsoid drawn


def _trajectory_title(since: int, upto: int) -> str:
    return f"read and write coordinates, chunks {since}–{upto}"


def _trajectory_parts(layer: LayerTrace, upto: int, tail: int, since: int) -> tuple[int, int, list, list]:
    """(upto, since, the read and write paths as (n, 3) voxel points, per footprint (centre, radii, hover))."""
    count = layer.mu_write.shape[0]
    upto = check_index(upto, count, "upto (a chunk index)")
    if tail < 1:
        raise ValueError(f"tail must be at least 1, got {tail}")
    since = check_index(since, upto + 1, "since (a chunk index up to upto)")
    grid = layer.grid
    paths = [
        in_voxels(check_array(mu, 2, f"mu_{name}", "(K, 3)")[since : upto + 1], grid)
        for name, mu in (("read", layer.mu_read), ("write", layer.mu_write))
    ]
    centre = in_voxels(layer.mu_write[upto], grid)
    radii = sigma_voxels_per_axis(layer.sigma[upto], grid)
    footprints = [
        (
            centre,
            level * radii,
            f"{level}σ of chunk {upto}'s write: σ = {float(layer.sigma[upto]):.3f} normalised, "
            f"semi-axes {', '.join(f'{r:.2f}' for r in level * radii)} voxels",
        )
        for level, _ in FOOTPRINTS
    ]
    return upto, since, paths, footprints


def trajectory_leaves(layer: LayerTrace, upto: int, tail: int = 8, since: int = 0) -> Leaves:
    """What differs in :func:`trajectory_figure` at chunk ``upto`` from the same figure at another chunk with the
    same ``since``: the paths, the footprint and the title (see ``analysis.figures.stepped``)."""
    upto, since, paths, footprints = _trajectory_parts(layer, upto, tail, since)
    leaves = Leaves({("layout", "title", "text"): _trajectory_title(since, upto)})
    for index, points in enumerate(paths, start=1):
        leaves.update({("data", index, *path): value for path, value in _path_arrays(points, tail).items()})
    for index, (centre, radii, hover) in enumerate(footprints, start=3):
        points = _ellipsoid_points(centre, radii)
        leaves.update({("data", index, axis): points[:, i] for i, axis in enumerate("xyz")})
        leaves["data", index, "hovertemplate"] = f"{hover}<extra></extra>"
    return leaves


def sigma_figure(
    sigma: np.ndarray, current: int, grid: Sequence[int], span: tuple[int, int] | None = None
) -> go.Figure:
    """Write spread σ (K,) over chunks in voxel spacings, the normalised value in the hover.

    One line when every axis of ``grid`` (D, H, W) has the same size, else one per axis size.
    The current chunk gets a marker and a dashed line. ``span`` (first, last): only those chunks.
    """
    current, chunks, values, lines = _sigma_lines(sigma, current, grid, span)
    fig = go.Figure()
    for name, spread in lines:
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


def _sigma_lines(
    sigma: np.ndarray, current: int, grid: Sequence[int], span: tuple[int, int] | None
) -> tuple[int, np.ndarray, np.ndarray, list[tuple[str, np.ndarray]]]:
    """(current, the chunks shown, their σ normalised, per line its name and σ in voxel spacings along its axes)."""
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
    in_voxels_along = sigma_voxels_per_axis(values, (D, H, W))  # (K, 3) along x, y, z
    lines = [
        (
            "σ" if len(axes_by_size) == 1 else f"σ along {', '.join(axes)}",
            in_voxels_along[:, "xyz".index(axes[0])],  # σ in voxel spacings along these axes
        )
        for axes in axes_by_size.values()
    ]
    return current, chunks, values, lines


def sigma_leaves(sigma: np.ndarray, current: int, grid: Sequence[int], span: tuple[int, int] | None = None) -> Leaves:
    """What differs in :func:`sigma_figure` at chunk ``current`` (same σ, grid and span): each line's current-chunk
    marker, and the dashed line (see ``analysis.figures.stepped``)."""
    current, chunks, _, lines = _sigma_lines(sigma, current, grid, span)
    leaves = marker_leaves(current)
    for line, (_, spread) in enumerate(lines):
        leaves["data", 2 * line + 1, "x"] = [current]
        leaves["data", 2 * line + 1, "y"] = [spread[current - chunks[0]]]
    return leaves


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
