"""What one chunk of a sample feeds the model, and what the model predicted there against the truth.

:func:`chunk_input_figure` draws the chunk's input the way the task's metadata describes it: the
occlusion frame (with the occluder, the true and the predicted ball), the coordinate-binding
tokens in key space, the map observation beside the hidden map, the counter sequence.
:func:`chunk_outcome` gives the prediction, the truth and their probability in words, and
:func:`prediction_card` those words as the app's card (HTML). A model's tokens and a task's frames differ from
chunk to chunk only in values: :func:`chunk_input_leaves` gives them (see ``analysis.figures.stepped``).
A chunk's prediction is the model's at the chunk's last scored token, as in the trace.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis import figures
from analysis.figures.escape import html_text, plotly_text
from analysis.figures.images import HIDDEN_GREY, patch_box, picture
from analysis.figures.stepped import Leaves
from analysis.figures.timeline import frame_leaves
from analysis.figures.tokens import tokens_figure, tokens_leaves
from analysis.measures.images import chunk_errors
from analysis.traces.trace import Trace
from tensor_memory.tasks.masked_patches import hidden_pixels
from tensor_memory.tasks.moving_digits import DIGIT

PATCH_COLOUR = "#d62728"  # the current patch's outline
KEY_AXES = dict(
    xaxis=dict(title="x", range=[-1.1, 1.1]),
    yaxis=dict(title="y", range=[-1.1, 1.1]),
    zaxis=dict(title="z", range=[-1.1, 1.1]),
    aspectmode="cube",
)


def _token(trace: Trace, chunk: int) -> int:
    """The sequence position the chunk is scored at: its last token."""
    return trace.chunk_positions(chunk)[-1]


def _check(trace: Trace, chunk: int) -> int:
    if not 0 <= int(chunk) < trace.num_chunks:
        raise ValueError(f"chunk must be in 0..{trace.num_chunks - 1}, got {chunk}")
    return int(chunk)


def class_label(trace: Trace, value: int) -> str:
    """A class index in the task's own words: a ball position, a value, a cell's occupancy, a token's text."""
    task, params = trace.info.get("task"), trace.info.get("task_params", {})
    if task == "occlusion":
        y, x = divmod(int(value), int(params["size"]))
        return f"(y {y}, x {x})"
    if task == "moving_digits":
        size = int(params["size"])
        digit, cell = divmod(int(value), size * size)
        y, x = divmod(cell, size)
        return f"digit {digit} at (y {y}, x {x})"
    if task == "map_building":
        return "occupied" if int(value) == 1 else "free"
    return trace.class_text(value)  # a token's text where the trace holds its vocabulary


def model_chunk_event(trace: Trace, chunk: int) -> str:
    """A chunk of a trace without a task of ours, in words: its positions and, when recorded, its text."""
    positions = trace.chunk_positions(chunk)
    where = f"chunk {chunk}, position{'s' if len(positions) > 1 else ''} {positions[0]}" + (
        f"–{positions[-1]}" if len(positions) > 1 else ""
    )
    if trace.tokens is None:
        return where
    text = "".join(trace.tokens[i] for i in positions).replace("\n", "⏎")
    return f"{where}: “{text[:80]}{'…' if len(text) > 80 else ''}”"


