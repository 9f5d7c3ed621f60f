"""Explore: one chunk at a time — its input and prediction, the memory's volumes, where it reads and writes."""

from __future__ import annotations

import streamlit as st

from analysis.figures.chunk_input import chunk_outcome
from analysis.figures.views import SLICE_ANCHORS
from analysis.measures.volumes import FIELDS, MODES
from analysis.measures.world import READOUT_SAMPLES
from app import cache, layout, state, stepper, world_view
from app.figure_cache import figure_cache

MODE_NAMES = {"norm": "norm", "channel": "one channel", "pca": "PCA"}
FIRST_PAGE_SENT = "first_page_sent"


def volume_controls(channels: int, fields: list[str]) -> layout.VolumeView:
    """One row of controls for how the volumes are drawn (remembered while other pages are open)."""
    field_col, mode_col, index_col, kind_col, anchor_col = st.columns([1, 2, 1.3, 1.6, 2], vertical_alignment="bottom")
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
        kind = layout.remembered(st.segmented_control, "Plotly view", "explore.kind", "volume",
                                 options=["volume", "isosurface"], required=True)
    with anchor_col:
        anchor = layout.remembered(st.selectbox, "Slices", "explore.anchor", "write", options=list(SLICE_ANCHORS),
                                   format_func=SLICE_ANCHORS.get)
    return layout.VolumeView(field, mode, int(index), kind, anchor)


def prediction_card(outcome: dict, predicts: bool = True) -> None:
    """The chunk's prediction against the truth, or what the chunk stores when nothing is predicted
    (``predicts`` False: a trace recorded without targets holds no predictions at all)."""
    event = outcome["event"][:1].upper() + outcome["event"][1:]  # str.capitalize would lower a token's case
    if not predicts:
        st.info(f"{event}. This trace was recorded without targets, so it holds no "
                f"predictions (trace_model(..., targets=...) adds them).", icon=":material/input:")
        return
    if not outcome["scored"]:
        st.info(f"{event}: nothing to predict here; the model only takes it in.",
                icon=":material/input:")
        return
    if "error" in outcome:  # a reconstructed patch: no right or wrong, an error
        st.markdown(f"Reconstructed the hidden patch · RMS pixel error **{outcome['error']:.3f}** "
                    f"(pixels in [0, 1]); the Images page shows the whole picture.")
        return
    verdict = ":green-badge[:material/check: right]" if outcome["correct"] else ":red-badge[:material/close: wrong]"
    st.markdown(f"Predicted **{outcome['prediction']}** · truth **{outcome['truth']}** {verdict}  \n"
                f"p(truth) = {outcome['p_truth']:.1%}, p(prediction) = {outcome['p_prediction']:.1%}")


context = state.current()
stepper.stepped_page(context, "Explore",
                     "Step through the sample chunk by chunk: every view follows the current chunk.")
trace, chunk = context.trace, context.chunk
series, view = None, layout.VolumeView()
if context.has_memory_views:
    lay = trace.layer(context.layer)
    view = volume_controls(lay.channels, [f for f in FIELDS if getattr(lay, f) is not None])
    series = cache.volume_series(context.ref, context.sample, context.layer, view.field, view.mode,
                                 view.index)


def figures_job(at: int):
    return cache.chunk_figures_job(trace, context.sample_key, context.layer, series, view.kind, view.anchor, at)


def build_ahead() -> None:
    """Have the neighbouring chunks' figures (and their PyVista renderings) built while this one is on screen.

    Not on a session's first page: the browser is still loading Plotly then and needs the CPU more.
    """
    if not st.session_state.get(FIRST_PAGE_SENT):
        st.session_state[FIRST_PAGE_SENT] = True
        return
    chunks = [c for c in (chunk + 1, chunk + 2, chunk - 1, chunk + 3) if 0 <= c < trace.num_chunks]
    jobs = [job for c in chunks for job in (figures_job(c), stepper.annotation_job(context, c))]
    if series is not None:
        blocks = dict.fromkeys(c // cache.FRAME_BLOCK for c in chunks)
        jobs += [cache.volume_frames_job(context.sample_key, context.layer, series, b) for b in blocks]
    figure_cache().ahead(jobs)


if series is not None:  # the PyVista rendering starts in the worker (VTK leaves the GIL) while the figures are built
    figure_cache().ahead([cache.volume_frames_job(context.sample_key, context.layer, series, chunk // cache.FRAME_BLOCK)])
figures = figure_cache().get(*figures_job(chunk))
outcome = chunk_outcome(trace, chunk)

if series is None:  # predictions only: no memory to draw
    left, right = st.columns(2)
    with left:
        layout.chart(figures["input"], "input", height=400)
    with right:
        prediction_card(outcome, trace.has_predictions)
        layout.chart(figures["timeline"], "timeline", height=300)
    build_ahead()
    layout.memory_notice(context, "The memory views")
    st.stop()

input_col, volume_col, render_col = st.columns([1, 1.25, 1.05])
with input_col:
    layout.chart(figures["input"], "input", height=340)
    prediction_card(outcome, trace.has_predictions)
with volume_col:
    layout.chart(figures["volume"], "volume", height=440)
with render_col:
    st.markdown(f"**{series.label}**, PyVista volume rendering")
    st.image(cache.volume_frame(context.sample_key, context.layer, series, chunk), width="stretch")
    st.caption("Plotly (middle) turns and zooms; PyVista (here) renders off-screen. Low values are transparent; "
               "one colour scale holds for every chunk.")

timeline_col, slices_col = st.columns([1, 1.3])
with timeline_col:
    layout.chart(figures["timeline"], "timeline", height=300)
with slices_col:
    st.markdown(f"**Slices of {series.label}** {SLICE_ANCHORS[view.anchor]}")
    layout.chart(figures["slices"], "slices", height=270)

st.markdown("##### Where it reads and writes, and how it gates")
trajectory_col, sigma_col, gates_col = st.columns([1.2, 1, 1])
with trajectory_col:
    layout.chart(figures["trajectory"], "trajectory", height=400)
with sigma_col:
    layout.chart(figures["sigma"], "sigma", height=400)
with gates_col:
    layout.chart(figures["gates"], "gates", height=400)

if world_view.supported(context):
    st.markdown("##### Does the memory's space follow the world?")
    question = ("the ball's position read off each write" if context.task == "occlusion"
                else "the map decoded from what the memory returns for each cell")
    if layout.remembered(st.toggle, f"Show {question} (fits a linear read-out over {READOUT_SAMPLES} samples once)",
                         "explore.world", False):
        world_view.readout_figure(context)
build_ahead()
