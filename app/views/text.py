"""Text: a language model's sample token by token — what it predicts, and what its memory is worth."""

from __future__ import annotations

import html

import streamlit as st

from analysis.figures.language import contribution_figure, read_overlap_figure, token_loss_figure
from analysis.figures.addressing import trajectory_figure
from analysis.measures.language import chunk_text, read_overlap
from app import cache, layout, state, stepper


def recorded_text(context: state.Context) -> None:
    """A trace file with tokens: the current chunk's text and, per position, what the model predicted."""
    stepper.stepped_page(context, "Text", "The recorded input, one memory chunk at a time: the chunk's tokens in "
                                          "their text and, where the trace has targets, each position's prediction.")
    shown = chunk_text(context.trace, context.chunk)
    st.markdown(f"##### Chunk {context.chunk}: tokens {shown['start']}–{shown['stop'] - 1}")
    with st.container(border=True):
        st.markdown(f"<span style='color:#888'>…{html.escape(shown['before'])}</span>"
                    f"<b style='background:#fff3bf'>{html.escape(shown['text'])}</b>", unsafe_allow_html=True)
    st.dataframe(shown["rows"], hide_index=True, width="stretch")
    if not context.trace.per_token:
        st.caption("Recorded without targets: trace_model(..., targets=...) adds each position's prediction.")


context = state.current()
if context.is_trace_file and context.trace.tokens is None:
    layout.header(context, "Text", "The recorded input, token by token.")
    st.info(f"Text is off for the trace file {context.ref.label}: it was recorded without tokens "
            f"(trace_model(..., tokens=[...]) records them).", icon=":material/info:")
    st.stop()
if context.is_trace_file:
    recorded_text(context)
    st.stop()
if context.task != "language_modelling":
    layout.header(context, "Text", "A language model's text, token by token.")
    st.info(f"{context.ref.label} is a `{context.task}` checkpoint. The text view shows language models: pick "
            f"`language_modelling-tensor` (or -base, -local) in the sidebar.", icon=":material/info:")
    st.stop()

stepper.stepped_page(context, "Text", "Held-out text (the test split) through the model, one memory chunk at a "
                                      "time: each token's likeliest continuations, its loss with the memory and with "
                                      "the memory's read switched off, and where the memory reads from.")
losses = cache.text_losses(context.ref, context.seed)
chunk = min(context.chunk, (len(losses.tokens) - 1) // losses.chunk_size)
start, stop = chunk * losses.chunk_size, min((chunk + 1) * losses.chunk_size, len(losses.tokens))

st.markdown(f"##### Chunk {chunk}: tokens {start}–{stop - 1}")
with st.container(border=True):
    before = "".join(losses.tokens[max(0, start - 48):start])
    shown = "".join(losses.tokens[start:stop])
    st.markdown(f"<span style='color:#888'>…{before}</span><b style='background:#fff3bf'>{shown}</b>",
                unsafe_allow_html=True)
rows = [{"position": i, "token": losses.tokens[i], "next (true)": losses.next_tokens[i],
         "loss": round(float(losses.loss[i]), 3),
         **({"loss, memory off": round(float(losses.loss_without_memory[i]), 3)}
            if losses.loss_without_memory is not None else {}),
         **{f"top {r + 1}": f"{losses.top_tokens[i][r]!r} {losses.top_probs[i][r]:.0%}" for r in range(5)}}
        for i in range(start, stop)]
st.dataframe(rows, hide_index=True, width="stretch")
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
    earlier = overlap[chunk, :chunk]
    if chunk and earlier.max() > 0.05:
        st.caption(f"Chunk {chunk}'s read lands mostly on the write of chunk {int(earlier.argmax())} "
                   f"(footprint {earlier.max():.2f} at the read point).")
    else:
        st.caption(f"Chunk {chunk}'s read lands on no earlier write's footprint (all below 0.05)."
                   if chunk else "Chunk 0 reads the empty memory.")
