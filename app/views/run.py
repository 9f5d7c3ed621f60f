"""Run: a training run followed while it grows — the addressing film of its records so far, where a collapse began,
and the newest snapshot of its probe, opened in Explore.

A page of its own, not a section of Diagnose: a run is neither the checkpoint nor the trace the other pages show,
and it keeps growing. The part that follows it draws itself again every :data:`POLL_S` seconds (``st.fragment``),
without the rest of the page; each poll reads only the records appended since the last (``app.runs``).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from analysis.figures.escape import markdown_code, markdown_text
from app import layout, runs
from app.sidebar import CHOICE_KEY, TRACES_KEY
from app.state import trace_label
from tensor_memory.errors import EXPECTED_ERRORS, describe

POLL_S = 1.0  # seconds between two polls of the run: a new record is drawn within about this
TO_EXPLORE_KEY = "run.to_explore"  # set when a snapshot was opened: the page's next full run goes to Explore


def open_snapshot(path: Path, label: str) -> None:
    """Make the snapshot trace ``path`` the shown trace (a button's callback: before the sidebar draws)."""
    st.session_state.setdefault(TRACES_KEY, {})[label] = path
    st.session_state[CHOICE_KEY] = label
    st.session_state[TO_EXPLORE_KEY] = True


def snapshot(run: runs.LiveRun) -> None:
    """The newest snapshot of the probe, and a button that opens it in Explore (its chunk stepper)."""
    path = run.follower.newest_snapshot()
    if path is None:
        st.caption("No snapshot of the probe yet.")
        return
    step = int(path.name.split(".")[0].removeprefix("step-"))
    label = trace_label(f"{run.follower.folder.name} step {step}")
    st.caption(f"Newest snapshot of the probe: step {step:,} ({markdown_code(path.name)}).")
    if st.button(
        f"Open step {step:,} in Explore", icon=":material/view_in_ar:", on_click=open_snapshot, args=(path, label)
    ):
        st.rerun(scope="app")  # the page is left from a full run: switching pages in a fragment's run breaks it


@st.fragment(run_every=POLL_S)
def follow(run: runs.LiveRun, layer: str | None) -> None:
    """What grows with the run: the newest step, the film, the onsets, the snapshot; drawn again every POLL_S."""
    try:
        run.poll()
    except EXPECTED_ERRORS as error:
        st.error(markdown_text(f"Stopped following {run.follower.folder}: {describe(error)}"))
        return
    numbers = st.columns(3)
    numbers[0].metric("Latest step", "—" if run.last_step is None else f"{run.last_step:,}")
    numbers[1].metric("Records", f"{len(run.records):,}")
    numbers[2].metric(
        "Loss", "—" if not run.records or run.records[-1].get("loss") is None else f"{run.records[-1]['loss']:.4g}"
    )
    try:
        layout.chart(run.figure(layer), "run_film", height=480)
    except ValueError:
        st.info("Waiting for the first record of the memory layers' addressing.", icon=":material/hourglass_top:")
    runs.onset_notice(run)
    snapshot(run)


if st.session_state.pop(TO_EXPLORE_KEY, False):
    st.switch_page("views/explore.py")
st.markdown("## Run")
folder = runs.opened()
if folder is None:
    st.info(
        "No training run is open. Start the explorer with `--run DIR` (a folder written by `analysis.monitor` or "
        "`tensor-memory train`), or type a run folder under the data root in the sidebar's **Training run**.",
        icon=":material/info:",
    )
    st.stop()
try:
    run = runs.live(folder)
except EXPECTED_ERRORS as error:
    st.error(markdown_text(f"Could not follow the run {folder}: {describe(error)}"))
    st.stop()
header = run.follower.header
badges = st.container(horizontal=True, gap="small")
badges.badge(markdown_text(folder.name), icon=":material/monitoring:", color="blue")
badges.badge(markdown_text(f"model: {header['model']}"), color="gray")
badges.badge(f"a record every {header['every']:,} steps", color="gray")
if header.get("writer"):
    badges.badge(markdown_text(header["writer"]), color="gray")
st.caption(
    "The memory layers' addressing on a fixed probe as the run records it, drawn as it arrives; a dotted line marks "
    "where the layer's collapse began."
)
names = list(header["layers"])
if len(names) > 1:
    layer = layout.remembered(
        st.columns([1, 2])[0].selectbox,
        "Memory layer",
        f"run.layer.{folder}",
        names[-1],
        options=names,
        format_func=lambda name: name.replace("backbone.", "").replace(".memory", " memory"),
    )
else:
    layer = names[0] if names else None
follow(run, layer)
