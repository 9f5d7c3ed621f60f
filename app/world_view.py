"""The "does the memory's space mean something?" panel, shared by Explore and Diagnose."""

from __future__ import annotations

import streamlit as st

from analysis.figures.escape import markdown_code
from analysis.figures.world import decoded_map_figure, write_position_figure
from analysis.measures.world import READOUTS
from app import cache, layout
from app.state import Context


def readout_numbers(context: Context) -> None:
    """The read-out's scores on unseen samples, as metrics (Diagnose)."""
    fit = cache.world_readout(context.ref, context.layer)
    if fit is None:
        return
    columns = st.columns(3)
    if context.task == "occlusion":
        columns[0].metric(
            "R², writes → ball (visible frames)",
            f"{fit['r2_visible']:.2f}",
            help="A linear map from μ_write to the ball's (row, column), fitted on seed 0's samples "
            "and scored on seeds 1–3: 1 means the writes go where the ball is.",
        )
        columns[1].metric(
            "R², hidden frames",
            "—" if fit["r2_hidden"] is None else f"{fit['r2_hidden']:.2f}",
            help="The same map on frames where the ball is hidden: do the writes keep tracking it?",
        )
    else:
        columns[0].metric(
            "map decoded from memory (observed cells)",
            f"{fit['accuracy_observed']:.1%}",
            help="A linear probe from what the memory returns for a cell to its occupancy, fitted on "
            "seed 0's samples and scored on seeds 1–3, on cells some observation revealed.",
        )
        columns[1].metric("all cells", f"{fit['accuracy_all']:.1%}", help="Unobserved cells can only be guessed.")
    columns[2].caption(
        f"Layer {markdown_code(fit['layer'])}; fitted on seed {fit['fit_seed']}, scored on seeds "
        f"{', '.join(map(str, fit['eval_seeds']))} (never the same samples)."
    )


def readout_figure(context: Context) -> None:
    """The read-out applied to the session's sample (Explore and Diagnose)."""
    fit = cache.world_readout(context.ref, context.layer)
    if fit is None:
        return
    if context.task == "occlusion":
        trace = context.trace
        fig = write_position_figure(
            fit,
            trace.layer(fit["layer"]).mu_write,
            trace.meta["positions"],
            trace.meta["occluded"],
            size=int(context.checkpoint.task.config.size),
        )
    else:
        fig = decoded_map_figure(cache.decoded_sample_map(context.ref, context.sample, context.layer))
    layout.chart(fig, "world_readout", height=360)


def supported(context: Context) -> bool:
    return context.has_memory_views and context.task in READOUTS and not context.is_trace_file  # fits a model
