"""The pre-norm block every kind shares, and the backbone that stacks them."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from ..config import MARKER_STD, require_int
from ..memory.layer import TensorMemory
from .attention import ATTENTION, SoftmaxAttention, sinusoidal_positions
from .config import BackboneConfig, BackboneState, LayerState
from .slots import SlotMemory


class MLP(nn.Module):
    def __init__(self, dim: int, ratio: int) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(dim, ratio * dim), nn.Linear(ratio * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


class Block(nn.Module):
    """Pre-norm block: ``x += attn(LN(x)); x = mem(x) [memory layers]; x += mlp(LN(x))``.

    ``forward(x, state, pos0, prefix)``: x (B, R+N, dim) with R register tokens first (the
    memory sees only the N real tokens); state a :class:`LayerState` when streaming, None for
    a whole sequence (bidirectional), in which case the memory starts from zero.
    """

    def __init__(self, config: BackboneConfig, index: int) -> None:
        super().__init__()
        self.attn_norm = nn.LayerNorm(config.dim)
        self.attn = ATTENTION.get(config.kind, SoftmaxAttention)(config)
        self.memory: nn.Module | None = None
        if config.has_memory(index):
            self.memory = TensorMemory(config.memory) if config.kind == "tensor" else SlotMemory(config)
        self.mlp_norm = nn.LayerNorm(config.dim)
        self.mlp = MLP(config.dim, config.mlp_ratio)

    def init_layer_state(self, batch_size: int, device=None, dtype=None) -> LayerState:
        memory = None if self.memory is None else self.memory.init_state(batch_size, device=device, dtype=dtype)
        return LayerState(self.attn.init_cache(batch_size, device, dtype), memory)

    def attend(self, x, cache, pos0: int, prefix: int):
        out, cache = self.attn(self.attn_norm(x), cache, pos0, prefix)
        return x + out, cache

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.mlp_norm(x))

    def forward(self, x, state: LayerState | None, pos0: int, prefix: int = 0):
        x, cache = self.attend(x, None if state is None else state.attn, pos0, prefix)
        memory_state = None if state is None else state.memory
        if self.memory is not None:
            x, memory_state = apply_memory(self.memory, x, memory_state, prefix)
        x = self.feed_forward(x)
        return x, (None if state is None else LayerState(cache, memory_state))


def apply_memory(memory: nn.Module, x: torch.Tensor, state, prefix: int):
    """Run a memory sub-block (y = x + σ(γ)·m) on the real tokens of x, skipping R register tokens."""
    if prefix == 0:
        return memory(x, state)
    y, state = memory(x[:, prefix:], state)
    return torch.cat([x[:, :prefix], y], dim=1), state


class Backbone(nn.Module):
    """``y, state = bb(x, state=None)``: x (B, N, dim) features → y (B, N, dim) after a final LayerNorm.

    Causal models return a :class:`BackboneState`; pass it back to continue the stream
    (``state=None`` starts a new sequence). Bidirectional models process whole sequences and
    return ``None`` as state.
    """

    def __init__(self, config: BackboneConfig) -> None:
        super().__init__()
        if not isinstance(config, BackboneConfig):
            raise ValueError(f"Backbone expects a BackboneConfig, got {type(config).__name__}")
        self.config = config
        self.registers = None
        if config.kind == "registers":  # learned tokens, no position: they sit before position 0
            self.registers = nn.Parameter(torch.randn(config.num_registers, config.dim) * MARKER_STD)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.layers))
        self.norm = nn.LayerNorm(config.dim)

    def init_state(self, batch_size: int, device=None, dtype=None) -> BackboneState:
        """A fresh stream (what ``state=None`` means): position 0, empty caches, zero memories."""
        if not self.config.causal:
            raise ValueError(
                "init_state: bidirectional models (BackboneConfig.causal=False) process whole "
                "sequences and carry no state"
            )
        require_int("init_state", "batch_size", batch_size, 1)
        ref = next(self.parameters())  # the model's device and dtype
        device, dtype = device or ref.device, dtype or ref.dtype
        return BackboneState(0, [block.init_layer_state(batch_size, device, dtype) for block in self.blocks])

    def forward(self, x: torch.Tensor, state: BackboneState | None = None):
        self._check_input(x, state)
        B, N, _ = x.shape
        if self.config.causal and state is None:
            state = self.init_state(B, x.device, x.dtype)
        pos0 = 0 if state is None else state.pos
        if N == 0:  # an empty segment of a stream changes nothing
            return self.norm(x), state
        h = x  # (B, N, dim)
        if self.config.positions == "sinusoidal":
            h = x + sinusoidal_positions(pos0, N, self.config.dim, x.device, x.dtype)
        prefix = 0
        if self.registers is not None:
            prefix = self.registers.shape[0]
            h = torch.cat([self.registers.expand(B, -1, -1), h], dim=1)  # (B, R+N, dim)
        layers = []
        shared = self._shared_start(state)
        for i, block in enumerate(self.blocks):
            layer_state = None if state is None else state.layers[i]
            if shared is not None and block.memory is not None:  # share_state: the state the layer below left
                layer_state = LayerState(layer_state.attn, shared)
            h, layer_state = block(h, layer_state, pos0, prefix)
            if shared is not None and block.memory is not None:
                shared = layer_state.memory
            layers.append(layer_state)
        y = self.norm(h[:, prefix:])  # register outputs are discarded
        return y, (None if state is None else BackboneState(pos0 + N, layers))

    def _shared_start(self, state: BackboneState | None):
        """With ``share_state``: the memory state the first memory layer starts from — the one the last
        memory layer left at the end of the previous segment (the public code's threading). Else None."""
        if not self.config.share_state or state is None:
            return None
        last = max(i for i, block in enumerate(self.blocks) if block.memory is not None)
        return state.layers[last].memory

    def _check_input(self, x: torch.Tensor, state: BackboneState | None) -> None:
        dim = self.config.dim
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != dim:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"Backbone expects x of shape (B, N, BackboneConfig.dim={dim}), got {shape}")
        if not torch.isfinite(x).all():
            raise ValueError("Backbone input contains NaN or infinite values")
        if state is None:
            return
        if not self.config.causal:
            raise ValueError(
                "bidirectional models (BackboneConfig.causal=False) process whole sequences: pass state=None"
            )
        if (
            not isinstance(state, BackboneState)
            or len(state.layers) != len(self.blocks)
            or isinstance(state.pos, bool)
            or not isinstance(state.pos, int)
            or state.pos < 0
        ):
            raise ValueError(
                f"state must be the BackboneState this backbone returned ({len(self.blocks)} layers, pos >= 0)"
            )
        for layer in state.layers:
            for part in (layer.attn, layer.memory):
                if part is not None:
                    batch = getattr(part, dataclasses.fields(part)[0].name).shape[0]
                    if batch != x.shape[0]:
                        raise ValueError(f"state holds batch size {batch}, x has {x.shape[0]}")
