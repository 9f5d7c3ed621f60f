"""A checkpoint's addressing over its training steps (the history of ``analysis.traces.training_log``)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.figures.base import finish
from analysis.figures.escape import plotly_text
from tensor_memory.training.evaluation import metric_unit

# The panels of the figure: (title, measures drawn in it, y-axis title).
PANELS = (
    ("where writes go", ("write_spread_voxels", "read_write_distance_voxels"), "voxels"),
    ("write spread σ", ("sigma_voxels",), "voxels"),
    ("shares of the grid", ("boundary_fraction", "occupancy"), "share"),
    ("gates", ("gate_scale", "gate_i_mean", "gate_f_mean", "gate_o_mean"), "value"),
)
# The last panel's line: the template's ninth colour, which it would get, is a pale pink next to the others.
METRIC_COLOUR = "#8c564b"  # brown, as strong as the measures' colours and none of theirs
SUBPLOT_TITLE_ROW = 24  # pixels: a panel title's line (16 px font) and a gap
LABELS = {
    "write_spread_voxels": "write spread",
    "read_write_distance_voxels": "read–write distance",
    "sigma_voxels": "median σ",
    "boundary_fraction": "coordinates at a face",
    "occupancy": "voxels written (≥ e⁻²)",
    "gate_scale": "σ(γ)",
    "gate_i_mean": "mean i",
    "gate_f_mean": "mean f",
    "gate_o_mean": "mean o",
}


def addressing_history_figure(history: dict[str, Any], layer: str | None = None, scaffold_steps: int = 0) -> go.Figure:
    """The addressing measures of ``layer`` (default: the last) against the training step, with the
    validation accuracy in the last panel. A ValueError when the log holds no addressing.

    A history may name its last panel's series and unit (``metric_label``, ``metric_unit``: a run folder's
    training loss). ``scaffold_steps`` (the run's ``training.address_scaffold_steps``) shades the steps during which
    the address scaffold steered training; the measures there are still the model's own addressing.
    """
    layers = history["layers"]
    if not layers:
        raise ValueError(
            "this training log holds no addressing measures (logs written by training before "
            "addressing was recorded, or a model without memory layers)"
        )
    layer = layer or sorted(layers)[-1]
    if layer not in layers:
        raise ValueError(f"no addressing measures for layer {layer!r} in this log; it has {sorted(layers)}")
    measures = layers[layer]
    metric = history.get("metric", "accuracy")
    label = history.get("metric_label", f"validation {metric.replace('_', ' ')}")
    metric_axis = history.get("metric_unit", metric_unit(metric))
    titles = [title for title, _, _ in PANELS] + [plotly_text(label)]
    fig = make_subplots(rows=1, cols=len(titles), subplot_titles=titles, horizontal_spacing=0.05)
    for column, (_, names, unit) in enumerate(PANELS, start=1):
        for name in names:
            if name in measures:
                steps, values = measures[name]
                fig.add_trace(
                    go.Scatter(
                        x=steps, y=values, mode="lines+markers", name=LABELS.get(name, name), legendgroup=str(column)
                    ),
                    row=1,
                    col=column,
                )
        fig.update_yaxes(title_text=unit, row=1, col=column)
    steps, values = history[f"val_{metric}"]
    fig.add_trace(
        go.Scatter(x=steps, y=values, mode="lines+markers", name=titles[-1], line_color=METRIC_COLOUR),
        row=1,
        col=len(titles),
    )
    if metric_axis == "%":
        fig.update_yaxes(range=[0, 1], row=1, col=len(titles))
    else:
        fig.update_yaxes(title_text=plotly_text(metric_axis or metric), row=1, col=len(titles))
    fig.update_xaxes(title_text="training step")
    if scaffold_steps > 0:
        for column in range(1, len(titles) + 1):
            fig.add_vrect(x0=0, x1=scaffold_steps, fillcolor="gray", opacity=0.12, line_width=0, row=1, col=column)
        fig.add_annotation(
            text=f"address scaffold, withdrawn by step {scaffold_steps:,}",
            xref="paper",
            yref="paper",
            x=0,
            y=1,
            yanchor="bottom",
            yshift=SUBPLOT_TITLE_ROW,  # its own row above the panels' titles (finish makes room for it)
            showarrow=False,
            xanchor="left",
            font=dict(size=11, color="gray"),
        )
    return finish(
        fig,
        f"Addressing during training · {plotly_text(layer)}",
        height=480,
        margin=dict(b=150),  # the legend's rows under the axes' titles
        legend=dict(orientation="h", y=-0.3, yanchor="top"),
    )


__all__ = ["addressing_history_figure", "PANELS"]
