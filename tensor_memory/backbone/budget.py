"""What a backbone's state and a batch through it cost: the numbers its fixed-size state holds, and a
memory estimate that refuses a batch before it is allocated."""

from __future__ import annotations

import math
from typing import Any

from .. import limits as L
from .config import BackboneConfig

FLOAT_BYTES = 4


def estimated_parts(
    backbone: BackboneConfig, tokens: int, batch: int, training: bool, outputs: int = 0, vocabulary: int = 0
) -> dict[str, int]:
    """Bytes a backbone of ``backbone`` needs to run ``batch`` sequences of ``tokens`` tokens (an estimate), by what
    they grow with: the task's ``outputs`` a position (the head and its logits) and the ``vocabulary`` of token types
    its encoder embeds (0 for tasks that embed no vocabulary).

    ``weights``: the blocks, the memory layers, the embedding and the head (with a gradient and AdamW's two
    moments when training). ``activations``: what a block keeps per token (about 16·d numbers with the MLP's 4·d
    expansion) and the attention scores over the window. ``memory state``: each memory layer's volumes, one pair per
    chunk when training (kept for the backward), two otherwise. ``logits``: ``outputs`` numbers a position, four
    copies when training (measured: a step through a 100,000-type head, 16 × 128 positions, 0.82 GB of logits,
    peaked 3.3 GB above what was held before), two otherwise (the logits and their softmax).
    """
    d, depth = backbone.dim, backbone.layers
    params = depth * (4 * d * d + 2 * backbone.mlp_ratio * d * d) + 2 * d * d + (vocabulary + outputs) * d
    window = min(tokens, backbone.window or tokens)
    per_layer = tokens * d * (8 + 2 * backbone.mlp_ratio) + backbone.heads * tokens * window
    state = 0
    if backbone.memory is not None:
        cfg = backbone.memory
        layers = len(backbone.memory_layers or range(depth))
        chunks = math.ceil(tokens / cfg.chunk_size) if training else 2
        params += layers * (cfg.chunk_size * d * d + 8 * cfg.channels * cfg.channels + 2 * cfg.channels * d)
        state = layers * cfg.state_numel * (3 * chunks if training else chunks)  # h, c and the write factors
    kept = 2 if training else 1  # the backward keeps the forward's activations and their gradients
    numbers = {
        "weights": params * (4 if training else 1),
        "activations": batch * depth * per_layer * kept,
        "memory state": batch * state * kept,
        "logits": batch * tokens * outputs * (4 if training else 2),
    }
    return {part: count * FLOAT_BYTES for part, count in numbers.items()}


def estimated_bytes(
    backbone: BackboneConfig, tokens: int, batch: int, training: bool, outputs: int = 0, vocabulary: int = 0
) -> int:
    """The total of :func:`estimated_parts`."""
    return sum(estimated_parts(backbone, tokens, batch, training, outputs, vocabulary).values())


def task_parts(backbone: BackboneConfig, tokens: int, batch: int, training: bool, task: Any = None) -> dict[str, int]:
    """:func:`estimated_parts` with ``task`` (a Task, or None) giving its head, its logits and the vocabulary it
    embeds."""
    outputs = task.output_width if task is not None else 0
    return estimated_parts(backbone, tokens, batch, training, outputs, getattr(task, "input_vocabulary", 0))


def task_bytes(backbone: BackboneConfig, tokens: int, batch: int, training: bool, task: Any = None) -> int:
    """The total of :func:`task_parts`: what a device must hold for ``task`` at this size."""
    return sum(task_parts(backbone, tokens, batch, training, task).values())


def check_budget(
    backbone: BackboneConfig, tokens: int, batch: int, training: bool, where: str, task: Any = None
) -> None:
    """A ValueError naming the sizes, the largest part and what to lower when :func:`estimated_bytes` is over
    ``limits.MEMORY_BUDGET_BYTES``; ``task`` (a Task) adds its head, its logits and the vocabulary it embeds."""
    parts = task_parts(backbone, tokens, batch, training, task)
    need = sum(parts.values())
    if need <= L.MEMORY_BUDGET_BYTES:
        return
    largest = max(parts, key=parts.get)
    vocab_field = "task.params.vocab_size" if hasattr(getattr(task, "config", None), "vocab_size") else None
    vocabulary = getattr(task, "input_vocabulary", 0)
    lower = {
        "weights": "model.dim or model.layers" + (f", or {vocab_field}" if vocab_field and vocabulary else ""),
        "activations": "the batch (training.batch_size) or the sequence",
        "memory state": "the batch (training.batch_size), the memory's grid or its channels",
        "logits": (vocab_field or "the task's classes") + " or the batch (training.batch_size)",
    }[largest]
    memory = backbone.memory
    grid = "" if memory is None else f", memory C={memory.channels} on {'×'.join(map(str, memory.grid))}"
    shares = ", ".join(f"{part} {size / 2**30:.1f}" for part, size in parts.items() if size >= 2**26)
    raise ValueError(
        f"{where}: a batch of {batch} × {tokens} tokens through this model (d={backbone.dim}, "
        f"{backbone.layers} layers{grid}) needs about {need / 2**30:.1f} GiB, over the "
        f"{L.MEMORY_BUDGET_BYTES / 2**30:.0f} GiB budget ({shares} GiB); lower {lower}"
    )


def state_budget(backbone: BackboneConfig) -> dict[str, int | None]:
    """Numbers held per sequence by the fixed-size state: memory volumes, and a windowed KV cache."""
    memory = (
        backbone.memory.state_numel * len(backbone.memory_layers or range(backbone.layers))
        if backbone.kind == "tensor"
        else None
    )
    kv = 2 * backbone.dim * (backbone.window - 1) * backbone.layers if backbone.window else None
    total = None if backbone.window is None else (memory or 0) + kv  # None: a KV cache that grows
    return {"memory_state_numbers": memory, "kv_cache_numbers": kv, "total_state_numbers": total}


__all__ = ["estimated_parts", "estimated_bytes", "task_parts", "task_bytes", "check_budget", "state_budget"]
