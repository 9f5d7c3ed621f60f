"""Teach: one chunk through the mechanism's five steps with its live numbers, and a hands-on sandbox.

The chunk is the stepper's: the browser reports the chunk it shows, and the page runs the mechanism on it here."""

from __future__ import annotations

import numpy as np
import streamlit as st

from analysis.figures import teach as teach_figures
from analysis.figures import volume_figure
from analysis.figures.chunk_input import chunk_input_figure
from analysis.measures import teach
from analysis.measures.volumes import volume_values
from app import layout, state, stepping
from tensor_memory.memory.geometry import nearest_voxel

AXES = ("x", "y", "z")


def vector(values: np.ndarray, digits: int = 2) -> str:
    return "(" + ", ".join(f"{v:.{digits}f}" for v in values) + ")"


def step_box(number: int, title: str, text: str):
    """A bordered box for one step: its explanation on the left; returns (numbers column, picture column)."""
    box = st.container(border=True)
    box.markdown(f"**Step {number} · {title}**")
    words, picture = box.columns([1, 1.3])
    words.markdown(text)
    return words, picture


context = state.current()
layout.require_checkpoint(context, "Teach", "runs one chunk through the live weights, step by step")
chunk = stepping.stepped_page(
    context,
    "Teach",
    "How Tensor Memory handles one chunk, with the checkpoint's own numbers — then try it by hand.",
    key="teach",
)
if not layout.memory_notice(context, "The walkthrough and the sandbox"):
    st.stop()
trace = context.trace
lay = trace.layer(context.layer)
memory = teach.memory_module(context.checkpoint.model, context.layer)
config = memory.config
step, agreement = teach.walkthrough(trace, memory, context.layer, chunk)
units, sizes = teach.voxel_units(step), teach.step_sizes(step)
D, H, W = step.grid
tokens = trace.chunk_positions(chunk)

words, picture = step_box(
    1,
    "Chunk summaries",
    (
        f"The sequence is cut into chunks of **{config.chunk_size}** token(s) of width d = {config.token_dim}. "
        f"Chunk {chunk} holds tokens {tokens[0]}–{tokens[-1]}. Its first token is the "
        f"**read query** q; a learned projection of all its tokens ({config.chunk_size}·{config.token_dim} → "
        f"{config.token_dim} numbers) is the **write summary** s."
    ),
)
with picture:
    layout.chart(chunk_input_figure(trace, chunk), "teach_input", height=300)

words, picture = step_box(
    2,
    "Addressing",
    (
        "One shared coordinate head and tanh turn q and s into points of the grid, in [-1, 1] per axis: "
        "μ_read = tanh(head(q)), μ_write = tanh(head(s))."
    ),
)
with words:
    rows = "".join(
        f"| {a} | {step.mu_read[i]:+.3f} | {units['read'][i]:.2f} | {step.mu_write[i]:+.3f} | "
        f"{units['write'][i]:.2f} |\n"
        for i, a in enumerate(AXES)
    )
    st.markdown("| axis | μ_read | read voxel | μ_write | write voxel |\n|---|---:|---:|---:|---:|\n" + rows)
    st.caption(f"Grid of {D}×{H}×{W} voxels (D×H×W); voxel centres at -1 … 1 along each axis.")
with picture:
    layout.chart(
        teach_figures.addressing_figure(step, f"chunk {chunk}: read (blue), write (red), 1σ and 2σ"),
        "teach_address",
        height=340,
    )

words, picture = step_box(
    3,
    "Read",
    (
        "The read mixes the hidden state h *as it was before this chunk's write* at μ_read: trilinear interpolation of "
        "the (up to) eight surrounding voxels. The read vector r goes through out_proj to token width and is added to "
        "every token of the chunk, scaled by the read gate σ(γ)."
    ),
)
with words:
    st.dataframe(
        {"voxel (z, y, x)": [str(v) for v, _ in step.corners], "weight": [w for _, w in step.corners]}, hide_index=True
    )
    read_col, gate_col, added_col = st.columns(3)
    read_col.metric("‖r‖", f"{sizes['read']:.3f}")
    gate_col.metric("σ(γ)", f"{step.gate_scale:.3f}")
    added_col.metric("‖σ(γ)·out_proj(r)‖", f"{step.added_norm:.3f}")
with picture:
    layout.chart(teach_figures.vector_figure(step.read, "read vector r per channel"), "teach_read", height=260)

words, picture = step_box(
    4,
    "Soft write",
    (
        "A linear layer turns s into the write **content** (one number per channel) and a spread **σ**. The content "
        "is written everywhere, weighted by a Gaussian around μ_write: V = content · exp(−‖p − μ_write‖² / 2σ²). "
        "No voxel is picked outright."
    ),
)
with words:
    sigma_col, content_col, peak_col = st.columns(3)
    sigma_col.metric("σ", f"{step.sigma:.3f}", help=f"{vector(units['sigma'])} voxels along x, y, z")
    content_col.metric("‖content‖", f"{sizes['content']:.3f}")
    peak_col.metric("peak of ‖V‖", f"{sizes['write_peak']:.3f}")
with picture:
    layout.chart(volume_figure(volume_values(step.write), "volume", "‖V‖, the write volume"), "teach_write", height=340)

