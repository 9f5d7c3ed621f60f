"""The page for a memory trained on frozen MiniLM (checkpoints/minilm-tensor): what it recalls, and its gate.

These checkpoints hold a memory for a pretrained model, not a task model, so the chunk-by-chunk
pages do not apply; this one page lays out what ``analysis.measures.pretrained`` computes.
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from analysis.figures.escape import markdown_text
from analysis.figures.language import gate_history_figure
from analysis.measures.pretrained import closed_gate_scale, gate_history, recall_examples, window_text
from tensor_memory.optional import MissingPackage
from tensor_memory.pretrained.checkpoint import load_minilm_checkpoint

from . import layout
from .cache import CheckpointRef

DOCUMENT_KEY = "minilm.document"


@st.cache_resource(max_entries=2, show_spinner="Loading MiniLM and the memory…")
def _load(ref: CheckpointRef):
    return load_minilm_checkpoint(Path(ref.path))


@st.cache_data(max_entries=16, show_spinner="Running the document through MiniLM, with and without the memory…")
def _examples(ref: CheckpointRef, document: int) -> tuple[list, list]:
    model, _, _ = _load(ref)
    return window_text(model, document), recall_examples(model, document)


def render(ref: CheckpointRef) -> None:
    try:
        model, config, metrics = _load(ref)
    except MissingPackage as error:  # a core install without the hf group: say which group, not a traceback
        st.error(markdown_text(str(error)), icon=":material/extension_off:")
        st.stop()
    st.markdown("## Memory on a pretrained model")
    badges = st.container(horizontal=True, gap="small")
    badges.badge(markdown_text(ref.label), icon=":material/deployed_code:", color="blue")
    base = config["base"]
    badges.badge(markdown_text(f"base: all-MiniLM-L6-v2 ({base['package']} {base['version']})"), color="gray")
    badges.badge(f"memory after layer(s) {', '.join(map(str, model.config.layers))}", color="violet")
    st.caption(
        "MiniLM stays frozen and sees one window of 32 word pieces at a time; the memory carries what "
        "earlier windows said. In every later window the pieces an earlier window held are masked, and the "
        "model must name them. The checkpoint stores only the memory and the head, and names the base "
        "model by the sha256 of its weights."
    )
    if metrics:
        cols = st.columns(3)
        cols[0].metric("Recall with the memory", f"{metrics['accuracy']:.1%}")
        if "frozen" in metrics:
            cols[1].metric(
                "Frozen MiniLM + the same head",
                f"{metrics['frozen']['accuracy']:.1%}",
                help="Trained the same steps on the same batches, no memory.",
            )
        cols[2].metric(
            "σ(γ) after training",
            ", ".join(f"{g:.2g}" for g in metrics["gate_scale"]),
            help=f"Attached closed, at σ(γ) = {closed_gate_scale():.1e}.",
        )
    frozen = metrics.get("frozen", {}).get("accuracy") if metrics else None
    layout.chart(gate_history_figure(gate_history(Path(ref.path)), frozen), key="minilm_gate")
    st.markdown("##### One test document")
    document = int(st.number_input("Test document", min_value=0, max_value=500, step=1, key=DOCUMENT_KEY))
    windows, rows = _examples(ref, document)
    for k, text in enumerate(windows):
        st.markdown(f"**window {k}**: {markdown_text(text)}")
    if not rows:
        st.info("Nothing in this document repeats across windows: pick another.", icon=":material/info:")
        return
    st.dataframe(
        [
            {
                "window": r["window"],
                "truth": r["truth"],
                "with the memory": ", ".join(f"{t} {p:.0%}" for t, p in r["with_memory"][:3]),
                "memory read off": ", ".join(f"{t} {p:.0%}" for t, p in r["memory_off"][:3]),
            }
            for r in rows
        ],
        hide_index=True,
        width="stretch",
    )
