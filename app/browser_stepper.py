"""The Explore page's chunk stepper, in the browser: a small custom component shipped in the package.

Once a sample is captured, every chunk's views (the annotation track, the input and the prediction,
the volume, its PyVista rendering, the slices, the trajectories, σ, the gates, the timeline) go to
the browser in one payload. Previous, Next, Play/Pause, the slider and the arrow keys then show
another chunk there (``browser/stepper.js``), with no message to the server: the server runs again
only when the sample, the checkpoint, the layer or a view setting changes.

The component is a folder Streamlit serves: ``browser/index.html`` and ``browser/stepper.js`` beside
the installed Plotly's own ``plotly.min.js`` (copied once into a folder named by their digest; no
CDN). It speaks Streamlit's component messages directly (``componentReady``, ``render``,
``setFrameHeight``) and never sends a value back.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Hashable, Optional

import plotly
import plotly.graph_objects as go
import streamlit.components.v1 as components

from analysis.figures.annotations import annotation_figure
from analysis.figures.base import TEMPLATE
from analysis.figures.chunk_input import chunk_outcome
from analysis.figures.views import SLICE_ANCHORS, explore_figures
from analysis.measures.volumes import VolumeSeries
from analysis.traces.trace import Trace

SOURCE = Path(__file__).resolve().parent / "browser"
FILES = ("index.html", "stepper.js")
PLAY_INTERVAL_MS = 1000  # one chunk a second while playing, as the server-side stepper
HEIGHTS = {"track": None, "input": 340, "volume": 440, "timeline": 300, "slices": 270, "trajectory": 400,
           "sigma": 400, "gates": 400}  # pixels; None: the figure's own


def served_folder() -> Path:
    """The component's folder: its two files and the installed Plotly's plotly.min.js, made once per version."""
    plotly_js = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    digest = hashlib.sha256(b"".join((SOURCE / name).read_bytes() for name in FILES)
                            + plotly.__version__.encode()).hexdigest()[:16]
    folder = Path(tempfile.gettempdir()) / f"tensor-memory-stepper-{digest}"
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


def chunk_stepper(payload: dict[str, Any], key: str) -> None:
    """Draw the stepper and every view of :func:`explore_payload`; nothing comes back to the server.

    Declared on every call: Streamlit registers a component only when it is declared inside a script run,
    and this module may first be imported outside one (``python -m app`` prepares the opening page in a
    thread of its own)."""
    component = components.declare_component("chunk_stepper", path=str(served_folder()))
    component(payload=payload, key=key, default=None)


def prediction_html(outcome: dict[str, Any], predicts: bool) -> str:
    """The chunk's prediction against the truth as the Explore page words it (escaped HTML)."""
    event = html.escape(outcome["event"][:1].upper() + outcome["event"][1:])
    if not predicts:
        return (f"<div class='card'>{event}. This trace was recorded without targets, so it holds no predictions "
                f"(trace_model(..., targets=...) adds them).</div>")
    if not outcome["scored"]:
        return f"<div class='card'>{event}: nothing to predict here; the model only takes it in.</div>"
    if "error" in outcome:
        return (f"<div class='card plain'>Reconstructed the hidden patch · RMS pixel error "
                f"<b>{outcome['error']:.3f}</b> (pixels in [0, 1]); the Images page shows the whole picture.</div>")
    verdict = "<span style='color:#177233'>✓ right</span>" if outcome["correct"] else \
        "<span style='color:#b42318'>✗ wrong</span>"
    return (f"<div class='card plain'>Predicted <b>{html.escape(outcome['prediction'])}</b> · truth "
            f"<b>{html.escape(outcome['truth'])}</b> {verdict}<br>p(truth) = {outcome['p_truth']:.1%}, "
            f"p(prediction) = {outcome['p_prediction']:.1%}</div>")


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


def explore_payload(trace: Trace, identity: Hashable, layer: Optional[str], series: Optional[VolumeSeries],
                    kind: str, anchor: str, start: int, images: Optional[list[bytes]] = None) -> dict[str, Any]:
    """Every chunk's Explore views, laid out for :func:`chunk_stepper`: with ``series`` (a memory to draw)
    the full page, else the input, the prediction and the timeline. ``identity`` names the sample (the
    browser keeps its chunk while only the settings change); ``images`` the PyVista renderings (PNG, one a chunk)
    when they are to be shown."""
    count = trace.num_chunks
    cells: dict[str, list[Any]] = {"track": [], "card": []}
    events, template = [], shared_template()
    for k in range(count):
        figures = {"track": annotation_figure(trace, k), **explore_figures(trace, k, layer, series, kind, anchor)}
        for name, fig in figures.items():
            cells.setdefault(name, []).append(_plain(fig, template))
        outcome = chunk_outcome(trace, k)
        cells["card"].append(prediction_html(outcome, trace.has_predictions))
        events.append(outcome["event"])
    kinds = {name: "figure" for name in cells} | {"card": "html"}
    labels: dict[str, str] = {}
    if series is None:
        rows = [{"widths": [1, 1], "cells": [["input"], ["card", "timeline"]]}]
    else:
        labels = {"slices": f"Slices of {series.label} {SLICE_ANCHORS[anchor]}"}
        top = {"widths": [1, 1.6], "cells": [["input", "card"], ["volume"]]}
        if images is not None:
            cells["render"] = ["data:image/png;base64," + base64.b64encode(png).decode() for png in images]
            kinds["render"] = "image"
            labels["render"] = f"{series.label}, PyVista volume rendering"
            top = {"widths": [1, 1.25, 1.05], "cells": [["input", "card"], ["volume"], ["render"]]}
        rows = [top,
                {"widths": [1, 1.3], "cells": [["timeline"], ["slices"]]},
                {"heading": "Where it reads and writes, and how it gates"},
                {"widths": [1.2, 1, 1], "cells": [["trajectory"], ["sigma"], ["gates"]]}]
    settings = None if series is None else (series.field, series.mode, series.index, kind, anchor)
    return {"id": hashlib.sha256(repr((identity, layer, settings)).encode()).hexdigest()[:16],
            "sample": hashlib.sha256(repr(identity).encode()).hexdigest()[:16], "count": count,
            "start": int(start), "interval_ms": PLAY_INTERVAL_MS, "cells": cells, "kinds": kinds, "labels": labels,
            "heights": {name: HEIGHTS.get(name) for name in kinds}, "rows": rows,
            "events": events, "template": template}


__all__ = ["chunk_stepper", "explore_payload", "prediction_html", "served_folder", "PLAY_INTERVAL_MS"]