words, picture = step_box(
    5,
    "Recurrent update",
    (
        "[V ; h] pass through small depthwise convolutions along D, H and W and a pointwise mix into four gates: "
        "input i, forget f, output o (sigmoids) and candidate g (tanh). Then c ← f⊙c + i⊙g and h ← o⊙tanh(c)."
    ),
)
with words:
    before_col, after_col = st.columns(2)
    before_col.metric("‖h‖ before", f"{sizes['h_before']:.3f}")
    after_col.metric("‖h‖ after", f"{sizes['h_after']:.3f}", delta=f"{sizes['h_change']:+.3f}")
    st.caption(
        f"Recomputed here with the checkpoint's own layer; it matches the recorded h to {agreement:.1e} "
        "(the trace keeps volumes in float16)."
    )
    layout.chart(teach_figures.gates_bar_figure(step), "teach_gates", height=260)
with picture:
    pictures = teach_figures.update_figures(step, nearest_voxel(step.mu_write, step.grid))
    st.markdown("‖h‖ after the update, through the write")
    layout.chart(pictures["after"], "teach_after", height=250)
    st.markdown("‖h after − h before‖: what this chunk changed")
    layout.chart(pictures["change"], "teach_change", height=250)

st.markdown("### Sandbox")
st.caption(
    "Set the read and write by hand; the checkpoint's own memory layer computes the write volume, the read "
    "and the gated update."
)


def take_chunk_values() -> None:
    """Fill the sandbox with the current chunk's recorded addressing."""
    for i, axis in enumerate(AXES):  # on the sliders' 0.05 steps
        st.session_state[f"sandbox.read.{axis}"] = round(float(lay.mu_read[chunk][i]) * 20) / 20
        st.session_state[f"sandbox.write.{axis}"] = round(float(lay.mu_write[chunk][i]) * 20) / 20
    st.session_state["sandbox.sigma"] = float(np.clip(round(float(lay.sigma[chunk]), 2), config.sigma_min, 1.5))


if "sandbox.sigma" not in st.session_state:
    take_chunk_values()
controls = st.container(border=True)
read_col, write_col, content_col = controls.columns(3)
with read_col:
    st.markdown("**Read at** (normalised)")
    mu_read = np.array([st.slider(f"read {a}", -1.0, 1.0, step=0.05, key=f"sandbox.read.{a}") for a in AXES])
with write_col:
    st.markdown("**Write at** (normalised)")
    mu_write = np.array([st.slider(f"write {a}", -1.0, 1.0, step=0.05, key=f"sandbox.write.{a}") for a in AXES])
    sigma = st.slider("σ (spread)", float(config.sigma_min), 1.5, step=0.01, key="sandbox.sigma")
with content_col:
    st.markdown("**Content and memory**")
    source = st.radio("Content", ["this chunk's content", "one channel"], key="sandbox.content", horizontal=True)
    if source == "one channel":
        channel = st.number_input("Channel", 0, config.channels - 1, 0, key="sandbox.channel")
        content = np.zeros(config.channels, dtype=np.float32)
        content[channel] = st.slider("Amplitude", -3.0, 3.0, 1.0, step=0.1, key="sandbox.amplitude")
    else:
        content = lay.content[chunk] * st.slider("Scale", 0.0, 3.0, 1.0, step=0.1, key="sandbox.scale")
    empty = (
        st.radio("Memory before", [f"as before chunk {chunk}", "empty"], key="sandbox.memory", horizontal=True)
        == "empty"
    )
    st.button(f"Take chunk {chunk}'s addressing", on_click=take_chunk_values, icon=":material/restart_alt:")
h_prev, c_prev = teach.state_before(lay, chunk)
if empty:
    h_prev, c_prev = np.zeros_like(h_prev), np.zeros_like(c_prev)
mine = teach.mechanism_step(memory, h_prev, c_prev, mu_read, mu_write, sigma, content)
write_col, read_col, update_col = st.columns(3)
with write_col:
    layout.chart(volume_figure(volume_values(mine.write), "volume", "write volume ‖V‖"), "sandbox_write", height=340)
    st.caption(f"σ = {sigma:.2f}: {vector(teach.voxel_units(mine)['sigma'])} voxels along x, y, z.")
with read_col:
    layout.chart(teach_figures.vector_figure(mine.read, "read value r per channel"), "sandbox_read", height=260)
    norm_col, added_col = st.columns(2)
    norm_col.metric("‖r‖", f"{teach.step_sizes(mine)['read']:.3f}")
    added_col.metric("added to tokens", f"{mine.added_norm:.3f}", help="‖σ(γ)·out_proj(r)‖")
with update_col:
    layout.chart(teach_figures.gates_bar_figure(mine), "sandbox_gates", height=300)
sandbox = teach_figures.update_figures(mine, nearest_voxel(mu_write, mine.grid))
after_col, change_col = st.columns(2)
with after_col:
    st.markdown("‖h‖ after the gated update, through the write")
    layout.chart(sandbox["after"], "sandbox_after", height=260)
with change_col:
    st.markdown("‖h after − h before‖")
    layout.chart(sandbox["change"], "sandbox_change", height=260)
