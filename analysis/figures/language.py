"""Figures of the text view and of the causality audit."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from analysis.figures.base import finish
from analysis.figures.escape import plotly_text
from analysis.measures.language import TokenLosses


def _shown(piece: str) -> str:
    """A token's text made visible, as Plotly text: the end of a line as ⏎, spaces as ·."""
    return plotly_text(piece.replace("\n", "⏎").replace(" ", "·") if piece else "⏎")


def token_loss_figure(losses: TokenLosses, chunk: int) -> go.Figure:
    """Per-token loss of chunk ``chunk``'s tokens, with and without the memory (bars), tokens on the axis."""
    size = losses.chunk_size
    start, stop = chunk * size, min((chunk + 1) * size, len(losses.tokens))
    if not 0 <= start < len(losses.tokens):
        raise ValueError(f"chunk must be in 0..{(len(losses.tokens) - 1) // size}, got {chunk}")
    labels = [f"{i}: {_shown(losses.next_tokens[i])}" for i in range(start, stop)]
    fig = go.Figure(go.Bar(x=labels, y=losses.loss[start:stop], name="with the memory", marker_color="#1f77b4"))
    if losses.loss_without_memory is not None:
        fig.add_bar(
            x=labels,
            y=losses.loss_without_memory[start:stop],
            name="memory read off (σ(γ) = 0)",
            marker_color="#bbbbbb",
        )
    return finish(
        fig,
        f"chunk {chunk}: loss of each next token (nats)",
        height=300,
        barmode="group",
        yaxis_title="−log p(next token)",
        legend=dict(orientation="h", y=1.12, x=1, xanchor="right"),
    )


def contribution_figure(losses: TokenLosses, chunk: int) -> go.Figure:
    """The memory's contribution (loss without − with) at every position, the chunk ``chunk`` marked."""
    contribution = losses.contribution
    fig = go.Figure()
    if contribution is None:
        fig.add_annotation(text="no memory layers: nothing to switch off", showarrow=False)
        return finish(fig, "the memory's contribution")
    positions = np.arange(len(contribution))
    fig.add_bar(
        x=positions,
        y=contribution,
        marker_color=np.where(contribution >= 0, "#2ca02c", "#d62728"),
        hovertext=[_shown(t) for t in losses.next_tokens],
        hovertemplate="%{x} %{hovertext}: %{y:.3f}<extra></extra>",
    )
    size = losses.chunk_size
    fig.add_vrect(x0=chunk * size - 0.5, x1=(chunk + 1) * size - 0.5, fillcolor="#444444", opacity=0.08, line_width=0)
    return finish(
        fig,
        f"what the memory is worth per token (mean {contribution.mean():+.3f} nats; >0 helps)",
        height=240,
        xaxis_title="position",
        yaxis_title="nats saved",
    )


def read_overlap_figure(overlap: np.ndarray, chunk: int) -> go.Figure:
    """Which earlier chunks' writes each chunk's read lands on (rows: reading chunk, columns: writing chunk)."""
    K = overlap.shape[0]
    fig = go.Figure(go.Heatmap(z=overlap, zmin=0, zmax=1, colorscale="Blues", colorbar=dict(title="footprint")))
    fig.add_shape(type="rect", x0=-0.5, x1=K - 0.5, y0=chunk - 0.5, y1=chunk + 0.5, line=dict(color="#d62728"))
    fig.update_yaxes(autorange="reversed", title="reading chunk")
    return finish(
        fig,
        "what each read draws on: earlier writes' footprint at the read point",
        height=320,
        xaxis_title="writing chunk",
    )


def audit_heatmap_figure(result: dict[str, Any]) -> go.Figure:
    """The audit's single-position perturbations: how much each output position moved (log scale)."""
    heat = result["heatmap"]
    change = np.asarray(heat["change"], dtype=np.float64)
    z = np.log10(np.maximum(change, 1e-12))
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=heat["output"],
            y=heat["perturbed"],
            zmin=-12,
            zmax=0,
            colorscale="Magma",
            colorbar=dict(
                title="log10 change", tickvals=[-12, -8, -4, 0], ticktext=["0 (≤1e-12)", "1e-8", "1e-4", "1"]
            ),
            customdata=change,
            hovertemplate="perturbed %{y} → output %{x}: %{customdata:.2e}<extra></extra>",
        )
    )
    n = len(heat["output"])
    fig.add_trace(
        go.Scatter(
            x=[0, n - 1],
            y=[0, n - 1],
            mode="lines",
            line=dict(color="#2ca02c", dash="dot"),
            name="perturbed = output",
            hoverinfo="skip",
        )
    )
    fig.update_yaxes(autorange="reversed", title="perturbed input position")
    return finish(
        fig,
        f"{plotly_text(heat['name'])}: change of each output when one input moves — left of the line must be 0",
        height=420,
        xaxis_title="output position",
        showlegend=False,
    )


def gate_history_figure(history: dict, frozen_accuracy: float | None = None) -> go.Figure:
    """σ(γ) of each memory over training (left axis) and validation accuracy on asked pieces (right axis)."""
    fig = go.Figure()
    gates = np.asarray(history["gates"], dtype=np.float64)
    for j in range(gates.shape[1] if gates.ndim == 2 else 0):
        fig.add_scatter(x=history["steps"], y=gates[:, j], name=f"σ(γ), memory {j}", line=dict(color="#1f77b4"))
    fig.add_scatter(
        x=history["val_steps"],
        y=history["val_accuracy"],
        name="recall accuracy",
        yaxis="y2",
        mode="lines+markers",
        line=dict(color="#2ca02c"),
    )
    if frozen_accuracy is not None:
        fig.add_hline(
            y=frozen_accuracy, yref="y2", line=dict(color="#888888", dash="dot"), annotation_text="frozen MiniLM + head"
        )
    return finish(
        fig,
        "the gate opening, and recall over training",
        height=320,
        xaxis_title="step",
        yaxis=dict(title="σ(γ)", type="log"),
        yaxis2=dict(title="accuracy", overlaying="y", side="right"),
        legend=dict(orientation="h", y=-0.25),
    )
