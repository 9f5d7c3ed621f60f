"""Occlusion: the belief through the occlusion, the memory's energy, and interventions against the untouched run.

For a moving-digits checkpoint the clip is shown as a video (its frames, the true and predicted digit on each), the
position belief summed over identity, and the identity belief beside it. The frames step in the browser
(:func:`occlusion_payload`); the interventions run on the server. Run as a page it draws itself; imported, it
lends its payload.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from analysis.figures import belief_figure
from analysis.figures.base import marker_leaves
from analysis.figures.escape import markdown_text
from analysis.figures.occlusion_views import (
    KIND_NAMES,
    belief_card,
    energy_figure,
    energy_leaves,
    intervention_figure,
    survival_figure,
)
from analysis.figures.state import slices_figure, slices_leaves
from analysis.figures.timeline import belief_leaves
from analysis.figures.video import filmstrip_figure, filmstrip_leaves, identity_belief_figure
from analysis.figures.views import slice_index
from analysis.measures.interventions import KINDS, intervention_defaults
from analysis.measures.occlusion import (
    TASKS,
    belief,
    belief_of,
    frames_around,
    hit_rates,
    memory_energy,
    occlusion_memory,
)
from analysis.traces.trace import Trace
from app import cache, layout, state, stepping
from app.browser_stepper import Heading, Row, StepperPayload, stepper_payload
from app.cache import CheckpointRef, Sample
from tensor_memory.errors import EXPECTED_ERRORS, describe
from tensor_memory.memory.geometry import from_voxels

SURVIVAL_SAMPLES = 64
INTERVENTION_KEY = "intervention"  # (sample, the last intervention asked for on it as cache arguments)
BELIEF_FRAMES = 8  # the belief: frames side by side at most (their titles need the room)
FILM_FRAMES = 12  # the moving digit's filmstrip: frames at most
HEIGHTS = {"belief": 250, "identity": 320, "energy": 440, "energy_slices": 280}  # pixels; the film its own


def occlusion_payload(
    trace: Trace, identity: Any, layer: str | None, memory: bool, span: tuple[int, int] | None = None
) -> StepperPayload:
    """The page's views of every chunk (of ``span`` when given): for an occlusion or moving-digits trace the
    belief around the frame (and the filmstrip and the identity belief of a digit); with ``memory`` the layer's
    energy and slices. ``identity`` names the sample."""
    b = belief(trace) if trace.info.get("task") in TASKS else None
    digits = b is not None and "identity_probs" in b
    lay = trace.layer(layer) if memory else None
    first = 0 if span is None else span[0]
    energy = None if lay is None else memory_energy(lay, span)  # (k, D, H, W): the chunks held
    count = trace.num_chunks
    drawn = {}  # drawn once, at the first chunk: a chunk's differ in leaves
    if b is not None:
        beliefs = (b["probs"].reshape(len(b["probs"]), -1), b["truth"], b["occluded"], b["probs"].shape[1])
        drawn["belief"] = belief_figure(*beliefs, frames=frames_around(first, BELIEF_FRAMES, count))
        if digits:
            drawn["film"] = filmstrip_figure(trace, frames_around(first, FILM_FRAMES, count))
            drawn["identity"] = identity_belief_figure(b, first)
    if energy is not None:
        drawn["energy"] = energy_figure(lay, first, None if b is None else b["occluded"], span)
        drawn["energy_slices"] = slices_figure(energy[0], slice_index(trace, layer, first, "write"))

    def views(k: int, outcome: dict[str, Any]) -> dict[str, Any]:
        shown: dict[str, Any] = {}
        if b is not None:
            if digits:
                shown["film"] = filmstrip_leaves(trace, frames_around(k, FILM_FRAMES, count))
                shown["identity"] = marker_leaves(k)
            shown["belief"] = belief_leaves(*beliefs, frames=frames_around(k, BELIEF_FRAMES, count))
            shown["belief_card"] = belief_card(b, k)
        if energy is not None:
            shown["energy"] = energy_leaves(k)
            shown["energy_slices"] = slices_leaves(energy[k - first], slice_index(trace, layer, k, "write"))
        return shown

    rows: list[Row | Heading] = []
    if b is not None:
        rows += [Row((("film",),), (1,))] if digits else []
        rows += [Heading("Belief frame by frame"), Row((("belief", "belief_card"),), (1,))]
        rows += [Row((("identity",),), (1,))] if digits else []
    if energy is not None:
        rows += [Heading("What the memory holds"), Row((("energy",), ("energy_slices",)), (1.2, 1))]
    labels = {
        "belief": "The predicted position distribution"
        + (" (summed over the digits)" if digits else "")
        + " of the frames around this one, the true position circled",
        "film": "The clip as the model sees it (grey: the curtain): the true digit's box solid, the predicted "
        "one dashed; above each frame, the true digit → the predicted one",
        "identity": "Which digit the model believes it is, frame by frame",
        "energy_slices": "‖h‖² after this chunk, through its write",
    }
    shown = ("occlusion", layer, memory)
    return stepper_payload(trace, identity, shown, views, tuple(rows), labels, HEIGHTS, span, drawn=drawn)


def occlusion_views(
    ref: CheckpointRef, sample: Sample, layer: str | None, memory: bool, span: tuple[int, int] | None
) -> StepperPayload:
    """:func:`occlusion_payload` of the cached sample: what the page hands :func:`app.cache.stepper_payload`."""
    return occlusion_payload(cache.sample_trace(ref, sample), (ref, sample), layer, memory, span)


def percent(value: float | None) -> str:
    return "—" if value is None else f"{value:.0%}"


def hit_rate_metrics(trace: Trace, digits: bool) -> None:
    """This sample's share of frames right, hidden and visible apart (for a digit also place and digit alone)."""
    rates = hit_rates(belief(trace))
    columns = iter(st.columns(6 if digits else 2))
    next(columns).metric(
        "Right on hidden frames",
        percent(rates["hidden"]),
        help="Frames behind the curtain, this sample." + (" Digit and place both right." if digits else ""),
    )
    next(columns).metric("Right on visible frames", percent(rates["visible"]))
    if digits:
        for where in ("hidden", "visible"):
            for what in ("Place", "Digit"):
                next(columns).metric(f"{what} right on {where} frames", percent(rates[f"{what.lower()}_{where}"]))


