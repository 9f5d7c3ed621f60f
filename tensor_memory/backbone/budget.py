"""What a backbone's state and a batch through it cost: the numbers its fixed-size state holds, and a
memory estimate that refuses a batch before it is allocated."""

from __future__ import annotations

import math
from typing import Optional

from .. import limits as L
from .config import BackboneConfig

FLOAT_BYTES = 4


def estimated_bytes(backbone: BackboneConfig, tokens: int, batch: int, training: bool) -> int:
    """Bytes a backbone of ``backbone`` needs to run ``batch`` sequences of ``tokens`` tokens (an estimate).

    Parameters (with AdamW's two moments and a gradient when training), the activations a block keeps
    per token (about 16·d numbers with the MLP's 4·d expansion), attention scores over the window, and
    each memory layer's state: one volume pair per chunk when training (kept for the backward), two
    otherwise.
    """
    d, depth = backbone.dim, backbone.layers
    params = depth * (4 * d * d + 2 * backbone.mlp_ratio * d * d) + 2 * d * d  # blocks, plus embeddings/head at most
    window = min(tokens, backbone.window or tokens)
    per_layer = tokens * d * (8 + 2 * backbone.mlp_ratio) + backbone.heads * tokens * window
    state = 0
    if backbone.memory is not None:
        cfg = backbone.memory
        layers = len(backbone.memory_layers or range(depth))
        chunks = math.ceil(tokens / cfg.chunk_size) if training else 2
        params += layers * (cfg.chunk_size * d * d + 8 * cfg.channels * cfg.channels + 2 * cfg.channels * d)
        state = layers * cfg.state_numel * (3 * chunks if training else chunks)  # h, c and the write factors
    numbers = params * (4 if training else 1) + batch * (depth * per_layer + state) * (2 if training else 1)
    return numbers * FLOAT_BYTES


def check_budget(backbone: BackboneConfig, tokens: int, batch: int, training: bool, where: str) -> None:
    """A ValueError naming the sizes when :func:`estimated_bytes` is over ``limits.MEMORY_BUDGET_BYTES``."""
    need = estimated_bytes(backbone, tokens, batch, training)
    if need > L.MEMORY_BUDGET_BYTES:
        memory = backbone.memory
        grid = "" if memory is None else f", memory C={memory.channels} on {'×'.join(map(str, memory.grid))}"
        raise ValueError(f"{where}: a batch of {batch} × {tokens} tokens through this model (d={backbone.dim}, "
                         f"{backbone.layers} layers{grid}) needs about {need / 2**30:.1f} GiB, over the "
                         f"{L.MEMORY_BUDGET_BYTES / 2**30:.0f} GiB budget; use a smaller batch, sequence or model")


def state_budget(backbone: BackboneConfig) -> dict[str, Optional[int]]:
    """Numbers held per sequence by the fixed-size state: memory volumes, and a windowed KV cache."""
    memory = backbone.memory.state_numel * len(backbone.memory_layers or range(backbone.layers)) \
        if backbone.kind == "tensor" else None
    kv = 2 * backbone.dim * (backbone.window - 1) * backbone.layers if backbone.window else None
    total = None if backbone.window is None else (memory or 0) + kv  # None: a KV cache that grows
    return {"memory_state_numbers": memory, "kv_cache_numbers": kv, "total_state_numbers": total}


__all__ = ["estimated_bytes", "check_budget", "state_budget"]
