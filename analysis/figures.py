"""Plotly figures of Tensor Memory traces: volumes, slices, addressing, gates and occlusion belief.

Every function here is pure: it reads numpy arrays (or a :class:`~analysis.trace.LayerTrace` or
:class:`~analysis.trace.Trace`), never modifies them, and returns a new
``plotly.graph_objects.Figure`` (no Streamlit, no external resources, the same figure for the
same inputs). Wrong shapes raise ``ValueError`` naming the argument and the shape expected.

Conventions, as in the mechanism (DESIGN.md §2):

* a state volume is ``(C, D, H, W)``; :func:`volume_values` reduces it to ``(D, H, W)``;
* 3D axes are voxel indices: x along W, y along H, z along D;
* coordinates ``mu`` are ``(x, y, z)`` in ``[-1, 1]`` with voxel centres at ``linspace(-1, 1, n)``,
  so a coordinate sits at voxel ``(mu + 1)(n - 1)/2`` (:func:`voxel_coordinates`) and a spread σ
  covers ``σ(n - 1)/2`` voxel spacings;
* time plots have the chunk index on x and mark the current chunk with a dashed vertical line.
"""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike
from plotly.subplots import make_subplots

from .grid import grid_sizes, sigma_in_voxels, voxel_coordinates
from .trace import LayerTrace, Trace

TEMPLATE = "plotly_white"
MARGIN = dict(l=10, r=10, t=40, b=10)
COLORSCALE = "Viridis"
READ_COLOUR = (31, 119, 180)  # blue
WRITE_COLOUR = (214, 39, 40)  # red
CURRENT_COLOUR = "#444444"
TRUTH_COLOUR = "#2ca02c"
PREDICTION_COLOUR = "#ff7f0e"
AXIS_TITLES = {"x": "x (W)", "y": "y (H)", "z": "z (D)"}
VOLUME_MODES = ("norm", "channel", "pca")


# ---------------------------------------------------------------------------------------
# Validation and shared layout
# ---------------------------------------------------------------------------------------

def _array(value: ArrayLike, ndim: int, name: str, expected: str) -> np.ndarray:
    """``value`` as an array with ``ndim`` dimensions, or a ValueError naming the expected shape."""
    array = np.asarray(value)
    if array.ndim != ndim:
        raise ValueError(f"{name} must have shape {expected}, got shape {tuple(array.shape)}")
    return array


def _index(value: int, size: int, name: str) -> int:
    """``value`` as an index into ``size`` items, or a ValueError giving the valid range."""
    index = int(value)
    if not 0 <= index < size:
        raise ValueError(f"{name} must be in 0..{size - 1}, got {value}")
    return index


def colour_range(values: np.ndarray, value_range: Optional[Sequence[float]] = None) -> tuple[float, float]:
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


def _finish(fig: go.Figure, title: str, **layout) -> go.Figure:
    """The shared compact layout: white template, small margins, the title top left."""
    fig.update_layout(template=TEMPLATE, margin=MARGIN, title=dict(text=title, x=0.01, font=dict(size=14)),
                      **layout)
    return fig


def _voxel_scene() -> dict:
    """A 3D scene in voxel-index axes with true proportions."""
    return dict(xaxis=dict(title=AXIS_TITLES["x"]), yaxis=dict(title=AXIS_TITLES["y"]),
                zaxis=dict(title=AXIS_TITLES["z"]), aspectmode="data")


def _mark_current(fig: go.Figure, current: int) -> None:
    """A dashed vertical line at chunk ``current``."""
    fig.add_vline(x=current, line_dash="dash", line_color=CURRENT_COLOUR, line_width=1,
                  annotation_text=f"chunk {current}", annotation_position="top right")


def _rgb(colour: tuple[int, int, int], white: float = 0.0) -> str:
    """``colour`` mixed with a fraction ``white`` of white, as a CSS rgb string."""
    r, g, b = (round(c + (255 - c) * white) for c in colour)
    return f"rgb({r},{g},{b})"


# ---------------------------------------------------------------------------------------
# Coordinates
# ---------------------------------------------------------------------------------------

def _state_volume(volume: np.ndarray) -> np.ndarray:
    return _array(volume, 4, "volume", "(C, D, H, W)")


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
        return array[_index(channel, channels, "channel")].astype(np.float32)
    if mode != "pca":
        raise ValueError(f"mode must be one of {', '.join(map(repr, VOLUME_MODES))}, got {mode!r}")
    components = pca_basis(array)[0] if basis is None else _array(basis, 2, "basis", f"(k, {channels})")
    if components.shape[1] != channels:
        raise ValueError(f"basis must have shape (k, {channels}) for a volume of {channels} channels, "
                         f"got {tuple(components.shape)}")
    direction = components[_index(component, len(components), "component")]
    samples = np.moveaxis(array, 0, -1).astype(np.float64)  # (D, H, W, C)
    centred = samples - samples.reshape(-1, channels).mean(axis=0)
    return (centred @ direction).astype(np.float32)


