"""Two checkpoints side by side: accuracy on the same samples, and how each memory addresses its grid.

:func:`checkpoint_summary` measures one checkpoint over ``samples`` sequences of stream ``seed``:
its task metrics, and for a Tensor Memory checkpoint the addressing report over the same samples
(other backbones have no memory to report on). :func:`comparison_rows` puts two summaries next to
each other (``analysis/figures/compare.py`` draws them). Checkpoints of different tasks
can be compared for their addressing; their accuracies measure different things, which
:func:`comparison_note` says.
"""

from __future__ import annotations

from typing import Any

import torch

from analysis.measures.addressing import (
    BOUNDARY_FRACTION,
    COLLAPSE_SPREAD_VOXELS,
    DEAD_GATE_SCALE,
    SIGMA_COLLAPSE_VOXELS,
    SIGMA_EXPLOSION_EXTENT,
    UNREAD_FRACTION,
    addressing_report,
)
from analysis.traces.capture import capture_many, sample_batch
from tensor_memory import memory_layers
from tensor_memory.storage.checkpoint import Checkpoint
from tensor_memory.training.evaluation import format_metric


def sample_metrics(ckpt: Checkpoint, seed: int = 0, samples: int = 32, **task_params: Any) -> dict[str, float | None]:
    """The task's metrics (accuracy, occluded accuracy, …) over samples 0..samples-1 of stream ``seed``."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    task, batch = sample_batch(ckpt, seed, list(range(samples)), **task_params)
    with torch.no_grad():
        logits, _ = ckpt.model.eval()(batch.inputs)
    logits = logits.cpu()  # scored beside the batch, on the CPU
    return {name: (correct / total if total else None) for name, (correct, total) in task.counts(logits, batch).items()}


def checkpoint_summary(
    ckpt: Checkpoint, seed: int = 0, samples: int = 32, layer: str | None = None, **task_params: Any
) -> dict[str, Any]:
    """``{"name", "task", "backbone", "samples", "metrics", "addressing", "memory_layers"}`` for one checkpoint.

    ``addressing`` is :func:`analysis.measures.addressing.addressing_report` over the same samples (gate
    volumes included, cells left out), or None for a checkpoint without memory layers.
    """
    names = list(memory_layers(ckpt.model))
    addressing = None
    if names:
        traces = capture_many(
            ckpt, seed, list(range(samples)), gates=True, cell_state=False, progress=False, **task_params
        )
        addressing = addressing_report(traces, layer if layer in names else None)
    return {
        "name": ckpt.path.name,
        "task": ckpt.task.name,
        "backbone": ckpt.model.backbone.config.kind,
        "samples": samples,
        "metrics": sample_metrics(ckpt, seed, samples, **task_params),
        "addressing": addressing,
        "memory_layers": names,
    }


def comparison_note(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    """A warning when the two summaries' accuracies cannot be compared, else None."""
    if a["task"] != b["task"]:
        return (
            f"{a['name']} is a {a['task']} checkpoint and {b['name']} a {b['task']} one: their accuracies "
            f"measure different tasks; compare their addressing"
        )
    return None


def _percent(value: float | None) -> str:  # an addressing share
    return "—" if value is None else f"{value:.1%}"


def _number(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


# (label, measure key, format, what the threshold means): each threshold is the verdict's own, said in the row's unit
MEASURES = (
    (
        "write spread (voxels)",
        "write_spread_voxels",
        _number,
        f"below {COLLAPSE_SPREAD_VOXELS:g} voxel: coordinate collapse",
    ),
    ("voxels the writes fill", "effective_voxels", _number, "of the grid's voxels"),
    ("voxels ever written", "ever_active_fraction", _percent, ""),
    ("median σ (voxels)", "sigma_voxels", _number, f"below {SIGMA_COLLAPSE_VOXELS:g} voxel: σ collapse"),
    ("median σ (share of the grid)", "sigma_extent", _percent, f"above {SIGMA_EXPLOSION_EXTENT:.0%}: σ explosion"),
    ("reads within 2σ of a write", "reads_within_2sigma", _percent, f"below {UNREAD_FRACTION:.0%}: unread writes"),
    ("coordinates at a face", "boundary_fraction", _percent, f"above {BOUNDARY_FRACTION:.0%}: boundary saturation"),
    ("σ(γ) read gate", "gate_scale", lambda v: _number(v, 3), f"below {DEAD_GATE_SCALE:g}: dead memory"),
    ("input dependence of writes", "input_dependence", _percent, "0%: every sample writes the same path"),
)


def comparison_rows(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, str]]:
    """Rows ``{"measure", a's name, b's name, "meaning"}``: metrics, verdicts, then addressing measures."""

    def row(label: str, va: str, vb: str, meaning: str = "") -> dict[str, str]:
        return {"measure": label, a["name"]: va, b["name"]: vb, "meaning": meaning}

    if a["name"] == b["name"]:
        b = {**b, "name": b["name"] + " (2)"}
    rows = [row("task", a["task"], b["task"]), row("backbone", a["backbone"], b["backbone"])]
    for metric in dict.fromkeys([*a["metrics"], *b["metrics"]]):
        shown = lambda s, metric=metric: format_metric(metric, s["metrics"].get(metric), percent_digits=1)  # noqa: E731
        rows.append(
            row(metric.replace("_", " "), shown(a), shown(b), f"over {a['samples']} and {b['samples']} samples")
        )
    verdict = lambda s: s["addressing"]["verdict"] if s["addressing"] else "no memory layers"  # noqa: E731
    rows.append(row("addressing verdict", verdict(a), verdict(b)))
    if a["addressing"] or b["addressing"]:
        for label, key, fmt, meaning in MEASURES:
            value = lambda s, fmt=fmt, key=key: fmt(s["addressing"]["measures"].get(key)) if s["addressing"] else "—"  # noqa: E731
            rows.append(row(label, value(a), value(b), meaning))
    return rows


__all__ = ["sample_metrics", "checkpoint_summary", "comparison_note", "comparison_rows"]
