"""A checkpoint's training log, read back: how its addressing developed over the training steps.

Training writes, at every evaluation, the validation metrics and each memory layer's addressing
measures (``tensor_memory.addressing``) into ``train_log.jsonl``. :func:`read_training_log` reads
that file (refusing a malformed one with the line that is wrong), :func:`addressing_history`
turns it into one series per measure, and :func:`addressing_history_figure` plots them against
the step, so a collapse shows when it happened.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from tensor_memory.evaluation import metric_unit
from tensor_memory.training_log import read_training_log

from analysis.figures import finish

# The panels of the figure: (title, measures drawn in it, y-axis title).
PANELS = (("where writes go", ("write_spread_voxels", "read_write_distance_voxels"), "voxels"),
          ("write spread σ", ("sigma_voxels",), "voxels"),
          ("pinned at a face", ("boundary_fraction",), "share"),
          ("gates", ("gate_scale", "gate_i_mean", "gate_f_mean", "gate_o_mean"), "value"))
LABELS = {"write_spread_voxels": "write spread", "read_write_distance_voxels": "read–write distance",
          "sigma_voxels": "median σ", "boundary_fraction": "coordinates at a face", "gate_scale": "σ(γ)",
          "gate_i_mean": "mean i", "gate_f_mean": "mean f", "gate_o_mean": "mean o"}


def addressing_history(entries: list[dict[str, Any]], metric: str = "accuracy") -> dict[str, Any]:
    """``{"layers": {layer: {measure: (steps, values)}}, "val_<metric>": (steps, values), "metric": metric}``.

    ``metric`` is the validation metric to follow (the task's headline: accuracy, or masked patches' psnr).
    Series are numpy arrays in step order; a measure a log entry lacks (or logged as null) is left
    out of that series rather than drawn as zero. Logs written before training recorded
    addressing give empty ``layers``.
    """
    layers: dict[str, dict[str, list[tuple[int, float]]]] = {}
    accuracy: list[tuple[int, float]] = []
    for entry in entries:
        step = entry["step"]
        value = entry.get(f"val_{metric}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            accuracy.append((step, float(value)))
        addressing = entry.get("addressing")
        if not isinstance(addressing, dict):
            continue
        for layer, measures in addressing.items():
            if not isinstance(measures, dict):
                continue
            for name, value in measures.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    layers.setdefault(layer, {}).setdefault(name, []).append((step, float(value)))

    def series(points: list[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
        points = sorted(points)
        return np.array([p[0] for p in points], dtype=np.int64), np.array([p[1] for p in points])

    return {"layers": {layer: {name: series(points) for name, points in measures.items()}
                       for layer, measures in layers.items()},
            f"val_{metric}": series(accuracy), "metric": metric}


def addressing_history_figure(history: dict[str, Any], layer: Optional[str] = None,
                              scaffold_steps: int = 0) -> go.Figure:
    """The addressing measures of ``layer`` (default: the last) against the training step, with the
    validation accuracy in the last panel. A ValueError when the log holds no addressing.

    ``scaffold_steps`` (the run's ``training.address_scaffold_steps``) shades the steps during which
    the address scaffold steered training; the measures there are still the model's own addressing.
    """
    layers = history["layers"]
    if not layers:
        raise ValueError("this training log holds no addressing measures (logs written by training before "
                         "addressing was recorded, or a model without memory layers)")
    layer = layer or sorted(layers)[-1]
    if layer not in layers:
        raise ValueError(f"no addressing measures for layer {layer!r} in this log; it has {sorted(layers)}")
    measures = layers[layer]
    metric = history.get("metric", "accuracy")
    titles = [title for title, _, _ in PANELS] + [f"validation {metric.replace('_', ' ')}"]
    fig = make_subplots(rows=1, cols=len(titles), subplot_titles=titles, horizontal_spacing=0.05)
    for column, (_, names, unit) in enumerate(PANELS, start=1):
        for name in names:
            if name in measures:
                steps, values = measures[name]
                fig.add_trace(go.Scatter(x=steps, y=values, mode="lines+markers", name=LABELS.get(name, name),
                                         legendgroup=str(column)), row=1, col=column)
        fig.update_yaxes(title_text=unit, row=1, col=column)
    steps, values = history[f"val_{metric}"]
    fig.add_trace(go.Scatter(x=steps, y=values, mode="lines+markers", name=titles[-1]), row=1, col=len(titles))
    if metric_unit(metric) == "%":
        fig.update_yaxes(range=[0, 1], row=1, col=len(titles))
    else:
        fig.update_yaxes(title_text=metric_unit(metric) or metric, row=1, col=len(titles))
    fig.update_xaxes(title_text="training step")
    if scaffold_steps > 0:
        for column in range(1, len(titles) + 1):
            fig.add_vrect(x0=0, x1=scaffold_steps, fillcolor="gray", opacity=0.12, line_width=0, row=1, col=column)
        fig.add_annotation(text=f"address scaffold, withdrawn by step {scaffold_steps:,}", xref="paper", yref="paper",
                           x=0, y=1.12, showarrow=False, xanchor="left", font=dict(size=11, color="gray"))
    return finish(fig, f"Addressing during training · {layer}", legend=dict(orientation="h", y=-0.25))


__all__ = ["read_training_log", "addressing_history", "addressing_history_figure"]
