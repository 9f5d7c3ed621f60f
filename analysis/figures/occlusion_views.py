"""Figures for the occlusion questions: where the memory's energy sits, what an intervention changes,
how long the belief in a hidden ball survives, and a frame's belief in words (:func:`belief_card`).

Each builder is pure, like :mod:`analysis.figures`: arrays or results in, a new Plotly figure out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis import figures
from analysis.figures.stepped import Leaves
from analysis.measures.interventions import InterventionResult
from analysis.measures.occlusion import memory_energy
from analysis.traces.trace import LayerTrace

BASELINE_COLOUR = "#555555"
INTERVENED_COLOUR = "#d62728"
KIND_NAMES = {
    "zero": "memory zeroed",
    "zero_region": "region zeroed",
    "gate_off": "σ(γ) forced to 0",
    "move_write": "write moved",
    "set_sigma": "σ of the write set",
}


def _shade(fig: go.Figure, occluded: np.ndarray | None, count: int, offset: int = 0, **where: Any) -> None:
    """Grey bands over runs of occluded chunks (when there is one flag per chunk), chunk 0 of them drawn at
    ``offset``."""
    if occluded is None or len(occluded) != count:
        return
    for first, last in figures.flag_runs(np.asarray(occluded, dtype=bool)):
        fig.add_vrect(
            x0=offset + first - 0.5,
            x1=offset + last + 0.5,
            fillcolor="grey",
            opacity=0.18,
            line_width=0,
            layer="below",
            **where,
        )


def belief_card(b: dict[str, Any], frame: int) -> str:
    """The probability of the truth at ``frame`` of a :func:`analysis.measures.occlusion.belief` (and of the true
    digit, for moving digits), as one card of HTML (class ``card plain``: the app's stepper styles it)."""
    digits = "identity_truth_probability" in b
    text = f"p({'true place' if digits else 'truth'}) at frame {frame}: <b>{b['truth_probability'][frame]:.1%}</b>"
    if digits:
        text += f" · p(true digit): <b>{b['identity_truth_probability'][frame]:.1%}</b>"
    return f"<div class='card plain'>{text}</div>"


def energy_figure(
    layer: LayerTrace, current: int, occluded: np.ndarray | None = None, span: tuple[int, int] | None = None
) -> go.Figure:
    """The memory's energy ‖h‖² over chunks: the total on top, every voxel below (rows "z,y,x").

    Occluded chunks (one flag per chunk) are shaded and the current chunk is marked. ``span`` (first, last): only
    those chunks.
    """
    K = len(layer.h)
    if not 0 <= current < K:
        raise ValueError(f"current must be in 0..{K - 1}, got {current}")
    chunks = figures.chunk_span(span, K, current)
    energy = memory_energy(layer, (int(chunks[0]), int(chunks[-1])))  # (k, D, H, W), the chunks shown
    D, H, W = energy.shape[1:]
    per_voxel = energy.reshape(len(chunks), -1).T  # (voxels, k)
    labels = [f"{z},{y},{x}" for z in range(D) for y in range(H) for x in range(W)]
    if occluded is not None and len(occluded) == K:
        occluded = np.asarray(occluded)[chunks]
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, row_heights=[0.3, 0.7], vertical_spacing=0.04)
    fig.add_trace(
        go.Scatter(
            x=chunks,
            y=per_voxel.sum(0),
            mode="lines+markers",
            name="total",
            line=dict(color="#1f77b4"),
            hovertemplate="chunk %{x}: Σ‖h‖² = %{y:.3f}<extra></extra>",
        ),
        row=1,
        col=1,
    )
    fig.add_trace(
        go.Heatmap(
            x=chunks,
            y=labels,
            z=per_voxel,
            colorscale=figures.COLORSCALE,
            colorbar=dict(title="‖h‖²", thickness=10, len=0.65, y=0.35),
            hovertemplate="chunk %{x}, voxel z,y,x = %{y}<br>‖h‖² = %{z:.3f}<extra></extra>",
        ),
        row=2,
        col=1,
    )
    _shade(fig, occluded, len(chunks), int(chunks[0]), row=1, col=1)
    for row in (1, 2):
        fig.add_vline(x=current, line_dash="dash", line_color=figures.CURRENT_COLOUR, line_width=1, row=row, col=1)
    fig.update_yaxes(title_text="Σ over voxels", row=1, col=1)
    fig.update_yaxes(title_text="voxel z,y,x", showticklabels=len(labels) <= 64, row=2, col=1)
    fig.update_xaxes(title_text="chunk", row=2, col=1)
    return figures.finish(fig, "memory energy ‖h‖² per voxel", height=460, showlegend=False)


