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
    """One sample: the ball's path and the position the fitted map reads off each write (hidden frames hollow).

    The axes span the ``size`` × ``size`` frame (outlined), widened only as far as a read-off lies outside it; the
    path breaks where the ball leaves one edge and comes back at the opposite one (the world wraps around).
    """
    predicted = apply_linear(fit["weights"], np.asarray(mu_write, dtype=np.float64))  # (K, 2) as (y, x)
    K = len(predicted)
    positions, occluded = np.asarray(positions)[:K], np.asarray(occluded)[:K].astype(bool)
    fig = go.Figure()
    fig.add_trace(
        go.Scatter(
            **_wrapped_path(positions),
            mode="lines+markers+text",
            name="ball",
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
    fig.add_shape(type="rect", x0=-0.5, y0=-0.5, x1=size - 0.5, y1=size - 0.5, line=dict(color="#999999", width=1))
    (y_low, x_low), (y_high, x_high) = (
        np.minimum(-0.5, np.floor(predicted.min(0, initial=0.0)) - 0.5),
        np.maximum(size - 0.5, np.ceil(predicted.max(0, initial=0.0)) + 0.5),
    )
    fig.update_xaxes(title_text="x (column)", range=[float(x_low), float(x_high)], constrain="domain")
    fig.update_yaxes(title_text="y (row)", range=[float(y_high), float(y_low)], constrain="domain", scaleanchor="x")
    r2 = fit.get("r2_visible")
    return finish(
        fig,
        f"Do the writes follow the ball? R² = {r2:.2f} on visible frames of unseen samples"
        if r2 is not None
        else "Do the writes follow the ball?",
        height=360,
    )


def _wrapped_path(positions: np.ndarray) -> dict[str, list]:
    """The ball's (y, x) per frame as a line's x, y and frame labels, broken (None) where a step jumps more than one
    pixel: there the ball left the frame at one edge and came back at the opposite one."""
    xs: list = []
    ys: list = []
    text: list = []
    for k, (y, x) in enumerate(positions.tolist()):
        if k and np.abs(positions[k] - positions[k - 1]).max() > 1:
            xs, ys, text = xs + [None], ys + [None], text + [""]
        xs, ys, text = xs + [x], ys + [y], text + [str(k)]
    return {"x": xs, "y": ys, "text": text}


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
