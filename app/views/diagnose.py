"""Diagnose: the addressing report over many samples, and two checkpoints side by side (their summaries, and both
on the session's sample stepping together in the browser: :func:`app.compare.comparison_payload`)."""

from __future__ import annotations

from typing import Any

import streamlit as st

from analysis.figures.compare import comparison_figure
from analysis.figures.escape import markdown_code, markdown_text
from analysis.figures.training import addressing_history_figure
from analysis.measures.compare import comparison_note, comparison_rows
from app import cache, layout, runs, state, stepping, world_view
from app.cache import CheckpointRef, Sample
from app.compare import SUMMARY_SAMPLES, comparison_views, counterpart, their_sample
from app.sidebar import checkpoint_options
from tensor_memory.errors import EXPECTED_ERRORS, describe
from tensor_memory.storage.checkpoint import CheckpointError
from tensor_memory.tasks import TASKS
from tensor_memory.training.evaluation import format_metric

SAMPLE_COUNTS = [8, 16, 32, 64, 128]
MEASURES = (
    ("write_spread_voxels", "write spread (voxels)", "{:.2f}"),
    ("effective_voxels", "voxels filled", "{:.1f}"),
    ("sigma_voxels", "median σ (voxels)", "{:.2f}"),
    ("reads_within_2sigma", "reads within 2σ", "{:.0%}"),
    ("boundary_fraction", "at a face", "{:.0%}"),
    ("gate_scale", "σ(γ)", "{:.3f}"),
)


def verdict(report: dict[str, Any] | None, name: str) -> None:
    """The addressing verdict as a coloured box, or a note for a checkpoint without memory."""
    if report is None:
        st.info(markdown_text(f"{name} has no Tensor Memory layers: no addressing to report."), icon=":material/info:")
    elif report["verdict"] == "healthy":
        st.success(
            f"**healthy**: {markdown_text(name)} reads and writes across its grid", icon=":material/check_circle:"
        )
    else:
        st.error(
            f"**{report['verdict']}**"
            + (f" (also: {', '.join(report['failures'][1:])})" if len(report["failures"]) > 1 else ""),
            icon=":material/error:",
        )


def measured(ref: CheckpointRef, sample: Sample, samples: int, layer: str | None) -> dict[str, Any]:
    """The checkpoint's summary over ``samples`` samples of the sample's stream, or the page stops saying why not."""
    try:
        return cache.summary(ref, sample, samples, layer)
    except EXPECTED_ERRORS as error:  # TraceError is a ValueError
        st.error(markdown_text(f"Could not measure {ref.label} on these samples: {describe(error)}"))
        st.stop()


context = state.current()
layout.header(
    context,
    "Diagnose",
    "Is the memory using its grid? The addressing report over many samples, with its "
    "verdict and reasons, and any two checkpoints side by side.",
)
if context.is_trace_file:  # one recorded sample: its report, nothing to run again
    report = None if not context.has_memory_views else cache.trace_addressing(context.ref, context.layer)
    where = "the one sample this trace recorded"
else:
    samples = layout.remembered(
        st.select_slider,
        "Samples to measure over",
        "diagnose.samples",
        SUMMARY_SAMPLES,
        options=SAMPLE_COUNTS,
        help="More samples: steadier numbers, longer to compute.",
    )
    mine = measured(context.ref, context.sample, samples, context.layer)
    report = mine["addressing"]
    where = f"{samples} samples of seed {context.seed}"

st.markdown("##### Addressing report")
verdict(report, context.ref.label)
if report is not None:
    reasons_col, measures_col = st.columns([3, 2])
    with reasons_col:
        st.markdown("\n".join(f"- {markdown_text(reason)}" for reason in report["reasons"]))
        st.caption(f"Layer {markdown_code(report['layer'])}, {where}.")
    with measures_col:
        columns = st.columns(3)
        for position, (key, label, fmt) in enumerate(MEASURES):
            value = report["measures"].get(key)
            columns[position % 3].metric(label, "—" if value is None else fmt.format(value))
    for failure, remedy in report.get("remedies", {}).items():
        st.warning(f"**What usually helps ({failure}):** {markdown_text(remedy)}", icon=":material/build:")
    with st.expander("Every measure and threshold"):
        st.json({"measures": report["measures"], "thresholds": report["thresholds"]}, expanded=False)


