"""The ``slots`` kind's memory: a fixed set of recurrent slot vectors read and written by cross-attention."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import SLOT_GATE_INIT, BackboneConfig, SlotState


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
        return SlotState(slots=slots.expand(batch_size, -1, -1), pending=slots.new_zeros(batch_size, 0, slots.shape[1]))

    def forward(self, x: torch.Tensor, state: SlotState | None = None) -> tuple[torch.Tensor, SlotState]:
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
            chunk = tokens[:, k * cs : (k + 1) * cs]  # (B, cs, d)
            update = self.write(self.slot_norm(slots), chunk)  # (B, M, d)
            slots = self.update(update.reshape(-1, d), slots.reshape(-1, d)).view_as(slots)
            before.append(slots)
        seen = torch.stack(before[:n_read], dim=1).repeat_interleave(cs, dim=1)[:, P : P + N]  # (B, N, M, d)
        M = seen.shape[2]
        message = self.read(tokens[:, P:].reshape(B * N, 1, d), seen.reshape(B * N, M, d))  # (B·N, 1, d)
        y = x + torch.sigmoid(self.gate) * message.view(B, N, d)
        return y, SlotState(slots=slots, pending=tokens[:, n_write * cs :])
