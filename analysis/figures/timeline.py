"""Predictions over time and the occlusion task's frames: the timeline, the belief and one frame."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.figures.base import (
    COLORSCALE,
    PREDICTION_COLOUR,
    TRUTH_COLOUR,
    chunk_span,
    finish,
    flag_runs,
    mark_current,
)
from analysis.figures.escape import plotly_text
from analysis.figures.stepped import Leaves
from analysis.measures.checks import check_array, check_index
from analysis.measures.images import chunk_errors
from analysis.traces.trace import Trace


def timeline_figure(trace: Trace, current: int, span: tuple[int, int] | None = None) -> go.Figure:
    """The probability given to the target class per chunk, correct/incorrect marks, occlusion shaded.

    Chunks not scored (target −1, or ``scored`` false) are gaps. For the occlusion task, runs of
    chunks where ``meta["occluded"]`` is true are grey rectangles labelled "occluded" at their foot (the current
    chunk's label is at the top: the stepper opens on the first occluded chunk). A trace whose
    predictions are values (masked patches) shows each chunk's pixel error instead. ``span`` (first, last):
    only those chunks (:func:`~analysis.figures.base.chunk_span`).
    """
    if trace.predicts_values:
        return _error_timeline(trace, current, span)
    if not trace.has_predictions:
        return _unscored_timeline(trace, current, span)
    target = check_array(trace.chunks["target"], 1, "chunks['target']", "(K,)")
    prediction = check_array(trace.chunks["prediction"], 1, "chunks['prediction']", "(K,)")
    scored = check_array(trace.chunks["scored"], 1, "chunks['scored']", "(K,)").astype(bool)
    count = len(scored)
    if "probs" in trace.chunks:
        probs = check_array(trace.chunks["probs"], 2, "chunks['probs']", "(K, classes)")
        if target.max(initial=-1) >= probs.shape[1]:
            raise ValueError(f"a target is {int(target.max())}, beyond the {probs.shape[1]} classes of probs")
        count = probs.shape[0]
    if not len(target) == len(prediction) == len(scored) == count:
        raise ValueError(
            f"chunks disagree on the number of chunks: probs {count}, target {len(target)}, "
            f"prediction {len(prediction)}, scored {len(scored)}"
        )
    current = check_index(current, count, "current (a chunk index)")
    chunks = chunk_span(span, count, current)
    valid = (scored & (target >= 0))[chunks]
    p_target = trace.target_probabilities()[0][chunks]
    prediction, target = prediction[chunks], target[chunks]
    fig = go.Figure(
        go.Scatter(
            x=chunks,
            y=p_target,
            mode="lines",
            name="p(target)",
            line=dict(color="#555555"),
            hovertemplate="chunk %{x}<br>p(target) = %{y:.3f}<extra></extra>",
        )
    )
    for name, hits, colour, symbol in (
        ("correct", valid & (prediction == target), TRUTH_COLOUR, "circle"),
        ("incorrect", valid & (prediction != target), "#d62728", "x"),
    ):
        fig.add_trace(
            go.Scatter(
                x=chunks[hits],
                y=p_target[hits],
                mode="markers",
                name=name,
                marker=dict(color=colour, symbol=symbol, size=9),
                hovertemplate=f"chunk %{{x}}: {name}<extra></extra>",
            )
        )
    _shade_occluded(fig, trace, chunks, count)
    mark_current(fig, current)
    task = plotly_text(trace.info.get("task") or trace.info.get("checkpoint_name", "trace"))
    return finish(
        fig, f"{task}: probability of the target", xaxis_title="chunk", yaxis_title="p(target)", yaxis_range=[0, 1.05]
    )


def _shade_occluded(fig: go.Figure, trace: Trace, chunks: np.ndarray, count: int) -> None:
    """Grey rectangles labelled "occluded" (at their foot) over the runs of shown chunks whose ``meta["occluded"]``
    is true."""
    if "occluded" not in trace.meta:
        return
    occluded = check_array(trace.meta["occluded"], 1, "meta['occluded']", "(K,)")
    if len(occluded) != count:
        raise ValueError(f"meta['occluded'] has {len(occluded)} entries for {count} chunks")
    for first, last in flag_runs(occluded[chunks]):
        first, last = chunks[first], chunks[last]
        fig.add_vrect(
            x0=first - 0.5,
            x1=last + 0.5,
            fillcolor="grey",
            opacity=0.2,
            line_width=0,
            layer="below",
            annotation_text="occluded",
            annotation_position="bottom left",
        )


def _unscored_timeline(trace: Trace, current: int, span: tuple[int, int] | None) -> go.Figure:
    """A trace recorded without targets: the chunks and the current one, and why there is no curve."""
    current = check_index(current, trace.num_chunks, "current (a chunk index)")
    chunks = chunk_span(span, trace.num_chunks, current)
    fig = go.Figure(
        go.Scatter(
            x=chunks,
            y=np.zeros(len(chunks)),
            mode="markers",
            name="chunk",
            marker=dict(color="#bbbbbb", size=5),
            hoverinfo="x",
        )
    )
    fig.add_annotation(
        text="no predictions in this trace (recorded without targets)",
        showarrow=False,
        xref="paper",
        yref="paper",
        x=0.5,
        y=0.6,
    )
    mark_current(fig, current)
    return finish(
        fig,
        f"{plotly_text(trace.info.get('checkpoint_name', 'trace'))}: chunks",
        xaxis_title="chunk",
        yaxis_visible=False,
    )


def _error_timeline(trace: Trace, current: int, span: tuple[int, int] | None) -> go.Figure:
    """Masked patches: the RMS pixel error of each hidden patch's reconstruction, per chunk."""
    errors = chunk_errors(trace)
    current = check_index(current, len(errors), "current (a chunk index)")
    chunks = chunk_span(span, len(errors), current)
    errors = errors[chunks]
    fig = go.Figure(
        go.Bar(
            x=chunks,
            y=errors,
            name="hidden patch",
            marker_color=PREDICTION_COLOUR,
            hovertemplate="chunk %{x}: RMS error %{y:.3f}<extra></extra>",
        )
    )
    mark_current(fig, current)
    high = float(np.nanmax(errors)) if np.isfinite(errors).any() else 1.0
    return finish(
        fig,
        f"{plotly_text(trace.info.get('task', 'trace'))}: pixel error of each hidden patch (visible ones are given)",
        xaxis_title="chunk (patch)",
        yaxis_title="RMS error",
        yaxis_range=[0, 1.05 * high],
    )


def _belief_values(
    probs: np.ndarray, positions: np.ndarray, occluded: np.ndarray, size: int, frames: Sequence[int] | None
) -> tuple[list[str], list[dict], float]:
    """What :func:`belief_figure` shows of the frames chosen: their titles, per frame the heatmap's and the truth
    marker's values, and the colour scale's top."""
    probs = check_array(probs, 2, "probs", f"(T, {size * size})")
    if probs.shape[1] != size * size:
        raise ValueError(f"probs must have shape (T, {size * size}) for size {size}, got {tuple(probs.shape)}")
    count = probs.shape[0]
    positions = check_array(positions, 2, "positions", f"({count}, 2)")
    occluded = check_array(occluded, 1, "occluded", f"({count},)")
    if positions.shape != (count, 2) or occluded.shape != (count,):
        raise ValueError(
            f"positions must be ({count}, 2) and occluded ({count},) for {count} frames, got "
            f"{tuple(positions.shape)} and {tuple(occluded.shape)}"
        )
    shown = list(range(count)) if frames is None else [check_index(t, count, "frame") for t in frames]
    if not shown:
        raise ValueError("frames must name at least one frame")
    titles = [f"frame {t}" + (" · occluded" if occluded[t] else "") for t in shown]
    columns = [
        {
            "heatmap": {
                "z": probs[t].reshape(size, size),
                "hovertemplate": f"frame {t}<br>x %{{x}}, y %{{y}}<br>p = %{{z:.3f}}<extra></extra>",
            },
            "truth": {
                "x": [int(positions[t, 1])],
                "y": [int(positions[t, 0])],
                "hovertemplate": f"frame {t}: truth at x %{{x}}, y %{{y}}<extra></extra>",
            },
        }
        for t in shown
    ]
    high = float(probs[shown].max())
    return titles, columns, high if high > 0 else 1.0


def belief_figure(
    probs: np.ndarray, positions: np.ndarray, occluded: np.ndarray, size: int = 16, frames: Sequence[int] | None = None
) -> go.Figure:
    """The predicted position distribution of each frame as a (size, size) heatmap, truth marked.

    ``probs`` (T, size²) with class ``y * size + x``; ``positions`` (T, 2) the true (y, x);
    ``occluded`` (T,) puts "occluded" in a frame's title. ``frames`` picks which frames to show
    (default all). One colour scale from 0 to the largest probability shown.
    """
    titles, columns, high = _belief_values(probs, positions, occluded, size, frames)
    fig = make_subplots(
        rows=1, cols=len(titles), subplot_titles=titles, horizontal_spacing=min(0.02, 1 / max(len(titles) - 1, 1))
    )
    for col, values in enumerate(columns, start=1):
        fig.add_trace(go.Heatmap(**values["heatmap"], coloraxis="coloraxis"), row=1, col=col)
        fig.add_trace(
            go.Scatter(
                **values["truth"],
                mode="markers",
                name="truth",
                marker=dict(symbol="circle-open", size=10, color=TRUTH_COLOUR, line=dict(width=2)),
            ),
            row=1,
            col=col,
        )
        fig.update_xaxes(showticklabels=False, range=[-0.5, size - 0.5], constrain="domain", row=1, col=col)
        fig.update_yaxes(
            showticklabels=False,
            range=[size - 0.5, -0.5],
            constrain="domain",
            constraintoward="top",  # each frame just under its title
            scaleanchor="x" if col == 1 else f"x{col}",
            row=1,
            col=col,
        )
    fig.update_annotations(font_size=11)
    return finish(
        fig,
        "belief: predicted position per frame (○ truth)",
        height=230,
        showlegend=False,  # the title names the marker; a legend would sit on the colour bar's title
        coloraxis=dict(colorscale=COLORSCALE, cmin=0.0, cmax=high, colorbar=dict(title="p", thickness=10)),
    )


def belief_leaves(
    probs: np.ndarray, positions: np.ndarray, occluded: np.ndarray, size: int = 16, frames: Sequence[int] | None = None
) -> Leaves:
    """What differs in :func:`belief_figure` from the same figure of as many other ``frames`` of the clip: each
    frame's values and title, the colour scale's top (see ``analysis.figures.stepped``)."""
    titles, columns, high = _belief_values(probs, positions, occluded, size, frames)
    leaves = Leaves({("layout", "coloraxis", "cmax"): high})
    for col, (title, values) in enumerate(zip(titles, columns, strict=True)):
        leaves[("layout", "annotations", col, "text")] = title
        for index, trace in enumerate(("heatmap", "truth")):
            leaves |= {("data", 2 * col + index, key): value for key, value in values[trace].items()}
    return leaves


# The tasks' worlds are tori (tensor_memory.tasks.occlusion, moving_digits): positions are taken modulo the size.
WRAP_NOTE = "The world wraps around: what leaves one edge comes<br>back at the opposite one, so its box shows on both."
NOTE_HEIGHT = 29  # pixels: the note's two lines of 11 px type (1.3 × 11 each)


def box_outline(position: Sequence[int], side: int, frame: int | None = None) -> tuple[list, list]:
    """The (x, y) points of :func:`object_box`'s outline: each copy's corners, the copies apart by None."""
    y, x = (int(v) for v in position)
    rows = (0, frame) if frame and y + side > frame else (0,)
    cols = (0, frame) if frame and x + side > frame else (0,)
    xs: list = []
    ys: list = []
    for dy in rows:
        for dx in cols:
            top, left = y - dy - 0.5, x - dx - 0.5
            xs += [None, left, left + side, left + side, left, left]
            ys += [None, top, top, top + side, top + side, top]
    return xs[1:], ys[1:]


def object_box(
    name: str, position: Sequence[int], side: int, colour: str, dash: str, frame: int | None = None
) -> go.Scatter:
    """The outline of a ``side`` × ``side`` object whose top-left pixel is ``position`` (y, x).

    The tasks' objects wrap at the edges of their ``frame`` × ``frame`` frames, so does the box: one that runs
    off an edge is drawn again one frame over (the axes clip each copy), the copies one line with gaps.
    """
    if len(position) != 2:
        raise ValueError(f"{name} must be (y, x), got {tuple(position)}")
    xs, ys = box_outline(position, side, frame)
    return go.Scatter(
        x=xs,
        y=ys,
        mode="lines",
        name=name,
        legendgroup=name,
        line=dict(color=colour, width=3, dash=dash),
        hoverinfo="name",
    )


def _placed(position: Sequence[int] | None) -> Sequence[int]:
    """Where a box without a position is drawn, hidden."""
    return (0, 0) if position is None else position


def _frame_values(frame: np.ndarray, truth: Sequence[int] | None, prediction: Sequence[int] | None, ball: int):
    """What differs between frames of :func:`frame_figure`: the heatmap's values, each box's points and whether
    it shows (a box without a position is drawn hidden, so that every frame's figure has the same traces)."""
    image = check_array(frame, 2, "frame", "(S, S)").astype(np.float32)
    heatmap = {"z": image, "zmin": min(0.0, float(image.min())), "zmax": max(1.0, float(image.max()))}
    boxes = []
    for position in (truth, prediction):
        xs, ys = box_outline(_placed(position), ball, image.shape[0])
        boxes.append({"x": xs, "y": ys, "visible": position is not None})
    wraps = any(box["visible"] and None in box["x"] for box in boxes)  # a box drawn in copies on opposite edges
    return image.shape, heatmap, boxes, WRAP_NOTE if wraps else ""


def frame_figure(
    frame: np.ndarray,
    truth: Sequence[int] | None = None,
    prediction: Sequence[int] | None = None,
    title: str = "",
    ball: int = 2,
) -> go.Figure:
    """An input frame (S, S) in greyscale with the true and the predicted ball outlined.

    ``truth`` and ``prediction`` are the top-left pixel (y, x) of a ``ball`` × ``ball`` ball (or digit),
    which wraps at the frame's edges as its box does; truth is a solid green square, prediction a dashed
    orange one (hidden where None). A box drawn on two edges says why under the title (:data:`WRAP_NOTE`). Grey
    levels span [0, 1] (wider if the frame's values do).
    """
    (rows, cols), heatmap, boxes, note = _frame_values(frame, truth, prediction, ball)
    fig = go.Figure(
        go.Heatmap(
            **heatmap,
            colorscale=[[0.0, "black"], [1.0, "white"]],
            showscale=False,
            hovertemplate="x %{x}, y %{y}<br>%{z:.2f}<extra></extra>",
        )
    )
    named = (("truth", truth, TRUTH_COLOUR, "solid"), ("prediction", prediction, PREDICTION_COLOUR, "dash"))
    for (name, position, colour, dash), box in zip(named, boxes, strict=True):
        box_trace = object_box(name, _placed(position), ball, colour, dash, frame=rows)
        fig.add_trace(box_trace.update(visible=box["visible"]))
    fig.add_annotation(  # its own rows under the title (finish makes room), empty while no box wraps
        text=note,
        xref="paper",
        yref="paper",
        x=0,
        y=1,
        xanchor="left",
        yanchor="bottom",
        height=NOTE_HEIGHT,
        valign="bottom",
        align="left",
        showarrow=False,
        font=dict(size=11, color="#666666"),
    )
    fig.update_xaxes(range=[-0.5, cols - 0.5], constrain="domain", title_text="x")
    fig.update_yaxes(range=[rows - 0.5, -0.5], constrain="domain", scaleanchor="x", title_text="y")
    return finish(fig, title, legend=dict(orientation="h", y=-0.15))


def frame_leaves(
    frame: np.ndarray,
    truth: Sequence[int] | None = None,
    prediction: Sequence[int] | None = None,
    title: str = "",
    ball: int = 2,
) -> Leaves:
    """What differs in :func:`frame_figure` from the same figure of another frame of the clip (its size and
    ``ball``): the pixels, the boxes, the title (see ``analysis.figures.stepped``)."""
    _, heatmap, boxes, note = _frame_values(frame, truth, prediction, ball)
    leaves = Leaves({("data", 0, key): value for key, value in heatmap.items()})
    leaves[("layout", "annotations", 0, "text")] = note
    for index, box in enumerate(boxes, start=1):
        leaves |= {("data", index, key): value for key, value in box.items()}
    leaves[("layout", "title", "text")] = title
    return leaves
