"""Occlusion: the belief through the occlusion, the memory's energy, and interventions against the untouched run."""

from __future__ import annotations

import numpy as np
import streamlit as st

from analysis.figures import belief_figure, slices_figure
from analysis.measures.interventions import KINDS
from analysis.measures.occlusion import belief, memory_energy, occlusion_memory
from analysis.figures.occlusion_views import KIND_NAMES, energy_figure, intervention_figure, survival_figure
from analysis.figures.views import slice_index
from analysis.measures.grid import normalised_coordinates
from analysis.measures.volumes import nearest_voxel
from app import cache, layout, state, stepper
from tensor_memory.errors import EXPECTED_ERRORS, describe

BELIEF_FRAMES = 8  # frames drawn side by side at most (their titles need the room)
SURVIVAL_SAMPLES = 64
INTERVENTION_KEY = "intervention"  # (sample, the last intervention asked for on it as cache arguments)

context = state.current()
stepper.stepped_page(context, "Occlusion", "What the model believes while the ball is hidden, what its memory "
                                            "holds, and what changes when the memory is taken away.")
trace, chunk = context.trace, context.chunk
is_occlusion = context.task == "occlusion"

if is_occlusion:
    b = belief(trace)
    size = b["probs"].shape[1]
    first = int(np.clip(chunk - BELIEF_FRAMES // 2, 0, max(trace.num_chunks - BELIEF_FRAMES, 0)))
    frames = list(range(first, min(first + BELIEF_FRAMES, trace.num_chunks)))
    st.markdown("##### Belief frame by frame")
    layout.chart(belief_figure(trace.chunks["probs"], b["truth"], b["occluded"], size=size, frames=frames),
                 "belief", height=250)
    hidden, shown = b["occluded"], ~b["occluded"]
    accuracy = lambda flags: f"{b['correct'][flags].mean():.0%}" if flags.any() else "—"  # noqa: E731
    hidden_col, visible_col, truth_col = st.columns(3)
    hidden_col.metric("Right on hidden frames", accuracy(hidden), help="Frames behind the curtain, this sample.")
    visible_col.metric("Right on visible frames", accuracy(shown))
    truth_col.metric(f"p(truth) at frame {chunk}", f"{b['truth_probability'][chunk]:.1%}")
    st.caption(f"Frames {frames[0]}–{frames[-1]}: the predicted position distribution, the true position circled. "
               "Step the chunk to move the window.")
else:
    st.info(f"The belief views need an occlusion checkpoint; {context.ref.label} is a {context.task} one. The memory's "
            "energy and the interventions below work for every Tensor Memory checkpoint.", icon=":material/info:")

if not layout.memory_notice(context, "The memory's energy and the interventions"):
    st.stop()
lay = trace.layer(context.layer)
occluded = trace.meta["occluded"][:trace.num_chunks] if is_occlusion else None

st.markdown("##### What the memory holds")
if is_occlusion:
    held = occlusion_memory(trace, context.layer)
    if held["last_visible"] is not None:
        write = ", ".join(f"{v:.1f}" for v in held["write_voxel"])
        near = sum(held["read_within_2sigma"])
        st.markdown(f"The last visible frame ({held['last_visible']}) wrote at voxel (x, y, z) = ({write}) with "
                    f"σ = {held['sigma_voxels']:.2f} voxels; {near} of the {len(held['occluded_chunks'])} reads during "
                    f"the occlusion land within 2σ of it (median distance "
                    f"{np.median(held['read_distance_voxels']):.2f} voxels).")
energy_col, slice_col = st.columns([1.2, 1])
with energy_col:
    layout.chart(energy_figure(lay, chunk, occluded), "energy", height=440)
with slice_col:
    st.markdown(f"**‖h‖² after chunk {chunk}**, through its write")
    layout.chart(slices_figure(memory_energy(lay)[chunk], slice_index(trace, context.layer, chunk, "write")),
                 "energy_slices", height=280)
    st.caption("The energy each voxel of the hidden state holds after the current chunk.")

st.markdown("##### Interventions")
D, H, W = lay.grid
default_chunk = int(np.flatnonzero(occluded)[0]) if occluded is not None and occluded.any() else chunk
sample = f"{abs(hash(context.sample_key)):x}"  # a new sample gets fresh controls with its own defaults
with st.form("intervention_form", border=True):
    kind_col, chunk_col = st.columns([2, 3])
    kind = kind_col.radio("Intervention", KINDS, format_func=KIND_NAMES.get, key="intervention.kind",
                          help="Zero h and c (all of it or a box of voxels) just before the chunk reads, force "
                               "σ(γ) = 0 from that chunk on so reads no longer reach the tokens, or change the "
                               "chunk's own write: move it to another voxel, or set its σ.")
    at = (chunk_col.slider("Before chunk", 0, trace.num_chunks - 1, default_chunk, key=f"intervention.chunk.{sample}",
                           help="The chunk the intervention starts at: zeroing and the gate act before it reads, "
                                "a moved or widened write is its own write.")
          if trace.num_chunks > 1 else 0)
    z0, y0, x0 = nearest_voxel(lay.mu_write[max(default_chunk - 1, 0)], lay.grid)
    box = lambda v, n: (max(v - 1, 0), min(v + 1, n - 1))  # noqa: E731
    z_col, y_col, x_col = st.columns(3)
    z_range = z_col.slider("Region z (D)", 0, D - 1, box(z0, D), key=f"intervention.z.{sample}")
    y_range = y_col.slider("Region y (H)", 0, H - 1, box(y0, H), key=f"intervention.y.{sample}")
    x_range = x_col.slider("Region x (W)", 0, W - 1, box(x0, W), key=f"intervention.x.{sample}")
    st.caption("The region (voxel indices, ends included) applies to \"region zeroed\"; it starts around the last "
               "write before the chosen chunk. Interventions act on every memory layer.")
    to_col, sigma_col = st.columns([3, 1])
    z1, y1, x1 = nearest_voxel(lay.mu_write[min(default_chunk, len(lay.mu_write) - 1)], lay.grid)
    target = to_col.columns(3)
    to_voxel = [target[i].slider(f"Write to voxel {a}", 0.0, float(n - 1), float(v), step=0.25,
                                 key=f"intervention.to.{a}.{sample}")
                for i, (a, n, v) in enumerate((("x", W, x1), ("y", H, y1), ("z", D, z1)))]
    new_sigma = sigma_col.slider("σ of the write", 0.05, 2.0, 0.4, step=0.05, key=f"intervention.sigma.{sample}",
                                 help="Normalised units: 2/(n − 1) is one voxel spacing along an axis of n voxels.")
    st.caption("\"write moved\" and \"σ of the write set\" change the chosen chunk's write alone (its read comes "
               "first, so the change shows from the next chunk on).")
    if st.form_submit_button("Run the intervention", icon=":material/science:", type="primary"):
        region = tuple((lo, hi + 1) for lo, hi in (z_range, y_range, x_range)) if kind == "zero_region" else None
        to = tuple(float(v) for v in normalised_coordinates(to_voxel, lay.grid)) if kind == "move_write" else None
        st.session_state[INTERVENTION_KEY] = (sample, (kind, int(at), region, None, to,
                                                       float(new_sigma) if kind == "set_sigma" else None))
remembered = st.session_state.get(INTERVENTION_KEY)
asked = remembered[1] if remembered and remembered[0] == sample else ("zero", default_chunk, None, None, None, None)
try:
    result = cache.intervention(context.ref, context.seed, context.params, *asked)
except EXPECTED_ERRORS as error:  # a setting this sample cannot take: say so, the rest of the app goes on
    st.error(f"The intervention could not run: {describe(error)}")
    st.stop()
numbers = result.summary()
changed_col, accuracy_col, drop_col = st.columns(3)
changed_col.metric("Predictions changed", f"{numbers['chunks_changed']} of {numbers['chunks_after']}",
                   help=f"Chunks {result.chunk} to {trace.num_chunks - 1}.")
if numbers["accuracy_baseline"] is not None:
    change = numbers["accuracy_intervened"] - numbers["accuracy_baseline"]
    accuracy_col.metric("Accuracy from that chunk on", f"{numbers['accuracy_intervened']:.0%}",
                        delta=f"{change:+.0%} vs untouched" if change else "same as untouched",
                        delta_color="normal" if change else "off", delta_arrow="auto" if change else "off")
    drop_col.metric("Mean drop in p(truth)", f"{numbers['target_probability_drop']:+.3f}")
layout.chart(intervention_figure(result), "intervention", height=320)
if is_occlusion:
    first = int(np.clip(result.chunk - 2, 0, max(trace.num_chunks - BELIEF_FRAMES, 0)))
    shown = list(range(first, min(first + BELIEF_FRAMES, trace.num_chunks)))
    for run, name in ((result.baseline, "untouched"), (result.intervened, KIND_NAMES[result.kind])):
        st.markdown(f"**Belief, {name}**")
        layout.chart(belief_figure(run["probs"][:trace.num_chunks], b["truth"], b["occluded"], size=size,
                                   frames=shown), f"belief_{name}", height=230)
if numbers["chunks_changed"] == 0:
    st.caption("No prediction changed: the model does not rely on what this intervention removed. For a collapsed "
               "memory (see Diagnose) that is expected.")

if is_occlusion:
    st.markdown("##### How long the belief survives")
    if st.button(f"Measure over {SURVIVAL_SAMPLES} samples per occlusion length", icon=":material/timer:",
                 key="survival"):
        st.session_state["survival_asked"] = True
    if st.session_state.get("survival_asked"):
        layout.chart(survival_figure(cache.survival(context.ref, SURVIVAL_SAMPLES, context.seed)), "survival",
                     height=320)
