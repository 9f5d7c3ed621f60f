"""Audit: is the checkpoint causal? Inputs after each position perturbed; earlier outputs must not move."""

from __future__ import annotations

import streamlit as st

from analysis.figures.escape import markdown_code
from analysis.figures.language import audit_heatmap_figure
from app import cache, layout, state

context = state.current()
layout.require_checkpoint(context, "Audit", "perturbs the inputs and runs the model again to test causality")
layout.header(
    context,
    "Audit",
    "A causal model's output at position t depends on inputs up to t only. The audit "
    "replaces the token features after t with noise, for many t, and measures how far "
    "every layer's output and the logits at positions ≤ t moved (0 for a causal model).",
)
result = cache.causality(context.ref, context.seed)
if result["verdict"] == "causal":
    st.success(
        f"**causal**: no output at or before a perturbed position moved (largest change "
        f"{result['max_change']:.2g} of its RMS).",
        icon=":material/check_circle:",
    )
else:
    shared = (
        " It threads one memory state through its layers (`share_state=True`), as the paper's public code "
        "does: later layers read writes of future chunks."
        if result.get("share_state")
        else ""
    )
    if result.get("bidirectional"):
        shared = (
            " This model is bidirectional by design (`causal=False`: it reads each image whole, as a ViT "
            "does), so later inputs moving earlier outputs is expected, not a flaw."
        )
    st.error(
        f"**leaks**: outputs moved by up to {result['max_change']:.3g} of their RMS when only later inputs "
        f"changed.{shared}",
        icon=":material/error:",
    )
st.dataframe(
    [
        {
            "output": name,
            "largest change (of RMS)": f"{o['max_change']:.3g}",
            "first leaking t": "—" if o["leak_from"] is None else o["leak_from"],
        }
        for name, o in result["outputs"].items()
    ],
    hide_index=True,
)
layout.chart(audit_heatmap_figure(result), key="audit_heatmap")
st.caption(
    f"Audited positions: {len(result['positions'])} of {len(result['heatmap']['output'])}; tolerance "
    f"{result['tolerance']:.0e} of the output's RMS. The same check from the command line: "
    f"{markdown_code(f'tensor-memory audit --checkpoint {context.ref.path}')}."
)
