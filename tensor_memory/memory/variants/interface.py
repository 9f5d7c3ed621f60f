"""How tokens come into a layer and its result goes out: the paper's way, or the paper's public code's.

The paper's layer normalises the tokens it takes (LN_m), carries a last incomplete chunk until its tokens are complete
and returns ``x + σ(γ)·m``. The public ``TensorMemoryInterface`` takes tokens its blocks normalised, zero-pads a last
incomplete chunk and writes it at once, and returns the message ``m`` for its blocks to gate (or, imported with the
gate of the block around it as γ, ``σ(γ)·m``).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import MemoryConfig


def input_norm(config: MemoryConfig) -> nn.Module:
    """LN_m, or nothing where the caller normalises the tokens."""
    return nn.LayerNorm(config.token_dim) if config.public_code.input_norm else nn.Identity()


def read_gate(config: MemoryConfig) -> nn.Parameter | None:
    """γ, the learned scalar whose sigmoid scales the read; None where the output is the message alone."""
    gated = config.public_code.output in ("residual", "gated")
    return nn.Parameter(torch.tensor(float(config.gate_init))) if gated else None


class PendingChunks(nn.Module):
    """Complete chunks only: a last incomplete one is read now and written once its tokens arrive
    (``MemoryState.pending`` carries them), so a stream cut anywhere gives one pass's outputs."""

    def __init__(self, chunk_size: int) -> None:
        super().__init__()
        self.chunk_size = chunk_size

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(B, T, d) → (B, n_write, chunk·d), the tokens of each complete chunk side by side."""
        B, T, d = tokens.shape
        n_write = T // self.chunk_size
        return tokens[:, : n_write * self.chunk_size].reshape(B, n_write, self.chunk_size * d)


class PaddedChunks(PendingChunks):
    """Every chunk, a last incomplete one zero-padded and written at once: nothing is carried."""

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        B, T, d = tokens.shape
        n_write = -(-T // self.chunk_size)
        if T % self.chunk_size:
            tokens = F.pad(tokens, (0, 0, 0, n_write * self.chunk_size - T))  # (B, n_write·chunk, d) zeros after
        return tokens.reshape(B, n_write, self.chunk_size * d)


def chunking(config: MemoryConfig) -> PendingChunks:
    """How the config cuts tokens into chunks to write."""
    kind = PaddedChunks if config.public_code.partial_chunk == "pad" else PendingChunks
    return kind(config.chunk_size)


class Residual(nn.Module):
    """y = x + σ(γ)·m."""

    def scale(self, gate: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        """σ(γ)."""
        return torch.sigmoid(gate)

    def forward(self, x: torch.Tensor, scaled: torch.Tensor) -> torch.Tensor:
        return x + scaled


class Message(nn.Module):
    """y = m: the projected read alone, scaled by 1."""

    def scale(self, gate: None, like: torch.Tensor) -> torch.Tensor:
        """1, as a tensor like ``like``."""
        return like.new_ones(())

    def forward(self, x: torch.Tensor, scaled: torch.Tensor) -> torch.Tensor:
        return scaled


class Gated(Residual):
    """y = σ(γ)·m: the gated read, which the caller adds to its own stream."""

    def forward(self, x: torch.Tensor, scaled: torch.Tensor) -> torch.Tensor:
        return scaled


def output(config: MemoryConfig) -> nn.Module:
    """What the layer returns."""
    return {"residual": Residual, "gated": Gated}.get(config.public_code.output, Message)()
