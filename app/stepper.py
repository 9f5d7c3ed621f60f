"""The chunk stepper: Previous / Play / Next, a chunk slider, "Chunk k / K" and the annotation track.

The current chunk lives in ``st.session_state["chunk"]`` (a plain key, kept while pages without
the stepper are open), so every page and view of the session follows it. Chunks are numbered from
0, as in every plot, and K is the last chunk's number. The slider is keyed by the chunk it shows:
a step made by the buttons or by Play replaces it with a new slider, and a browser still
reporting an old slider's value (it may, while a step is on its way) is ignored.

Playing advances one chunk per :data:`PLAY_INTERVAL_S`: a fragment ticks on that timer and
reruns the app when a step is due, and the rerun takes the step before anything is drawn.
Playing stops at the last chunk.
"""

from __future__ import annotations

import time
from typing import Callable, Optional

import plotly.graph_objects as go
import streamlit as st

from analysis.figures.annotations import annotation_figure, key_chunk
from analysis.figures.chunk_input import chunk_outcome
from analysis.figures.overview import overview_figure
from analysis.measures.overview import SERIES

from . import cache, layout
from .browser_stepper import stepping_span
from .figure_cache import figure_cache
from .state import CHUNK_KEY, Context

PLAY_INTERVAL_S = 1.0
PLAYING_KEY = "playing"
DUE_KEY = "next_step_due"  # time.monotonic() at which a playing stepper takes its next step
SLIDER_KEY = "chunk_slider"  # + ".<chunk>"
SAMPLE_KEY = "stepper_sample"  # the sample the chunk belongs to: a new sample starts at its key chunk
CHART_CONFIG = {"displayModeBar": False}
JUMPED_KEY = "overview_jumped"  # the overview click already acted on (a selection stays until the next click)


def annotation_job(context: Context, chunk: int) -> tuple[tuple, Callable[[], go.Figure]]:
    """(key, build) of the annotation track at ``chunk`` (over its page of a long trace), for
    :class:`app.figure_cache.FigureCache`."""
    trace, span = context.trace, stepping_span(chunk, context.num_chunks)
    return ("annotation", context.sample_key, chunk), lambda: annotation_figure(trace, chunk, span)


def _go_to(chunk: int) -> None:
    st.session_state[CHUNK_KEY] = int(chunk)
    st.session_state[PLAYING_KEY] = False


def _typed(key: str) -> None:
    _go_to(st.session_state[key])


def pages(context: Context, key: str) -> Optional[tuple[int, int]]:
    """For a trace longer than the browser takes at once: the overview of every chunk (a click jumps there), the
    pages before and after and a chunk to go to; returns the page of the current chunk, (first, last), that goes
    to the browser. None for a shorter trace, which goes whole (nothing is drawn)."""
    count, chunk = context.num_chunks, context.chunk
    span = stepping_span(chunk, count)
    if span is None:
        return None
    first, last = span
    with st.container(border=True):
        st.markdown(f"**A long trace: {count:,} chunks.** The stepper below holds chunks {first}–{last}; step "
                    f"through them there, or pick another stretch here. Click the overview to go to a chunk.")
        measured = cache.overview(context.ref, context.sample, context.layer)
        event = st.plotly_chart(overview_figure(measured, chunk, span), theme=None, config=CHART_CONFIG,
                                key=f"{key}.overview", on_select="rerun", selection_mode="points")
        st.caption(" · ".join(f"**{SERIES[name][0]}**: {SERIES[name][1]}" for name in measured))
        points = event.get("selection", {}).get("points", []) if event else []
        clicked = int(round(points[0]["x"])) if points else None
        if clicked is not None and st.session_state.get(JUMPED_KEY) != (key, clicked):
            st.session_state[JUMPED_KEY] = (key, clicked)
            _go_to(min(max(clicked, 0), count - 1))
            st.rerun()
        row = st.columns([1, 1, 1], vertical_alignment="bottom")
        row[0].button("Chunks {}–{}".format(*stepping_span(first - 1, count)) if first else "The first chunks",
                      icon=":material/skip_previous:", disabled=first == 0, on_click=_go_to, args=(first - 1,),
                      key=f"{key}.earlier", width="stretch")
        row[1].button("Chunks {}–{}".format(*stepping_span(last + 1, count)) if last < count - 1 else
                      "The last chunks", icon=":material/skip_next:", disabled=last == count - 1, on_click=_go_to,
                      args=(last + 1,), key=f"{key}.later", width="stretch")
        typed = f"{key}.go.{chunk}"
        row[2].number_input("Go to chunk", 0, count - 1, chunk, key=typed, on_change=_typed, args=(typed,))
    return span


