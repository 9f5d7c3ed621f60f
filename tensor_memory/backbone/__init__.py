"""Backbones: one small pre-norm Transformer, seven ways of giving it context.

The package reads in six parts: ``config`` (settings and streaming state), ``attention``,
``slots`` (the slot memory), ``blocks`` (the shared block and the stack), ``attach`` (a memory put
into other Transformers' blocks) and ``budget`` (what a state holds and a batch needs).

Every kind shares the same block,

    x += attn(LN(x));  x += mem(x)  [memory layers only, LN_m inside];  x += mlp(LN(x))

and, with ``positions="sinusoidal"``, a sinusoidal absolute position embedding added at the
input. They differ only in the context mechanism:

- ``base``      softmax attention over every earlier token (a KV cache that grows).
- ``local``     softmax attention over the last ``window`` tokens (a fixed-size KV cache).
- ``tensor``    softmax attention (window optional) + :class:`TensorMemory` in memory layers.
- ``xl``        Transformer-XL segment recurrence: a token sees its own segment and the whole
                previous one, whose keys/values come from stop-gradient layer inputs.
- ``linear``    kernelised linear attention, φ(x) = elu(x) + 1; the state is a running sum.
- ``slots``     softmax attention + a fixed set of recurrent slot vectors per memory layer.
- ``registers`` softmax attention + learned register tokens prepended in every forward.

Streaming: ``y, state = bb(x, state)`` carries everything a causal model needs to continue a
sequence, so feeding it in segments gives the outputs of one pass. ``state.pos`` is the
number of tokens consumed so far; positions, windows, XL segments and memory chunks are all
counted from the start of the stream, never from the start of a call.
"""

from __future__ import annotations

from .attach import attach_memory, detach_memory
from .attention import Attention, LinearAttention, SoftmaxAttention, XLAttention, sinusoidal_positions, visibility
from .blocks import MLP, Backbone, Block, apply_memory
from .budget import check_budget, estimated_bytes, state_budget
from .config import (
    KINDS,
    MEMORY_KINDS,
    POSITIONS,
    SLOT_GATE_INIT,
    BackboneConfig,
    BackboneState,
    KVCache,
    LayerState,
    LinearState,
    SlotState,
    XLCache,
)
from .slots import CrossAttention, SlotMemory

__all__ = [
    "KINDS",
    "MEMORY_KINDS",
    "POSITIONS",
    "SLOT_GATE_INIT",
    "BackboneConfig",
    "BackboneState",
    "LayerState",
    "KVCache",
    "LinearState",
    "XLCache",
    "SlotState",
    "Attention",
    "SoftmaxAttention",
    "LinearAttention",
    "XLAttention",
    "sinusoidal_positions",
    "visibility",
    "CrossAttention",
    "SlotMemory",
    "MLP",
    "Block",
    "Backbone",
    "apply_memory",
    "attach_memory",
    "detach_memory",
    "check_budget",
    "estimated_bytes",
    "state_budget",
]
