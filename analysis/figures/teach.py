"""Pictures of one mechanism step (:class:`analysis.measures.teach.MechanismStep`), for the Teach page."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from analysis import figures
from analysis.measures.teach import MechanismStep
from analysis.measures.volumes import volume_values
from analysis.traces.trace import LayerTrace


def addressing_figure(step: MechanismStep, title: str) -> go.Figure:
    """The grid with the read (blue) and write (red) coordinates and the write's 1σ and 2σ surfaces."""
    one = lambda a: np.asarray(a, dtype=np.float32)[None]  # noqa: E731
    layer = LayerTrace(
        mu_read=one(step.mu_read),
        read=one(step.read),
        mu_write=one(step.mu_write),
        sigma=np.array([step.sigma], dtype=np.float32),
        content=one(step.content),
        h=one(step.h_new),
        c=None,
        gate_scale=step.gate_scale,
    )
    fig = figures.trajectory_figure(layer, 0, tail=1)
    fig.update_layout(title_text=title)
    return fig


def vector_figure(values: np.ndarray, title: str, axis: str = "channel", colour: str = "#1f77b4") -> go.Figure:
    """A bar per entry of a vector (a read, a write content)."""
    values = np.asarray(values, dtype=np.float64)
    fig = go.Figure(
        go.Bar(
            x=np.arange(len(values)),
            y=values,
            marker_color=colour,
            hovertemplate=f"{axis} %{{x}}: %{{y:.4f}}<extra></extra>",
        )
    )
    return figures.finish(fig, title, xaxis_title=axis, height=260)


def gates_bar_figure(step: MechanismStep) -> go.Figure:
    """The mean of each gate over the volume (|g| for the candidate) beside σ(γ)."""
    names = ["i (input)", "f (forget)", "o (output)", "|g| (candidate)", "σ(γ) read gate"]
    means = [float(step.gates[g].mean()) for g in "ifo"] + [float(np.abs(step.gates["g"]).mean()), step.gate_scale]
    fig = go.Figure(
        go.Bar(
            x=names,
            y=means,
            marker_color=["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#555555"],
            text=[f"{m:.2f}" for m in means],
            textposition="outside",
            hovertemplate="%{x}: %{y:.4f}<extra></extra>",
        )
    )
    return figures.finish(fig, "gates, mean over the volume", yaxis_range=[0, 1.15], height=260)


def update_figures(step: MechanismStep, index: tuple[int, int, int]) -> dict[str, go.Figure]:
    """Slices through voxel ``index`` (z, y, x): ``"before"`` and ``"after"`` the update of ‖h‖ (one colour
    scale), and ``"change"``, ‖h after − h before‖. Untitled: the slices' own titles fill the top."""
    before, after = (volume_values(v, "norm") for v in (step.h_prev, step.h_new))
    change = volume_values(step.h_new - step.h_prev, "norm")
    high = max(float(before.max()), float(after.max()), 1e-6)
    return {
        "before": figures.slices_figure(before, index, "", (0.0, high)),
        "after": figures.slices_figure(after, index, "", (0.0, high)),
        "change": figures.slices_figure(change, index, ""),
    }


__all__ = ["addressing_figure", "vector_figure", "gates_bar_figure", "update_figures"]
