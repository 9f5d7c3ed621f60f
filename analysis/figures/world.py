"""The world read out of the memory: where the writes put the ball, and the map decoded from the memory."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.figures.base import TRUTH_COLOUR, WRITE_COLOUR, finish, rgb
from analysis.measures.world import apply_linear


def write_position_figure(
    fit: dict[str, Any], mu_write: np.ndarray, positions: np.ndarray, occluded: np.ndarray, size: int = 16
) -> go.Figure:
    """One sample: the ball's path and the position the fitted map reads off each write (hidden frames hollow)."""
    predicted = apply_linear(fit["weights"], np.asarray(mu_write, dtype=np.float64))  # (K, 2) as (y, x)
    K = len(predicted)
    positions, occluded = np.asarray(positions)[:K], np.asarray(occluded)[:K].astype(bool)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            x=positions[:, 1],
            y=positions[:, 0],
            mode="lines+markers+text",
            name="ball",
            text=[str(k) for k in range(K)],
            textposition="top center",
            line=dict(color=TRUTH_COLOUR),
            marker=dict(size=9),
        )
    )
    fig.add_trace(
        go.Scatter(
            x=predicted[:, 1],
            y=predicted[:, 0],
            mode="lines+markers",
            name="read off μ_write",
            line=dict(color=rgb(WRITE_COLOUR), dash="dot"),
            marker=dict(size=9, symbol=np.where(occluded, "circle-open", "circle")),
        )
    )
    r2 = fit.get("r2_visible")
    fig.update_xaxes(title_text="x (column)", range=[-1, size])
    fig.update_yaxes(title_text="y (row)", range=[size, -1], scaleanchor="x")
    return finish(
        fig,
        f"Do the writes follow the ball? R² = {r2:.2f} on visible frames of unseen samples"
        if r2 is not None
        else "Do the writes follow the ball?",
        height=360,
    )


def decoded_map_figure(decoded: dict[str, np.ndarray]) -> go.Figure:
    """The true map (unobserved cells dimmed), the map decoded from the memory, and where they differ."""
    truth, observed, estimate = decoded["map"], decoded["observed"].astype(bool), decoded["decoded"]
    wrong = ((estimate > 0.5) != truth.astype(bool)) & observed
    fig = make_subplots(
        rows=1,
        cols=3,
        subplot_titles=(
            "true map (unobserved dimmed)",
            "decoded from memory",
            f"wrong on observed cells: {int(wrong.sum())}",
        ),
    )
    shown = np.where(observed, truth.astype(float), 0.5 * truth + 0.25)
    for column, values in enumerate((shown, estimate, wrong.astype(float)), start=1):
        fig.add_trace(go.Heatmap(z=values, zmin=0, zmax=1, colorscale="Greys", showscale=False), row=1, col=column)
        fig.update_yaxes(autorange="reversed", scaleanchor=f"x{column if column > 1 else ''}", row=1, col=column)
    accuracy = 1.0 - wrong.sum() / max(observed.sum(), 1)
    return finish(fig, f"Map decoded from the memory: {accuracy:.0%} of observed cells right", height=320)


__all__ = ["write_position_figure", "decoded_map_figure"]