def energy_leaves(current: int) -> Leaves:
    """What differs in :func:`energy_figure` at chunk ``current`` (same layer, flags and span): the dashed line of
    each row, its last two shapes (see ``analysis.figures.stepped``)."""
    return Leaves({("layout", "shapes", row, x): int(current) for row in (-2, -1) for x in ("x0", "x1")})


def intervention_figure(result: InterventionResult) -> go.Figure:
    """The probability of the truth per chunk, untouched against intervened; changed predictions marked."""
    base, changed = result.target_probability("baseline"), result.target_probability("intervened")
    K = len(base)
    chunks = np.arange(K)
    name = KIND_NAMES.get(result.kind, result.kind)
    fig = go.Figure(
        [
            go.Scatter(
                x=chunks,
                y=base,
                mode="lines+markers",
                name="untouched",
                line=dict(color=BASELINE_COLOUR),
                hovertemplate="chunk %{x}: p(truth) = %{y:.3f}<extra>untouched</extra>",
            ),
            go.Scatter(
                x=chunks,
                y=changed,
                mode="lines+markers",
                name=name,
                line=dict(color=INTERVENED_COLOUR, dash="dash"),
                hovertemplate=f"chunk %{{x}}: p(truth) = %{{y:.3f}}<extra>{name}</extra>",
            ),
        ]
    )
    flips = np.flatnonzero(result.changed)
    if len(flips):
        fig.add_trace(
            go.Scatter(
                x=flips,
                y=changed[flips],
                mode="markers",
                name="prediction changed",
                marker=dict(symbol="x", size=11, color=INTERVENED_COLOUR),
            )
        )
    _shade(fig, result.meta.get("occluded"), K)
    fig.add_vline(
        x=result.chunk - 0.5,
        line_color=INTERVENED_COLOUR,
        line_width=2,
        annotation_text=f"{name} {'at' if result.kind in ('move_write', 'set_sigma') else 'before'} chunk "
        f"{result.chunk}",
        annotation_position="top right",
    )
    return figures.finish(
        fig,
        "probability of the truth, untouched against intervened",
        xaxis_title="chunk",
        yaxis_title="p(truth)",
        yaxis_range=[0, 1.05],
        height=320,
        legend=dict(orientation="h", y=-0.25),
    )


def survival_figure(survival: dict[str, Any]) -> go.Figure:
    """Accuracy at the j-th hidden frame for each occlusion length L
    (from :func:`analysis.measures.occlusion.belief_survival`)."""
    fig = go.Figure()
    for length, accuracies in survival["by_offset"].items():
        if accuracies:
            fig.add_trace(
                go.Scatter(
                    x=np.arange(1, len(accuracies) + 1),
                    y=accuracies,
                    mode="lines+markers",
                    name=f"L = {length}",
                    hovertemplate=f"L = {length}, hidden frame %{{x}}: %{{y:.1%}}<extra></extra>",
                )
            )
    return figures.finish(
        fig,
        f"belief survival over {survival['samples']} samples per length",
        xaxis_title="hidden frame j (1 = first)",
        yaxis_title="accuracy",
        yaxis_range=[0, 1.05],
        yaxis_tickformat=".0%",
        height=320,
    )


__all__ = ["energy_figure", "energy_leaves", "intervention_figure", "survival_figure", "belief_card", "KIND_NAMES"]
