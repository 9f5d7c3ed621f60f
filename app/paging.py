"""A long trace goes to the browser a page of chunks at a time: which page, and the controls that turn pages.

The browser's stepper steps within the page it holds; above it, for a trace longer than one page, the
overview of every chunk (a click goes to that chunk), the pages before and after, and a chunk to go
to. Each of these is a move of the server's (:func:`app.state.go_to`): the stepper follows it.
"""

from __future__ import annotations

import streamlit as st

from analysis.figures.overview import overview_figure
from analysis.measures.overview import SERIES

from . import cache, state
from .spans import STEPPING_WINDOW, opening_chunk, stepping_span

CHART_CONFIG = {"displayModeBar": False}
JUMPED_KEY = "overview_jumped"  # the overview click already acted on (a selection stays until the next click)


def _typed(key: str) -> None:
    state.go_to(st.session_state[key])


def _overview(context: state.Context, key: str, span: tuple[int, int]) -> None:
    """The overview of every chunk; a click on it goes to that chunk."""
    count, chunk = context.num_chunks, context.chunk
    measured = cache.overview(context.ref, context.sample, context.layer)
    event = st.plotly_chart(
        overview_figure(measured, chunk, span),
        theme=None,
        config=CHART_CONFIG,
        key=f"{key}.overview",
        on_select="rerun",
        selection_mode="points",
    )
    st.caption(" · ".join(f"**{SERIES[name][0]}**: {SERIES[name][1]}" for name in measured))
    points = event.get("selection", {}).get("points", []) if event else []
    clicked = int(round(points[0]["x"])) if points else None
    if clicked is not None and st.session_state.get(JUMPED_KEY) != (key, clicked):
        st.session_state[JUMPED_KEY] = (key, clicked)
        state.go_to(min(max(clicked, 0), count - 1))
        st.rerun()


def pages(context: state.Context, key: str) -> tuple[int, int] | None:
    """For a trace longer than the browser takes at once: the overview, the pages before and after and a chunk to
    go to; returns the page of the current chunk, (first, last), that goes to the browser. None for a shorter
    trace, which goes whole (nothing is drawn). ``key`` prefixes the controls' keys."""
    count, chunk = context.num_chunks, context.chunk
    span = stepping_span(chunk, count)
    if span is None:
        return None
    first, last = span
    with st.container(border=True):
        st.markdown(
            f"**A long trace: {count:,} chunks.** The stepper below holds chunks {first}–{last}; step "
            f"through them there, or pick another stretch here. Click the overview to go to a chunk."
        )
        _overview(context, key, span)
        row = st.columns([1, 1, 1], vertical_alignment="bottom")
        row[0].button(
            "Chunks {}–{}".format(*stepping_span(first - 1, count)) if first else "The first chunks",
            icon=":material/skip_previous:",
            disabled=first == 0,
            on_click=state.go_to,
            args=(first - 1,),
            key=f"{key}.earlier",
            width="stretch",
        )
        row[1].button(
            "Chunks {}–{}".format(*stepping_span(last + 1, count)) if last < count - 1 else "The last chunks",
            icon=":material/skip_next:",
            disabled=last == count - 1,
            on_click=state.go_to,
            args=(last + 1,),
            key=f"{key}.later",
            width="stretch",
        )
        typed = f"{key}.go.{chunk}"
        row[2].number_input("Go to chunk", 0, count - 1, chunk, key=typed, on_change=_typed, args=(typed,))
    return span


__all__ = ["pages", "stepping_span", "opening_chunk", "STEPPING_WINDOW"]
