"""The chunk stepper: the one component every page that follows the current chunk draws, and the payload it reads.

A page hands the browser every chunk's views at once, a :class:`StepperPayload` built by :func:`stepper_payload`;
Previous, Next, Play/Pause, the slider and the arrow keys then show another chunk there (``browser/stepper.js``).
Pages whose views are all in the payload (Explore, Occlusion, Diagnose) step with no message to the server. Pages
that draw a chunk's views on the server (Teach runs the mechanism on it, Export writes its figures to files, Images
and Text fill metrics and tables) ask the browser to report: it then sends the chunk it shows back as the
component's value (:func:`reported_chunk` checks it), and the server runs the page again for that chunk.

The server moves the chunk itself only when it must (a new sample, another page of a long trace, "Go to chunk") and
counts those moves: a payload whose ``moves`` changed sends the browser to ``start``; otherwise the browser keeps the
chunk it is on, across new payloads and across pages of the same sample (it remembers it for the browser tab).

The component is a folder Streamlit serves: ``browser/index.html`` and ``browser/stepper.js`` beside the installed
Plotly's own ``plotly.min.js`` (copied once into a folder named by their digest; no CDN). It speaks Streamlit's
component messages directly (``componentReady``, ``render``, ``setFrameHeight``, ``setComponentValue``).
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any

import plotly
import plotly.graph_objects as go
import streamlit.components.v1 as components

from analysis.figures.annotations import annotation_figure, annotation_leaves
from analysis.figures.base import TEMPLATE
from analysis.figures.chunk_input import chunk_outcome
from analysis.figures.stepped import Leaves, plain_leaves
from analysis.traces.trace import Trace

SOURCE = Path(__file__).resolve().parent / "browser"
FILES = ("index.html", "stepper.js")
PLAY_INTERVAL_MS = 1000  # one chunk a second while playing
TRACK = "track"  # the annotation track under the controls: every payload has it


@dataclasses.dataclass(frozen=True)
class Row:
    """A row of a page's views: columns of cell names (drawn top to bottom), with the columns' relative widths."""

    columns: tuple[tuple[str, ...], ...]
    widths: tuple[float, ...]


@dataclasses.dataclass(frozen=True)
class Heading:
    """A heading between rows."""

    text: str


@dataclasses.dataclass(frozen=True)
class StepperPayload:
    """Every chunk's views of one page, as ``browser/stepper.js`` reads them (:meth:`to_json`). Fields:

    - ``id``: names the sample, the page's settings and the chunks held; the browser redraws only when it changes.
    - ``sample``: names the sample alone; across payloads of one sample the browser keeps its chunk.
    - ``offset``, ``count``, ``total``: the chunks held are ``offset`` … ``offset + count − 1`` of the trace's
      ``total`` (a long trace goes a page at a time); chunks keep the trace's numbers.
    - ``rows``: the layout, :class:`Row` and :class:`Heading` in order, under the controls and the track.
    - ``views``: a view's name → one view per chunk held: a Plotly figure's JSON, an HTML text or a PNG as a data URL;
      for a view in ``drawn``, the leaves that make its figure that chunk's (``analysis.figures.stepped``).
    - ``kinds``: a name → ``"figure"``, ``"html"`` or ``"image"``.
    - ``labels``: a name → the caption above its cell (names without one are left out).
    - ``heights``: a name → its height in pixels, or None for a figure's own.
    - ``events``: per chunk held, what happens in it, in words (under the counter).
    - ``template``: the figures' Plotly template, sent once; a figure without a template of its own takes it.
    - ``drawn``: a view's name → its figure drawn once for the page (at the first chunk held), where each chunk's
      figure differs from it only in a few values (the current chunk's marker, a volume's data, a title).
    - ``reports``: whether the browser sends the chunk it shows back to the server (pages drawn on the server).
    - ``interval_ms``: Play's pace, milliseconds a chunk.
    - ``start``: the server's chunk, where the browser opens on a new sample or after a move of the server's.
    - ``moves``: how many times the server has moved the chunk itself; a change sends the browser to ``start``.

    ``start`` and ``moves`` belong to the session: the page sets them when it draws a (shared, cached) payload.
    """

    id: str
    sample: str
    offset: int
    count: int
    total: int
    rows: tuple[Row | Heading, ...]
    views: dict[str, list[Any]]
    kinds: dict[str, str]
    labels: dict[str, str]
    heights: dict[str, int | None]
    events: list[str]
    template: dict[str, Any]
    drawn: dict[str, Any] = dataclasses.field(default_factory=dict)
    reports: bool = False
    interval_ms: int = PLAY_INTERVAL_MS
    start: int = 0
    moves: int = 0

    def to_json(self) -> dict[str, Any]:
        """The component's ``payload`` argument: every field as a JSON value, a row as ``{"heading": text}`` or
        ``{"widths": [...], "columns": [[name, ...], ...]}``."""
        out = {
            field.name: getattr(self, field.name) for field in dataclasses.fields(self)
        }  # shallow: the views are big
        out["rows"] = [
            {"heading": row.text}
            if isinstance(row, Heading)
            else {"widths": list(row.widths), "columns": [list(column) for column in row.columns]}
            for row in self.rows
        ]
        return out


def digest(value: Hashable) -> str:
    """A short name for ``value`` (its repr hashed), as payloads name samples and settings."""
    return hashlib.sha256(repr(value).encode()).hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def served_folder() -> Path:
    """The component's folder: its two files and the installed Plotly's plotly.min.js, made once per version."""
    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    named = hashlib.sha256(
        b"".join((SOURCE / name).read_bytes() for name in FILES) + plotly.__version__.encode()
    ).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"tensor-memory-stepper-{named}"
    if not (folder / "plotly.min.js").is_file():
        staging = Path(tempfile.mkdtemp(prefix=".stepper-", dir=folder.parent))
        for name in FILES:
            shutil.copy2(SOURCE / name, staging / name)
        shutil.copy2(plotly_js, staging / "plotly.min.js")
        try:
            os.replace(staging, folder)  # complete before it is visible
        except OSError:  # another process made it first
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def chunk_stepper(payload: StepperPayload, key: str) -> None:
    """Draw the stepper and every view of ``payload``; on a page that reports, the browser's chunk comes back as the
    value of the widget ``key`` (read it with :func:`reported_chunk`).

    Declared on every call: Streamlit registers a component only when it is declared inside a script run,
    and this module may first be imported outside one (``python -m app`` prepares the opening page in a
    thread of its own)."""
    component = components.declare_component("chunk_stepper", path=str(served_folder()))
    component(payload=payload.to_json(), key=key, default=None)


def reported_chunk(value: Any, identity: Hashable, moves: int, count: int) -> int | None:
    """The chunk a stepper's value reports, when it is about the sample ``identity`` and was chosen after the
    server's last move (``moves``) within the trace's ``count`` chunks; else None (an old report)."""
    if not isinstance(value, dict) or value.get("sample") != digest(identity) or value.get("moves") != moves:
        return None
    chunk = value.get("chunk")
    return int(chunk) if isinstance(chunk, int) and 0 <= chunk < count else None


def shared_template() -> dict[str, Any]:
    """The figures' template as plotly.js takes it: sent once in the payload, not with each figure (7 KB each)."""
    return json.loads(go.Figure(layout=dict(template=TEMPLATE)).to_json())["layout"]["template"]