def run_section() -> None:
    """Where the collapse of the training run this session follows began, when it follows one (the Run page)."""
    folder = runs.opened()
    if folder is None:
        return
    st.markdown(f"##### The training run followed: {markdown_text(folder.name)}")
    try:
        run = runs.live(folder)
        run.poll()
    except EXPECTED_ERRORS as error:
        st.info(markdown_text(f"Could not read the run {folder}: {describe(error)}"), icon=":material/info:")
        return
    runs.onset_notice(run)
    st.page_link("views/run.py", label=f"Follow {markdown_text(folder.name)} as it grows", icon=":material/monitoring:")


run_section()


def training_section(ref: CheckpointRef, layer: str | None, scaffold_steps: int) -> None:
    """The addressing measures its training logged, against the step: when a collapse happened."""
    st.markdown("##### Addressing during training")
    try:
        history = cache.training_history(ref)
        figure = addressing_history_figure(history, layer, scaffold_steps)
    except FileNotFoundError:
        st.info(
            markdown_text(f"{ref.label} has no train_log.jsonl, so there is no training history to show."),
            icon=":material/info:",
        )
        return
    except ValueError as error:
        st.info(markdown_text(f"No addressing history to show: {error}"), icon=":material/info:")
        return
    layout.chart(figure, "training_history")
    st.caption(
        "Logged by `tensor-memory train` at every evaluation, on 16 validation samples"
        + (
            ", with the model's own addressing also while the address scaffold (shaded) steered training"
            if scaffold_steps
            else ""
        )
        + "."
    )


if context.is_trace_file:
    st.info(
        "The training history, the world read-out and the side-by-side comparison run checkpoints: open one "
        "in the sidebar for them.",
        icon=":material/info:",
    )
    st.stop()
if report is not None:
    training_section(
        context.ref, report["layer"], context.checkpoint.config["training"].get("address_scaffold_steps", 0)
    )

if world_view.supported(context):
    st.markdown("##### Does the memory's space follow the world?")
    world_view.readout_numbers(context)
    world_view.readout_figure(context)

st.markdown("##### Two checkpoints side by side")
options = checkpoint_options()
names = list(options)
other_label = layout.remembered(
    st.selectbox,
    "Compare with",
    f"diagnose.other.{context.ref.label}",
    counterpart(context.ref.label, names),
    options=names,
    help="Same task: accuracies compare directly. Another task: compare the addressing.",
)
try:
    other_ref = CheckpointRef.of(options[other_label], other_label)
    other_loaded = cache.load(other_ref)
except CheckpointError as error:
    st.error(markdown_text(f"Could not load {other_label} to compare: {error}"))
    st.stop()
same_task = other_loaded.checkpoint.task.name == context.task
carried = their_sample(context.sample, context.checkpoint.task, other_loaded.checkpoint.task)
theirs = measured(other_ref, carried, samples, None)
note = comparison_note(mine, theirs)
if note:
    st.warning(markdown_text(note), icon=":material/warning:")
left, right = st.columns(2)
for column, summary in ((left, mine), (right, theirs)):
    with column, st.container(border=True):
        name, task = markdown_text(summary["name"]), markdown_text(summary["task"])
        st.markdown(f"**{name}** · {task} · {markdown_code(summary['backbone'])}")
        verdict(summary["addressing"], summary["name"])
        headline = TASKS[summary["task"]].headline  # accuracy; PSNR for masked patches
        st.metric(headline, format_metric(headline, summary["metrics"].get(headline), percent_digits=1))
layout.chart(comparison_figure(mine, theirs), "comparison", height=320)
st.dataframe(comparison_rows(mine, theirs), hide_index=True, width="stretch")

st.markdown("##### Both on this sample, chunk by chunk")
if not same_task:
    st.info(
        markdown_text(
            f"{other_label} is trained on another task, so it cannot run this sample: pick a checkpoint of the "
            f"{context.task} task to step both side by side."
        ),
        icon=":material/info:",
    )
    st.stop()
view = layout.volume_view()
drawn = (view.field, view.mode, view.index, view.kind)  # what the comparison draws of Explore's view
try:
    stepping.stepper(
        context,
        "diagnose",
        lambda span: cache.stepper_payload(
            "diagnose",
            comparison_views,
            (context.ref, other_ref),
            (context.sample, carried),
            context.layer,
            drawn,
            span,
        ),
    )
except EXPECTED_ERRORS as error:
    st.info(
        markdown_text(f"The two cannot be stepped together on this sample: {describe(error)}"), icon=":material/info:"
    )
    st.stop()
st.caption(
    "Both run the session's sample and step together in your browser; the 3D view and the channels are "
    "Explore's settings."
)
