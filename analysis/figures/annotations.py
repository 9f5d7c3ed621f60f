"""What happens at each chunk of a sample: task events, scored predictions, and the chunk worth opening on.

:func:`chunk_events` turns the task's metadata into one boolean track per event — occluded frames,
writes and queries, observations — at chunk resolution (a chunk has an event when any of its
tokens does), plus whether each scored prediction was right. :func:`annotation_figure` draws
them as a compact track under the chunk stepper, and :func:`key_chunk` picks the chunk a
newcomer should see first.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from analysis.figures.base import chunk_span, templated
from analysis.figures.stepped import Leaves
from analysis.traces.trace import Trace

EVENT_COLOURS = {
    "occluded": "#7f7f7f",
    "write": "#1f77b4",
    "query": "#9467bd",
    "observation": "#17becf",
    "distractor": "#bcbd22",
    "hidden": "#7f7f7f",
    "correct": "#2ca02c",
    "wrong": "#d62728",
}
PROBES = ("occluded", "query", "hidden")  # the events a memory is tested on, in the order key_chunk looks for them


def _tokens_per_chunk(trace: Trace) -> int:
    return int(trace.info.get("chunk_size", 1))


def _per_chunk(token_flags: np.ndarray, chunk_size: int, chunks: int) -> np.ndarray:
    """(N,) token flags → (chunks,) flags, true where any token of the chunk is."""
    flags = np.zeros(chunks * chunk_size, dtype=bool)
    usable = min(len(token_flags), len(flags))
    flags[:usable] = np.asarray(token_flags[:usable], dtype=bool)
    return flags.reshape(chunks, chunk_size).any(axis=1)


def _task_token_events(trace: Trace) -> dict[str, np.ndarray]:
    """The task's events per token of the sequence."""
    task, params, meta = trace.info.get("task"), trace.info.get("task_params", {}), trace.meta
    tokens = int(trace.info.get("num_tokens", trace.num_chunks * _tokens_per_chunk(trace)))
    position = np.arange(tokens)
    if task in ("occlusion", "moving_digits") and "occluded" in meta:
        per_frame = (int(params["size"]) // int(params["patch"])) ** 2
        return {"occluded": np.repeat(np.asarray(meta["occluded"], dtype=bool), per_frame)}
    if task == "masked_patches":  # a hidden patch is what the model must fill in
        return {"hidden": np.asarray(meta["masked"], dtype=bool)}
    if task == "coordinate_binding":
        writes, filler = int(params["writes"]), int(params.get("distractors", 0))
        events = {"write": position < writes, "query": position >= writes + filler}
        if filler:
            events["distractor"] = (position >= writes) & (position < writes + filler)
        return events
    if task == "map_building":
        observations = int(params["observations"])
        return {"observation": position < observations, "query": position >= observations}
    return {}


def chunk_events(trace: Trace) -> dict[str, np.ndarray]:
    """Ordered ``{event: (K,) bool}``: the task's events, then ``correct`` and ``wrong`` for scored chunks
    (a trace of values, masked patches, or without predictions has no right or wrong: its events alone)."""
    K, size = trace.num_chunks, _tokens_per_chunk(trace)
    events = {name: _per_chunk(flags, size, K) for name, flags in _task_token_events(trace).items()}
    if trace.predicts_values or not trace.has_predictions:
        return events
    scored = np.asarray(trace.chunks["scored"], dtype=bool)[:K]
    right = np.asarray(trace.chunks["prediction"] == trace.chunks["target"])[:K]
    events["correct"] = scored & right
    events["wrong"] = scored & ~right
    return events


def key_chunk(trace: Trace) -> int:
    """The chunk to open on: the first occluded frame or first query, else the last chunk (0 when empty)."""
    if trace.num_chunks == 0:
        return 0
    events = chunk_events(trace)
    for name in PROBES:
        if name in events and events[name].any():
            return int(np.flatnonzero(events[name])[0])
    return trace.num_chunks - 1


def annotation_figure(trace: Trace, current: int, span: tuple[int, int] | None = None) -> go.Figure:
    """One row of marks per event over the chunks, predictions last, the current chunk highlighted; ``span``
    (first, last): only those chunks."""
    K = trace.num_chunks
    if not 0 <= current < max(K, 1):
        raise ValueError(f"current must be in 0..{K - 1}, got {current}")
    first, last = (0, max(K, 1) - 1) if span is None else (int(chunk_span(span, K, current)[0]), int(span[1]))
    events = chunk_events(trace)
    rows = [name for name in events if name not in ("correct", "wrong")] + (
        [] if trace.predicts_values or not trace.has_predictions else ["prediction"]
    )
    shown = last - first + 1
    size = float(np.clip(520 / shown, 4, 14))
    fig = go.Figure(
        go.Scatter(
            x=[-10] * len(rows), y=rows, mode="markers", marker=dict(opacity=0), hoverinfo="skip", showlegend=False
        )
    )  # every row shows, even without marks
    for name, flags in events.items():
        chunks = np.flatnonzero(flags[first : last + 1]) + first
        row = "prediction" if name in ("correct", "wrong") else name
        fig.add_trace(
            go.Scatter(
                x=chunks,
                y=[row] * len(chunks),
                mode="markers",
                name=name,
                showlegend=False,
                marker=dict(
                    symbol="square" if row != "prediction" else ("circle" if name == "correct" else "x"),
                    size=size,
                    color=EVENT_COLOURS.get(name, "#555555"),
                ),
                hovertemplate=f"chunk %{{x}}: {name}<extra></extra>",
            )
        )
    fig.add_vrect(**_highlight(current), fillcolor="#ff7f0e", opacity=0.25, line_width=0, layer="below")
    fig.update_layout(
        **templated(
            height=34 + 24 * len(rows), margin=dict(l=10, r=10, t=6, b=24), showlegend=False, hovermode="closest"
        )
    )
    fig.update_xaxes(
        range=[first - 0.5, last + 0.5], dtick=1 if shown <= 40 else None, showgrid=False, zeroline=False, title=None
    )
    fig.update_yaxes(categoryorder="array", categoryarray=rows[::-1], showgrid=False, title=None)
    return fig


def _highlight(current: int) -> dict[str, float]:
    """Where the current chunk's band lies (the track's only shape)."""
    return {"x0": current - 0.5, "x1": current + 0.5}


def annotation_leaves(current: int) -> Leaves:
    """What differs in :func:`annotation_figure` at chunk ``current`` (same trace and span): the band (see
    ``analysis.figures.stepped``)."""
    return Leaves({("layout", "shapes", -1, name): x for name, x in _highlight(int(current)).items()})


__all__ = ["chunk_events", "key_chunk", "annotation_figure", "annotation_leaves", "EVENT_COLOURS"]