def last_sight(trace: Trace, layer: str | None) -> None:
    """Where the last visible frame wrote, and how many reads of the occlusion come back to it."""
    held = occlusion_memory(trace, layer)
    if held["last_visible"] is None:
        return
    write = ", ".join(f"{v:.1f}" for v in held["write_voxel"])
    st.markdown(
        f"**Where the last sight went.** The last visible frame ({held['last_visible']}) wrote at voxel "
        f"(x, y, z) = ({write}) with σ = {held['sigma_voxels']:.2f} voxels; "
        f"{held['reads_within_2sigma_count']} of the {len(held['occluded_chunks'])} reads during the "
        f"occlusion land within 2σ of it (median distance {held['median_read_distance_voxels']:.2f} voxels)."
    )


def intervention_form(trace: Trace, layer: str | None, defaults: dict[str, Any], sample: str) -> None:
    """The intervention's controls, starting from ``defaults`` (:func:`intervention_defaults`); a submitted one is
    remembered for ``sample``."""
    lay = trace.layer(layer)
    D, H, W = lay.grid
    with st.form("intervention_form", border=True):
        kind_col, chunk_col = st.columns([2, 3])
        kind = kind_col.radio(
            "Intervention",
            KINDS,
            format_func=KIND_NAMES.get,
            key="intervention.kind",
            help="Zero h and c (all of it or a box of voxels) just before the chunk reads, force "
            "σ(γ) = 0 from that chunk on so reads no longer reach the tokens, or change the "
            "chunk's own write: move it to another voxel, or set its σ.",
        )
        at = (
            chunk_col.slider(
                "Before chunk",
                0,
                trace.num_chunks - 1,
                defaults["chunk"],
                key=f"intervention.chunk.{sample}",
                help="The chunk the intervention starts at: zeroing and the gate act before it reads, "
                "a moved or widened write is its own write.",
            )
            if trace.num_chunks > 1
            else 0
        )
        ranges = [
            column.slider(f"Region {axis} ({size_name})", 0, n - 1, box, key=f"intervention.{axis}.{sample}")
            for column, axis, size_name, n, box in zip(
                st.columns(3), "zyx", "DHW", (D, H, W), defaults["region"], strict=True
            )
        ]
        st.caption(
            'The region (voxel indices, ends included) applies to "region zeroed"; it starts around the last '
            "write before the chosen chunk. Interventions act on every memory layer."
        )
        to_col, sigma_col = st.columns([3, 1])
        to_voxel = [
            column.slider(
                f"Write to voxel {axis}", 0.0, float(n - 1), float(v), step=0.25, key=f"intervention.to.{axis}.{sample}"
            )
            for column, axis, n, v in zip(to_col.columns(3), "xyz", (W, H, D), defaults["write_voxel"], strict=True)
        ]
        new_sigma = sigma_col.slider(
            "σ of the write",
            0.05,
            2.0,
            0.4,
            step=0.05,
            key=f"intervention.sigma.{sample}",
            help="Normalised units: 2/(n − 1) is one voxel spacing along an axis of n voxels.",
        )
        st.caption(
            '"write moved" and "σ of the write set" change the chosen chunk\'s write alone (its read comes '
            "first, so the change shows from the next chunk on)."
        )
        if st.form_submit_button("Run the intervention", icon=":material/science:", type="primary"):
            region = tuple((lo, hi + 1) for lo, hi in ranges) if kind == "zero_region" else None
            to = tuple(float(v) for v in from_voxels(to_voxel, lay.grid)) if kind == "move_write" else None
            st.session_state[INTERVENTION_KEY] = (
                sample,
                (kind, int(at), region, None, to, float(new_sigma) if kind == "set_sigma" else None),
            )


