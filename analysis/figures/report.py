"""The offline report of a trace: its numbers (:func:`report_numbers`) and one self-contained HTML page.

The page inlines Plotly's JavaScript once, so it opens in any browser without a network. It shows
the addressing verdict with its reasons, the prediction timeline, for occlusion the belief through
the occlusion and what the memory held, the read/write trajectories with the last footprint, σ and
the gates over time, and the hidden state at the chunks that matter.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from analysis import figures
from analysis.figures.escape import html_text
from analysis.figures.occlusion_views import energy_figure
from analysis.measures.addressing import addressing_report
from analysis.measures.images import chunk_errors
from analysis.measures.occlusion import belief, occlusion_memory
from analysis.measures.volumes import volume_values
from analysis.traces.trace import Trace, TraceError
from tensor_memory.memory.hookpoints import GATE_POINTS
from tensor_memory.storage.files import atomic_write_text


def gate_numbers(trace: Trace) -> dict[str, Any]:
    """Per memory layer: σ(γ) and, when the gate volumes were captured, each gate's mean per chunk."""
    out: dict[str, Any] = {}
    for name, layer in trace.layers.items():
        entry: dict[str, Any] = {"gate_scale": layer.gate_scale}
        if layer.has_gates:
            for field in GATE_POINTS:
                values = getattr(layer, field).astype(np.float32)
                entry[f"{field}_mean"] = values.mean(axis=(1, 2, 3, 4)).tolist()
        out[name] = entry
    return out


def prediction_numbers(trace: Trace) -> dict[str, Any]:
    """Accuracy over the scored chunks, and per chunk whether the prediction was right; for a trace of values
    (masked patches) the RMS pixel error over the scored chunks, and per chunk its error."""
    scored = trace.chunks["scored"]
    if not trace.has_predictions:
        return {"accuracy": None, "scored_chunks": 0, "correct": [None] * trace.num_chunks}
    if trace.predicts_values:
        errors = chunk_errors(trace)
        return {
            "rms_error": float(np.sqrt(np.nanmean(np.square(errors)))) if scored.any() else None,
            "scored_chunks": int(scored.sum()),
            "errors": [None if np.isnan(e) else float(e) for e in errors],
        }
    correct = trace.chunks["prediction"] == trace.chunks["target"]
    out: dict[str, Any] = {
        "accuracy": float(correct[scored].mean()) if scored.any() else None,
        "scored_chunks": int(scored.sum()),
        "correct": [bool(c) if s else None for c, s in zip(correct, scored, strict=True)],
    }
    if "occluded" in trace.meta:
        hidden = trace.meta["occluded"][: trace.num_chunks].astype(bool) & scored
        out["occluded_accuracy"] = float(correct[hidden].mean()) if hidden.any() else None
        out["visible_accuracy"] = float(correct[scored & ~hidden].mean()) if (scored & ~hidden).any() else None
    return out


def report_numbers(trace: Trace) -> dict[str, Any]:
    """``{"trace", "addressing", "gates", "predictions", "occlusion"}`` — what ``report --json`` prints."""
    if not trace.layers:
        raise TraceError(
            "the trace holds no memory layers (the predictions of a checkpoint without Tensor "
            "Memory); a report needs the trace of a tensor checkpoint"
        )
    addressing = addressing_report(trace)
    out: dict[str, Any] = {
        "trace": trace.info,
        "addressing": addressing,
        "gates": gate_numbers(trace),
        "predictions": prediction_numbers(trace),
        "occlusion": None,
    }
    if trace.info.get("task") == "occlusion":
        b = belief(trace)
        out["occlusion"] = {
            "truth_probability": b["truth_probability"].tolist(),
            "occluded": b["occluded"].tolist(),
            "correct": b["correct"].tolist(),
            "memory": occlusion_memory(trace),
        }
    return out


def _section(title: str, body: str, note: str = "") -> str:
    note_html = f"<p class='note'>{html_text(note)}</p>" if note else ""
    return f"<section><h2>{html_text(title)}</h2>{note_html}{body}</section>"


def _figure(fig: go.Figure) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False})


def _key_chunk(trace: Trace, numbers: dict[str, Any]) -> tuple[int, str]:
    """The chunk to show the state at: the last visible frame before an occlusion, else the last chunk."""
    last_visible = (numbers["occlusion"] or {}).get("memory", {}).get("last_visible")
    if last_visible is not None:
        return last_visible, "the last visible frame before the occlusion"
    return trace.num_chunks - 1, "the last chunk"


def _verdict_html(addressing: dict[str, Any]) -> str:
    healthy = addressing["verdict"] == "healthy"
    items = "".join(f"<li>{html_text(r)}</li>" for r in addressing["reasons"])
    remedies = "".join(
        f"<li><b>{html_text(failure)}</b>: {html_text(text)}</li>"
        for failure, text in addressing.get("remedies", {}).items()
    )
    return (
        f"<p class='verdict {'ok' if healthy else 'bad'}'>Addressing verdict for "
        f"<code>{html_text(addressing['layer'])}</code>: <b>{html_text(addressing['verdict'])}</b></p>"
        f"<ul>{items}</ul>" + (f"<p>What usually helps:</p><ul>{remedies}</ul>" if remedies else "")
    )


