"""Accuracy against distance (``tensor-memory eval --distance``): one line per model over how long ago the answer
was shown, the attention window's reach marked, so where each model stops reaching back shows at a glance."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import plotly.graph_objects as go

from analysis.figures.base import finish


def distance_figure(curves: Mapping[str, list[dict]], unit: str, title: str, reach: float | None = None) -> go.Figure:
    """``curves``: a name → rows of ``{"from", "to", "accuracy"}`` (a distance or a bin of them, as
    :func:`tensor_memory.training.distance.distance_evaluation` gives them); drawn at each bin's middle, in percent.
    ``reach``: where an equal-state window stops seeing (in ``unit``), a dotted line."""
    if not curves:
        raise ValueError("distance_figure needs at least one curve")
    fig = go.Figure()
    for name, rows in curves.items():
        x = np.array([(row["from"] + row["to"]) / 2 for row in rows], dtype=np.float64)
        y = np.array([100 * row["accuracy"] for row in rows], dtype=np.float64)
        dashed = "reads off" in name
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines+markers",
                name=name,
                line=dict(dash="dot" if dashed else "solid", width=2),
                hovertemplate=f"{name}<br>distance %{{x:g}} {unit}: %{{y:.1f}} %<extra></extra>",
            )
        )
    if reach is not None:
        fig.add_vline(
            x=reach,
            line_dash="dash",
            line_color="#888888",
            annotation_text="an equal-state window's reach",
            annotation_position="top right",
        )
    return finish(
        fig,
        title,
        xaxis_title=f"distance ({unit} since the answer was shown)",
        yaxis_title="accuracy (%)",
        yaxis_range=[-2, 102],
    )


__all__ = ["distance_figure"]