def intervention_result(context: state.Context, asked: tuple, is_occlusion: bool, digits: bool) -> None:
    """The intervention ``asked`` for (cache arguments) against the untouched run: what changed, and the belief."""
    trace = context.trace
    try:
        result = cache.intervention(context.ref, context.sample, *asked)
    except EXPECTED_ERRORS as error:  # a setting this sample cannot take: say so, the rest of the app goes on
        st.error(markdown_text(f"The intervention could not run: {describe(error)}"))
        st.stop()
    numbers = result.summary()
    changed_col, accuracy_col, drop_col = st.columns(3)
    changed_col.metric(
        "Predictions changed",
        f"{numbers['chunks_changed']} of {numbers['chunks_after']}",
        help=f"Chunks {result.chunk} to {trace.num_chunks - 1}.",
    )
    if numbers["accuracy_baseline"] is not None:
        change = numbers["accuracy_change"]
        accuracy_col.metric(
            "Accuracy from that chunk on",
            f"{numbers['accuracy_intervened']:.0%}",
            delta=f"{change:+.0%} vs untouched" if change else "same as untouched",
            delta_color="normal" if change else "off",
            delta_arrow="auto" if change else "off",
        )
        drop_col.metric("Mean drop in p(truth)", f"{numbers['target_probability_drop']:+.3f}")
    layout.chart(intervention_figure(result), "intervention", height=320)
    if is_occlusion:
        size = int(trace.info["task_params"]["size"])
        frames = frames_around(result.chunk + 2, BELIEF_FRAMES, trace.num_chunks)  # from two frames before it
        for run, name in ((result.baseline, "untouched"), (result.intervened, KIND_NAMES[result.kind])):
            run_belief = belief_of(run["probs"][: trace.num_chunks], run["prediction"], result.meta, size)
            st.markdown(f"**Belief, {name}**")
            layout.chart(
                belief_figure(
                    run_belief["probs"].reshape(len(run_belief["probs"]), -1),
                    run_belief["truth"],
                    run_belief["occluded"],
                    size=size,
                    frames=frames,
                ),
                f"belief_{name}",
                height=230,
            )
            if digits:
                layout.chart(identity_belief_figure(run_belief, result.chunk), f"identity_belief_{name}", height=300)
    if numbers["chunks_changed"] == 0:
        st.caption(
            "No prediction changed: the model does not rely on what this intervention removed. For a "
            "collapsed memory (see Diagnose) that is expected."
        )


