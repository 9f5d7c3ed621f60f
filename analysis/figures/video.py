"""The moving-digits clip as a video: its frames with the curtain, prediction against truth, and the identity belief.

:func:`filmstrip_figure` lays a trace's frames side by side, the true and the predicted 8 × 8 digit
boxes on each and "true → predicted digit" above; :func:`identity_belief_figure` draws p(digit) per
frame from :func:`analysis.measures.occlusion.belief`. The position belief is
:func:`analysis.figures.timeline.belief_figure` fed the belief's identity-summed ``probs``.
Pure like every figure builder: arrays or a trace in, a new Plotly figure out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.figures.base import COLORSCALE, PREDICTION_COLOUR, TRUTH_COLOUR, finish, flag_runs, mark_current
from analysis.figures.stepped import Leaves
from analysis.figures.timeline import box_outline, object_box
from analysis.measures.checks import check_array, check_index
from analysis.measures.occlusion import belief as clip_belief
from analysis.traces.trace import Trace
from tensor_memory.tasks.moving_digits import DIGIT

RIGHT_COLOUR, WRONG_COLOUR = TRUTH_COLOUR, "#d62728"
GREYS = [[0.0, "black"], [1.0, "white"]]


def digit_box(name: str, position: Sequence[int], size: int, colour: str, dash: str) -> go.Scatter:
    """The outline of the 8 × 8 digit whose top-left pixel is ``position`` (y, x) in a ``size`` × ``size`` frame,
    wrapping at the frame's edges as the digit does."""
    return object_box(name, position, DIGIT, colour, dash, frame=size)


def _digit_belief(trace: Trace) -> dict[str, np.ndarray]:
    b = clip_belief(trace)
    if "identity_probs" not in b:
        raise ValueError(f"the video view needs a moving_digits trace, got task {trace.info.get('task')!r}")
    return b


def _film_values(trace: Trace, frames: Sequence[int] | None) -> list[dict[str, Any]]:
    """Per frame of :func:`filmstrip_figure` what differs between frames: its title and colour, its axis title,
    the heatmap's values and the boxes' points."""
    b = _digit_belief(trace)
    pictures = check_array(trace.meta["frames"], 3, "meta['frames']", "(T, S, S)")
    count, size = len(b["truth"]), int(trace.info["task_params"]["size"])
    shown = list(range(count)) if frames is None else [check_index(t, count, "frame") for t in frames]
    if not shown:
        raise ValueError("frames must name at least one frame")
    out = []
    for t in shown:
        boxes = [box_outline(b[name][t], DIGIT, size) for name in ("truth", "predicted")]
        out.append(
            {
                "title": f"{b['identity_truth'][t]} → {b['identity_predicted'][t]}",
                "colour": RIGHT_COLOUR if b["joint_correct"][t] else WRONG_COLOUR,
                "axis": f"{t}" + (" · hidden" if b["occluded"][t] else ""),
                "heatmap": {
                    "z": pictures[t],
                    "hovertemplate": f"frame {t}<br>x %{{x}}, y %{{y}}: %{{z:.2f}}<extra></extra>",
                },
                "boxes": [{"x": xs, "y": ys} for xs, ys in boxes],
            }
        )
    return out


def filmstrip_figure(trace: Trace, frames: Sequence[int] | None = None) -> go.Figure:
    """The clip's frames side by side (occluded ones show the curtain), the true digit's box (solid green) and
    the predicted one (dashed orange) on each, titled "true → predicted digit": green when the model has
    digit and place right (what the task scores), red otherwise. ``frames`` picks the frames (default all)."""
    columns = _film_values(trace, frames)
    size = int(trace.info["task_params"]["size"])
    fig = make_subplots(
        rows=1,
        cols=len(columns),
        subplot_titles=[c["title"] for c in columns],
        horizontal_spacing=min(0.01, 1 / max(len(columns) - 1, 1)),
    )
    for col, values in enumerate(columns, start=1):
        fig.add_trace(go.Heatmap(**values["heatmap"], coloraxis="coloraxis"), row=1, col=col)
        named = (("truth", TRUTH_COLOUR, "solid"), ("prediction", PREDICTION_COLOUR, "dash"))
        for (name, colour, dash), box in zip(named, values["boxes"], strict=True):
            fig.add_trace(digit_box(name, (0, 0), size, colour, dash).update(box), row=1, col=col)
        fig.update_xaxes(
            showticklabels=False,
            range=[-0.5, size - 0.5],
            constrain="domain",
            title=dict(text=values["axis"], font_size=10),
            row=1,
            col=col,
        )
        fig.update_yaxes(
            showticklabels=False,
            range=[size - 0.5, -0.5],
            constrain="domain",
            constraintoward="top",
            scaleanchor="x" if col == 1 else f"x{col}",
            row=1,
            col=col,
        )  # frames just under their titles
    for annotation, values in zip(fig.layout.annotations, columns, strict=True):
        annotation.update(font=dict(size=12, color=values["colour"]))
    return finish(
        fig,
        "the clip: true → predicted digit per frame, green when digit and place are right "
        "(box: truth solid, prediction dashed)",
        height=160,
        showlegend=False,
        coloraxis=dict(colorscale=GREYS, cmin=0.0, cmax=1.0, showscale=False),
    )


