"""Two checkpoints' metrics side by side (the summaries of ``analysis.measures.compare``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from analysis.figures.base import finish
from analysis.figures.escape import plotly_text
from tensor_memory.training.evaluation import format_metric, metric_unit

COLOURS = ("#1f77b4", "#ff7f0e")


def comparison_figure(a: dict[str, Any], b: dict[str, Any]) -> go.Figure:
    """Grouped bars of the two checkpoints' metrics (chance left out) on one axis: the accuracies on 0–100%, or,
    for a task scored in decibels (masked patches), its PSNRs."""
    everything = [m for m in dict.fromkeys([*a["metrics"], *b["metrics"]]) if m != "chance"]
    unit = "dB" if any(metric_unit(m) == "dB" for m in everything) else "%"
    metrics = [m for m in everything if metric_unit(m) == unit]
    fig = go.Figure()
    for summary, colour in zip((a, b), COLOURS, strict=True):
        values = [summary["metrics"].get(m) for m in metrics]
        name = plotly_text(summary["name"])
        fig.add_trace(
            go.Bar(
                x=[plotly_text(m.replace("_", " ")) for m in metrics],
                y=[np.nan if v is None else v for v in values],
                name=name,
                marker_color=colour,
                text=[format_metric(m, v, percent_digits=1) for m, v in zip(metrics, values, strict=True)],
                textposition="outside",
                hovertemplate=f"{name}<br>%{{x}}: %{{text}}<extra></extra>",
            )
        )
    axis = dict(yaxis_range=[0, 1.15], yaxis_tickformat=".0%") if unit == "%" else dict(yaxis_title="dB")
    return finish(
        fig, "metrics on the same samples", barmode="group", height=320, legend=dict(orientation="h", y=-0.2), **axis
    )


__all__ = ["comparison_figure"]
