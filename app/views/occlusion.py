"""Occlusion: the belief through the occlusion, the memory's energy, and interventions against the untouched run.

For a moving-digits checkpoint the clip is shown as a video (its frames, the true and predicted digit on each), the
position belief summed over identity, and the identity belief beside it. The frames step in the browser
(:func:`app.browser_stepper.occlusion_payload`); the interventions run on the server.
"""

from __future__ import annotations

import numpy as np
import streamlit as st

from analysis.figures import belief_figure
from analysis.figures.occlusion_views import KIND_NAMES, intervention_figure, survival_figure
from analysis.figures.video import identity_belief_figure
from analysis.measures.interventions import KINDS
from analysis.measures.occlusion import TASKS, belief, belief_of, occlusion_memory
from app import browser_stepper, cache, layout, state, stepper
from app.browser_stepper import BELIEF_FRAMES, window
from tensor_memory.errors import EXPECTED_ERRORS, describe
from tensor_memory.memory.geometry import from_voxels, nearest_voxel

SURVIVAL_SAMPLES = 64
INTERVENTION_KEY = "intervention"  # (sample, the last intervention asked for on it as cache arguments)

context = state.current()
layout.require_checkpoint(context, "Occlusion", "runs the checkpoint again on new occlusions and interventions")
is_occlusion = context.task in TASKS  # the ball, or a moving digit
is_digits = context.task == "moving_digits"
layout.header(context, "Occlusion", f"What the model believes while the {'digit' if is_digits else 'ball'} is hidden, "
                                    "what its memory holds, and what changes when the memory is taken away. The "
                                    "frames step in your browser.")
layout.require_trace(context)
if context.num_chunks == 0:
    st.info("This sample has no chunks to step through: the sequence is shorter than one memory chunk. Make the "
            "horizon longer in the sidebar.")
    st.stop()
trace, chunk = context.trace, stepper.opening_chunk(context)


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def rate(right: np.ndarray, flags: np.ndarray) -> str:
    """The share of ``flags``' frames that are ``right``."""
    return percent(right[flags].mean() if flags.any() else None)


if is_occlusion:
    b = belief(trace)
    size = b["probs"].shape[1]
    hidden, shown = b["occluded"], ~b["occluded"]
    right = b["joint_correct"] if is_digits else b["correct"]
    columns = iter(st.columns(6 if is_digits else 2))
    next(columns).metric("Right on hidden frames", rate(right, hidden),
                         help="Frames behind the curtain, this sample." + (" Digit and place both right." if is_digits
                                                                          else ""))
    next(columns).metric("Right on visible frames", rate(right, shown))
    if is_digits:
        for where, flags in (("hidden", hidden), ("visible", shown)):
            for what, hits in (("Place", b["correct"]), ("Digit", b["identity_correct"])):
                next(columns).metric(f"{what} right on {where} frames", rate(hits, flags))
else:
    st.info(f"The belief views need an occlusion or moving_digits checkpoint; {context.ref.label} is a {context.task} "
            "one. The memory's energy and the interventions below work for every Tensor Memory checkpoint.",
            icon=":material/info:")
memory = layout.memory_notice(context, "The memory's energy and the interventions")
if is_occlusion or memory:
    span = stepper.pages(context, "occlusion")
    browser_stepper.chunk_stepper(cache.occlusion_payload(context.ref, context.sample, context.layer, memory, span),
                                  chunk, key="occlusion_stepper")
if not memory:
    st.stop()
lay = trace.layer(context.layer)
occluded = trace.meta["occluded"][:trace.num_chunks] if is_occlusion else None
if is_occlusion:
    held = occlusion_memory(trace, context.layer)
    if held["last_visible"] is not None:
        write = ", ".join(f"{v:.1f}" for v in held["write_voxel"])
        near = sum(held["read_within_2sigma"])
        st.markdown(f"**Where the last sight went.** The last visible frame ({held['last_visible']}) wrote at voxel "
                    f"(x, y, z) = ({write}) with σ = {held['sigma_voxels']:.2f} voxels; {near} of the "
                    f"{len(held['occluded_chunks'])} reads during the occlusion land within 2σ of it (median "
                    f"distance {np.median(held['read_distance_voxels']):.2f} voxels).")

st.markdown("##### Interventions")
if not context.checkpoint.model.backbone.config.causal:
    st.info("Interventions cut the sequence at a chunk and carry the memory's state into the rest. This model is "
            "bidirectional (it reads each image whole, as a ViT does), so it cannot be cut: interventions need a "
            "causal checkpoint such as occlusion-tensor.", icon=":material/info:")
    st.stop()
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
        to = tuple(float(v) for v in from_voxels(to_voxel, lay.grid)) if kind == "move_write" else None
        st.session_state[INTERVENTION_KEY] = (sample, (kind, int(at), region, None, to,
                                                       float(new_sigma) if kind == "set_sigma" else None))
remembered = st.session_state.get(INTERVENTION_KEY)
asked = remembered[1] if remembered and remembered[0] == sample else ("zero", default_chunk, None, None, None, None)
try:
    result = cache.intervention(context.ref, context.sample, *asked)
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
    frames = window(result.chunk + 2, BELIEF_FRAMES, trace.num_chunks)  # from two frames before the intervention
    for run, name in ((result.baseline, "untouched"), (result.intervened, KIND_NAMES[result.kind])):
        run_belief = belief_of(run["probs"][:trace.num_chunks], run["prediction"], result.meta, size)
        st.markdown(f"**Belief, {name}**")
        layout.chart(belief_figure(run_belief["probs"].reshape(len(run_belief["probs"]), -1), run_belief["truth"],
                                   run_belief["occluded"], size=size, frames=frames), f"belief_{name}", height=230)
        if is_digits:
            layout.chart(identity_belief_figure(run_belief, result.chunk), f"identity_belief_{name}", height=300)
if numbers["chunks_changed"] == 0:
    st.caption("No prediction changed: the model does not rely on what this intervention removed. For a collapsed "
               "memory (see Diagnose) that is expected.")

if is_occlusion:
    st.markdown("##### How long the belief survives")
    if st.button(f"Measure over {SURVIVAL_SAMPLES} samples per occlusion length", icon=":material/timer:",
                 key="survival"):
        st.session_state["survival_asked"] = True
    if st.session_state.get("survival_asked"):
        survival = cache.survival(context.ref, SURVIVAL_SAMPLES, context.seed)
        layout.chart(survival_figure(survival), "survival_chart", height=320)  # "survival" is the button
        if is_digits:
            parts = {"digit and place": survival, "place": survival["position"], "digit": survival["identity"]}
            st.dataframe({"occlusion length L": survival["lengths"],
                          **{what: [percent(part["occluded_accuracy"][L]) for L in survival["lengths"]]
                             for what, part in parts.items()}}, hide_index=True)
            st.caption(f"Right on hidden frames over {survival['samples']} clips per length: the curve above needs "
                       "digit and place right; here each alone.")
