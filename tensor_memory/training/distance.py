"""Accuracy against distance: how long ago a scored position's needed input was last seen.

A task that can say it sets ``distance_unit`` and :meth:`Task.distances`: for every scored position, how many
steps (frames, tokens) separate it from the last input that holds its answer — an occluded frame from the last
frame the ball was seen, a map query from the last glimpse of its cell, a binding query from its key's write.
Accuracy binned by that distance shows where each backbone stops reaching back; with the memory's reads held
off through the hook points (the control), what of it the memory carries.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from .. import limits as L
from ..config import require_int
from ..memory import memory_layers
from ..memory.hooking import hooks, reads_off
from ..storage.checkpoint import Checkpoint
from ..tasks import Task
from .evaluation import task_with
from .streamed import attention_reach


def distance_counts(
    model: nn.Module, task: Task, seed: int = 0, batches: int = 8, batch_size: int = 64, progress: bool | None = None
) -> dict[int, tuple[int, int]]:
    """``{distance: (correct, scored)}`` of ``model`` over the evaluation batches :func:`evaluate` uses (batch i is
    ``task.draw("eval", batch_size, seed, i)``); positions whose needed input was never shown are left out."""
    if task.distance_unit is None:
        raise ValueError(
            f"task {task.name} does not say how long ago a position's answer was shown; accuracy by "
            f"distance applies to occlusion, map_building and coordinate_binding"
        )
    require_int("distance_counts", "batches", batches, 1, L.MAX_STEPS)
    require_int("distance_counts", "batch_size", batch_size, 1, L.MAX_BATCH)
    device = next(model.parameters()).device
    counts: dict[int, list[int]] = {}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for index in tqdm(
                range(batches),
                desc=f"distance {task.name}",
                unit="batch",
                leave=False,
                disable=not (sys.stderr.isatty() if progress is None else progress),
                file=sys.stderr,
            ):
                batch = task.draw("eval", batch_size, seed, index)
                logits, _ = model({k: v.to(device) for k, v in batch.inputs.items()})
                hit = logits.argmax(-1).cpu() == batch.targets  # (B, N)
                distance = task.distances(batch)  # (B, N), −1 where nothing is scored or the answer was never shown
                scored = batch.mask & (distance >= 0)
                for d in distance[scored].unique().tolist():
                    here = scored & (distance == d)
                    tally = counts.setdefault(int(d), [0, 0])
                    tally[0] += int((hit & here).sum())
                    tally[1] += int(here.sum())
    finally:
        model.train(was_training)
    return {d: (c, n) for d, (c, n) in sorted(counts.items())}


def distance_evaluation(
    ckpt: Checkpoint,
    seed: int = 0,
    batches: int = 8,
    batch_size: int = 64,
    progress: bool | None = None,
    task_params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A checkpoint's accuracy by distance, and for a model with memory layers the same with their reads off;
    ``task_params`` change its task's parameters for the evaluation (those that keep the model's shapes).

    ``{"unit", "tokens_per_unit", "W", "rows": [{"from", "to", "scored", "accuracy", "reads_off"?}]}``: a row per
    distance up to 32, else per equal bin (:func:`bin_width`); W the attention's reach in tokens (the window, XL's
    segment, or the whole sample for full attention)."""
    task, model = task_with(ckpt, task_params), ckpt.model
    runs = {"accuracy": contextlib.nullcontext}
    layers = list(memory_layers(model))
    if layers:
        runs["reads_off"] = lambda: hooks(model, reads_off(layers))
    tallies = {}
    for name, context in runs.items():
        with context():
            tallies[name] = distance_counts(model, task, seed, batches, batch_size, progress)
    width = bin_width(max(tallies["accuracy"], default=0))
    rows = []
    for low in sorted({d // width * width for d in tallies["accuracy"]}):
        inside = [d for d in tallies["accuracy"] if low <= d < low + width]
        scored = sum(tallies["accuracy"][d][1] for d in inside)
        rows.append(
            {
                "from": low,
                "to": low + width - 1,
                "scored": scored,
                **{name: sum(tallies[name][d][0] for d in inside) / scored for name in runs},
            }
        )
    return {
        "unit": task.distance_unit,
        "tokens_per_unit": task.tokens_per_distance,
        "W": attention_reach(model.backbone.config, task.tokens),
        "rows": rows,
    }


def bin_width(longest: int, most: int = 16) -> int:
    """Distances share a row in bins this wide: 1 up to 32 (every distance its own row), else ``most`` rows."""
    return 1 if longest < 32 else -(-(longest + 1) // most)


__all__ = ["distance_counts", "distance_evaluation", "bin_width"]