def survival_section(context: state.Context, digits: bool) -> None:
    """How long the belief survives occlusions of several lengths, measured when asked for."""
    st.markdown("##### How long the belief survives")
    if st.button(
        f"Measure over {SURVIVAL_SAMPLES} samples per occlusion length", icon=":material/timer:", key="survival"
    ):
        st.session_state["survival_asked"] = True
    if not st.session_state.get("survival_asked"):
        return
    survival = cache.survival(context.ref, SURVIVAL_SAMPLES, context.seed)
    layout.chart(survival_figure(survival), "survival_chart", height=320)  # "survival" is the button
    if digits:
        parts = {"digit and place": survival, "place": survival["position"], "digit": survival["identity"]}
        st.dataframe(
            {
                "occlusion length L": survival["lengths"],
                **{
                    what: [percent(part["occluded_accuracy"][L]) for L in survival["lengths"]]
                    for what, part in parts.items()
                },
            },
            hide_index=True,
        )
        st.caption(
            f"Right on hidden frames over {survival['samples']} clips per length: the curve above needs "
            "digit and place right; here each alone."
        )


def page() -> None:
    context = state.current()
    layout.require_checkpoint(context, "Occlusion", "runs the checkpoint again on new occlusions and interventions")
    is_occlusion, digits = context.task in TASKS, context.task == "moving_digits"  # the ball, or a moving digit
    layout.header(
        context,
        "Occlusion",
        f"What the model believes while the {'digit' if digits else 'ball'} is "
        "hidden, what its memory holds, and what changes when the memory is taken "
        "away. The frames step in your browser.",
    )
    layout.require_trace(context)
    layout.require_chunks(context)
    if is_occlusion:
        hit_rate_metrics(context.trace, digits)
    else:
        st.info(
            f"The belief views need an occlusion or moving_digits checkpoint; {markdown_text(context.ref.label)} "
            f"is {layout.a_task(context.task)} one. The memory's energy and the interventions below work for "
            "every Tensor Memory checkpoint.",
            icon=":material/info:",
        )
    memory = layout.memory_notice(context, "The memory's energy and the interventions")
    chunk = context.chunk
    if is_occlusion or memory:
        chunk = stepping.stepper(
            context,
            "occlusion",
            lambda span: cache.stepper_payload(
                "occlusion", occlusion_views, context.ref, context.sample, context.layer, memory, span
            ),
        )
    if not memory:
        return
    if is_occlusion:
        last_sight(context.trace, context.layer)
    st.markdown("##### Interventions")
    if not context.checkpoint.model.backbone.config.causal:
        st.info(
            "Interventions cut the sequence at a chunk and carry the memory's state into the rest. This model is "
            "bidirectional (it reads each image whole, as a ViT does), so it cannot be cut: interventions need a "
            "causal checkpoint such as occlusion-tensor.",
            icon=":material/info:",
        )
        return
    defaults = intervention_defaults(context.trace, context.layer, chunk)
    sample = f"{abs(hash(context.sample_key)):x}"  # a new sample gets fresh controls with its own defaults
    intervention_form(context.trace, context.layer, defaults, sample)
    remembered = st.session_state.get(INTERVENTION_KEY)
    asked = (
        remembered[1] if remembered and remembered[0] == sample else ("zero", defaults["chunk"], None, None, None, None)
    )
    intervention_result(context, asked, is_occlusion, digits)
    if is_occlusion:
        survival_section(context, digits)


if __name__ == "__main__":  # run as a page (st.Page runs it so); imported, it only lends its payload
    page()
