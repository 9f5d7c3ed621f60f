"""Explore: one chunk at a time — its input and prediction, the memory's volumes, where it reads and writes.

Every chunk's views go to the browser once (:func:`explore_payload`); stepping happens there, with no message to
the server. Run as a page it draws itself; imported, it lends its payload to ``python -m app``, which prepares the
opening page.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from analysis.figures.chunk_input import chunk_input_figure, input_has_leaves, prediction_card
from analysis.figures.state import VOLUME_KINDS
from analysis.figures.views import SLICE_ANCHORS, explore_figures, explore_leaves
from analysis.measures.volumes import FIELDS, MODES, VolumeSeries
from analysis.measures.world import READOUT_SAMPLES
from analysis.traces.trace import Trace
from app import cache, layout, state, stepping, world_view
from app.browser_stepper import Heading, Row, StepperPayload, stepper_payload
from app.cache import CheckpointRef, Sample, TraceRef

MODE_NAMES = {"norm": "norm", "channel": "one channel", "pca": "PCA"}
SLICES_WIDTH = 230  # pixels: the Slices box shows its longest choice ("through this chunk's write") whole
HEIGHTS = {
    "input": 340,
    "volume": 440,
    "timeline": 300,
    "slices": 270,
    "trajectory": 400,
    "sigma": 400,
    "gates": 400,
}  # pixels; the others take their figure's own


def explore_payload(
    trace: Trace,
    identity: Any,
    layer: str | None,
    series: VolumeSeries | None,
    kind: str,
    anchor: str,
    images: list[bytes] | None = None,
    span: tuple[int, int] | None = None,
) -> StepperPayload:
    """The page's views of every chunk (of ``span`` when given): with ``series`` (a memory to draw) the full page,
    else the input, the prediction and the timeline; ``images`` the PyVista renderings (PNG, one a chunk of the
    span) when they are shown. ``identity`` names the sample."""
    first = 0 if span is None else span[0]
    drawn = explore_figures(trace, first, layer, series, kind, anchor, span)  # once: a chunk's differ in leaves
    if not input_has_leaves(trace):
        del drawn["input"]  # different throughout: drawn for each chunk

    def views(k: int, outcome: dict[str, Any]) -> dict[str, Any]:
        shown = {
            **explore_leaves(trace, k, layer, series, kind, anchor, span),
            "card": prediction_card(outcome, trace.has_predictions),
        }
        if "input" not in drawn:
            shown["input"] = chunk_input_figure(trace, k)
        return shown if images is None else {**shown, "render": images[k - first]}

    if series is None:
        rows = (Row((("input",), ("card", "timeline")), (1, 1)),)
        return stepper_payload(trace, identity, (layer, None), views, rows, heights=HEIGHTS, span=span, drawn=drawn)
    labels = {"slices": f"Slices of {series.label} {SLICE_ANCHORS[anchor]}"}
    top = Row((("input", "card"), ("volume",)), (1, 1.6))
    if images is not None:
        labels["render"] = f"{series.label}, PyVista volume rendering"
        top = Row((("input", "card"), ("volume",), ("render",)), (1, 1.25, 1.05))
    rows = (
        top,
        Row((("timeline",), ("slices",)), (1, 1.3)),
        Heading("Where it reads and writes, and how it gates"),
        Row((("trajectory",), ("sigma",), ("gates",)), (1.2, 1, 1)),
    )
    settings = (layer, series.field, series.mode, series.index, kind, anchor, images is not None)
    return stepper_payload(trace, identity, settings, views, rows, labels, HEIGHTS, span, drawn=drawn)


def explore_views(
    ref: CheckpointRef | TraceRef,
    sample: Sample,
    layer: str | None,
    view: layout.VolumeView | None,
    span: tuple[int, int] | None,
) -> StepperPayload:
    """:func:`explore_payload` of the sample, its volumes drawn as ``view`` says (None: no memory views), from the
    cached trace, series and renderings: what the page hands :func:`app.cache.stepper_payload`."""
    trace = cache.trace_of(ref, sample)
    if view is None:
        return explore_payload(trace, (ref, sample), layer, None, "volume", "write", span=span)
    series = cache.volume_series(ref, sample, layer, view.field, view.mode, view.index, span)
    images = (
        cache.volume_renderings(ref, sample, layer, view.field, view.mode, view.index, span) if view.rendered else None
    )
    return explore_payload(trace, (ref, sample), layer, series, view.kind, view.anchor, images, span)


def volume_controls(channels: int, fields: list[str]) -> layout.VolumeView:
    """One row of controls for how the volumes are drawn (remembered while other pages are open), each as wide as
    it needs: a narrow window wraps the row rather than cutting a control off."""
    row = st.container(horizontal=True, vertical_alignment="bottom", gap="medium")
    field = layout.remembered(
        row.segmented_control,
        "State",
        "explore.field",
        "h",
        options=fields,
        required=True,
        help="h: the hidden state that reads see; c: the cell state behind it.",
    )
    mode = layout.remembered(
        row.segmented_control,
        "Channels",
        "explore.mode",
        "norm",
        options=list(MODES),
        format_func=MODE_NAMES.get,
        required=True,
        help="How each voxel's channels become one value: their norm, one channel, or a "
        "principal component fitted over every chunk.",
    )
    index = 0
    if mode != "norm":
        for kept in ("explore.index", layout.KEEP + "explore.index"):  # another checkpoint may have fewer
            if kept in st.session_state:
                st.session_state[kept] = min(int(st.session_state[kept]), channels - 1)
        index = layout.remembered(
            row.number_input,
            "Channel" if mode == "channel" else "Component",
            "explore.index",
            0,
            min_value=0,
            max_value=channels - 1,
            step=1,
            width=130,
        )
    kind = layout.remembered(
        row.segmented_control,
        "Plotly 3D view",
        "explore.kind",
        layout.VolumeView.kind,
        options=list(VOLUME_KINDS),
        format_func=VOLUME_KINDS.get,
        required=True,
        help="A point per voxel that holds something (lightest to draw), a few "
        "isosurfaces, or the full volume of 15 transparent surfaces.",
    )
    anchor = layout.remembered(
        row.selectbox,
        "Slices",
        "explore.anchor",
        "write",
        options=list(SLICE_ANCHORS),
        format_func=SLICE_ANCHORS.get,
        width=SLICES_WIDTH,
    )
    rendered = layout.remembered(
        row.toggle,
        "PyVista",
        "explore.rendered",
        layout.VolumeView.rendered,
        help="Also show PyVista's volume rendering (off-screen, every chunk rendered once per sample: a few seconds).",
    )
    return layout.VolumeView(field, mode, int(index), kind, anchor, bool(rendered))


def page() -> None:
    context = state.current()
    layout.header(
        context,
        "Explore",
        "Step through the sample chunk by chunk: every view follows the current chunk, "
        "in your browser (Previous, Next, Play, the slider, or the arrow keys).",
    )
    layout.require_trace(context)
    layout.require_chunks(context)
    view = None
    if context.has_memory_views:
        lay = context.trace.layer(context.layer)
        view = volume_controls(lay.channels, [f for f in FIELDS if getattr(lay, f) is not None])
    stepping.stepper(
        context,
        "explore",
        lambda span: cache.stepper_payload(
            "explore", explore_views, context.ref, context.sample, context.layer, view, span
        ),
    )
    if view is None:
        layout.memory_notice(context, "The memory views")
        return
    st.caption(
        "Plotly turns and zooms; PyVista, when on, renders off-screen (low values are transparent; one "
        "colour scale holds for every chunk)."
    )
    if world_view.supported(context):
        st.markdown("##### Does the memory's space follow the world?")
        question = (
            "the ball's position read off each write"
            if context.task == "occlusion"
            else "the map decoded from what the memory returns for each cell"
        )
        if layout.remembered(
            st.toggle,
            f"Show {question} (fits a linear read-out over {READOUT_SAMPLES} samples once)",
            "explore.world",
            False,
        ):
            world_view.readout_figure(context)


if __name__ == "__main__":  # run as a page (st.Page runs it so); imported, it only lends its payload
    page()