def _values(values: np.ndarray) -> np.ndarray:
    return _array(values, 3, "values", "(D, H, W)").astype(np.float32)


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
    return _finish(go.Figure(trace), title, scene=_voxel_scene())


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
    z, y, x = (_index(i, n, name) for i, n, name in zip(index, (D, H, W), ("z index", "y index", "x index")))
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
    return _finish(fig, title, coloraxis=dict(colorscale=COLORSCALE, cmin=low, cmax=high,
                                              colorbar=dict(thickness=12)))


# ---------------------------------------------------------------------------------------
# Addressing: trajectories, footprint, σ
# ---------------------------------------------------------------------------------------

def _box_trace(grid: Sequence[int]) -> go.Scatter3d:
    """The 12 edges of the box spanned by the voxel centres, as one line with gaps."""
    D, H, W = grid_sizes(grid)
    corners = np.array([[x, y, z] for z in (0, D - 1) for y in (0, H - 1) for x in (0, W - 1)], dtype=float)
    edges = [(a, b) for a in range(8) for b in range(a + 1, 8) if bin(a ^ b).count("1") == 1]
    xs, ys, zs = [], [], []
    for a, b in edges:
        for axis, out in enumerate((xs, ys, zs)):
            out.extend([corners[a, axis], corners[b, axis], None])
    return go.Scatter3d(x=xs, y=ys, z=zs, mode="lines", name="grid", line=dict(color="#999999", width=2),
                        hoverinfo="skip", showlegend=False)


def _path_trace(name: str, points: np.ndarray, colour: tuple[int, int, int], tail: int) -> go.Scatter3d:
    """(n, 3) voxel points of chunks 0..n-1 as a line whose older points fade towards white.

    The last ``tail`` points keep most of their colour and larger markers; the newest is largest.
    """
    age = np.arange(len(points))[::-1]
    recency = np.where(age < tail, 1.0 - 0.5 * age / tail, 0.15)
    size = np.where(age == 0, 9, np.where(age < tail, 5, 3))
    scale = [[0.0, _rgb(colour, white=0.85)], [1.0, _rgb(colour)]]
    return go.Scatter3d(x=points[:, 0], y=points[:, 1], z=points[:, 2], mode="lines+markers", name=name,
                        customdata=np.arange(len(points)),
                        line=dict(color=recency, colorscale=scale, cmin=0.0, cmax=1.0, width=4),
                        marker=dict(color=recency, colorscale=scale, cmin=0.0, cmax=1.0, size=size),
                        hovertemplate=f"{name}, chunk %{{customdata}}<br>x %{{x:.2f}}, y %{{y:.2f}}, "
                                      f"z %{{z:.2f}}<extra></extra>")


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


def _ellipsoid_trace(name: str, centre: np.ndarray, radii: np.ndarray, colour: tuple[int, int, int],
                     opacity: float, hover: str) -> go.Mesh3d:
    """An ellipsoid mesh with semi-axes ``radii`` (x, y, z) around ``centre``."""
    vertices, triangles = _unit_sphere()
    points = centre + vertices * radii
    return go.Mesh3d(x=points[:, 0], y=points[:, 1], z=points[:, 2], i=triangles[:, 0], j=triangles[:, 1],
                     k=triangles[:, 2], name=name, color=_rgb(colour), opacity=opacity, showlegend=True,
                     hovertemplate=f"{hover}<extra></extra>")


