"""A page's chunk stepper: the chunk a browser reported, a long trace's pages, and the browser's stepper itself.

:func:`stepper` draws it on any page with the page's own payload. :func:`stepped_page` opens the pages that draw
a chunk's views on the server (Teach, Images, Text, Export): their stepper holds the annotation track alone and
reports the chunk it shows, which becomes the session's chunk before the page draws anything.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import streamlit as st

from analysis.figures.escape import markdown_text
from analysis.traces.validation import TraceError

from . import cache, layout, paging, state
from .browser_stepper import StepperPayload, chunk_stepper, reported_chunk, stepper_payload
from .cache import CheckpointRef, Sample, TraceRef

Build = Callable[[tuple[int, int] | None], StepperPayload]  # a page's payload of a span (None: every chunk)


def stepper(context: state.Context, key: str, build: Build) -> int:
    """Draw the stepper of the page ``key``: follow a chunk its browser reported, draw a long trace's pages, then
    ``build(span)``'s payload opening on the session's chunk. Returns the session's chunk."""
    component = f"{key}_stepper"
    reported = reported_chunk(st.session_state.get(component), context.sample_key, state.moves(), context.num_chunks)
    if reported is not None:
        state.follow(reported)
    span = paging.pages(context, key)
    try:
        payload = build(span)
    except TraceError as error:  # a trace store's chunk found damaged (or NaN) as the page reads it
        st.error(markdown_text(f"Could not read chunks of the trace {context.ref.label}: {error}"))
        st.stop()
    chunk_stepper(dataclasses.replace(payload, start=context.chunk, moves=state.moves()), component)
    return context.chunk


def track_payload(ref: CheckpointRef | TraceRef, sample: Sample, span: tuple[int, int] | None) -> StepperPayload:
    """The annotation track of every chunk (of ``span``), reporting the chunk shown: the stepper of a page drawn on
    the server."""
    return stepper_payload(
        cache.trace_of(ref, sample), (ref, sample), "track", lambda k, outcome: {}, span=span, reports=True
    )


def stepped_page(context: state.Context, title: str, subtitle: str, key: str) -> int:
    """The opening of a page that draws the current chunk on the server: header, the sample (or why there is none),
    the stepper. Returns the chunk to draw; the page stops here when the sample has no chunk."""
    layout.header(context, title, subtitle)
    layout.require_trace(context)
    layout.require_chunks(context)
    return stepper(
        context, key, lambda span: cache.stepper_payload("track", track_payload, context.ref, context.sample, span)
    )


__all__ = ["stepper", "stepped_page", "track_payload"]
