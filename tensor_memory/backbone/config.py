"""Backbone settings and the streaming state every kind carries between calls."""

from __future__ import annotations

import dataclasses

import torch

from .. import limits as L
from ..config import ConfigBase, require_int
from ..memory.config import MemoryConfig, MemoryState

KINDS = ("tensor", "base", "xl", "local", "linear", "slots", "registers")
# What the backbone adds to its input to mark token positions. "sinusoidal" has amplitude 1 per
# feature, which swamps task encoders whose features start small: the diagnostic tasks' configs use
# "none" and let their encoders carry the positions they need (docs/trainability.md).
POSITIONS = ("sinusoidal", "none")
MEMORY_KINDS = ("tensor", "slots")  # kinds with a memory sub-block in their memory layers
SLOT_GATE_INIT = -2.0  # read gate of the slot memory at init, the same σ(γ) ≈ 0.12 as MemoryConfig
LINEAR_EPS = 1e-6  # keeps linear attention's normaliser away from zero


# ---------------------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class BackboneConfig(ConfigBase):
    kind: str = "tensor"  # tensor | base | xl | local | linear | slots | registers
    dim: int = 64  # token width d
    layers: int = 2
    heads: int = 4
    mlp_ratio: int = 4  # MLP hidden width = mlp_ratio · dim
    causal: bool = True  # False: bidirectional, whole sequences only
    positions: str = "sinusoidal"  # "sinusoidal" | "none", see POSITIONS
    window: int | None = None  # attend to positions (t − window, t]; None = unbounded
    memory: MemoryConfig | None = None  # kind "tensor" only; defaults to MemoryConfig(token_dim=dim)
    memory_layers: list[int] | None = None  # layers with a memory (tensor) or slots; None = all
    xl_segment: int = 16  # Transformer-XL segment length (its memory is one segment)
    num_slots: int = 8  # slots per memory layer (kind "slots")
    slot_chunk: int = 1  # tokens per slot read/write step (kind "slots")
    num_registers: int = 4  # register tokens (kind "registers")
    share_state: bool = False  # kind "tensor": thread ONE memory state through the layers, as the paper's public
    # code does — each memory layer starts from the state the one below left after the whole segment, so a
    # later layer reads writes of future chunks. Leaky: for demonstrating the flaw (tensor-memory audit), not use

    def __post_init__(self) -> None:
        owner = "BackboneConfig"
        if self.kind not in KINDS:
            raise ValueError(f"{owner}.kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        require_int(owner, "dim", self.dim, 1, L.MAX_DIM)
        require_int(owner, "layers", self.layers, 1, L.MAX_LAYERS)
        require_int(owner, "heads", self.heads, 1, L.MAX_HEADS)
        if self.dim % self.heads:
            raise ValueError(f"{owner}.heads must divide {owner}.dim={self.dim}, got {self.heads}")
        require_int(owner, "mlp_ratio", self.mlp_ratio, 1, L.MAX_MLP_RATIO)
        if not isinstance(self.causal, bool):
            raise ValueError(f"{owner}.causal must be True or False, got {self.causal!r}")
        if self.positions not in POSITIONS:
            raise ValueError(
                f"{owner}.positions must be one of {', '.join(map(repr, POSITIONS))}, got {self.positions!r}"
            )
        if self.window is not None:
            require_int(owner, "window", self.window, 1, L.MAX_SEQUENCE)
        elif self.kind == "local":
            raise ValueError(f"{owner}.window is required for kind 'local' (an integer >= 1), got None")
        require_int(owner, "xl_segment", self.xl_segment, 1, L.MAX_SEQUENCE)
        require_int(owner, "num_slots", self.num_slots, 1, L.MAX_SLOTS)
        require_int(owner, "slot_chunk", self.slot_chunk, 1, L.MAX_SEQUENCE)
        require_int(owner, "num_registers", self.num_registers, 1, L.MAX_SLOTS)
        self._check_memory(owner)
        if not isinstance(self.share_state, bool):
            raise ValueError(f"{owner}.share_state must be True or False, got {self.share_state!r}")
        if self.share_state and (self.kind != "tensor" or not self.causal):
            raise ValueError(
                f"{owner}.share_state only applies to causal kind 'tensor' models (it threads their "
                f"memory state through the layers), got kind {self.kind!r}, causal={self.causal}"
            )

    def _check_memory(self, owner: str) -> None:
        if isinstance(self.memory, dict):  # from_dict / JSON: rebuild the nested config
            self.memory = MemoryConfig.from_dict(self.memory)
        if self.kind == "tensor" and self.memory is None:
            self.memory = MemoryConfig(token_dim=self.dim)
        if self.memory is not None:
            if self.kind != "tensor":
                raise ValueError(f"{owner}.memory is only used by kind 'tensor', got kind {self.kind!r}; leave it None")
            if not isinstance(self.memory, MemoryConfig):
                raise ValueError(f"{owner}.memory must be a MemoryConfig or a dict, got {type(self.memory).__name__}")
            if self.memory.token_dim != self.dim:
                raise ValueError(
                    f"{owner}.memory.token_dim must equal {owner}.dim={self.dim}, got token_dim={self.memory.token_dim}"
                )
        if self.memory_layers is not None:
            if self.kind not in MEMORY_KINDS:
                raise ValueError(
                    f"{owner}.memory_layers is only used by kinds {' and '.join(MEMORY_KINDS)}, "
                    f"got kind {self.kind!r}; leave it None"
                )
            ids = list(self.memory_layers) if isinstance(self.memory_layers, (list, tuple)) else None
            ok = (
                bool(ids)
                and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < self.layers for i in ids)
                and len(set(ids)) == len(ids)
            )
            if not ok:
                raise ValueError(
                    f"{owner}.memory_layers must be a non-empty list of distinct layer indices in "
                    f"[0, {self.layers - 1}] (or None for all), got {self.memory_layers!r}"
                )
            self.memory_layers = sorted(ids)  # type: ignore[arg-type]

    def has_memory(self, layer: int) -> bool:
        """Whether block ``layer`` gets the memory (tensor) or slot (slots) sub-block."""
        if self.kind not in MEMORY_KINDS:
            return False
        return self.memory_layers is None or layer in self.memory_layers


