"""The chunk stepper in the browser (Explore, Occlusion, Diagnose): a small custom component in the package.

Once a sample is captured, every chunk's views go to the browser in one payload: on Explore the
annotation track, the input and the prediction, the volume (and PyVista's rendering, when it is
asked for), the slices, the trajectories, σ, the gates and the timeline; on Occlusion the belief
around the frame (the filmstrip and the identity belief of a digit) and the memory's energy; on
Diagnose two checkpoints on one sample side by side. Previous, Next, Play/Pause, the slider and the
arrow keys then show another chunk there (``browser/stepper.js``), with no message to the server:
the server runs again only when the sample, the checkpoint, the layer or a view setting changes.

The component is a folder Streamlit serves: ``browser/index.html`` and ``browser/stepper.js`` beside
the installed Plotly's own ``plotly.min.js`` (copied once into a folder named by their digest; no
CDN). It speaks Streamlit's component messages directly (``componentReady``, ``render``,
``setFrameHeight``) and never sends a value back.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import html
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Hashable, Optional

import numpy as np
import plotly
import plotly.graph_objects as go
import streamlit.components.v1 as components

from analysis.figures.annotations import annotation_figure
from analysis.figures.base import TEMPLATE
from analysis.figures.chunk_input import chunk_input_figure, chunk_outcome
from analysis.figures.occlusion_views import energy_figure
from analysis.figures.state import slices_figure, volume_figure
from analysis.figures.timeline import belief_figure, timeline_figure
from analysis.figures.video import filmstrip_figure, identity_belief_figure
from analysis.figures.views import SLICE_ANCHORS, explore_figures, slice_index
from analysis.measures.occlusion import TASKS as OCCLUSION_TASKS, belief, memory_energy
from analysis.measures.volumes import VolumeSeries
from analysis.traces.trace import Trace

SOURCE = Path(__file__).resolve().parent / "browser"
FILES = ("index.html", "stepper.js")
PLAY_INTERVAL_MS = 1000  # one chunk a second while playing, as the server-side stepper
HEIGHTS = {"track": None, "input": 340, "volume": 440, "timeline": 300, "slices": 270, "trajectory": 400,
           "sigma": 400, "gates": 400, "film": None, "belief": 250, "identity": 320, "energy": 440,
           "energy_slices": 280}  # pixels; None: the figure's own
STEPPING_WINDOW = 64  # a trace longer than this goes to the browser this many chunks at a time (a page of it)
BELIEF_FRAMES = 8  # the Occlusion page's belief: frames side by side at most (their titles need the room)
FILM_FRAMES = 12  # the moving digit's filmstrip: frames at most


@functools.lru_cache(maxsize=1)
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


def chunk_stepper(payload: dict[str, Any], start: int, key: str) -> None:
    """Draw the stepper and every view of a :func:`stepper_payload`, opening on chunk ``start`` when the sample is
    new to the browser; nothing comes back to the server.

    Declared on every call: Streamlit registers a component only when it is declared inside a script run,
    and this module may first be imported outside one (``python -m app`` prepares the opening page in a
    thread of its own)."""
    component = components.declare_component("chunk_stepper", path=str(served_folder()))
    component(payload={**payload, "start": int(start)}, key=key, default=None)


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


def stepper_payload(trace: Trace, identity: Hashable, settings: Hashable,
                    views: Callable[[int, dict[str, Any]], dict[str, Any]], rows: list[dict[str, Any]],
                    labels: Optional[dict[str, str]] = None, heights: Optional[dict[str, int]] = None,
                    span: Optional[tuple[int, int]] = None) -> dict[str, Any]:
    """Every chunk's views for :func:`chunk_stepper`: ``views(k, outcome)`` gives chunk ``k``'s (a name → a Plotly
    figure, an HTML text, or a PNG image's bytes; ``outcome`` is its :func:`chunk_outcome`), beside the annotation
    track; ``rows`` lays the names out, ``heights`` (pixels) adds to :data:`HEIGHTS`. ``identity`` names the sample:
    the browser keeps its chunk while only ``settings`` change. ``span`` (first, last): only those chunks, the
    stepping window of a long trace (:func:`stepping_span`); the browser numbers them as the trace does."""
    first, last = (0, trace.num_chunks - 1) if span is None else span
    cells: dict[str, list[Any]] = {}
    kinds, events, template = {"track": "figure"}, [], shared_template()
    for k in range(first, last + 1):
        outcome = chunk_outcome(trace, k)
        for name, view in {"track": annotation_figure(trace, k, span), **views(k, outcome)}.items():
            if isinstance(view, go.Figure):
                kinds[name], view = "figure", _plain(view, template)
            elif isinstance(view, bytes):
                kinds[name], view = "image", "data:image/png;base64," + base64.b64encode(view).decode()
            else:
                kinds[name] = "html"
            cells.setdefault(name, []).append(view)
        events.append(outcome["event"])
    return {"id": hashlib.sha256(repr((identity, settings, span)).encode()).hexdigest()[:16],
            "sample": hashlib.sha256(repr(identity).encode()).hexdigest()[:16], "count": last - first + 1,
            "offset": first, "total": trace.num_chunks,
            "interval_ms": PLAY_INTERVAL_MS, "cells": cells, "kinds": kinds,
            "labels": labels or {}, "heights": {name: {**HEIGHTS, **(heights or {})}.get(name) for name in kinds},
            "rows": rows, "events": events, "template": template}


def stepping_span(chunk: int, count: int, width: int = STEPPING_WINDOW) -> Optional[tuple[int, int]]:
    """The page of a long trace that holds ``chunk``: (first, last) of the ``width`` chunks from ⌊chunk / width⌋·width
    (the last page may be shorter); None for a trace of at most ``width`` chunks, which goes to the browser whole."""
    if count <= width:
        return None
    first = min(max(int(chunk), 0), count - 1) // width * width
    return first, min(first + width, count) - 1


def explore_payload(trace: Trace, identity: Hashable, layer: Optional[str], series: Optional[VolumeSeries],
                    kind: str, anchor: str, images: Optional[list[bytes]] = None,
                    span: Optional[tuple[int, int]] = None) -> dict[str, Any]:
    """The Explore page's views of every chunk (of ``span`` when given): with ``series`` (a memory to draw) the full
    page, else the input, the prediction and the timeline; ``images`` the PyVista renderings (PNG, one a chunk of
    the span) when they are shown."""
    first = 0 if span is None else span[0]

    def views(k: int, outcome: dict[str, Any]) -> dict[str, Any]:
        shown = {**explore_figures(trace, k, layer, series, kind, anchor, span),
                 "card": prediction_html(outcome, trace.has_predictions)}
        return shown if images is None else {**shown, "render": images[k - first]}

    if series is None:
        rows = [{"widths": [1, 1], "cells": [["input"], ["card", "timeline"]]}]
        return stepper_payload(trace, identity, (layer, None), views, rows, span=span)
    labels = {"slices": f"Slices of {series.label} {SLICE_ANCHORS[anchor]}"}
    top = {"widths": [1, 1.6], "cells": [["input", "card"], ["volume"]]}
    if images is not None:
        labels["render"] = f"{series.label}, PyVista volume rendering"
        top = {"widths": [1, 1.25, 1.05], "cells": [["input", "card"], ["volume"], ["render"]]}
    rows = [top, {"widths": [1, 1.3], "cells": [["timeline"], ["slices"]]},
            {"heading": "Where it reads and writes, and how it gates"},
            {"widths": [1.2, 1, 1], "cells": [["trajectory"], ["sigma"], ["gates"]]}]
    settings = (layer, series.field, series.mode, series.index, kind, anchor, images is not None)
    return stepper_payload(trace, identity, settings, views, rows, labels, span=span)


def comparison_payload(sides: list[tuple[str, Trace, Optional[VolumeSeries]]], identity: Hashable,
                       settings: Hashable, kind: str, span: Optional[tuple[int, int]] = None) -> dict[str, Any]:
    """Two checkpoints on one sample side by side, stepping together: for each (name, its trace, its volume series or
    None) the input with its prediction, the prediction against the truth, the volume and the timeline. The
    annotation track and the events are the first's; both traces must have the same chunks (ValueError).
    ``settings`` names what else decides the series (the layer, the field, the reduction)."""
    (first, trace, _), (second, other, _) = sides
    if trace.num_chunks != other.num_chunks:
        raise ValueError(f"{first} has {trace.num_chunks} chunks on this sample and {second} {other.num_chunks}: "
                         f"their memory chunks differ, so no chunk of one is a chunk of the other")
    named = dict(zip("ab", sides))

    def views(k: int, outcome: dict[str, Any]) -> dict[str, Any]:
        shown: dict[str, Any] = {}
        for side, (_, run, series) in named.items():
            shown[f"{side}_input"] = chunk_input_figure(run, k)
            shown[f"{side}_card"] = prediction_html(outcome if run is trace else chunk_outcome(run, k),
                                                    run.has_predictions)
            if series is not None:
                shown[f"{side}_volume"] = volume_figure(series.values[k], kind, f"{series.label} after chunk {k}",
                                                        value_range=series.value_range)
            shown[f"{side}_timeline"] = timeline_figure(run, k, span)
        return shown

    parts = ("input", "card", "volume", "timeline")
    rows = [{"widths": [1, 1], "cells": [[f"{side}_{part}" for part in parts if part != "volume" or series is not None]
                                         for side, (_, _, series) in named.items()]}]
    labels = {f"{side}_input": name for side, (name, _, _) in named.items()}
    heights = {f"{side}_{part}": HEIGHTS[part] for side in named for part in ("input", "volume", "timeline")}
    shown = ("compare", first, second, settings, kind, tuple(s is None for _, _, s in sides))
    return stepper_payload(trace, identity, shown, views, rows, labels, heights, span)


def window(chunk: int, width: int, count: int) -> list[int]:
    """``width`` consecutive frames around ``chunk`` (it sits at ``width // 2``), kept inside ``count`` frames."""
    first = int(np.clip(chunk - width // 2, 0, max(count - width, 0)))
    return list(range(first, min(first + width, count)))


def belief_html(b: dict[str, Any], k: int) -> str:
    """The frame's probabilities of the truth, as the Occlusion page words them."""
    digits = "identity_truth_probability" in b
    text = f"p({'true place' if digits else 'truth'}) at frame {k}: <b>{b['truth_probability'][k]:.1%}</b>"
    if digits:
        text += f" · p(true digit): <b>{b['identity_truth_probability'][k]:.1%}</b>"
    return f"<div class='card plain'>{text}</div>"


def occlusion_payload(trace: Trace, identity: Hashable, layer: Optional[str], memory: bool,
                      span: Optional[tuple[int, int]] = None) -> dict[str, Any]:
    """The Occlusion page's views of every chunk (of ``span`` when given): for an occlusion or moving-digits trace
    the belief around the frame (and the filmstrip and the identity belief of a digit); with ``memory`` the layer's
    energy and slices."""
    b = belief(trace) if trace.info.get("task") in OCCLUSION_TASKS else None
    lay = trace.layer(layer) if memory else None
    energy = None if lay is None else memory_energy(lay)  # (K, D, H, W)
    occluded = None if b is None else b["occluded"]
    count = trace.num_chunks

    def views(k: int, outcome: dict[str, Any]) -> dict[str, Any]:
        shown: dict[str, Any] = {}
        if b is not None:
            frames = window(k, BELIEF_FRAMES, count)
            if "identity_probs" in b:
                shown["film"] = filmstrip_figure(trace, window(k, FILM_FRAMES, count))
                shown["identity"] = identity_belief_figure(b, k)
            shown["belief"] = belief_figure(b["probs"].reshape(len(b["probs"]), -1), b["truth"], b["occluded"],
                                            size=b["probs"].shape[1], frames=frames)
            shown["belief_card"] = belief_html(b, k)
        if energy is not None:
            shown["energy"] = energy_figure(lay, k, occluded, span)
            shown["energy_slices"] = slices_figure(energy[k], slice_index(trace, layer, k, "write"))
        return shown

    rows: list[dict[str, Any]] = []
    if b is not None:
        rows += [{"widths": [1], "cells": [["film"]]}] if "identity_probs" in b else []
        rows += [{"heading": "Belief frame by frame"}, {"widths": [1], "cells": [["belief", "belief_card"]]}]
        rows += [{"widths": [1], "cells": [["identity"]]}] if "identity_probs" in b else []
    if energy is not None:
        rows += [{"heading": "What the memory holds"}, {"widths": [1.2, 1], "cells": [["energy"], ["energy_slices"]]}]
    labels = {"belief": "The predicted position distribution" + (" (summed over the digits)" if b is not None and
                                                                 "identity_probs" in b else "")
                        + " of the frames around this one, the true position circled",
              "film": "The clip as the model sees it (grey: the curtain): the true digit's box solid, the predicted "
                      "one dashed; above each frame, the true digit → the predicted one",
              "identity": "Which digit the model believes it is, frame by frame",
              "energy_slices": "‖h‖² after this chunk, through its write"}
    return stepper_payload(trace, identity, ("occlusion", layer, memory), views, rows, labels, span=span)


__all__ = ["chunk_stepper", "stepper_payload", "stepping_span", "STEPPING_WINDOW", "explore_payload", "occlusion_payload", "comparison_payload",
           "prediction_html", "belief_html", "window", "served_folder", "PLAY_INTERVAL_MS", "BELIEF_FRAMES", "FILM_FRAMES"]
