"""Explore: one chunk at a time — its input and prediction, the memory's volumes, where it reads and writes.

Every chunk's views go to the browser once (:mod:`app.browser_stepper`); stepping happens there."""

from __future__ import annotations

import streamlit as st

from analysis.figures.state import VOLUME_KINDS
from analysis.figures.views import SLICE_ANCHORS
from analysis.measures.volumes import FIELDS, MODES
from analysis.measures.world import READOUT_SAMPLES
from app import browser_stepper, cache, layout, state, stepper, world_view

MODE_NAMES = {"norm": "norm", "channel": "one channel", "pca": "PCA"}


def volume_controls(channels: int, fields: list[str]) -> layout.VolumeView:
    """One row of controls for how the volumes are drawn (remembered while other pages are open)."""
    field_col, mode_col, index_col, kind_col, anchor_col, render_col = st.columns([1, 2, 1.1, 2.6, 1.8, 1.3],
                                                                                   vertical_alignment="bottom")
    with field_col:
        field = layout.remembered(st.segmented_control, "State", "explore.field", "h", options=fields, required=True,
                                  help="h: the hidden state that reads see; c: the cell state behind it.")
    with mode_col:
        mode = layout.remembered(st.segmented_control, "Channels", "explore.mode", "norm", options=list(MODES),
                                 format_func=MODE_NAMES.get, required=True,
                                 help="How each voxel's channels become one value: their norm, one channel, or a "
                                      "principal component fitted over every chunk.")
    with index_col:
        index = 0
        if mode != "norm":
            for kept in ("explore.index", layout.KEEP + "explore.index"):  # another checkpoint may have fewer
                if kept in st.session_state:
                    st.session_state[kept] = min(int(st.session_state[kept]), channels - 1)
            index = layout.remembered(st.number_input, "Channel" if mode == "channel" else "Component",
                                      "explore.index", 0, min_value=0, max_value=channels - 1, step=1)
    with kind_col:
        kind = layout.remembered(st.segmented_control, "Plotly 3D view", "explore.kind", layout.VolumeView.kind,
                                 options=list(VOLUME_KINDS), format_func=VOLUME_KINDS.get, required=True,
                                 help="A point per voxel that holds something (lightest to draw), a few "
                                      "isosurfaces, or the full volume of 15 transparent surfaces.")
    with anchor_col:
        anchor = layout.remembered(st.selectbox, "Slices", "explore.anchor", "write", options=list(SLICE_ANCHORS),
                                   format_func=SLICE_ANCHORS.get)
    with render_col:
        rendered = layout.remembered(st.toggle, "PyVista", "explore.rendered", layout.VolumeView.rendered,
                                     help="Also show PyVista's volume rendering (off-screen, every chunk rendered "
                                          "once per sample: a few seconds).")
    return layout.VolumeView(field, mode, int(index), kind, anchor, bool(rendered))


context = state.current()
layout.header(context, "Explore", "Step through the sample chunk by chunk: every view follows the current chunk, in "
                                  "your browser (Previous, Next, Play, the slider, or the arrow keys).")
layout.require_trace(context)
if context.num_chunks == 0:
    st.info("This sample has no chunks to step through: the sequence is shorter than one memory chunk. Make the "
            "horizon longer in the sidebar.")
    st.stop()
trace, view = context.trace, None
if context.has_memory_views:
    lay = trace.layer(context.layer)
    view = volume_controls(lay.channels, [f for f in FIELDS if getattr(lay, f) is not None])
opening = stepper.opening_chunk(context)
span = stepper.pages(context, "explore")
payload = cache.explore_payload(context.ref, context.sample, context.layer, view, span)
browser_stepper.chunk_stepper(payload, opening, key="explore_stepper")
if view is None:
    layout.memory_notice(context, "The memory views")
    st.stop()
st.caption("Plotly turns and zooms; PyVista, when on, renders off-screen (low values are transparent; one colour "
           "scale holds for every chunk).")

if world_view.supported(context):
    st.markdown("##### Does the memory's space follow the world?")
    question = ("the ball's position read off each write" if context.task == "occlusion"
                else "the map decoded from what the memory returns for each cell")
    if layout.remembered(st.toggle, f"Show {question} (fits a linear read-out over {READOUT_SAMPLES} samples once)",
                         "explore.world", False):
        world_view.readout_figure(context)