def advance(chunk: int, count: int) -> tuple[int, bool]:
    """The chunk after ``chunk`` of ``count``, and whether playing goes on (not past the last chunk)."""
    following = min(chunk + 1, count - 1)
    return following, following < count - 1


def _move(delta: int, count: int) -> None:
    st.session_state[CHUNK_KEY] = min(max(int(st.session_state.get(CHUNK_KEY, 0)) + delta, 0), count - 1)
    st.session_state[PLAYING_KEY] = False


def _slid(key: str, shown: int) -> None:
    """The slider drawn at chunk ``shown`` was moved; a browser reporting a slider already replaced is ignored."""
    if st.session_state.get(CHUNK_KEY) == shown:
        st.session_state[CHUNK_KEY] = int(st.session_state[key])
        st.session_state[PLAYING_KEY] = False


def _toggle_play(count: int) -> None:
    if st.session_state.get(PLAYING_KEY):
        st.session_state[PLAYING_KEY] = False
        return
    if int(st.session_state.get(CHUNK_KEY, 0)) >= count - 1:
        st.session_state[CHUNK_KEY] = 0  # playing from the end starts over
    st.session_state[PLAYING_KEY] = True
    st.session_state[DUE_KEY] = time.monotonic() + PLAY_INTERVAL_S


def opening_chunk(context: Context) -> int:
    """The chunk a page opens on: a new sample's key chunk, else the session's current chunk."""
    if st.session_state.get(SAMPLE_KEY) != context.sample_key:
        st.session_state[SAMPLE_KEY] = context.sample_key
        st.session_state[CHUNK_KEY] = key_chunk(context.trace)
        st.session_state[PLAYING_KEY] = False
    st.session_state[CHUNK_KEY] = context.chunk  # within this trace
    return context.chunk


def _sync(context: Context) -> None:
    """Open a new sample at its key chunk; take a due step while playing."""
    count = context.num_chunks
    opening_chunk(context)
    if st.session_state.get(PLAYING_KEY) and time.monotonic() >= st.session_state.get(DUE_KEY, 0.0):
        st.session_state[CHUNK_KEY], st.session_state[PLAYING_KEY] = advance(context.chunk, count)
        st.session_state[DUE_KEY] = time.monotonic() + PLAY_INTERVAL_S


@st.fragment(run_every=PLAY_INTERVAL_S)
def _ticker() -> None:
    """While playing, rerun the whole app once a step is due (the rerun takes the step)."""
    if st.session_state.get(PLAYING_KEY) and time.monotonic() >= st.session_state.get(DUE_KEY, 0.0):
        st.rerun()


def render(context: Context) -> None:
    """Draw the stepper for the context's trace; afterwards ``context.chunk`` is the chunk to show."""
    if context.trace is None:
        return
    count = context.num_chunks
    if count == 0:
        st.info("This sample has no chunks to step through: the sequence is shorter than one memory chunk. "
                "Make the horizon longer in the sidebar.")
        return
    _sync(context)
    chunk, playing = context.chunk, bool(st.session_state.get(PLAYING_KEY))
    with st.container(border=True):
        buttons, slider, counter = st.columns([3.2, 6, 2.2], vertical_alignment="center")
        with buttons:
            row = st.container(horizontal=True, gap="small")
            row.button("Previous", icon=":material/skip_previous:", disabled=chunk == 0, on_click=_move,
                       args=(-1, count), key="previous")
            row.button("Pause" if playing else "Play", icon=":material/pause:" if playing else ":material/play_arrow:",
                       type="primary", disabled=count < 2, on_click=_toggle_play, args=(count,), key="play")
            row.button("Next", icon=":material/skip_next:", disabled=chunk == count - 1, on_click=_move,
                       args=(1, count), key="next")
        with slider:
            if count > 1:
                key = f"{SLIDER_KEY}.{chunk}"
                st.slider("Chunk", 0, count - 1, chunk, key=key, label_visibility="collapsed", on_change=_slid,
                          args=(key, chunk))
        with counter:
            st.markdown(f"#### Chunk {chunk} / {count - 1}")
            st.caption(chunk_outcome(context.trace, chunk)["event"])
        track = figure_cache().get(*annotation_job(context, chunk))
        st.plotly_chart(track, theme=None, config=CHART_CONFIG, key="annotation_track")
    if playing:
        _ticker()


__all__ = ["render", "advance", "annotation_job", "opening_chunk", "pages", "PLAY_INTERVAL_S"]


def stepped_page(context: Context, title: str, subtitle: str) -> None:
    """The opening of every page that follows the current chunk: header, the sample (or why there is
    none), the stepper; the page stops here when the sample has no chunk."""
    layout.header(context, title, subtitle)
    layout.require_trace(context)
    render(context)
    if context.num_chunks == 0:
        st.stop()

