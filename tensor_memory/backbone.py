"""Backbones: one small pre-norm Transformer, seven ways of giving it context.

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

import dataclasses
import math
from typing import Optional, Union

import torch
import torch.nn.functional as F
from torch import nn

from .config import ConfigBase, require_int
from .memory import MemoryConfig, MemoryState, TensorMemory

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
    window: Optional[int] = None  # attend to positions (t − window, t]; None = unbounded
    memory: Optional[MemoryConfig] = None  # kind "tensor" only; defaults to MemoryConfig(token_dim=dim)
    memory_layers: Optional[list[int]] = None  # layers with a memory (tensor) or slots; None = all
    xl_segment: int = 16  # Transformer-XL segment length (its memory is one segment)
    num_slots: int = 8  # slots per memory layer (kind "slots")
    slot_chunk: int = 1  # tokens per slot read/write step (kind "slots")
    num_registers: int = 4  # register tokens (kind "registers")

    def __post_init__(self) -> None:
        owner = "BackboneConfig"
        if self.kind not in KINDS:
            raise ValueError(f"{owner}.kind must be one of {', '.join(KINDS)}, got {self.kind!r}")
        require_int(owner, "dim", self.dim, 1)
        require_int(owner, "layers", self.layers, 1)
        require_int(owner, "heads", self.heads, 1)
        if self.dim % self.heads:
            raise ValueError(f"{owner}.heads must divide {owner}.dim={self.dim}, got {self.heads}")
        require_int(owner, "mlp_ratio", self.mlp_ratio, 1)
        if not isinstance(self.causal, bool):
            raise ValueError(f"{owner}.causal must be True or False, got {self.causal!r}")
        if self.positions not in POSITIONS:
            raise ValueError(f"{owner}.positions must be one of {', '.join(map(repr, POSITIONS))}, "
                             f"got {self.positions!r}")
        if self.window is not None:
            require_int(owner, "window", self.window, 1)
        elif self.kind == "local":
            raise ValueError(f"{owner}.window is required for kind 'local' (an integer >= 1), got None")
        require_int(owner, "xl_segment", self.xl_segment, 1)
        require_int(owner, "num_slots", self.num_slots, 1)
        require_int(owner, "slot_chunk", self.slot_chunk, 1)
        require_int(owner, "num_registers", self.num_registers, 1)
        self._check_memory(owner)

    def _check_memory(self, owner: str) -> None:
        if isinstance(self.memory, dict):  # from_dict / JSON: rebuild the nested config
            self.memory = MemoryConfig.from_dict(self.memory)
        if self.kind == "tensor" and self.memory is None:
            self.memory = MemoryConfig(token_dim=self.dim)
        if self.memory is not None:
            if self.kind != "tensor":
                raise ValueError(f"{owner}.memory is only used by kind 'tensor', got kind {self.kind!r}; "
                                 f"leave it None")
            if not isinstance(self.memory, MemoryConfig):
                raise ValueError(f"{owner}.memory must be a MemoryConfig or a dict, got {type(self.memory).__name__}")
            if self.memory.token_dim != self.dim:
                raise ValueError(f"{owner}.memory.token_dim must equal {owner}.dim={self.dim}, "
                                 f"got token_dim={self.memory.token_dim}")
        if self.memory_layers is not None:
            if self.kind not in MEMORY_KINDS:
                raise ValueError(f"{owner}.memory_layers is only used by kinds {' and '.join(MEMORY_KINDS)}, "
                                 f"got kind {self.kind!r}; leave it None")
            ids = list(self.memory_layers) if isinstance(self.memory_layers, (list, tuple)) else None
            ok = bool(ids) and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < self.layers
                                   for i in ids) and len(set(ids)) == len(ids)
            if not ok:
                raise ValueError(f"{owner}.memory_layers must be a non-empty list of distinct layer indices in "
                                 f"[0, {self.layers - 1}] (or None for all), got {self.memory_layers!r}")
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
        return dataclasses.replace(self, **{f.name: getattr(self, f.name).detach()  # type: ignore[arg-type]
                                            for f in dataclasses.fields(self)})

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


AttentionCache = Union[KVCache, LinearState, XLCache]


@dataclasses.dataclass
class LayerState:
    """One block's state: its attention cache and its memory's (or slots') state, either may be None."""

    attn: Optional[AttentionCache] = None
    memory: Optional[Union[MemoryState, SlotState]] = None

    def detach(self) -> "LayerState":
        return LayerState(None if self.attn is None else self.attn.detach(),
                          None if self.memory is None else self.memory.detach())

    def numel(self) -> int:
        return sum(part.numel() for part in (self.attn, self.memory) if part is not None)


@dataclasses.dataclass
class BackboneState:
    """Everything a causal backbone carries between segments of one stream."""

    pos: int  # tokens consumed so far
    layers: list[LayerState]

    def detach(self) -> "BackboneState":
        """Cut the gradient history (truncated back-propagation through a stream)."""
        return BackboneState(self.pos, [layer.detach() for layer in self.layers])

    def numel(self) -> int:
        """Numbers held per stream (all layers, all batch rows): the state's memory cost."""
        return sum(layer.numel() for layer in self.layers)


# ---------------------------------------------------------------------------------------
# Positions and masks
# ---------------------------------------------------------------------------------------

def sinusoidal_positions(start: int, n: int, dim: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """Sinusoidal embedding of positions start … start+n−1 → (n, dim) (Vaswani et al.)."""
    pos = torch.arange(start, start + n, device=device, dtype=torch.float64)  # float64: accurate far into a stream
    freq = 10000.0 ** (-torch.arange(0, dim, 2, device=device, dtype=torch.float64) / dim)  # (⌈dim/2⌉,)
    angles = pos[:, None] * freq[None, :]  # (n, ⌈dim/2⌉)
    pe = torch.zeros(n, dim, device=device, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)
    pe[:, 1::2] = torch.cos(angles[:, :dim // 2])
    return pe.to(dtype)


def visibility(q_pos: torch.Tensor, k_pos: torch.Tensor, causal: bool, window: Optional[int]) -> torch.Tensor:
    """(Lq, Lk) bool, True where a query at q_pos may attend a key at k_pos.

    Causal: keys at or before the query. Window: causal keys in (t − window, t];
    bidirectional keys with |t − j| < window. Negative positions are register tokens: they
    are visible regardless of window (causality still holds: they sit before position 0).
    """
    back = q_pos[:, None] - k_pos[None, :]  # (Lq, Lk) how far back the key is
    ok = back >= 0 if causal else torch.ones_like(back, dtype=torch.bool)
    if window is not None:
        near = back < window if causal else back.abs() < window
        ok = ok & (near | (k_pos < 0)[None, :] | (q_pos < 0)[:, None])
    return ok


# ---------------------------------------------------------------------------------------
# Attention: shared projections, three ways to attend
# ---------------------------------------------------------------------------------------

class Attention(nn.Module):
    """Multi-head projections shared by the attention forms. Subclasses implement ``forward``.

    ``forward(a, cache, pos0, prefix)``: a (B, R+N, dim) the block's normalised input — R
    register tokens (positions −R…−1) then N tokens at positions pos0…pos0+N−1; cache the
    layer's :data:`AttentionCache` when streaming (causal mode), None for a whole sequence.
    Returns (B, R+N, dim) and the updated cache.
    """

    def __init__(self, config: BackboneConfig) -> None:
        super().__init__()
        self.heads, self.dk = config.heads, config.dim // config.heads
        self.causal, self.window = config.causal, config.window
        self.query = nn.Linear(config.dim, config.dim)
        # No key bias: it adds the same q·b to every score of a query, which softmax ignores, so its
        # gradient is exactly zero and Adam would only amplify rounding noise into it.
        self.key = nn.Linear(config.dim, config.dim, bias=False)
        self.value = nn.Linear(config.dim, config.dim)
        self.out = nn.Linear(config.dim, config.dim)

    def split(self, t: torch.Tensor) -> torch.Tensor:
        B, L, _ = t.shape
        return t.view(B, L, self.heads, self.dk).transpose(1, 2)  # (B, heads, L, dk)

    def merge(self, t: torch.Tensor) -> torch.Tensor:
        B, _, L, _ = t.shape
        return self.out(t.transpose(1, 2).reshape(B, L, self.heads * self.dk))  # (B, L, dim)

    def keys_values(self, a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self.split(self.key(a)), self.split(self.value(a))  # (B, heads, L, dk) each

    def init_cache(self, batch_size: int, device=None, dtype=None) -> Optional[AttentionCache]:
        empty = torch.zeros(batch_size, self.heads, 0, self.dk, device=device, dtype=dtype)
        return KVCache(empty, empty.clone())

    def extend_cache(self, cache: KVCache, k: torch.Tensor, v: torch.Tensor) -> KVCache:
        """Append new keys/values; with a window keep only the window − 1 newest (all a later token can see)."""
        k, v = torch.cat([cache.k, k], dim=2), torch.cat([cache.v, v], dim=2)  # (B, heads, L+N, dk)
        if self.window is not None:
            start = max(0, k.shape[2] - (self.window - 1))
            k, v = k[:, :, start:], v[:, :, start:]
        return KVCache(k, v)

    def context(self, a: torch.Tensor, cache: Optional[KVCache], pos0: int, prefix: int):
        """Keys/values of [registers; cached tokens; new tokens] with their positions and the visibility mask."""
        N = a.shape[1] - prefix
        k, v = self.keys_values(a)  # (B, heads, R+N, dk)
        keys, values, L = k, v, 0
        if cache is not None:
            L = cache.k.shape[2]
            keys = torch.cat([k[:, :, :prefix], cache.k, k[:, :, prefix:]], dim=2)  # (B, heads, R+L+N, dk)
            values = torch.cat([v[:, :, :prefix], cache.v, v[:, :, prefix:]], dim=2)
        dev = a.device
        registers = torch.arange(-prefix, 0, device=dev)
        q_pos = torch.cat([registers, torch.arange(pos0, pos0 + N, device=dev)])  # (R+N,)
        k_pos = torch.cat([registers, torch.arange(pos0 - L, pos0 + N, device=dev)])  # (R+L+N,)
        mask = visibility(q_pos, k_pos, self.causal, self.window)  # (R+N, R+L+N)
        new_cache = None if cache is None else self.extend_cache(cache, k[:, :, prefix:], v[:, :, prefix:])
        return keys, values, mask, new_cache


class SoftmaxAttention(Attention):
    """Scaled dot-product attention; streaming keeps a KV cache (all tokens, or window − 1)."""

    def forward(self, a, cache: Optional[KVCache], pos0: int, prefix: int = 0):
        q = self.split(self.query(a))  # (B, heads, R+N, dk)
        keys, values, mask, cache = self.context(a, cache, pos0, prefix)
        out = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)  # (B, heads, R+N, dk)
        return self.merge(out), cache


def phi(x: torch.Tensor) -> torch.Tensor:
    """The positive feature map of linear attention (Katharopoulos et al., 2020)."""
    return F.elu(x) + 1.0


class LinearAttention(Attention):
    """Kernelised attention: out_t = φ(q_t)ᵀ Σ_j φ(k_j) v_jᵀ / φ(q_t)ᵀ Σ_j φ(k_j).

    Without a window the causal state is the running sums (S, z), fixed in size; within a call
    the sums are formed as a masked (N, N) product, which is exact and cheap at our lengths.
    With a window the sums cannot forget, so the window is a masked product over a KV buffer.
    """

    def init_cache(self, batch_size: int, device=None, dtype=None) -> Optional[AttentionCache]:
        if self.window is not None:
            return super().init_cache(batch_size, device, dtype)
        return LinearState(S=torch.zeros(batch_size, self.heads, self.dk, self.dk, device=device, dtype=dtype),
                           z=torch.zeros(batch_size, self.heads, self.dk, device=device, dtype=dtype))

    def forward(self, a, cache, pos0: int, prefix: int = 0):
        q = phi(self.split(self.query(a)))  # (B, heads, N, dk)
        if self.window is not None:  # masked product over [buffer; new tokens]
            keys, values, mask, cache = self.context(a, cache, pos0, prefix)
            weights = (q @ phi(keys).transpose(-1, -2)) * mask  # (B, heads, N, L+N)
            out = weights @ values / (weights.sum(-1, keepdim=True) + LINEAR_EPS)
            return self.merge(out), cache
        k, v = self.keys_values(a)
        k = phi(k)  # (B, heads, N, dk)
        weights = q @ k.transpose(-1, -2)  # (B, heads, N, N)
        if self.causal:
            N = a.shape[1]
            weights = weights * torch.ones(N, N, dtype=torch.bool, device=a.device).tril()
        num, den = weights @ v, weights.sum(-1)  # (B, heads, N, dk), (B, heads, N)
        if cache is not None:  # what earlier segments contributed
            num = num + q @ cache.S
            den = den + torch.einsum("bhnd,bhd->bhn", q, cache.z)
            cache = LinearState(S=cache.S + k.transpose(-1, -2) @ v, z=cache.z + k.sum(dim=2))
        return self.merge(num / (den[..., None] + LINEAR_EPS)), cache


class XLAttention(Attention):
    """Transformer-XL segment recurrence (Dai et al., 2019) with absolute positions.

    Positions are cut into segments of ``xl_segment`` (pos // segment). A token attends to its
    own segment (causally) and the whole previous segment. Keys/values of the previous
    segment are computed from stop-gradient layer inputs, as Transformer-XL's memory is; those
    of the own segment keep their gradient. Streaming keeps the layer inputs of the previous
    segment and of the current one so far (fewer than two segments).
    """

    def __init__(self, config: BackboneConfig) -> None:
        super().__init__(config)
        self.segment = config.xl_segment

    def init_cache(self, batch_size: int, device=None, dtype=None) -> Optional[AttentionCache]:
        return XLCache(torch.zeros(batch_size, 0, self.query.in_features, device=device, dtype=dtype))

    def forward(self, a, cache: Optional[XLCache], pos0: int, prefix: int = 0):
        N = a.shape[1]
        ctx = a if cache is None else torch.cat([cache.h, a], dim=1)  # (B, L+N, dim) oldest first
        L = ctx.shape[1] - N
        q = self.split(self.query(a))  # (B, heads, N, dk)
        k_mem, v_mem = self.keys_values(ctx.detach())  # stop-gradient: used for the previous segment
        k_own, v_own = self.keys_values(ctx)  # used for the own segment
        dev = a.device
        q_pos, k_pos = torch.arange(pos0, pos0 + N, device=dev), torch.arange(pos0 - L, pos0 + N, device=dev)
        q_seg, k_seg = (q_pos // self.segment)[:, None], (k_pos // self.segment)[None, :]
        ok = visibility(q_pos, k_pos, self.causal, self.window)  # (N, L+N)
        mask = torch.cat([ok & (k_seg == q_seg - 1), ok & (k_seg == q_seg)], dim=1)  # (N, 2(L+N)) each key once
        out = F.scaled_dot_product_attention(q, torch.cat([k_mem, k_own], dim=2),
                                             torch.cat([v_mem, v_own], dim=2), attn_mask=mask)
        if cache is not None:  # keep the previous segment of the next token and its own segment so far
            first = max(0, ((pos0 + N) // self.segment - 1) * self.segment)
            cache = XLCache(ctx[:, max(0, first - (pos0 - L)):])
        return self.merge(out), cache


ATTENTION = {"linear": LinearAttention, "xl": XLAttention}  # every other kind: SoftmaxAttention


# ---------------------------------------------------------------------------------------
# Slot memory (kind "slots")
# ---------------------------------------------------------------------------------------

class CrossAttention(nn.Module):
    """Unmasked multi-head attention from queries (M, Lq, dim) to a context (M, Lk, dim) → (M, Lq, dim)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim, bias=False)  # a key bias is invisible to softmax (see Attention)
        self.value = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        M, Lq, dim = x.shape
        h = self.heads

        def split(t):  # (M, L, dim) → (M, heads, L, dk)
            return t.view(M, t.shape[1], h, dim // h).transpose(1, 2)

        q, k, v = self.query(x), self.key(context), self.value(context)
        out = F.scaled_dot_product_attention(split(q), split(k), split(v))  # (M, heads, Lq, dk)
        return self.out(out.transpose(1, 2).reshape(M, Lq, dim))


class SlotMemory(nn.Module):
    """A fixed set of learned slot vectors carried as recurrent state (B, M, dim).

    Tokens are cut into chunks of ``slot_chunk`` (counted from the start of the stream).
    Each token of chunk k reads the slots as they were before chunk k (cross-attention, added
    through a gate σ(γ) like the tensor memory's); once the chunk is complete the slots attend
    to its tokens and take a GRU step. A chunk cut by a segment boundary is carried in
    ``SlotState.pending``, so streaming gives the outputs of one pass.
    """

    def __init__(self, config: BackboneConfig) -> None:
        super().__init__()
        d, self.chunk = config.dim, config.slot_chunk
        self.initial = nn.Parameter(torch.randn(config.num_slots, d) / math.sqrt(d))  # slots at sequence start
        self.norm = nn.LayerNorm(d)  # LN_m for the tokens
        self.slot_norm = nn.LayerNorm(d)
        self.read = CrossAttention(d, config.heads)  # tokens → slots
        self.write = CrossAttention(d, config.heads)  # slots → chunk tokens
        self.update = nn.GRUCell(d, d)  # gated slot update
        self.gate = nn.Parameter(torch.tensor(SLOT_GATE_INIT))  # γ

    def init_state(self, batch_size: int, device=None, dtype=None) -> SlotState:
        ref = self.initial
        slots = ref.to(device=device or ref.device, dtype=dtype or ref.dtype)
        return SlotState(slots=slots.expand(batch_size, -1, -1),
                         pending=slots.new_zeros(batch_size, 0, slots.shape[1]))

    def forward(self, x: torch.Tensor, state: Optional[SlotState] = None) -> tuple[torch.Tensor, SlotState]:
        B, N, d = x.shape
        if state is None:
            state = self.init_state(B, x.device, x.dtype)
        if N == 0:
            return x, state
        cs, P = self.chunk, state.pending.shape[1]
        tokens = torch.cat([state.pending, self.norm(x)], dim=1)  # (B, P+N, d)
        n_read, n_write = math.ceil((P + N) / cs), (P + N) // cs  # chunks touched / completed
        slots, before = state.slots, [state.slots]  # before[k]: the slots chunk k reads
        for k in range(n_write):
            chunk = tokens[:, k * cs:(k + 1) * cs]  # (B, cs, d)
            update = self.write(self.slot_norm(slots), chunk)  # (B, M, d)
            slots = self.update(update.reshape(-1, d), slots.reshape(-1, d)).view_as(slots)
            before.append(slots)
        seen = torch.stack(before[:n_read], dim=1).repeat_interleave(cs, dim=1)[:, P:P + N]  # (B, N, M, d)
        M = seen.shape[2]
        message = self.read(tokens[:, P:].reshape(B * N, 1, d), seen.reshape(B * N, M, d))  # (B·N, 1, d)
        y = x + torch.sigmoid(self.gate) * message.view(B, N, d)
        return y, SlotState(slots=slots, pending=tokens[:, n_write * cs:])


# ---------------------------------------------------------------------------------------
# Blocks and the backbone
# ---------------------------------------------------------------------------------------

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
        self.memory: Optional[nn.Module] = None
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

    def forward(self, x, state: Optional[LayerState], pos0: int, prefix: int = 0):
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
            self.registers = nn.Parameter(torch.randn(config.num_registers, config.dim) * 0.02)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.layers))
        self.norm = nn.LayerNorm(config.dim)

    def init_state(self, batch_size: int, device=None, dtype=None) -> BackboneState:
        """A fresh stream (what ``state=None`` means): position 0, empty caches, zero memories."""
        if not self.config.causal:
            raise ValueError("init_state: bidirectional models (BackboneConfig.causal=False) process whole "
                             "sequences and carry no state")
        require_int("init_state", "batch_size", batch_size, 1)
        ref = next(self.parameters())  # the model's device and dtype
        device, dtype = device or ref.device, dtype or ref.dtype
        return BackboneState(0, [block.init_layer_state(batch_size, device, dtype) for block in self.blocks])

    def forward(self, x: torch.Tensor, state: Optional[BackboneState] = None):
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
        for i, block in enumerate(self.blocks):
            h, layer_state = block(h, None if state is None else state.layers[i], pos0, prefix)
            layers.append(layer_state)
        y = self.norm(h[:, prefix:])  # register outputs are discarded
        return y, (None if state is None else BackboneState(pos0 + N, layers))

    def _check_input(self, x: torch.Tensor, state: Optional[BackboneState]) -> None:
        dim = self.config.dim
        if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.shape[-1] != dim:
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"Backbone expects x of shape (B, N, BackboneConfig.dim={dim}), got {shape}")
        if not torch.isfinite(x).all():
            raise ValueError("Backbone input contains NaN or infinite values")
        if state is None:
            return
        if not self.config.causal:
            raise ValueError("bidirectional models (BackboneConfig.causal=False) process whole sequences: "
                             "pass state=None")
        if not isinstance(state, BackboneState) or len(state.layers) != len(self.blocks) \
                or isinstance(state.pos, bool) or not isinstance(state.pos, int) or state.pos < 0:
            raise ValueError(f"state must be the BackboneState this backbone returned "
                             f"({len(self.blocks)} layers, pos >= 0)")
        for layer in state.layers:
            for part in (layer.attn, layer.memory):
                if part is not None:
                    batch = getattr(part, dataclasses.fields(part)[0].name).shape[0]
                    if batch != x.shape[0]:
                        raise ValueError(f"state holds batch size {batch}, x has {x.shape[0]}")

    # -- parameter accounting ---------------------------------------------------------------

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def parameter_report(self) -> dict[str, int]:
        """Parameter counts: total, and its split into attention, memory (tensor memory or slots), mlp, other."""
        groups = {"attention": (Attention,), "memory": (TensorMemory, SlotMemory), "mlp": (MLP,)}
        report = {"total": self.num_parameters()}
        counted: set[int] = set()
        for name, types in groups.items():
            params = {id(p): p for m in self.modules() if isinstance(m, types) for p in m.parameters()}
            report[name] = sum(p.numel() for i, p in params.items() if i not in counted)
            counted |= set(params)
        report["other"] = report["total"] - sum(report[name] for name in groups)  # norms, registers
        return report
