"""Evaluation: a model's metrics on a task over seeded batches, for one setting or the task's sweep.

Batch ``i`` of an evaluation with seed ``s`` is ``task.draw("eval", batch_size, s, i)`` — for the
synthetic tasks ``task.sample(batch_size, derive_seed("eval", s, i))``: the evaluation stream never
overlaps the training stream, and the same seed gives the same batches (and, for a given model, the
same metrics) on every run. Language modelling's evaluation walks its test split once, in order. Counts (correct,
total) are summed over batches before dividing, so a metric is exact over all scored positions.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch import nn

from .. import limits as L
from ..accelerator import autocast, check_device_memory, check_precision, model_device, resolve_device
from ..backbone import SLOT_GATE_INIT, SlotMemory, check_budget
from ..backbone.budget import task_bytes
from ..config import require_int
from ..memory import TensorMemory
from ..storage.checkpoint import Checkpoint
from ..tasks import Task, make_task


def gate_drift(model: nn.Module) -> float | None:
    """σ(γ) − σ(γ_init) of the memory layer that moved most (sign kept: positive = read amplified).

    Memory layers are the tensor memories (γ_init = their ``config.gate_init``) and the slot
    memories of the ``slots`` baseline (γ_init = ``SLOT_GATE_INIT``). None for a model without one.
    """
    drifts = []
    for module in model.modules():
        if isinstance(module, TensorMemory):
            init = module.config.gate_init
        elif isinstance(module, SlotMemory):
            init = SLOT_GATE_INIT
        else:
            continue
        gate = module.gate.detach().double().cpu()
        drifts.append(float(torch.sigmoid(gate) - torch.sigmoid(torch.tensor(float(init), dtype=torch.float64))))
    if not drifts:
        return None
    return max(drifts, key=abs)


def _placed(
    model: nn.Module, task: Task, batch_size: int, device: str | torch.device | None, precision: str
) -> torch.device:
    """Where an evaluation runs: ``model`` moved to ``device`` when one is named, after checking that a batch fits
    the memory budget and the device's free memory and that the device runs ``precision``."""
    backbone = getattr(getattr(model, "backbone", None), "config", None)
    if backbone is not None:
        check_budget(backbone, task.tokens, batch_size, training=False, where="evaluate", task=task)
    target = model_device(model) if device is None else resolve_device(device)
    check_precision(precision, target)
    if backbone is not None:
        check_device_memory(task_bytes(backbone, task.tokens, batch_size, False, task), target, "evaluate")
    model.to(target)
    return target


def evaluate(
    model: nn.Module,
    task: Task,
    seed: int = 0,
    batches: int = 8,
    batch_size: int = 64,
    progress: bool | None = None,
    purpose: str = "eval",
    device: str | torch.device | None = None,
    precision: str = "fp32",
) -> dict[str, float | None]:
    """Metrics of ``model`` on ``task`` over ``batches`` seeded batches.

    Returns ``{metric: correct / total}`` for each metric of ``task.counts`` (None where no
    position was scored, e.g. occluded-frame accuracy when nothing is occluded), ``chance``
    (1 / number of classes) and, for models with memory layers, ``gate_drift``. The model is
    run in eval mode under ``torch.no_grad`` (its previous mode is restored afterwards).
    ``progress``: show a tqdm bar (default: when stderr is a terminal). ``purpose`` names the seed
    stream: batch i is ``task.draw(purpose, batch_size, seed, i)``; the trainer's
    validation uses ``"val"`` so that it never sees the ``"eval"`` batches reported for a checkpoint.
    ``device`` (auto, cpu, cuda, cuda:N): move the model there first (as ``model.to`` does); None: where it is.
    ``precision``: fp32, or bf16/fp16 autocast (``accelerator/precision.py``).
    """
    from tqdm import tqdm

    require_int("evaluate", "batches", batches, 1, L.MAX_STEPS)
    require_int("evaluate", "batch_size", batch_size, 1, L.MAX_BATCH)
    device = _placed(model, task, batch_size, device, precision)
    if progress is None:
        progress = sys.stderr.isatty()

    available = task.split_batches(purpose, batch_size)
    if available is not None:  # a finite split (a test text) is covered once, never wrapped
        batches = min(batches, available)
    totals: dict[str, list[float]] = {}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            for index in tqdm(
                range(batches),
                desc=f"eval {task.name}",
                unit="batch",
                disable=not progress,
                leave=False,
                file=sys.stderr,
            ):
                batch = task.draw(purpose, batch_size, seed, index).to(device)
                with autocast(precision, device):
                    logits, _ = model(batch.inputs)
                logits = logits.float()  # the metrics in float32, whatever the forward's type
                if not torch.isfinite(logits).all():
                    raise FloatingPointError(
                        f"the model's outputs are NaN or infinite on evaluation batch {index}: "
                        f"its weights are broken, so its accuracy would mean nothing; "
                        f"retrain it or use another checkpoint"
                    )
                for metric, (correct, total) in task.counts(logits, batch).items():
                    acc = totals.setdefault(metric, [0.0, 0.0])
                    acc[0] += float(correct)
                    acc[1] += float(total)
    finally:
        model.train(was_training)

    metrics: dict[str, float | None] = {
        metric: (correct / total if total > 0 else None) for metric, (correct, total) in totals.items()
    }
    metrics.update(task.derived_metrics(metrics))
    if task.outputs == "classes":
        metrics["chance"] = 1.0 / task.num_classes
    drift = gate_drift(model)
    if drift is not None:
        metrics["gate_drift"] = drift
    return metrics


