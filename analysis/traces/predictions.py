"""A trace without memory layers: the per-chunk predictions of any checkpoint, for stepping and comparing.

Backbones without Tensor Memory (``base``, ``local``, …) cannot be captured into a full trace, but
their predictions can be stepped through the same way: :func:`prediction_trace` runs one sample
and returns a :class:`~analysis.traces.trace.Trace` with no layers, chunked as the task is built
(occlusion: one frame per chunk; the other tasks: one token), with the same ``info``, ``chunks``,
``meta`` and text (a language model's tokens and vocabulary) as :func:`analysis.traces.capture.capture` gives.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from analysis.traces.capture import BROKEN_SAMPLE, sample_batch, sample_meta, sample_text, trace_info
from analysis.traces.chunk_scorer import check_finite, per_chunk
from analysis.traces.trace import Trace, TraceError
from tensor_memory.storage.checkpoint import Checkpoint, load_checkpoint


def prediction_trace(checkpoint: str | Path | Checkpoint, seed: int = 0, index: int = 0, **task_params: Any) -> Trace:
    """Sample ``index`` of stream ``seed`` through any checkpoint: predictions per task chunk, no memory layers."""
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
    task, batch = sample_batch(ckpt, seed, [index], **task_params)
    chunk_size = task.chunk_size
    N = batch.targets.shape[1]
    K = N // chunk_size
    if K == 0:
        raise TraceError(
            f"the sample has {N} tokens, fewer than one chunk ({chunk_size}); choose task parameters "
            f"that give a longer sequence"
        )
    with torch.no_grad():
        logits, _ = ckpt.model.eval()(batch.inputs)
    check_finite(logits, BROKEN_SAMPLE)
    info = {**trace_info(ckpt, task, seed, chunk_size, K, N, layers={}), "index": int(index)}
    return Trace(
        info=info,
        layers={},
        meta=sample_meta(batch, 0),
        chunks=per_chunk(logits[0], batch.targets[0], batch.mask[0], chunk_size, K, task.outputs),
        **sample_text(task, batch, logits, 0),  # a language model's tokens and vocabulary, as a capture records
    )


__all__ = ["prediction_trace"]