# ---------------------------------------------------------------------------------------
# State
# ---------------------------------------------------------------------------------------


class _Tensors:
    """Mixin for state dataclasses whose fields are all tensors."""

    def detach(self):
        return dataclasses.replace(
            self,
            **{
                f.name: getattr(self, f.name).detach()  # type: ignore[arg-type]
                for f in dataclasses.fields(self)
            },
        )

    def numel(self) -> int:
        return sum(getattr(self, f.name).numel() for f in dataclasses.fields(self))  # type: ignore[arg-type]


@dataclasses.dataclass
class KVCache(_Tensors):
    """Keys and values of earlier tokens, k and v (B, heads, L, dk); trimmed to window − 1 tokens."""

    k: torch.Tensor
    v: torch.Tensor


@dataclasses.dataclass
class LinearState(_Tensors):
    """Running sums of linear attention: S = Σ φ(k) vᵀ (B, heads, dk, dk), z = Σ φ(k) (B, heads, dk)."""

    S: torch.Tensor
    z: torch.Tensor


@dataclasses.dataclass
class XLCache(_Tensors):
    """Normalised layer inputs of the previous segment and the current one so far, (B, L, dim), L < 2·segment."""

    h: torch.Tensor


@dataclasses.dataclass
class SlotState(_Tensors):
    """Slot vectors (B, M, dim), and the normalised tokens of an incomplete chunk (B, P < slot_chunk, dim)."""

    slots: torch.Tensor
    pending: torch.Tensor


AttentionCache = KVCache | LinearState | XLCache


@dataclasses.dataclass
class LayerState:
    """One block's state: its attention cache and its memory's (or slots') state, either may be None."""

    attn: AttentionCache | None = None
    memory: MemoryState | SlotState | None = None

    def detach(self) -> LayerState:
        return LayerState(
            None if self.attn is None else self.attn.detach(), None if self.memory is None else self.memory.detach()
        )

    def numel(self) -> int:
        return sum(part.numel() for part in (self.attn, self.memory) if part is not None)


@dataclasses.dataclass
class BackboneState:
    """Everything a causal backbone carries between segments of one stream."""

    pos: int  # tokens consumed so far
    layers: list[LayerState]

    def detach(self) -> BackboneState:
        """Cut the gradient history (truncated back-propagation through a stream)."""
        return BackboneState(self.pos, [layer.detach() for layer in self.layers])

    def numel(self) -> int:
        """Numbers held per stream (all layers, all batch rows): the state's memory cost."""
        return sum(layer.numel() for layer in self.layers)