def trajectory_figure(layer: LayerTrace, upto: int, tail: int = 8) -> go.Figure:
    """Read and write coordinates of chunks 0..``upto`` in voxel units, with the write's footprint.

    Two lines, ``"read"`` (blue) and ``"write"`` (red), whose points older than ``tail`` chunks fade;
    the grid's box through the voxel centres; and the Gaussian of chunk ``upto``'s write as its
    1σ and 2σ isosurfaces (``"1σ"``, ``"2σ"``): ellipsoids centred on the write coordinate with
    semi-axes σ(n - 1)/2 voxels along each axis (the spread is isotropic in normalised units).
    """
    count = layer.mu_write.shape[0]
    upto = _index(upto, count, "upto (a chunk index)")
    if tail < 1:
        raise ValueError(f"tail must be at least 1, got {tail}")
    grid = layer.grid
    fig = go.Figure(_box_trace(grid))
    for name, mu, colour in (("read", layer.mu_read, READ_COLOUR), ("write", layer.mu_write, WRITE_COLOUR)):
        mu = _array(mu, 2, f"mu_{name}", "(K, 3)")
        fig.add_trace(_path_trace(name, voxel_coordinates(mu[:upto + 1], grid), colour, tail))
    centre = voxel_coordinates(layer.mu_write[upto], grid)
    radii = sigma_in_voxels(layer.sigma[upto], grid)
    for level, opacity in ((1, 0.5), (2, 0.18)):
        hover = (f"{level}σ of chunk {upto}'s write: σ = {float(layer.sigma[upto]):.3f} normalised, "
                 f"semi-axes {', '.join(f'{r:.2f}' for r in level * radii)} voxels")
        fig.add_trace(_ellipsoid_trace(f"{level}σ", centre, level * radii, WRITE_COLOUR, opacity, hover))
    return _finish(fig, f"read and write coordinates, chunks 0–{upto}", scene=_voxel_scene(),
                   legend=dict(itemsizing="constant"))


def sigma_figure(sigma: np.ndarray, current: int, grid: Sequence[int]) -> go.Figure:
    """Write spread σ (K,) over chunks in voxel spacings, the normalised value in the hover.

    One line when every axis of ``grid`` (D, H, W) has the same size, else one per axis size.
    The current chunk gets a marker and a dashed line.
    """
    values = _array(sigma, 1, "sigma", "(K,)").astype(np.float64)
    current = _index(current, len(values), "current (a chunk index)")
    D, H, W = grid_sizes(grid)
    axes_by_size: dict[int, list[str]] = {}
    for axis, n in (("x", W), ("y", H), ("z", D)):
        if n > 1:
            axes_by_size.setdefault(n, []).append(axis)
    if not axes_by_size:
        raise ValueError(f"σ in voxel spacings needs an axis with more than one voxel, grid is {(D, H, W)}")
    fig = go.Figure()
    chunks = np.arange(len(values))
    for n, axes in axes_by_size.items():
        name = "σ" if len(axes_by_size) == 1 else f"σ along {', '.join(axes)}"
        in_voxels = values * (n - 1) / 2.0
        fig.add_trace(go.Scatter(x=chunks, y=in_voxels, customdata=values, mode="lines+markers", name=name,
                                 hovertemplate="chunk %{x}<br>σ = %{y:.3f} voxel spacings<br>"
                                               "%{customdata:.4f} normalised<extra></extra>"))
        fig.add_trace(go.Scatter(x=[current], y=[in_voxels[current]], mode="markers", name="current",
                                 marker=dict(size=11, color=CURRENT_COLOUR, symbol="circle-open", line=dict(width=2)),
                                 showlegend=False, hoverinfo="skip"))
    _mark_current(fig, current)
    return _finish(fig, "write spread σ", xaxis_title="chunk", yaxis_title="σ (voxel spacings)")


# ---------------------------------------------------------------------------------------
# Gates
# ---------------------------------------------------------------------------------------

GATE_LINES = (("i (input)", "gate_i", False), ("f (forget)", "gate_f", False), ("o (output)", "gate_o", False),
              ("|g| (candidate)", "gate_g", True))


def gates_figure(layer: LayerTrace, current: int) -> go.Figure:
    """Per chunk, the mean over the volume of gates i, f, o and of |g|, and σ(γ) as a flat line.

    Without gate volumes in the layer, only σ(γ) and a note that they were not captured.
    """
    count = layer.sigma.shape[0]
    current = _index(current, count, "current (a chunk index)")
    chunks = np.arange(count)
    fig = go.Figure()
    if layer.has_gates:
        for name, field, absolute in GATE_LINES:
            gate = _array(getattr(layer, field), 5, field, "(K, C, D, H, W)")
            if gate.shape[0] != count:
                raise ValueError(f"{field} has {gate.shape[0]} chunks, the layer has {count}")
            means = (np.abs(gate) if absolute else gate).mean(axis=(1, 2, 3, 4), dtype=np.float64)
            fig.add_trace(go.Scatter(x=chunks, y=means, mode="lines+markers", name=name,
                                     hovertemplate=f"chunk %{{x}}<br>mean {name} = %{{y:.3f}}<extra></extra>"))
    else:
        fig.add_annotation(text="gate volumes were not captured", xref="paper", yref="paper", x=0.5, y=0.5,
                           showarrow=False, font=dict(color="#777777"))
    fig.add_trace(go.Scatter(x=chunks, y=np.full(count, layer.gate_scale), mode="lines", name="σ(γ) read gate",
                             line=dict(dash="dot", color="black"),
                             hovertemplate="σ(γ) = %{y:.4f}<extra></extra>"))
    _mark_current(fig, current)
    return _finish(fig, "gates", xaxis_title="chunk", yaxis_title="mean gate value", yaxis_range=[0, 1.05])


