"""A chunk of a trace of someone's model: its tokens as labelled cells in reading order (as plain text, whatever
they hold).

:func:`tokens_figure` draws them; :func:`tokens_leaves` gives what differs from chunk to chunk (see
``analysis.figures.stepped``): the figure always holds two traces, the tokens without a target (grey) and those
with one (coloured by p(target)), a part without tokens hidden, so that every chunk's figure has one structure.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import plotly.graph_objects as go

from analysis.figures.base import finish
from analysis.figures.escape import plotly_text
from analysis.figures.stepped import Leaves
from analysis.traces.trace import Trace

TOKENS_PER_ROW = 8  # at most this many of a chunk's tokens to a row; a longer chunk in rows of equal length
TOKEN_CHARS = 9  # longer tokens are cut, with "…", in the cells (the hover shows them whole)
UNSCORED_COLOUR = "#e8eef6"


def _parts(trace: Trace, chunk: int) -> list[dict[str, Any]]:
    """The two traces' values that differ by chunk: the tokens without a target, then those with one."""
    positions = np.array(trace.chunk_positions(chunk))
    order = np.arange(len(positions))
    per_row = row_length(trace)
    x, y = order % per_row, order // per_row
    targets = trace.per_token.get("target")
    scored = np.zeros(len(positions), bool) if targets is None else targets[positions] >= 0
    words = [trace.tokens[i] if trace.tokens is not None else str(i) for i in positions]
    out = []
    for part, coloured in ((~scored, False), (scored, True)):
        held = [w for w, inside in zip(words, part, strict=True) if inside]
        values = {
            "x": x[part],
            "y": y[part],
            "text": [plotly_text(w if len(w) <= TOKEN_CHARS else w[: TOKEN_CHARS - 1] + "…") for w in held],
            "customdata": np.stack([positions[part], [plotly_text(w) for w in held]], axis=1) if part.any() else [],
            "visible": bool(part.any()),
        }
        if coloured:  # p(target) of the scored positions; a trace without targets has none
            p_target = np.zeros(0) if targets is None else trace.per_token["p_target"][positions[part]]
            values["marker"] = {"color": p_target.astype(float)}
        out.append(values)
    return out


def row_length(trace: Trace) -> int:
    """Tokens to a row: a chunk of up to :data:`TOKENS_PER_ROW` in one row, a longer one in rows as even as they
    can be (16: 8 + 8; 12: 6 + 6), so that no row is left with a few."""
    size = max(int(trace.info.get("chunk_size", 1)), 1)
    rows = -(-size // TOKENS_PER_ROW)
    return -(-size // rows)


def _title(trace: Trace, chunk: int) -> str:
    return f"chunk {chunk}: its tokens" + ("" if trace.tokens is not None else " (positions; no tokens recorded)")


def tokens_figure(trace: Trace, chunk: int) -> go.Figure:
    """The chunk's tokens in reading order, :func:`row_length` to a row, coloured by p(target) where the trace
    has targets (grey where a position has none); the positions alone when no tokens were recorded."""
    fig = go.Figure()
    for values, coloured in zip(_parts(trace, chunk), (False, True), strict=True):
        marker = dict(
            size=34,
            symbol="square",
            color=values.pop("marker")["color"] if coloured else UNSCORED_COLOUR,
            colorscale="RdYlGn",
            cmin=0.0,
            cmax=1.0,
            showscale=coloured,
            colorbar=dict(title="p(target)", thickness=10),
        )
        fig.add_trace(
            go.Scatter(
                **values,
                mode="markers+text",
                showlegend=False,
                textfont=dict(size=12, color="#000000"),
                marker=marker,
                hovertemplate="position %{customdata[0]}: %{customdata[1]}"
                + ("<br>p(target) %{marker.color:.3f}" if coloured else "")
                + "<extra></extra>",
            )
        )
    return finish(
        fig,
        _title(trace, chunk),
        xaxis=dict(visible=False, range=[-0.6, row_length(trace) - 0.4]),
        yaxis=dict(visible=False, autorange="reversed"),
    )


def tokens_leaves(trace: Trace, chunk: int) -> Leaves:
    """What differs in :func:`tokens_figure` at ``chunk`` from the same trace's figure at another chunk."""
    leaves = Leaves({("layout", "title", "text"): _title(trace, chunk)})
    for index, values in enumerate(_parts(trace, chunk)):
        marker = values.pop("marker", {})
        leaves |= {("data", index, key): value for key, value in values.items()}
        leaves |= {("data", index, "marker", key): value for key, value in marker.items()}
    return leaves


__all__ = ["tokens_figure", "tokens_leaves", "row_length", "TOKENS_PER_ROW", "TOKEN_CHARS"]