def filmstrip_leaves(trace: Trace, frames: Sequence[int] | None = None) -> Leaves:
    """What differs in :func:`filmstrip_figure` from the same figure of as many other ``frames`` of the clip (see
    ``analysis.figures.stepped``): each frame's picture, boxes and titles."""
    leaves = Leaves()
    for col, values in enumerate(_film_values(trace, frames)):
        leaves["layout", "annotations", col, "text"] = values["title"]
        leaves["layout", "annotations", col, "font", "color"] = values["colour"]
        leaves["layout", "xaxis" if col == 0 else f"xaxis{col + 1}", "title", "text"] = values["axis"]
        leaves |= {("data", 3 * col, key): value for key, value in values["heatmap"].items()}
        for index, box in enumerate(values["boxes"], start=3 * col + 1):
            leaves |= {("data", index, key): value for key, value in box.items()}
    return leaves


def identity_belief_figure(belief: dict[str, Any], current: int) -> go.Figure:
    """p(digit) per frame as a heatmap (frames across, digits up), the true digit circled, the predicted one
    crossed, occluded frames outlined and the current frame marked. ``belief`` is what
    :func:`analysis.measures.occlusion.belief` gives for a moving_digits trace."""
    if "identity_probs" not in belief:
        raise ValueError("belief must come from a moving_digits trace (it has no identity_probs)")
    probs = check_array(belief["identity_probs"], 2, "belief['identity_probs']", "(T, identities)")
    count, identities = probs.shape
    truth = check_array(belief["identity_truth"], 1, "belief['identity_truth']", f"({count},)")
    predicted = check_array(belief["identity_predicted"], 1, "belief['identity_predicted']", f"({count},)")
    occluded = check_array(belief["occluded"], 1, "belief['occluded']", f"({count},)").astype(bool)
    if not len(truth) == len(predicted) == len(occluded) == count:
        raise ValueError(
            f"belief's arrays disagree on the number of frames: identity_probs {count}, identity_truth "
            f"{len(truth)}, identity_predicted {len(predicted)}, occluded {len(occluded)}"
        )
    current = check_index(current, count, "current (a frame index)")
    frames = np.arange(count)
    fig = go.Figure(
        go.Heatmap(
            x=frames,
            y=np.arange(identities),
            z=probs.T,
            colorscale=COLORSCALE,
            zmin=0.0,
            zmax=1.0,
            colorbar=dict(title="p", thickness=10),
            hovertemplate="frame %{x}: p(digit %{y}) = %{z:.3f}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=frames,
            y=truth,
            mode="markers",
            name="truth",
            marker=dict(symbol="circle-open", size=13, color=TRUTH_COLOUR, line=dict(width=3)),
            hovertemplate="frame %{x}: the digit is %{y}<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=frames,
            y=predicted,
            mode="markers",
            name="prediction",
            marker=dict(symbol="x", size=8, color=PREDICTION_COLOUR),
            hovertemplate="frame %{x}: predicted %{y}<extra></extra>",
        )
    )
    for first, last in flag_runs(occluded):  # above the heatmap, which would hide a band below it
        fig.add_vrect(
            x0=first - 0.5,
            x1=last + 0.5,
            fillcolor="white",
            opacity=0.15,
            layer="above",
            line=dict(color="#7f7f7f", width=2, dash="dot"),
            annotation_text="occluded",
            annotation_position="outside top",
        )  # above the plot, clear of the current frame's label
    mark_current(fig, current)
    fig.update_xaxes(range=[-0.5, count - 0.5], dtick=1)
    fig.update_yaxes(range=[-0.5, identities - 0.5], dtick=1)
    return finish(
        fig,
        "identity belief: p(digit) per frame (○ truth, × prediction)",
        xaxis_title="frame",
        yaxis_title="digit",
        height=320,
        legend=dict(orientation="h", y=-0.25),
    )


__all__ = ["filmstrip_figure", "filmstrip_leaves", "identity_belief_figure", "digit_box"]
