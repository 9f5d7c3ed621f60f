"""Capture a trace: run one task sample through a checkpoint with recording on.

``capture(checkpoint, seed=0, index=0, **task_params)`` generates sample ``index`` of the
stream ``seed`` for the checkpoint's task (with ``task_params`` overriding its config, e.g.
``occlusion_length=6``), streams it through the model a segment at a time (the state is carried,
so this equals one pass; it bounds memory and drives the progress bar) and returns a
:class:`~analysis.traces.trace.Trace`. Same checkpoint, seed, index and parameters ⇒ equal arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from analysis.traces.chunk_scorer import PER_TOKEN, check_finite, per_chunk, score_positions, written_chunks
from analysis.traces.segment_recorder import (
    LayerFields,
    joined_layers,
    layer_traces,
    layers_info,
    memory_chunk_size,
    record_segments,
)
from analysis.traces.trace import Trace, TraceError, check_volume_dtype
from tensor_memory import memory_layers
from tensor_memory.accelerator import resolve_device
from tensor_memory.backbone import check_budget
from tensor_memory.storage.checkpoint import Checkpoint, load_checkpoint
from tensor_memory.tasks import Batch
from tensor_memory.training.evaluation import task_with

SEGMENT_CHUNKS = 64  # chunks per forward call while capturing: bounds the float32 volumes held at once
BROKEN_SAMPLE = "this sample; the checkpoint is broken"  # what a checkpoint's NaN or infinite outputs say


def sample_batch(
    ckpt: Checkpoint, seed: int = 0, indices: Sequence[int] = (0,), **task_params: Any
) -> tuple[Any, Batch]:
    """The task (with ``task_params``) and its samples ``indices`` of stream ``seed``, one row each.

    Sample ``i`` of a stream is the same whichever other samples are drawn with it.
    """
    if any(i < 0 for i in indices):
        raise ValueError(f"sample indices must be >= 0, got {list(indices)}")
    task = task_with(ckpt, task_params or None)
    check_budget(
        ckpt.model.backbone.config,
        task.tokens,
        len(indices),
        training=False,
        where="the sample's task parameters",
        task=task,
    )
    rows = [task.draw("trace", 1, seed, i) for i in indices]  # the synthetic tasks: sample(derive_seed("trace", …))
    cat = lambda name: {k: torch.cat([getattr(r, name)[k] for r in rows]) for k in getattr(rows[0], name)}  # noqa: E731
    return task, Batch(
        cat("inputs"), torch.cat([r.targets for r in rows]), torch.cat([r.mask for r in rows]), cat("meta")
    )


def run_recorded(
    model: torch.nn.Module,
    inputs: dict[str, torch.Tensor],
    chunk_size: int,
    gates: bool = True,
    cell_state: bool = True,
    progress: bool | None = None,
    volumes: str = "float16",
) -> tuple[torch.Tensor, LayerFields]:
    """Stream ``inputs`` (B samples) through ``model`` a segment at a time, recording every memory layer.

    Returns the logits (B, N, classes) and, per layer, each field as (B, K, …) arrays — volumes
    float16, or int8 codes with ``<field>_scale`` (B, K, C) beside them when ``volumes="int8"``;
    the rest float32 — with ``gate_scale`` a float.
    """
    check_volume_dtype(volumes)
    N = next(iter(inputs.values())).shape[1]
    logits, recorded = None, []
    for segment in record_segments(
        model,
        model,
        inputs,
        N,
        SEGMENT_CHUNKS * chunk_size,
        gates=gates,
        cell_state=cell_state,
        volumes=volumes,
        progress=progress,
    ):
        out = segment.output
        if logits is None:  # filled a segment at a time: the outputs are never held twice
            logits = out.new_empty(out.shape[0], N, *out.shape[2:])
        logits[:, segment.start : segment.start + out.shape[1]] = out
        recorded.append(segment.layers)
    return logits, joined_layers(recorded)


def trace_info(
    ckpt: Checkpoint,
    task,
    seed: int,
    chunk_size: int,
    num_chunks: int,
    num_tokens: int,
    layers: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """A trace's ``info`` (without the sample index): what was run, on what, and each layer's volumes."""
    return {
        "checkpoint": str(ckpt.path),
        "checkpoint_name": Path(ckpt.path).name,
        "task": task.name,
        "task_params": task.config.to_dict(),
        "backbone": ckpt.model.backbone.config.kind,
        "seed": int(seed),
        "chunk_size": chunk_size,
        "num_chunks": num_chunks,
        "num_tokens": int(num_tokens),
        "num_classes": int(task.num_classes),
        "outputs": task.outputs,
        "output_width": int(task.output_width),
        "training_frozen": list(ckpt.config.get("training", {}).get("frozen", [])),
        "layers": layers,
    }


def sample_meta(batch, row: int) -> dict[str, np.ndarray]:
    """Row ``row`` of the task's metadata as numpy, floats as float32 (what a trace stores)."""
    meta = {k: v[row].numpy() for k, v in batch.meta.items()}
    return {k: v.astype(np.float32) if v.dtype.kind == "f" else v for k, v in meta.items()}


