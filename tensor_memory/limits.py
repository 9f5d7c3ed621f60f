"""Ceilings on every size a config or a command-line setting can ask for, and a memory budget.

A size is checked when its config is built, so a hostile ``config.json`` (or ``--set``) is refused
in well under a second, before anything is allocated, with one line naming the field. The
ceilings sit far above what this project trains (its largest model is d = 256, C = 32 on 16³) and
below what would exhaust a 24 GiB machine. On top of them, :func:`check_budget` estimates the
bytes a model needs to run a batch (parameters, activations and memory state, computed from the
config) and refuses more than :data:`MEMORY_BUDGET_BYTES`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # only for the annotations: the configs import this module
    from .backbone import BackboneConfig

MAX_LAYERS = 64  # blocks in a backbone
MAX_DIM = 4096  # token width d
MAX_HEADS = 256
MAX_MLP_RATIO = 16
MAX_GRID_SIDE = 256  # voxels along one axis of a memory grid
MAX_GRID_CELLS = 64 ** 3  # voxels in one memory grid (262,144)
MAX_CHANNELS = 1024  # features per voxel C
MAX_STATE_NUMBERS = 1 << 26  # numbers in one memory layer's state per sequence (2·C·D·H·W), 256 MB in float32
MAX_SLOTS = 4096  # slots, registers
MAX_SEQUENCE = 1 << 16  # tokens in one task sample (also windows, chunks and XL segments)
MAX_TASK_ITEMS = 4096  # frames, observations, writes, queries, classes of a task
MAX_VOCAB = 1 << 20  # token types of a language model (WikiText-103 has 267,735)
MAX_BATCH = 4096  # samples in one batch (training, evaluation)
MAX_STEPS = 10_000_000  # training steps, evaluation batches
MEMORY_BUDGET_BYTES = 16 << 30  # 16 GiB: what one model may need for a batch on this 24 GiB machine

FLOAT_BYTES = 4


def estimated_bytes(backbone: "BackboneConfig", tokens: int, batch: int, training: bool) -> int:
    """Bytes a backbone of ``backbone`` needs to run ``batch`` sequences of ``tokens`` tokens (an estimate).

    Parameters (with AdamW's two moments and a gradient when training), the activations a block keeps
    per token (about 16·d numbers with the MLP's 4·d expansion), attention scores over the window, and
    each memory layer's state: one volume pair per chunk when training (kept for the backward), two
    otherwise.
    """
    d, L = backbone.dim, backbone.layers
    params = L * (4 * d * d + 2 * backbone.mlp_ratio * d * d) + 2 * d * d  # blocks, plus embeddings/head at most
    window = min(tokens, backbone.window or tokens)
    per_layer = tokens * d * (8 + 2 * backbone.mlp_ratio) + backbone.heads * tokens * window
    state = 0
    if backbone.memory is not None:
        cfg = backbone.memory
        layers = len(backbone.memory_layers or range(L))
        chunks = math.ceil(tokens / cfg.chunk_size) if training else 2
        params += layers * (cfg.chunk_size * d * d + 8 * cfg.channels * cfg.channels + 2 * cfg.channels * d)
        state = layers * cfg.state_numel * (3 * chunks if training else chunks)  # h, c and the write factors
    numbers = params * (4 if training else 1) + batch * (L * per_layer + state) * (2 if training else 1)
    return numbers * FLOAT_BYTES


def check_budget(backbone: "BackboneConfig", tokens: int, batch: int, training: bool, where: str) -> None:
    """A ValueError naming the sizes when :func:`estimated_bytes` is over :data:`MEMORY_BUDGET_BYTES`."""
    need = estimated_bytes(backbone, tokens, batch, training)
    if need > MEMORY_BUDGET_BYTES:
        memory = backbone.memory
        grid = "" if memory is None else f", memory C={memory.channels} on {'×'.join(map(str, memory.grid))}"
        raise ValueError(f"{where}: a batch of {batch} × {tokens} tokens through this model (d={backbone.dim}, "
                         f"{backbone.layers} layers{grid}) needs about {need / 2**30:.1f} GiB, over the "
                         f"{MEMORY_BUDGET_BYTES / 2**30:.0f} GiB budget; use a smaller batch, sequence or model")


__all__ = ["MAX_LAYERS", "MAX_DIM", "MAX_HEADS", "MAX_MLP_RATIO", "MAX_GRID_SIDE", "MAX_GRID_CELLS", "MAX_CHANNELS",
           "MAX_STATE_NUMBERS", "MAX_SLOTS", "MAX_SEQUENCE", "MAX_TASK_ITEMS", "MAX_BATCH", "MAX_STEPS",
           "MEMORY_BUDGET_BYTES", "estimated_bytes", "check_budget"]
