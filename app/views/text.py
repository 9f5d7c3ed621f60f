"""Text: a language model's sample token by token — what it predicts, and what its memory is worth.

The chunk is the stepper's: the browser reports the chunk it shows, and the page fills its tables here."""

from __future__ import annotations

import streamlit as st

from analysis.figures.addressing import trajectory_figure
from analysis.figures.escape import markdown_text
from analysis.figures.language import contribution_figure, read_overlap_figure, token_loss_figure
from analysis.measures.language import READ_FLOOR, chunk_text, loss_rows, read_overlap, read_source
from app import cache, layout, state, stepping


def recorded_text(context: state.Context) -> None:
    """A trace file with tokens: the current chunk's text and, per position, what the model predicted."""
    chunk = stepping.stepped_page(
        context,
        "Text",
        "The recorded input, one memory chunk at a time: the chunk's tokens "
        "in their text and, where the trace has targets, each position's "
        "prediction.",
        key="text",
    )
    shown = chunk_text(context.trace, chunk)
    st.markdown(f"##### Chunk {chunk}: tokens {shown['start']}–{shown['stop'] - 1}")
    with st.container(border=True):
        st.markdown(
            f"<span style='color:#888'>…{markdown_text(shown['before'])}</span>"
            f"<b style='background:#fff3bf'>{markdown_text(shown['text'])}</b>",
            unsafe_allow_html=True,
        )
    st.dataframe(shown["rows"], hide_index=True, width="stretch")
    if not context.trace.per_token:
        st.caption("Recorded without targets: trace_model(..., targets=...) adds each position's prediction.")


context = state.current()
if context.is_trace_file and context.trace.tokens is None:
    layout.header(context, "Text", "The recorded input, token by token.")
    st.info(
        f"Text is off for the trace file {markdown_text(context.ref.label)}: it was recorded without tokens "
        f"(trace_model(..., tokens=[...]) records them).",
        icon=":material/info:",
    )
    st.stop()
if context.is_trace_file:
    recorded_text(context)
    st.stop()
if context.task != "language_modelling":
    layout.header(context, "Text", "A language model's text, token by token.")
    st.info(
        f"{markdown_text(context.ref.label)} is {layout.a_task(context.task)} checkpoint. The text view shows "
        f"language models: pick `language_modelling-tensor` (or -base, -local) in the sidebar.",
        icon=":material/info:",
    )
    st.stop()

chunk = stepping.stepped_page(
    context,
    "Text",
    "Held-out text (the test split) through the model, one memory chunk "
    "at a time: each token's likeliest continuations, its loss with the "
    "memory and with the memory's read switched off, and where the memory "
    "reads from.",
    key="text",
)
losses = cache.text_losses(context.ref, context.seed)
shown = loss_rows(losses, chunk)
chunk = shown["chunk"]  # within the text

st.markdown(f"##### Chunk {chunk}: tokens {shown['start']}–{shown['stop'] - 1}")
with st.container(border=True):
    st.markdown(
        f"<span style='color:#888'>…{markdown_text(shown['before'])}</span>"
        f"<b style='background:#fff3bf'>{markdown_text(shown['text'])}</b>",
        unsafe_allow_html=True,
    )
st.dataframe(shown["rows"], hide_index=True, width="stretch")
left, right = st.columns(2)
with left:
    layout.chart(token_loss_figure(losses, chunk), key="text_losses")
with right:
    layout.chart(contribution_figure(losses, chunk), key="text_contribution")

st.markdown("##### Where the memory reads and writes")
if layout.memory_notice(context, "The read and write trajectory"):
    trace_layer = context.trace.layer(context.layer)
    overlap = read_overlap(trace_layer.mu_read, trace_layer.mu_write, trace_layer.sigma)
    left, right = st.columns(2)
    with left:
        layout.chart(trajectory_figure(trace_layer, chunk), key="text_trajectory")
    with right:
        layout.chart(read_overlap_figure(overlap, chunk), key="text_overlap")
    source = read_source(overlap, chunk)
    if source is not None:
        st.caption(
            f"Chunk {chunk}'s read lands mostly on the write of chunk {source[0]} (footprint {source[1]:.2f} at "
            f"the read point)."
        )
    else:
        st.caption(
            f"Chunk {chunk}'s read lands on no earlier write's footprint (all below {READ_FLOOR})."
            if chunk
            else "Chunk 0 reads the empty memory."
        )
