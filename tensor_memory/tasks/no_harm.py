"""No harm: next-token prediction of a counter, s_t = (s_{t-1} + 1) mod 16.

Memory is useless here: the task checks that adding it costs nothing — every backbone should
reach ≥ 99% and the memory's read gate σ(γ) should stay near its initial value.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from .. import limits as L
from ..config import ConfigBase, require_int
from .base import Batch, Counts, Task, TokenEncoder, generator, masked_accuracy


@dataclasses.dataclass
class NoHarmConfig(ConfigBase):
    length: int = 32  # tokens per sequence
    modulus: int = 16  # the counter wraps at this value

    def __post_init__(self) -> None:
        require_int("NoHarmConfig", "length", self.length, 2, L.MAX_SEQUENCE)
        require_int("NoHarmConfig", "modulus", self.modulus, 2, L.MAX_TASK_ITEMS)


class NoHarm(Task):
    name = "no_harm"
    Config = NoHarmConfig
    sweep_field = "length"
    sweep_values = (32,)

    @property
    def num_classes(self) -> int:
        return self.config.modulus

    @property
    def tokens(self) -> int:
        return self.config.length

    def sample(self, batch_size: int, seed: int) -> Batch:
        cfg = self.config
        start = torch.randint(cfg.modulus, (batch_size, 1), generator=generator(seed))
        sequence = (start + torch.arange(cfg.length + 1)) % cfg.modulus  # (B, N+1)
        tokens, targets = sequence[:, :-1], sequence[:, 1:]  # predict the next value
        mask = torch.ones_like(tokens, dtype=torch.bool)
        return Batch({"tokens": tokens}, targets, mask, {"sequence": sequence})

    def encoder(self, dim: int) -> nn.Module:
        return TokenEncoder(self.config.modulus, dim)

    def counts(self, logits: torch.Tensor, batch: Batch) -> Counts:
        return {"accuracy": masked_accuracy(logits, batch, batch.mask)}
