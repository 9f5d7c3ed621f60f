"""Tensor Memory Explorer: ``streamlit run app/main.py`` (``make run`` runs ``python -m app``: this, with the opening
page prepared while the server starts).

Every run: the sidebar chooses a checkpoint, a sample and a memory layer; the sample's trace is
captured (cached); the session's :class:`app.state.Context` is published; the chosen page draws.
Pages only lay out what ``analysis/`` computes.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the folder holding the packages: the clone, or where they are installed
if str(ROOT) not in sys.path:  # `streamlit run app/main.py` puts app/ on the path, not the packages' folder
    sys.path.insert(0, str(ROOT))

import streamlit as st  # noqa: E402

from analysis.figures import use_template_by_default  # noqa: E402
from app import pretrained_view, sidebar, state  # noqa: E402
from app.cache import Sample, TraceRef  # noqa: E402
from tensor_memory.pretrained.checkpoint import is_pretrained_memory  # noqa: E402

use_template_by_default()  # every figure of the app is white: built so, not re-templated (10 ms a figure)
st.set_page_config(
    page_title="Tensor Memory Explorer",
    page_icon=str(Path(__file__).with_name("favicon.svg")),  # served by the app: an emoji icon is fetched off-host
    layout="wide",
    initial_sidebar_state="expanded",
    menu_items={
        "About": "Tensor Memory Explorer: watch a fixed-size 3D voxel memory work, chunk by "
        "chunk, in trained checkpoints."
    },
)

PAGES = {
    "explore": st.Page("views/explore.py", title="Explore", icon=":material/view_in_ar:", default=True),
    "occlusion": st.Page("views/occlusion.py", title="Occlusion", icon=":material/visibility_off:"),
    "diagnose": st.Page("views/diagnose.py", title="Diagnose", icon=":material/troubleshoot:"),
    "teach": st.Page("views/teach.py", title="Teach", icon=":material/school:"),
    "images": st.Page("views/images.py", title="Images", icon=":material/image:"),
    "text": st.Page("views/text.py", title="Text", icon=":material/notes:"),
    "audit": st.Page("views/audit.py", title="Audit", icon=":material/policy:"),
    "export": st.Page("views/export.py", title="Export", icon=":material/download:"),
    "run": st.Page("views/run.py", title="Run", icon=":material/monitoring:"),
}
TRACE_PAGES = ("explore", "diagnose", "text", "export", "run")  # what a trace shows (Text: with its tokens; Run: any)
NOT_FOR_TRACE = "Not for this trace"  # the navigation's menu of the pages a trace file cannot show

with st.sidebar:
    st.markdown("### :material/deployed_code: Tensor Memory Explorer")
    st.caption("A fixed-size 3D voxel memory that Transformer tokens write to and read from.")
    chosen = sidebar.checkpoint_section()
if isinstance(chosen, TraceRef):  # a trace file: the pages that read a trace, the others in a menu of their own
    trace = state.open_trace_file(chosen)
    applies = [n for n in TRACE_PAGES if n != "text" or trace.tokens is not None]
    page = st.navigation(
        {"": [PAGES[n] for n in applies], NOT_FOR_TRACE: [p for n, p in PAGES.items() if n not in applies]},
        position="top",
    )
else:
    page = st.navigation(list(PAGES.values()), position="top")
with st.sidebar:
    sidebar.run_section()  # after the navigation: it links to the Run page
st.html("<style>[data-testid='stMainBlockContainer'] { padding-top: 3rem; }</style>")  # the top bar holds the pages

if isinstance(chosen, TraceRef):
    with st.sidebar:
        layer = sidebar.layer_section(trace)
    state.publish(
        state.Context(
            ref=chosen,
            loaded=None,
            sample=Sample(),
            trace=trace,
            problem=None,
            layer=layer,
            memory_note=state.memory_note(chosen, None, trace),
        )
    )
    page.run()
    st.stop()
if is_pretrained_memory(Path(chosen.path)):  # a memory for frozen MiniLM: its own page
    pretrained_view.render(chosen)
    st.stop()
with st.sidebar:
    ref, loaded = state.load_checkpoint_or_previous(chosen)
    sample = sidebar.sample_section(loaded.checkpoint)
trace, sample, problem = state.capture_sample(ref, sample)
with st.sidebar:
    layer = sidebar.layer_section(trace)
state.publish(
    state.Context(
        ref=ref,
        loaded=loaded,
        sample=sample,
        trace=trace,
        problem=problem,
        layer=layer,
        memory_note=state.memory_note(ref, loaded, trace),
    )
)
page.run()
