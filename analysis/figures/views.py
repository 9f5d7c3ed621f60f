"""Every Plotly figure of the explorer's chunk view, built in one place so the page and the export agree.

:func:`explore_figures` returns, for one chunk of a trace, the chunk's input, the prediction
timeline and — for traces with memory layers — the chosen state volume (3D and slices), the
read/write trajectories with the current footprint, σ over time and the gates over time.
"""

from __future__ import annotations

import plotly.graph_objects as go

from analysis import figures
from analysis.figures.addressing import sigma_leaves, trajectory_leaves
from analysis.figures.base import marker_leaves
from analysis.figures.chunk_input import chunk_input_figure, chunk_input_leaves, input_has_leaves
from analysis.figures.state import slices_leaves, volume_leaves
from analysis.figures.stepped import Leaves
from analysis.measures.volumes import VolumeSeries
from analysis.traces.trace import Trace
from tensor_memory.memory.geometry import nearest_voxel

SLICE_ANCHORS = {
    "write": "through this chunk's write",
    "read": "through this chunk's read",
    "centre": "through the centre",
}


def slice_index(trace: Trace, layer: str | None, chunk: int, anchor: str) -> tuple[int, int, int] | None:
    """The voxel (z, y, x) the slices go through: nearest the chunk's write or read, or None for the centre."""
    if anchor not in SLICE_ANCHORS:
        raise ValueError(f"anchor must be one of {', '.join(SLICE_ANCHORS)}, got {anchor!r}")
    if anchor == "centre":
        return None
    lay = trace.layer(layer)
    mu = lay.mu_write[chunk] if anchor == "write" else lay.mu_read[chunk]
    return nearest_voxel(mu, lay.grid)


def explore_figures(
    trace: Trace,
    chunk: int,
    layer: str | None = None,
    series: VolumeSeries | None = None,
    kind: str = "volume",
    anchor: str = "write",
    span: tuple[int, int] | None = None,
) -> dict[str, go.Figure]:
    """``{"input", "timeline"}`` and, with ``series`` (the layer's volumes), ``"volume"``, ``"slices"``,
    ``"trajectory"``, ``"sigma"``, ``"gates"`` — all at ``chunk``; the figures over time show the chunks of
    ``span`` (first, last) only, when it is given (a long trace's stepping window)."""
    out = {"input": chunk_input_figure(trace, chunk), "timeline": figures.timeline_figure(trace, chunk, span)}
    if series is None:
        return out
    lay = trace.layer(layer)
    values = series.at(chunk)
    out["volume"] = figures.volume_figure(
        values, kind, f"{series.label} after chunk {chunk}", value_range=series.value_range
    )
    out["slices"] = figures.slices_figure(
        values, slice_index(trace, layer, chunk, anchor), "", value_range=series.value_range
    )
    out["trajectory"] = figures.trajectory_figure(lay, chunk, since=0 if span is None else span[0])
    out["sigma"] = figures.sigma_figure(lay.sigma, chunk, lay.grid, span)
    out["gates"] = figures.gates_figure(lay, chunk, span)
    return out


def explore_leaves(
    trace: Trace,
    chunk: int,
    layer: str | None = None,
    series: VolumeSeries | None = None,
    kind: str = "volume",
    anchor: str = "write",
    span: tuple[int, int] | None = None,
) -> dict[str, Leaves]:
    """What differs in each figure of :func:`explore_figures` at ``chunk`` from the same figures at another chunk of
    ``span`` (see ``analysis.figures.stepped``): every figure, the input where the trace's inputs
    :func:`~analysis.figures.chunk_input.input_has_leaves` (others differ throughout)."""
    out = {"timeline": marker_leaves(chunk)}
    if input_has_leaves(trace):
        out["input"] = chunk_input_leaves(trace, chunk)
    if series is None:
        return out
    lay = trace.layer(layer)
    values = series.at(chunk)
    out["volume"] = volume_leaves(values, kind, f"{series.label} after chunk {chunk}", series.value_range)
    out["slices"] = slices_leaves(values, slice_index(trace, layer, chunk, anchor), "", series.value_range)
    out["trajectory"] = trajectory_leaves(lay, chunk, since=0 if span is None else span[0])
    out["sigma"] = sigma_leaves(lay.sigma, chunk, lay.grid, span)
    out["gates"] = marker_leaves(chunk)
    return out


__all__ = ["explore_figures", "explore_leaves", "slice_index", "SLICE_ANCHORS"]