def _occlusion_html(trace: Trace, numbers: dict[str, Any]) -> str:
    b = belief(trace)
    memory = numbers["occlusion"]["memory"]
    hidden = np.flatnonzero(b["occluded"])
    parts = [
        _figure(
            figures.belief_figure(
                trace.chunks["probs"][: trace.num_chunks], b["truth"], b["occluded"], size=b["probs"].shape[1]
            )
        )
    ]
    if memory.get("last_visible") is not None:
        held = ", ".join(f"{d:.2f}" for d in memory["read_distance_voxels"])
        parts.append(
            f"<p>The last visible frame ({memory['last_visible']}) wrote at voxel "
            f"(x, y, z) = ({', '.join(f'{v:.2f}' for v in memory['write_voxel'])}) with σ = "
            f"{memory['sigma_voxels']:.2f} voxels. Reads during the occlusion (frames "
            f"{hidden[0]}–{hidden[-1]}) land {held} voxels from it.</p>"
        )
        fig = energy_figure(trace.layer(), trace.num_chunks - 1, b["occluded"])
        parts.append(_figure(fig))
    return "".join(parts)


STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ddd; padding-bottom: .2em; }
.verdict.ok b { color: #2ca02c; } .verdict.bad b { color: #d62728; }
.note { color: #666; font-size: .9em; } table { border-collapse: collapse; }
td, th { padding: .2em .8em; border-bottom: 1px solid #eee; text-align: left; }
.row { display: flex; flex-wrap: wrap; gap: 1em; } .row > div { flex: 1 1 480px; }
"""


def report_html(trace: Trace, numbers: dict[str, Any] | None = None) -> str:
    """The whole report as one HTML string, Plotly's JavaScript inlined."""
    numbers = numbers or report_numbers(trace)
    info, layer = trace.info, trace.layer()
    K = trace.num_chunks
    key, key_reason = _key_chunk(trace, numbers)
    predictions = numbers["predictions"]
    rows = [
        ("checkpoint", info.get("checkpoint_name")),
        ("task", info.get("task")),
        ("task parameters", info.get("task_params")),
        ("backbone", info.get("backbone")),
        ("sample", f"seed {info.get('seed')}, index {info.get('index')}"),
        ("chunks", K),
        ("memory layers", ", ".join(trace.layer_names)),
        ("RMS pixel error (hidden patches)", predictions["rms_error"])
        if trace.predicts_values
        else ("accuracy (scored chunks)", predictions["accuracy"]),
    ]
    if "occluded_accuracy" in predictions:
        rows += [
            ("occluded / visible accuracy", f"{predictions['occluded_accuracy']} / {predictions['visible_accuracy']}")
        ]
    table = "".join(f"<tr><th>{html_text(str(k))}</th><td>{html_text(str(v))}</td></tr>" for k, v in rows)

    values = volume_values(layer.h[key].astype(np.float32), "norm")
    sections = [
        _section("Sample", f"<table>{table}</table>"),
        _section("Addressing", _verdict_html(numbers["addressing"])),
        _section(
            "Predictions",
            _figure(figures.timeline_figure(trace, K - 1)),
            "The pixel error of each hidden patch's reconstruction."
            if trace.predicts_values
            else "Probability the model gives to the true answer at each chunk.",
        ),
    ]
    if numbers["occlusion"] is not None:
        sections.append(
            _section(
                "Occlusion: belief frame by frame",
                _occlusion_html(trace, numbers),
                "Predicted position distribution per frame; the true position is marked.",
            )
        )
    sections += [
        _section(
            "Where the memory reads and writes",
            f"<div class='row'><div>{_figure(figures.trajectory_figure(layer, K - 1))}</div>"
            f"<div>{_figure(figures.sigma_figure(layer.sigma, K - 1, layer.grid))}</div></div>",
            "Read (blue) and write (red) coordinates in voxel units, the last write's 1σ and 2σ "
            "footprint, and σ over time.",
        ),
        _section(
            f"Hidden state ‖h‖ at chunk {key}",
            f"<div class='row'><div>{_figure(figures.volume_figure(values, 'volume'))}</div>"
            f"<div>{_figure(figures.slices_figure(values))}</div></div>",
            f"Chunk {key}: {key_reason}.",
        ),
        _section(
            "Gates",
            _figure(figures.gates_figure(layer, K - 1)),
            "Mean input, forget and output gates and |g| over the volume per chunk; σ(γ) is the read gate.",
        ),
    ]
    title = f"Tensor Memory report — {info.get('checkpoint_name')} ({info.get('task')})"
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html_text(title)}</title>"
        f"<style>{STYLE}</style><script type='text/javascript'>{get_plotlyjs()}</script></head>"
        f"<body><h1>{html_text(title)}</h1>{''.join(sections)}</body></html>"
    )


def write_report(trace: Trace, out: str | Path) -> Path:
    """Write :func:`report_html` to ``out`` atomically; returns the path."""
    path = Path(out)
    atomic_write_text(path, report_html(trace))
    return path


__all__ = ["report_numbers", "report_html", "write_report", "gate_numbers", "prediction_numbers"]
