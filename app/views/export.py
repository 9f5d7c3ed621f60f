"""Export: the trace, the current chunk's figures (HTML and PNG) and the offline report, to download.

The chunk is the stepper's: the browser reports the chunk it shows, and the page builds that chunk's files here,
from its page of a long trace (the figures over time show that page; no volume outside it is read). A trace store
is a folder of any size: it is taken away as the folder, and no report is made of it here (the report reads every
chunk's volumes)."""

from __future__ import annotations

import re

import streamlit as st

from analysis.figures.escape import markdown_code, markdown_text
from analysis.figures.export import PNG_NEEDS, figure_pngs, figures_html
from analysis.figures.render import HTML_NEEDS, footprint_plotter, plotter_html
from analysis.figures.report import report_html
from analysis.traces.export import zip_bytes
from app import cache, layout, paging, state, stepping
from tensor_memory.optional import absent

context = state.current()
chunk = stepping.stepped_page(
    context,
    "Export",
    "Take the sample away: its trace, the figures of the current chunk, the offline report.",
    key="export",
)
trace = context.trace
view = layout.volume_view()
series = (view.field, view.mode, view.index) if context.has_memory_views else None
span = paging.stepping_span(chunk, context.num_chunks)  # the chunk's page of a long trace; None: the whole trace
figures = cache.chunk_figures(context.ref, context.sample, context.layer, series, view.kind, view.anchor, chunk, span)
store = isinstance(context.ref, cache.TraceRef) and context.ref.is_store
shown = context.ref.label if context.is_trace_file else f"{context.ref.label}-seed{context.seed}"
name = re.sub(r"[^A-Za-z0-9._-]+", "_", shown.removeprefix("trace: ")).strip("_")
title = f"{shown}, chunk {chunk}"
# An optional package missing: its button is off, and the page says which group brings it.
png_missing = absent(*PNG_NEEDS)
html_missing = next(filter(None, (absent(*needs) for needs in HTML_NEEDS)), None)


def png_archive() -> bytes:
    """Every Plotly figure drawn in Chromium, plus the PyVista volume rendering when there is a memory (rendered
    here, on the click: the page opens without waiting for PyVista)."""
    first = 0 if span is None else span[0]
    rendered = (
        {}
        if series is None
        else {
            f"pyvista_{view.field}.png": cache.volume_renderings(
                context.ref, context.sample, context.layer, *series, span
            )[chunk - first]
        }
    )
    return zip_bytes({**{f"{key}.png": data for key, data in figure_pngs(figures).items()}, **rendered})


trace_col, figures_col, report_col = st.columns(3)
with trace_col, st.container(border=True):
    st.markdown("**Trace**")
    if store:
        st.caption(
            f"This trace is a store, the folder {markdown_code(context.ref.path)} on the server "
            f"({context.num_chunks:,} chunks): copy the folder to take it away (`analysis.load_trace` opens it)."
        )
    else:
        st.caption(
            "Every recorded array of the sample (safetensors with a JSON header; `analysis.load_trace` reads "
            "it back and validates it)."
        )
    st.download_button(
        "Trace (.safetensors)",
        b"" if store else cache.trace_file(context.ref, context.sample),
        file_name=f"{name}.trace.safetensors",
        mime="application/octet-stream",
        icon=":material/database:",
        key="download_trace",
        disabled=store,
    )
with figures_col, st.container(border=True):
    st.markdown(f"**Figures of chunk {chunk}**")
    st.caption(
        f"{len(figures)} figures as the Explore page draws them now: one offline HTML page, or PNG images "
        "(drawn in headless Chromium; takes a few seconds)."
    )
    st.download_button(
        "Figures (HTML)",
        lambda: figures_html(figures, title),
        file_name=f"{name}-chunk{chunk}.html",
        mime="text/html",
        icon=":material/code:",
        key="download_html",
    )
    st.download_button(
        "Figures (PNG, zip)",
        png_archive,
        file_name=f"{name}-chunk{chunk}-png.zip",
        mime="application/zip",
        icon=":material/image:",
        key="download_png",
        disabled=png_missing is not None,
    )
    if context.has_memory_views:
        st.download_button(
            "Footprint, interactive 3D (PyVista HTML)",
            lambda: plotter_html(footprint_plotter(trace.layer(context.layer), chunk)),
            file_name=f"{name}-chunk{chunk}-footprint.html",
            mime="text/html",
            icon=":material/3d_rotation:",
            key="download_footprint",
            disabled=html_missing is not None,
        )
    for missing in (png_missing, html_missing if context.has_memory_views else None):
        if missing is not None:
            st.caption(markdown_text(str(missing)))
with report_col, st.container(border=True):
    st.markdown("**Offline report**")
    if store:
        st.caption(
            f"The report reads every chunk's volumes: it is not made here of a trace store of "
            f"{context.num_chunks:,} chunks."
        )
    elif context.has_memory_views:
        st.caption(
            "One self-contained HTML page: the addressing verdict, the predictions, the belief, the "
            "trajectories, the state and the gates."
        )
        st.download_button(
            "Report (HTML)",
            lambda: report_html(trace),
            file_name=f"{name}-report.html",
            mime="text/html",
            icon=":material/description:",
            key="download_report",
        )
    else:
        st.caption("The offline report describes a memory; this checkpoint has none to report on.")
with st.expander("Preview of the exported figures"):
    columns = st.columns(2)
    for position, (key, fig) in enumerate(figures.items()):
        with columns[position % 2]:
            layout.chart(fig, f"export_{key}", height=320)