# How a metric reads: most are shares of scored positions (percentages); these are numbers in their own units.
DECIBEL_METRICS = ("psnr", "psnr_mean_fill")
PLAIN_METRICS = ("ssim", "ssim_mean_fill", "mse", "cross_entropy", "perplexity")


def metric_unit(metric: str) -> str:
    """ "%" for a share of positions (accuracies, chance), "dB" for a PSNR, "" for the rest (SSIM, errors, drift)."""
    if metric in DECIBEL_METRICS:
        return "dB"
    return "" if metric in PLAIN_METRICS or metric == "gate_drift" else "%"


def format_metric(metric: str, value: float | None, percent_digits: int = 2) -> str:
    """``value`` of ``metric`` as people read it: "99.61%", "25.32 dB", "0.7312", "+0.0012"; "—" for None."""
    if value is None:
        return "—"
    if metric == "gate_drift":
        return f"{value:+.4f}"
    unit = metric_unit(metric)
    if unit == "%":
        return f"{100 * value:.{percent_digits}f}%"
    return f"{value:.2f} dB" if unit == "dB" else f"{value:.4f}"


def _shapes(module: nn.Module) -> dict[str, tuple[int, ...]]:
    return {name: tuple(value.shape) for name, value in module.state_dict().items()}


def task_with(ckpt: Checkpoint, params: dict[str, Any] | None) -> Task:
    """The checkpoint's task with ``params`` overriding its config, checked to fit the trained model.

    Raises ValueError when a value is invalid or would change the encoder's or head's shapes
    (e.g. a different vocabulary), which the trained weights cannot serve.
    """
    if not params:
        return ckpt.task
    name = ckpt.task.name
    merged = {**ckpt.task.config.to_dict(), **params}
    try:
        task = make_task(name, merged)
        task.restore(ckpt.path)  # the checkpoint's own files (a language model's tokenizer)
    except (ValueError, TypeError) as error:
        raise ValueError(f"task parameters {params} for {name!r}: {error}") from None
    model = ckpt.model
    dim = model.backbone.config.dim
    try:  # on the meta device: shapes only, no memory, no draw from the global RNG
        with torch.device("meta"):
            encoder, head = task.encoder(dim), task.head(dim)
    except Exception:  # an encoder whose construction needs real values
        with torch.random.fork_rng(devices=[]):
            encoder, head = task.encoder(dim), task.head(dim)
    if (
        type(encoder) is not type(model.encoder)
        or _shapes(encoder) != _shapes(model.encoder)
        or _shapes(head) != _shapes(model.head)
        or task.output_width != ckpt.task.output_width
    ):
        raise ValueError(
            f"task parameters {params} change the shapes of the {name!r} encoder or head the "
            f"checkpoint was trained with; only parameters that leave them unchanged can be varied"
        )
    return task


def evaluate_checkpoint(
    ckpt: Checkpoint,
    seed: int = 0,
    batches: int = 8,
    batch_size: int = 64,
    task_params: dict[str, Any] | None = None,
    progress: bool | None = None,
) -> dict[str, Any]:
    """``{"task", "backbone", "seed", "batches", "batch_size", "params", "metrics"}`` for a loaded checkpoint.

    ``task_params`` override the task's config (for sweeps); the trained model is reused.
    """
    task = task_with(ckpt, task_params)
    metrics = evaluate(ckpt.model, task, seed=seed, batches=batches, batch_size=batch_size, progress=progress)
    return {
        "task": task.name,
        "backbone": ckpt.model.backbone.config.kind,
        "seed": seed,
        "batches": batches,
        "batch_size": batch_size,
        "params": task.config.to_dict(),
        "metrics": metrics,
    }


def sweep_points(task: Task) -> list[dict[str, Any]]:
    """Every parameter setting of ``task.sweep()`` then of ``extra_sweeps`` ({field: values}), without repeats."""
    points = list(task.sweep())
    base = task.config.to_dict()
    for field, values in (getattr(type(task), "extra_sweeps", None) or {}).items():
        points.extend({**base, field: value} for value in values)
    unique: list[dict[str, Any]] = []
    for point in points:
        if point not in unique:
            unique.append(point)
    return unique


def sweep(
    ckpt: Checkpoint, seed: int = 0, batches: int = 8, batch_size: int = 64, progress: bool | None = None
) -> list[dict[str, Any]]:
    """``[{"params": {...}, "metrics": {...}}, ...]`` at every point of the task's sweep (same seeds at each)."""
    return [
        {
            "params": point,
            "metrics": evaluate_checkpoint(ckpt, seed, batches, batch_size, task_params=point, progress=progress)[
                "metrics"
            ],
        }
        for point in sweep_points(ckpt.task)
    ]


__all__ = [
    "evaluate",
    "evaluate_checkpoint",
    "sweep",
    "sweep_points",
    "gate_drift",
    "task_with",
    "metric_unit",
    "format_metric",
]
