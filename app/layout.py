"""Layout pieces every page shares: the page header, charts, remembered controls, notices."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from analysis.figures.escape import markdown_code, markdown_text

from .cache import TraceRef
from .sidebar import CHOICE_KEY
from .state import DEFAULT_CHECKPOINT, Context, shipped_checkpoints

CHART_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}
KEEP = "keep."  # prefix of the plain keys that remember a control's value while its page is not shown


def chart(fig: go.Figure, key: str, height: int | None = None) -> None:
    """A Plotly figure as ``analysis`` drew it (no Streamlit theme), full width, with a PNG download button.

    The figure is only read (it may be shared through :func:`app.cache.chunk_figures`); ``height`` in pixels
    overrides the figure's own.
    """
    st.plotly_chart(fig, theme=None, config=CHART_CONFIG, key=key, height=height or "content")


def remembered(widget: Callable[..., Any], label: str, key: str, default: Any, **kwargs: Any) -> Any:
    """A widget whose value survives visits to other pages (Streamlit forgets widgets that are not drawn)."""
    if key not in st.session_state:  # forgotten while another page was shown: restore the last value
        st.session_state[key] = st.session_state.get(KEEP + key, default)
    value = widget(label, key=key, **kwargs)
    st.session_state[KEEP + key] = value
    return value


def recalled(key: str, default: Any) -> Any:
    """The value a :func:`remembered` widget last had (``default`` before it was ever drawn)."""
    return st.session_state.get(KEEP + key, default)


def header(context: Context, title: str, subtitle: str) -> None:
    """The page title with what is shown: checkpoint, task, backbone and sample."""
    st.markdown(f"## {title}")
    badges = st.container(horizontal=True, gap="small")
    if context.is_trace_file:
        badges.badge(markdown_text(context.ref.label), icon=":material/description:", color="blue")
        badges.badge(
            markdown_text(f"task: {context.task}" if context.task else f"model: {context.backbone}"), color="gray"
        )
        badges.badge("recorded sample", color="gray")
        trace_notes(context)
    else:
        badges.badge(markdown_text(context.ref.label), icon=":material/deployed_code:", color="blue")
        badges.badge(markdown_text(f"task: {context.task}"), color="gray")
        badges.badge(
            markdown_text(f"backbone: {context.backbone}"), color="violet" if context.backbone == "tensor" else "orange"
        )
        badges.badge(f"seed {context.seed}", color="gray")
    st.caption(subtitle)


def a_task(task: object) -> str:
    """``task`` as Markdown code after its article ("an `occlusion`", "a `masked_patches`"): task names are English
    words, whose first letter says which article they take."""
    return f"{'an' if str(task)[:1].lower() in tuple('aeiou') else 'a'} {markdown_code(task)}"


def trace_notes(context: Context) -> None:
    """Under a trace's name: a store's, that it is read a page at a time, and a store cut short, what it lacks."""
    if not (isinstance(context.ref, TraceRef) and context.ref.is_store):
        return
    st.caption(
        f"A trace store of {context.num_chunks:,} chunks, read a page at a time: its volumes are checked for NaN or "
        f"infinite values as each page reads them."
    )
    if context.trace is not None and context.trace.incomplete:
        st.warning(
            markdown_text(
                f"{context.ref.label} is incomplete: {context.trace.incomplete}. Its capture stopped before the "
                f"end; it shows the chunks recorded up to its last complete segment."
            ),
            icon=":material/warning:",
        )


def require_checkpoint(context: Context, title: str, needs: str) -> None:
    """Stop a page a trace file cannot show, saying why in one line (``needs``: what the page runs)."""
    if context.is_trace_file:
        st.markdown(f"## {title}")
        st.info(
            f"{title} is off for the trace file {markdown_text(context.ref.label)}: it {needs}, and a trace file "
            f"holds one recorded sample, no weights. Open a checkpoint in the sidebar for this page.",
            icon=":material/info:",
        )
        trace_notes(context)
        st.stop()


def require_trace(context: Context) -> None:
    """Stop the page, saying why, when no sample could be run."""
    if context.trace is None:
        st.error(markdown_text(context.problem or "No sample could be run for this checkpoint."))
        st.stop()


def require_chunks(context: Context) -> None:
    """Stop the page, saying why, when the sample has no chunk to step through."""
    if context.num_chunks == 0:
        st.info(
            "This sample has no chunks to step through: the sequence is shorter than one memory chunk. Make the "
            "horizon longer in the sidebar."
        )
        st.stop()


def _open_default() -> None:
    st.session_state[CHOICE_KEY] = DEFAULT_CHECKPOINT


def memory_notice(context: Context, what: str) -> bool:
    """True when the memory views can be drawn; else an info box saying why, with a way to a tensor checkpoint."""
    if context.has_memory_views:
        return True
    st.info(
        f"{what} are not shown: {context.memory_note or 'there is no trace of this sample.'}", icon=":material/info:"
    )
    if DEFAULT_CHECKPOINT in shipped_checkpoints() and context.ref.label != DEFAULT_CHECKPOINT:
        st.button(
            f"Open {DEFAULT_CHECKPOINT}",
            icon=":material/swap_horiz:",
            on_click=_open_default,
            key=f"open_default_{what}",
        )
    return False


@dataclasses.dataclass(frozen=True)
class VolumeView:
    """How the Explore page draws the memory's volumes (remembered across pages; Export and Diagnose reuse it)."""

    field: str = "h"
    mode: str = "norm"
    index: int = 0
    kind: str = "points"
    anchor: str = "write"
    rendered: bool = False  # with PyVista's volume renderings beside (every chunk rendered once, about 2 s)


def volume_view() -> VolumeView:
    """The volume settings the Explore page last used."""
    defaults = VolumeView()
    return VolumeView(
        **{f.name: recalled(f"explore.{f.name}", getattr(defaults, f.name)) for f in dataclasses.fields(VolumeView)}
    )


__all__ = [
    "chart",
    "remembered",
    "recalled",
    "header",
    "trace_notes",
    "require_trace",
    "require_chunks",
    "require_checkpoint",
    "memory_notice",
    "VolumeView",
    "volume_view",
]
