"""Attention: positions, visibility masks, softmax, linear and Transformer-XL attention."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import LINEAR_EPS, AttentionCache, BackboneConfig, KVCache, LinearState, XLCache

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
    pe[:, 1::2] = torch.cos(angles[:, : dim // 2])
    return pe.to(dtype)


def visibility(q_pos: torch.Tensor, k_pos: torch.Tensor, causal: bool, window: int | None) -> torch.Tensor:
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

    def init_cache(self, batch_size: int, device=None, dtype=None) -> AttentionCache | None:
        empty = torch.zeros(batch_size, self.heads, 0, self.dk, device=device, dtype=dtype)
        return KVCache(empty, empty.clone())

    def extend_cache(self, cache: KVCache, k: torch.Tensor, v: torch.Tensor) -> KVCache:
        """Append new keys/values; with a window keep only the window − 1 newest (all a later token can see)."""
        k, v = torch.cat([cache.k, k], dim=2), torch.cat([cache.v, v], dim=2)  # (B, heads, L+N, dk)
        if self.window is not None:
            start = max(0, k.shape[2] - (self.window - 1))
            k, v = k[:, :, start:], v[:, :, start:]
        return KVCache(k, v)

    def context(self, a: torch.Tensor, cache: KVCache | None, pos0: int, prefix: int):
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

    def forward(self, a, cache: KVCache | None, pos0: int, prefix: int = 0):
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

    def init_cache(self, batch_size: int, device=None, dtype=None) -> AttentionCache | None:
        if self.window is not None:
            return super().init_cache(batch_size, device, dtype)
        return LinearState(
            S=torch.zeros(batch_size, self.heads, self.dk, self.dk, device=device, dtype=dtype),
            z=torch.zeros(batch_size, self.heads, self.dk, device=device, dtype=dtype),
        )

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

    def init_cache(self, batch_size: int, device=None, dtype=None) -> AttentionCache | None:
        return XLCache(torch.zeros(batch_size, 0, self.query.in_features, device=device, dtype=dtype))

    def forward(self, a, cache: XLCache | None, pos0: int, prefix: int = 0):
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
        out = F.scaled_dot_product_attention(
            q, torch.cat([k_mem, k_own], dim=2), torch.cat([v_mem, v_own], dim=2), attn_mask=mask
        )
        if cache is not None:  # keep the previous segment of the next token and its own segment so far
            first = max(0, ((pos0 + N) // self.segment - 1) * self.segment)
            cache = XLCache(ctx[:, max(0, first - (pos0 - L)) :])
        return self.merge(out), cache


ATTENTION = {"linear": LinearAttention, "xl": XLAttention}  # every other kind: SoftmaxAttention