def _plain(fig: go.Figure, template: dict[str, Any]) -> dict[str, Any]:
    """A figure as the JSON plotly.js takes (arrays as typed-array objects), less ``template`` if it has it (the
    browser puts the payload's back)."""
    plain = json.loads(fig.to_json())
    if plain["layout"].get("template") == template:
        del plain["layout"]["template"]
    return plain


def _view(view: Any, template: dict[str, Any], drawn: dict[str, Any] | None) -> tuple[str, Any]:
    """(kind, JSON value) of one view: a Plotly figure, the leaves that make the figure ``drawn`` (its JSON) the
    chunk's, a PNG image's bytes, or an HTML text."""
    if isinstance(view, Leaves):
        return "figure", plain_leaves(drawn, view)
    if isinstance(view, go.Figure):
        return "figure", _plain(view, template)
    if isinstance(view, bytes):
        return "image", "data:image/png;base64," + base64.b64encode(view).decode()
    return "html", view


def stepper_payload(
    trace: Trace,
    identity: Hashable,
    settings: Hashable,
    views: Callable[[int, dict[str, Any]], dict[str, Any]],
    rows: tuple[Row | Heading, ...] = (),
    labels: dict[str, str] | None = None,
    heights: dict[str, int] | None = None,
    span: tuple[int, int] | None = None,
    reports: bool = False,
    drawn: dict[str, go.Figure] | None = None,
) -> StepperPayload:
    """Every chunk's views: ``views(k, outcome)`` gives chunk ``k``'s (a name → a Plotly figure, an HTML text, a
    PNG image's bytes, or for a name in ``drawn`` the :class:`Leaves` that make that figure chunk ``k``'s; ``outcome``
    is its :func:`chunk_outcome`), beside the annotation track; ``drawn``: figures drawn once, at the first chunk.
    ``rows`` lay the names out, ``labels`` caption them, ``heights`` (pixels) size them. ``identity`` names the
    sample (the session's ``sample_key``), ``settings`` what else the views depend on. ``span`` (first, last): only
    those chunks, a page of a long trace. ``reports``: the page draws per-chunk views on the server, so the browser
    reports its chunk."""
    first, last = (0, trace.num_chunks - 1) if span is None else span
    template = shared_template()
    once = {
        name: _plain(fig, template)
        for name, fig in {TRACK: annotation_figure(trace, first, span), **(drawn or {})}.items()
    }
    held: dict[str, list[Any]] = {}  # a view's name → its view of every chunk
    kinds: dict[str, str] = {}
    events = []
    for k in range(first, last + 1):
        outcome = chunk_outcome(trace, k)
        for name, view in {TRACK: annotation_leaves(k), **views(k, outcome)}.items():
            kinds[name], value = _view(view, template, once.get(name))
            held.setdefault(name, []).append(value)
        events.append(outcome["event"])
    return StepperPayload(
        id=digest((identity, settings, span)),
        sample=digest(identity),
        offset=first,
        count=last - first + 1,
        total=trace.num_chunks,
        rows=tuple(rows),
        views=held,
        kinds=kinds,
        labels=dict(labels or {}),
        heights={name: (heights or {}).get(name) for name in kinds},
        events=events,
        template=template,
        drawn=once,
        reports=reports,
    )


__all__ = [
    "StepperPayload",
    "Row",
    "Heading",
    "stepper_payload",
    "chunk_stepper",
    "reported_chunk",
    "digest",
    "served_folder",
    "TRACK",
    "PLAY_INTERVAL_MS",
]
