"""A training run followed in the app: which run folders a session may open, and each one's follower.

A session may open the run the server was started with (``tensor-memory app --run``) and run folders under the
data root (``--data-root``), nothing else of this machine. Each opened run's
:class:`~analysis.traces.run_log.RunFollower` lives in the session (:func:`live`), so a poll reads only the records
appended since the last one; the film (``addressing_history_figure``) is drawn again only when records arrived.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import streamlit as st

from analysis.figures.escape import markdown_code, markdown_text
from analysis.figures.training import addressing_history_figure
from analysis.measures.addressing import BOUNDARY_FRACTION, DEAD_GATE_SCALE, SIGMA_COLLAPSE_VOXELS
from analysis.measures.collapse_onset import collapse_onset
from analysis.traces.run_log import RunFollower, follow_run

from .cli import RUN_ENV
from .state import data_root

WHAT_COLLAPSED = {  # a collapse verdict (collapse_onset's criteria) in the words of an onset
    "dead memory": f"the memory went dead (σ(γ) under {DEAD_GATE_SCALE:g}: the read is multiplied away)",
    "coordinate collapse": "the writes collapsed to one place",
    "sigma collapse": f"σ shrank to a point (under {SIGMA_COLLAPSE_VOXELS:g} voxels)",
    "boundary saturation": f"over {BOUNDARY_FRACTION:.0%} of the coordinates pinned at a face of the grid",
}
RUN_KEY = "run_folder"  # the folder of the run this session follows
LIVE_KEY = "run_followers"  # {folder: LiveRun} of the runs this session opened


def startup_run() -> Path | None:
    """The run folder to follow on (``$TENSOR_MEMORY_RUN``, set by ``tensor-memory app --run``)."""
    chosen = os.environ.get(RUN_ENV)
    return Path(chosen).expanduser().resolve() if chosen else None


def follower(folder: Path, where: str) -> RunFollower:
    """The follower of the run folder ``folder`` with every record so far read (its header and records checked);
    a ValueError in one line, starting with ``where``, when it is not a run folder."""
    try:
        return follow_run(folder)
    except ValueError as error:  # FileFormatError is one
        raise ValueError(f"{where} {error}") from None


def may_open(folder: Path) -> bool:
    """Whether a session may open ``folder`` (resolved): the startup run, or a folder under the data root."""
    root = data_root()
    return folder == startup_run() or (root is not None and folder.is_relative_to(root))


def open_run(text: str) -> Path:
    """Follow the run folder ``text`` (relative to the data root, or absolute) in this session; returns it. A
    ValueError when it is outside what the session may open or holds no run. The run already followed stays as
    it is, its records not read again."""
    root = data_root()
    typed = Path(text.strip()).expanduser()
    folder = ((root / typed) if root is not None and not typed.is_absolute() else typed).resolve()
    if not may_open(folder):
        allowed = f"folders under the data root {root}" if root is not None else "no folder typed here"
        raise ValueError(
            f"{text.strip()}: outside what this explorer may open ({allowed}; start it with --run DIR or "
            f"--data-root DIR to follow another run)"
        )
    live(folder)
    st.session_state[RUN_KEY] = str(folder)
    return folder


@dataclasses.dataclass
class LiveRun:
    """A followed run: its follower, and what is drawn of its records, made again only when records arrived."""

    follower: RunFollower
    made: dict[Any, Any] = dataclasses.field(default_factory=dict)  # {(what, records held, …): made}

    def poll(self) -> int:
        """Read what was appended since the last poll; how many records came (after a restart: all of them)."""
        new = len(self.follower.poll())
        if self.follower.restarted:
            self.made.clear()
        return new

    @property
    def records(self) -> list[dict[str, Any]]:
        return self.follower.records

    @property
    def last_step(self) -> int | None:
        return self.records[-1]["step"] if self.records else None

    def _made(self, what: str, make: Any, *args: Any) -> Any:
        key = (what, len(self.records), *args)
        if key not in self.made:
            self.made = {k: v for k, v in self.made.items() if k[0] != what}  # only the newest of each is kept
            self.made[key] = make(*args)
        return self.made[key]

    def history(self) -> dict[str, Any]:
        """The addressing history of the records so far (``RunFollower.history``)."""
        return self._made("history", self.follower.history)

    def figure(self, layer: str | None) -> go.Figure:
        """The addressing film of ``layer`` over the records so far, a line where its collapse began (a ValueError
        when no record holds addressing)."""
        return self._made("figure", self._film, layer)

    def _film(self, layer: str | None) -> go.Figure:
        figure = addressing_history_figure(self.history(), layer)
        figure.update_xaxes(matches="x")  # every panel over the same steps, zoomed together
        onset = self.onsets().get(layer or sorted(self.history()["layers"])[-1])
        if onset is not None:
            figure.add_vline(x=onset["step"], line_dash="dot", line_color="#d62728", row="all", col="all")
        return figure

    def onsets(self) -> dict[str, dict[str, Any] | None]:
        """{layer: where its collapse began (``collapse_onset``), or None}, over the records so far."""
        return self._made("onsets", lambda: collapse_onset(self.history()))


def onset_lines(onsets: dict[str, dict[str, Any] | None]) -> list[str]:
    """One Markdown line per collapsed layer: its path, what collapsed, and the step from which it has stayed so."""
    return [
        f"{markdown_code(layer)}: {markdown_text(WHAT_COLLAPSED.get(onset['criterion'], onset['criterion']))} "
        f"from step {onset['step']:,}"
        for layer, onset in onsets.items()
        if onset is not None
    ]


def onset_notice(run: LiveRun) -> None:
    """Where each collapsed layer's collapse began, one error line each, or that none has collapsed so far."""
    lines = onset_lines(run.onsets())
    for line in lines:
        st.error(line, icon=":material/error:")
    if not lines and run.records:
        st.success(
            f"No memory layer has collapsed so far ({len(run.records):,} records, up to step {run.last_step:,}).",
            icon=":material/check_circle:",
        )


def opened() -> Path | None:
    """The folder of the run this session follows (the startup run until another is opened), or None."""
    if RUN_KEY not in st.session_state and startup_run() is not None:
        st.session_state[RUN_KEY] = str(startup_run())
    folder = st.session_state.get(RUN_KEY)
    return None if folder is None else Path(folder)


def live(folder: Path) -> LiveRun:
    """This session's follower of ``folder``, opened on first use (a ValueError when it is no longer a run)."""
    runs = st.session_state.setdefault(LIVE_KEY, {})
    if str(folder) not in runs:
        runs[str(folder)] = LiveRun(follower(folder, "Run folder"))
    return runs[str(folder)]


__all__ = [
    "startup_run",
    "follower",
    "may_open",
    "open_run",
    "opened",
    "live",
    "LiveRun",
    "onset_lines",
    "onset_notice",
    "RUN_KEY",
]