def capture_many(
    checkpoint: str | Path | Checkpoint,
    seed: int = 0,
    indices: Sequence[int] = (0,),
    gates: bool = True,
    cell_state: bool = True,
    progress: bool | None = None,
    volumes: str = "float16",
    device: str | torch.device | None = None,
    **task_params: Any,
) -> list[Trace]:
    """One trace per sample index, run together as one batch (the same samples as capturing each alone;
    the arrays agree up to float rounding, since batched arithmetic may round differently). ``device``: where the
    model runs (auto, cpu, cuda, cuda:N; a loaded checkpoint's model is moved there); None: the CPU for a path, a
    loaded checkpoint where it is. The trace is on the CPU either way."""
    check_volume_dtype(volumes)
    if isinstance(checkpoint, Checkpoint):
        ckpt = checkpoint
        if device is not None:
            ckpt.model.to(resolve_device(device))
    else:
        ckpt = load_checkpoint(checkpoint, device=device or "cpu")
    if not memory_layers(ckpt.model):  # a checkpoint of another backbone: say which commands do apply
        kind = ckpt.config["model"]["kind"]
        raise TraceError(
            f"{ckpt.path}: a '{kind}' checkpoint has no memory layer to trace; `tensor-memory eval` "
            f"and `audit` work on it, and its task's tensor checkpoint (e.g. checkpoints/"
            f"{ckpt.config['task']['name']}-tensor) can be traced"
        )
    model = ckpt.model.eval()
    chunk_size = memory_chunk_size(model)
    task, batch = sample_batch(ckpt, seed, list(indices), **task_params)
    N = batch.targets.shape[1]
    if N < chunk_size:
        raise TraceError(
            f"the sample has {N} tokens, fewer than one memory chunk ({chunk_size}); "
            f"choose task parameters that give a longer sequence"
        )
    logits, layers = run_recorded(model, batch.inputs, chunk_size, gates, cell_state, progress, volumes)
    logits = logits.cpu()  # beside the sample, which stays on the CPU
    check_finite(logits, BROKEN_SAMPLE)
    K = written_chunks(layers, N, chunk_size)
    info = trace_info(ckpt, task, seed, chunk_size, K, N, layers_info(layers, volumes, chunk_size))
    traces = []
    for row, index in enumerate(indices):
        text = sample_text(task, batch, logits, row)
        traces.append(
            Trace(
                info={**info, "index": int(index)},
                layers=layer_traces(layers, row, K),
                meta=sample_meta(batch, row),
                chunks=per_chunk(logits[row], batch.targets[row], batch.mask[row], chunk_size, K, task.outputs),
                **text,
            )
        )
    return traces


def sample_text(task: Any, batch: Batch, logits: torch.Tensor, row: int) -> dict[str, Any]:
    """A language model's sample as the Text view reads a trace: ``tokens`` (the input as text, one string a
    position), ``per_token`` (target, prediction, p(target) at each position, target −1 where none is scored) and
    ``vocabulary`` (each class's text: predictions shown as words); nothing for a task without text."""
    if not hasattr(task, "decode"):
        return {}
    scores = score_positions(logits[row], torch.where(batch.mask[row], batch.targets[row], -1))
    return {
        "tokens": task.decode(batch.inputs["tokens"][row]),
        "per_token": {key: scores[key] for key in PER_TOKEN},
        "vocabulary": task.decode(range(task.num_classes)),
    }


def capture(
    checkpoint: str | Path | Checkpoint,
    seed: int = 0,
    index: int = 0,
    gates: bool = True,
    cell_state: bool = True,
    progress: bool | None = None,
    volumes: str = "float16",
    device: str | torch.device | None = None,
    **task_params: Any,
) -> Trace:
    """Record sample ``index`` of stream ``seed`` through ``checkpoint`` (a path or a loaded checkpoint,
    possibly with modules swapped by the caller). ``task_params`` override the task's config.
    ``gates=False`` leaves out the four gate volumes and ``cell_state=False`` the cell volume ``c``: the
    trace of a long sequence on a large grid then holds ``h`` alone. ``volumes="int8"`` stores every
    volume as int8 with a scale per chunk and channel (:mod:`analysis.traces.quantized`): half the size of
    float16, each value within 1/254 of its channel's largest magnitude in that chunk. ``device``: where the model
    runs (as for :func:`capture_many`)."""
    return capture_many(checkpoint, seed, [index], gates, cell_state, progress, volumes, device, **task_params)[0]