# ---------------------------------------------------------------------------------------
# Predictions over time and occlusion
# ---------------------------------------------------------------------------------------

def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) index of each run of True in a 1D boolean array."""
    padded = np.concatenate([[False], flags.astype(bool), [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [(int(a), int(b) - 1) for a, b in zip(edges[::2], edges[1::2])]


def timeline_figure(trace: Trace, current: int) -> go.Figure:
    """The probability given to the target class per chunk, correct/incorrect marks, occlusion shaded.

    Chunks not scored (target −1, or ``scored`` false) are gaps. For the occlusion task, runs of
    chunks where ``meta["occluded"]`` is true are grey rectangles labelled "occluded".
    """
    probs = _array(trace.chunks["probs"], 2, "chunks['probs']", "(K, classes)")
    count, classes = probs.shape
    target = _array(trace.chunks["target"], 1, "chunks['target']", "(K,)")
    prediction = _array(trace.chunks["prediction"], 1, "chunks['prediction']", "(K,)")
    scored = _array(trace.chunks["scored"], 1, "chunks['scored']", "(K,)").astype(bool)
    if not len(target) == len(prediction) == len(scored) == count:
        raise ValueError(f"chunks disagree on the number of chunks: probs {count}, target {len(target)}, "
                         f"prediction {len(prediction)}, scored {len(scored)}")
    if target.max(initial=-1) >= classes:
        raise ValueError(f"a target is {int(target.max())}, beyond the {classes} classes of probs")
    current = _index(current, count, "current (a chunk index)")
    valid = scored & (target >= 0)
    p_target = np.full(count, np.nan)
    p_target[valid] = probs[valid, target[valid]]
    chunks = np.arange(count)
    fig = go.Figure(go.Scatter(x=chunks, y=p_target, mode="lines", name="p(target)", line=dict(color="#555555"),
                               hovertemplate="chunk %{x}<br>p(target) = %{y:.3f}<extra></extra>"))
    for name, hits, colour, symbol in (("correct", valid & (prediction == target), TRUTH_COLOUR, "circle"),
                                       ("incorrect", valid & (prediction != target), "#d62728", "x")):
        fig.add_trace(go.Scatter(x=chunks[hits], y=p_target[hits], mode="markers", name=name,
                                 marker=dict(color=colour, symbol=symbol, size=9),
                                 hovertemplate=f"chunk %{{x}}: {name}<extra></extra>"))
    if "occluded" in trace.meta:
        occluded = _array(trace.meta["occluded"], 1, "meta['occluded']", "(K,)")
        if len(occluded) != count:
            raise ValueError(f"meta['occluded'] has {len(occluded)} entries for {count} chunks")
        for first, last in _runs(occluded):
            fig.add_vrect(x0=first - 0.5, x1=last + 0.5, fillcolor="grey", opacity=0.2, line_width=0, layer="below",
                          annotation_text="occluded", annotation_position="top left")
    _mark_current(fig, current)
    task = trace.info.get("task", "trace")
    return _finish(fig, f"{task}: probability of the target", xaxis_title="chunk", yaxis_title="p(target)",
                   yaxis_range=[0, 1.05])


def belief_figure(probs: np.ndarray, positions: np.ndarray, occluded: np.ndarray, size: int = 16,
                  frames: Optional[Sequence[int]] = None) -> go.Figure:
    """The predicted position distribution of each frame as a (size, size) heatmap, truth marked.

    ``probs`` (T, size²) with class ``y * size + x``; ``positions`` (T, 2) the true (y, x);
    ``occluded`` (T,) puts "occluded" in a frame's title. ``frames`` picks which frames to show
    (default all). One colour scale from 0 to the largest probability shown.
    """
    probs = _array(probs, 2, "probs", f"(T, {size * size})")
    if probs.shape[1] != size * size:
        raise ValueError(f"probs must have shape (T, {size * size}) for size {size}, got {tuple(probs.shape)}")
    count = probs.shape[0]
    positions = _array(positions, 2, "positions", f"({count}, 2)")
    occluded = _array(occluded, 1, "occluded", f"({count},)")
    if positions.shape != (count, 2) or occluded.shape != (count,):
        raise ValueError(f"positions must be ({count}, 2) and occluded ({count},) for {count} frames, got "
                         f"{tuple(positions.shape)} and {tuple(occluded.shape)}")
    shown = list(range(count)) if frames is None else [_index(t, count, "frame") for t in frames]
    if not shown:
        raise ValueError("frames must name at least one frame")
    titles = [f"frame {t}" + (" · occluded" if occluded[t] else "") for t in shown]
    fig = make_subplots(rows=1, cols=len(shown), subplot_titles=titles,
                        horizontal_spacing=min(0.02, 1 / max(len(shown) - 1, 1)))
    for col, t in enumerate(shown, start=1):
        fig.add_trace(go.Heatmap(z=probs[t].reshape(size, size), coloraxis="coloraxis",
                                 hovertemplate=f"frame {t}<br>x %{{x}}, y %{{y}}<br>p = %{{z:.3f}}<extra></extra>"),
                      row=1, col=col)
        fig.add_trace(go.Scatter(x=[positions[t, 1]], y=[positions[t, 0]], mode="markers", name="truth",
                                 legendgroup="truth", showlegend=col == 1,
                                 marker=dict(symbol="circle-open", size=10, color=TRUTH_COLOUR, line=dict(width=2)),
                                 hovertemplate=f"frame {t}: truth at x %{{x}}, y %{{y}}<extra></extra>"),
                      row=1, col=col)
        fig.update_xaxes(showticklabels=False, range=[-0.5, size - 0.5], constrain="domain", row=1, col=col)
        fig.update_yaxes(showticklabels=False, range=[size - 0.5, -0.5], constrain="domain",
                         scaleanchor="x" if col == 1 else f"x{col}", row=1, col=col)
    high = float(probs[shown].max())
    fig.update_annotations(font_size=11)
    return _finish(fig, "belief: predicted position per frame (○ truth)", height=230,
                   coloraxis=dict(colorscale=COLORSCALE, cmin=0.0, cmax=high if high > 0 else 1.0,
                                  colorbar=dict(title="p", thickness=10)))


def _square(name: str, position: Sequence[int], ball: int, colour: str, dash: str) -> go.Scatter:
    """The outline of a ``ball`` × ``ball`` square whose top-left pixel is ``position`` (y, x)."""
    if len(position) != 2:
        raise ValueError(f"{name} must be (y, x), got {tuple(position)}")
    y, x = (float(v) - 0.5 for v in position)
    return go.Scatter(x=[x, x + ball, x + ball, x, x], y=[y, y, y + ball, y + ball, y], mode="lines", name=name,
                      line=dict(color=colour, width=3, dash=dash), hoverinfo="name")


def frame_figure(frame: np.ndarray, truth: Optional[Sequence[int]] = None,
                 prediction: Optional[Sequence[int]] = None, title: str = "", ball: int = 2) -> go.Figure:
    """An input frame (S, S) in greyscale with the true and the predicted ball outlined.

    ``truth`` and ``prediction`` are the top-left pixel (y, x) of a ``ball`` × ``ball`` ball;
    truth is a solid green square, prediction a dashed orange one. Grey levels span [0, 1]
    (wider if the frame's values do).
    """
    image = _array(frame, 2, "frame", "(S, S)").astype(np.float32)
    rows, cols = image.shape
    fig = go.Figure(go.Heatmap(z=image, colorscale=[[0.0, "black"], [1.0, "white"]], showscale=False,
                               zmin=min(0.0, float(image.min())), zmax=max(1.0, float(image.max())),
                               hovertemplate="x %{x}, y %{y}<br>%{z:.2f}<extra></extra>"))
    for name, position, colour, dash in (("truth", truth, TRUTH_COLOUR, "solid"),
                                         ("prediction", prediction, PREDICTION_COLOUR, "dash")):
        if position is not None:
            fig.add_trace(_square(name, position, ball, colour, dash))
    fig.update_xaxes(range=[-0.5, cols - 0.5], constrain="domain", title_text="x")
    fig.update_yaxes(range=[rows - 0.5, -0.5], constrain="domain", scaleanchor="x", title_text="y")
    return _finish(fig, title, legend=dict(orientation="h", y=-0.15))


__all__ = ["volume_values", "pca_basis", "colour_range", "volume_figure", "slices_figure", "voxel_coordinates",
           "sigma_in_voxels", "trajectory_figure", "sigma_figure", "gates_figure", "timeline_figure", "belief_figure",
           "frame_figure"]