def _frame_index(trace: Trace, chunk: int) -> int:
    params = trace.info["task_params"]
    per_frame = (int(params["size"]) // int(params["patch"])) ** 2
    return _token(trace, chunk) // per_frame


def chunk_outcome(trace: Trace, chunk: int) -> dict[str, Any]:
    """``{"event", "scored", "prediction", "truth", "correct", "p_truth", "p_prediction"}`` for the chunk, in words.

    ``event`` says what the chunk's input is (e.g. "frame 5, occluded", "write 3 of 20"); the rest
    is None where the chunk is not scored (writes and observations are only stored).
    """
    k = _check(trace, chunk)
    task, params, meta = trace.info.get("task"), trace.info.get("task_params", {}), trace.meta
    t = _token(trace, k)
    if task in ("occlusion", "moving_digits"):
        frame = _frame_index(trace, k)
        event = f"frame {frame}" + (", occluded" if bool(meta["occluded"][frame]) else ", visible")
    elif task == "coordinate_binding":
        writes, filler = int(params["writes"]), int(params.get("distractors", 0))
        event = (
            f"write {t + 1} of {writes}"
            if t < writes
            else f"distractor {t - writes + 1} of {filler}"
            if t < writes + filler
            else f"query {t - writes - filler + 1} of {int(params['queries'])}"
        )
    elif task == "map_building":
        observations = int(params["observations"])
        event = (
            f"observation {t + 1} of {observations}"
            if t < observations
            else f"query {t - observations + 1} of {int(params['queries'])}"
        )
    elif task == "no_harm":
        event = f"token {t}: value {int(meta['sequence'][t])}"
    elif task == "masked_patches":
        row, col = divmod(t, int(params["image_size"]) // int(params["patch"]))
        event = f"patch {t} (row {row}, column {col}), " + ("hidden" if bool(meta["masked"][t]) else "visible")
    else:
        event = model_chunk_event(trace, k)
    scored = bool(trace.chunks["scored"][k])
    out: dict[str, Any] = {
        "event": event,
        "scored": scored,
        "prediction": None,
        "truth": None,
        "correct": None,
        "p_truth": None,
        "p_prediction": None,
    }
    if scored and trace.predicts_values:  # a reconstructed patch: its error stands for right or wrong
        out.update(
            prediction="the hidden patch, reconstructed",
            truth="the patch's pixels",
            error=float(chunk_errors(trace)[k]),
        )
    elif scored:
        prediction, target = int(trace.chunks["prediction"][k]), int(trace.chunks["target"][k])
        p_truth, p_prediction = (float(p[k]) for p in trace.target_probabilities())
        out.update(
            prediction=class_label(trace, prediction),
            truth=class_label(trace, target),
            correct=prediction == target,
            p_truth=p_truth,
            p_prediction=p_prediction,
        )
    return out


def prediction_card(outcome: dict[str, Any], predicts: bool) -> str:
    """A :func:`chunk_outcome` as one card of escaped HTML (classes ``card``, ``card plain``: the app's stepper styles
    them): the prediction against the truth with their probabilities, or why there is none. ``predicts``: whether
    the trace holds predictions at all."""
    event = html_text(outcome["event"][:1].upper() + outcome["event"][1:])
    if not predicts:
        return (
            f"<div class='card'>{event}. This trace was recorded without targets, so it holds no predictions "
            f"(trace_model(..., targets=...) adds them).</div>"
        )
    if not outcome["scored"]:
        return f"<div class='card'>{event}: nothing to predict here; the model only takes it in.</div>"
    if "error" in outcome:
        return (
            f"<div class='card plain'>Reconstructed the hidden patch · RMS pixel error "
            f"<b>{outcome['error']:.3f}</b> (pixels in [0, 1]); the Images page shows the whole picture.</div>"
        )
    verdict = (
        "<span style='color:#177233'>✓ right</span>"
        if outcome["correct"]
        else "<span style='color:#b42318'>✗ wrong</span>"
    )
    return (
        f"<div class='card plain'>Predicted <b style='white-space:pre'>{html_text(outcome['prediction'])}</b> · "
        f"truth <b style='white-space:pre'>{html_text(outcome['truth'])}</b> {verdict}<br>"
        f"p(truth) = {outcome['p_truth']:.1%}, "
        f"p(prediction) = {outcome['p_prediction']:.1%}</div>"
    )


def _frame_arguments(trace: Trace, k: int) -> dict[str, Any]:
    """:func:`figures.frame_figure`'s arguments at chunk ``k``: the frame with the curtain, the true and the predicted
    ball (or the moving digit, its 8 × 8 box)."""
    params, meta = trace.info["task_params"], trace.meta
    frame = _frame_index(trace, k)
    size = int(params["size"])
    cell = int(trace.chunks["prediction"][k]) % (size * size)  # a class is identity · size² + cell
    digits = trace.info["task"] == "moving_digits"
    thing = f"the digit ({int(meta['digit'])})" if digits else "the ball"
    occluded = bool(meta["occluded"][frame])
    return dict(
        frame=meta["frames"][frame],
        truth=tuple(meta["positions"][frame]),
        prediction=divmod(cell, size) if trace.chunks["scored"][k] else None,
        title=f"frame {frame}" + (f" · occluded: {thing} is behind the curtain" if occluded else ""),
        ball=DIGIT if digits else int(params["ball"]),
    )


def _frame_figure(trace: Trace, k: int) -> go.Figure:
    return figures.frame_figure(**_frame_arguments(trace, k))


def _frame_leaves(trace: Trace, k: int) -> Leaves:
    return frame_leaves(**_frame_arguments(trace, k))


def _binding_figure(trace: Trace, k: int) -> go.Figure:
    params, meta = trace.info["task_params"], trace.meta
    writes, t = int(params["writes"]), _token(trace, k)
    keys, values = np.asarray(meta["keys"]), np.asarray(meta["values"])
    shown = min(t + 1, writes)
    fig = go.Figure(
        go.Scatter3d(
            x=keys[:shown, 0],
            y=keys[:shown, 1],
            z=keys[:shown, 2],
            mode="markers+text",
            name="written keys",
            text=[str(int(v)) for v in values[:shown]],
            textposition="top center",
            marker=dict(size=4, color="#1f77b4", opacity=0.6),
            hovertemplate="key (%{x:.2f}, %{y:.2f}, %{z:.2f})<br>value %{text}<extra></extra>",
        )
    )
    if t < writes:
        title = f"write {t + 1} of {writes}: value {int(values[t])} at key ({', '.join(f'{v:.2f}' for v in keys[t])})"
        fig.add_trace(
            go.Scatter3d(
                x=keys[t : t + 1, 0],
                y=keys[t : t + 1, 1],
                z=keys[t : t + 1, 2],
                mode="markers",
                name="this write",
                marker=dict(size=9, color="#d62728"),
                hoverinfo="skip",
            )
        )
    elif t < writes + int(params.get("distractors", 0)):
        title = f"distractor {t - writes + 1}: a key with no value, between the writes and the queries"
    else:
        q = t - writes - int(params.get("distractors", 0))
        query, near = np.asarray(meta["query_keys"])[q], keys[int(meta["nearest"][q])]
        title = f"query {q + 1}: which value sits nearest this key?"
        fig.add_trace(
            go.Scatter3d(
                x=[query[0]],
                y=[query[1]],
                z=[query[2]],
                mode="markers",
                name="query key",
                marker=dict(size=8, color="#9467bd", symbol="diamond"),
                hoverinfo="name",
            )
        )
        fig.add_trace(
            go.Scatter3d(
                x=[query[0], near[0]],
                y=[query[1], near[1]],
                z=[query[2], near[2]],
                mode="lines+markers",
                name="nearest written key",
                line=dict(color="#2ca02c", width=5),
                marker=dict(size=[0, 9], color="#2ca02c", symbol="circle-open"),
                hoverinfo="name",
            )
        )
    return figures.finish(fig, title, scene=KEY_AXES, legend=dict(orientation="h", y=-0.05))


def _map_figure(trace: Trace, k: int) -> go.Figure:
    params, meta = trace.info["task_params"], trace.meta
    observations, patch, t = int(params["observations"]), int(params["patch"]), _token(trace, k)
    hidden = np.asarray(meta["map"]).astype(float)
    positions = np.asarray(meta["obs_positions"])
    seen = np.zeros_like(hidden, dtype=bool)
    for row, col in positions[: min(t + 1, observations)]:
        seen[row : row + patch, col : col + patch] = True
    if t < observations:
        (row, col), height, title = positions[t], patch, f"observation {t + 1} of {observations}"
    else:
        (row, col), height, title = (
            np.asarray(meta["query_cells"])[t - observations],
            1,
            f"query {t - observations + 1}: is this cell occupied?",
        )
    fig = make_subplots(rows=1, cols=2, subplot_titles=("observed so far", "hidden map"), horizontal_spacing=0.08)
    scale = [[0.0, "#f7f7f7"], [1.0, "#333333"]]
    for col_index, grid in ((1, np.where(seen, hidden, np.nan)), (2, hidden)):
        fig.add_trace(
            go.Heatmap(
                z=grid,
                zmin=0,
                zmax=1,
                colorscale=scale,
                showscale=False,
                xgap=1,
                ygap=1,
                hovertemplate="row %{y}, col %{x}: %{z}<extra></extra>",
            ),
            row=1,
            col=col_index,
        )
        fig.add_shape(
            type="rect",
            x0=col - 0.5,
            x1=col + height - 0.5,
            y0=row - 0.5,
            y1=row + height - 0.5,
            line=dict(color="#d62728", width=3),
            row=1,
            col=col_index,
        )
        fig.update_xaxes(showticklabels=False, constrain="domain", row=1, col=col_index)
        fig.update_yaxes(
            showticklabels=False,
            autorange="reversed",
            constrain="domain",
            scaleanchor="x" if col_index == 1 else "x2",
            row=1,
            col=col_index,
        )
    return figures.finish(fig, title, plot_bgcolor="#fde0dd")  # pink: cells not observed yet


def _counter_figure(trace: Trace, k: int) -> go.Figure:
    sequence = np.asarray(trace.meta["sequence"])
    t = _token(trace, k)
    tokens = sequence[:-1]
    fig = go.Figure(
        go.Heatmap(
            z=[tokens],
            text=[[str(int(v)) for v in tokens]],
            texttemplate="%{text}",
            colorscale="Blues",
            showscale=False,
            xgap=2,
            hovertemplate="token %{x}: %{z}<extra></extra>",
        )
    )
    fig.add_shape(type="rect", x0=t - 0.5, x1=t + 0.5, y0=-0.5, y1=0.5, line=dict(color="#d62728", width=3))
    fig.update_yaxes(showticklabels=False)
    return figures.finish(fig, f"token {t}: what comes next?", height=160, xaxis_title="position")


def _patches_figure(trace: Trace, k: int) -> go.Figure:
    """The image as the model sees it (hidden patches grey), the current patch outlined."""
    params, meta = trace.info["task_params"], trace.meta
    size, patch = int(params["image_size"]), int(params["patch"])
    image = np.asarray(meta["image"], dtype=np.float32)
    hidden = hidden_pixels(meta["masked"], size, patch)
    fig = go.Figure(picture(np.where(hidden[..., None], HIDDEN_GREY, image), "what the model sees"))
    t = _token(trace, k)
    fig.add_shape(patch_box(t, patch, size // patch, PATCH_COLOUR))
    fig.update_xaxes(range=[-0.5, size - 0.5], constrain="domain", showticklabels=False)
    fig.update_yaxes(range=[size - 0.5, -0.5], constrain="domain", scaleanchor="x", showticklabels=False)
    state = "hidden: the model fills it in" if bool(meta["masked"][t]) else "visible"
    return figures.finish(fig, f"patch {t} ({state}); grey patches are hidden")


BUILDERS = {
    "occlusion": _frame_figure,
    "moving_digits": _frame_figure,
    "coordinate_binding": _binding_figure,
    "map_building": _map_figure,
    "no_harm": _counter_figure,
    "masked_patches": _patches_figure,
}


LEAVES = {"occlusion": _frame_leaves, "moving_digits": _frame_leaves}  # inputs drawn once, patched per chunk


def _tokens_shown(trace: Trace) -> bool:
    """Whether the input is drawn as tokens: a model's trace, or a task without a picture whose tokens were recorded."""
    return trace.is_model_trace or (trace.info.get("task") not in BUILDERS and trace.tokens is not None)


def chunk_input_figure(trace: Trace, chunk: int) -> go.Figure:
    """The chunk's input drawn for its task, or its tokens (a note for tasks without a picture or tokens)."""
    k = _check(trace, chunk)
    if _tokens_shown(trace):
        return tokens_figure(trace, k)
    builder: Any | None = BUILDERS.get(trace.info.get("task"))
    if builder is None:
        fig = go.Figure()
        task = plotly_text(repr(trace.info.get("task")))
        fig.add_annotation(text=f"no picture of the input for task {task}", showarrow=False)
        return figures.finish(fig, f"chunk {k}")
    return builder(trace, k)


def input_has_leaves(trace: Trace) -> bool:
    """Whether the trace's input figures differ from chunk to chunk only in values (:func:`chunk_input_leaves`):
    tokens, a task's frames, a note; other tasks' figures differ in their traces and are drawn for each chunk."""
    return _tokens_shown(trace) or trace.info.get("task") not in BUILDERS or trace.info.get("task") in LEAVES


def chunk_input_leaves(trace: Trace, chunk: int) -> Leaves:
    """What differs in :func:`chunk_input_figure` at ``chunk`` from the trace's figure at another chunk (see
    ``analysis.figures.stepped``), for a trace that :func:`input_has_leaves`."""
    k = _check(trace, chunk)
    if _tokens_shown(trace):
        return tokens_leaves(trace, k)
    task = trace.info.get("task")
    return LEAVES[task](trace, k) if task in LEAVES else Leaves({("layout", "title", "text"): f"chunk {k}"})


__all__ = [
    "chunk_input_figure",
    "chunk_input_leaves",
    "chunk_outcome",
    "class_label",
    "input_has_leaves",
    "prediction_card",
]
