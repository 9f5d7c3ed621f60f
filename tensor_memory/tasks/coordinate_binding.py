"""Coordinate binding: write (key, value) pairs at 3-D coordinates, then recall by a noisy key.

A sequence is ``writes`` write tokens, each a key ``k ~ U[-1, 1]³`` and a value
``v ∈ {0..values-1}``, followed by ``queries`` query tokens. A query's key is one of the written
keys (chosen uniformly) plus ``N(0, noise²)``, clamped to ``[-1, 1]``. The target at a query is
the value of the written key *nearest* to the query key (Euclidean) — computed, not copied from
the chosen key, since with noise the two can differ. Only queries are scored; chance is
``1 / values``.

With ``distractors`` > 0, that many filler tokens come between the writes and the queries: each a random key
with no value, flagged as a write, so the queries are at least that many tokens from what they ask for
(the long-range version of the task; docs/results.md, "Long range").
"""

from __future__ import annotations

import dataclasses
import math

import torch
from torch import nn

from .. import limits as L
from ..config import CONTENT_STD, ConfigBase, require_float, require_int
from .base import Batch, Counts, Task, embedding, generator, masked_accuracy


@dataclasses.dataclass
class CoordinateBindingConfig(ConfigBase):
    writes: int = 20  # W, write tokens per sequence
    noise: float = 0.0  # standard deviation of the Gaussian added to a query's key
    queries: int = 4  # query tokens after the writes
    values: int = 32  # distinct values (classes)
    distractors: int = 0  # filler tokens (a random key, no value) between the writes and the queries

    def __post_init__(self) -> None:
        owner = "CoordinateBindingConfig"
        require_int(owner, "writes", self.writes, 1, L.MAX_TASK_ITEMS)
        require_float(owner, "noise", self.noise, 0.0, math.inf)
        require_int(owner, "queries", self.queries, 1, L.MAX_TASK_ITEMS)
        require_int(owner, "values", self.values, 2, L.MAX_TASK_ITEMS)
        require_int(owner, "distractors", self.distractors, 0, L.MAX_TASK_ITEMS)


class BindingEncoder(nn.Module):
    """key (B, N, 3) → Linear; value (B, N), ``values`` = none → Embedding; is_query (B, N) → Embedding."""

    def __init__(self, values: int, dim: int) -> None:
        super().__init__()
        self.key = nn.Linear(3, dim)
        self.value = embedding(values + 1, dim, CONTENT_STD)  # index `values`: no value (a query)
        self.flag = embedding(2, dim)  # 0: write, 1: query

    def forward(self, key: torch.Tensor, value: torch.Tensor, is_query: torch.Tensor) -> torch.Tensor:
        return self.key(key) + self.value(value) + self.flag(is_query)


class CoordinateBinding(Task):
    name = "coordinate_binding"
    Config = CoordinateBindingConfig
    sweep_field = "writes"
    sweep_values = (5, 10, 20, 50)
    extra_sweeps = {"noise": (0.0, 0.05, 0.1)}  # swept separately from `writes`
    distance_unit = "tokens"
    horizon = "writes"

    @property
    def num_classes(self) -> int:
        return self.config.values

    @property
    def tokens(self) -> int:
        return self.config.writes + self.config.distractors + self.config.queries

    def sample(self, batch_size: int, seed: int) -> Batch:
        cfg = self.config
        B, W, D, Q = batch_size, cfg.writes, cfg.distractors, cfg.queries
        g = generator(seed)
        keys = torch.rand(B, W, 3, generator=g) * 2 - 1  # (B, W, 3) in [-1, 1)
        values = torch.randint(cfg.values, (B, W), generator=g)  # (B, W)
        chosen = torch.randint(W, (B, Q), generator=g)  # (B, Q) the key each query is built from
        jitter = torch.randn(B, Q, 3, generator=g) * cfg.noise  # drawn even at noise 0: one stream
        query_keys = torch.gather(keys, 1, chosen[..., None].expand(B, Q, 3))
        query_keys = (query_keys + jitter).clamp(-1.0, 1.0)  # (B, Q, 3)
        # Exact squared distances (no cdist matmul trick): a noiseless query is at distance 0.
        dist = ((query_keys[:, :, None, :] - keys[:, None, :, :]) ** 2).sum(-1)  # (B, Q, W)
        nearest = dist.argmin(-1)  # (B, Q)
        answer = torch.gather(values, 1, nearest)  # (B, Q)
        filler = torch.rand(B, D, 3, generator=g) * 2 - 1  # (B, D, 3) drawn last: D = 0 leaves the stream as it was

        key = torch.cat([keys, filler, query_keys], dim=1)  # (B, N, 3)
        value = torch.cat([values, torch.full((B, D + Q), cfg.values, dtype=torch.long)], dim=1)  # (B, N)
        is_query = torch.cat([torch.zeros(B, W + D, dtype=torch.long), torch.ones(B, Q, dtype=torch.long)], dim=1)
        targets = torch.cat([torch.zeros(B, W + D, dtype=torch.long), answer], dim=1)  # (B, N)
        mask = is_query.bool()
        meta = {"keys": keys, "values": values, "query_keys": query_keys, "nearest": nearest, "chosen": chosen}
        return Batch({"key": key, "value": value, "is_query": is_query}, targets, mask, meta)

    def encoder(self, dim: int) -> nn.Module:
        return BindingEncoder(self.config.values, dim)

    def counts(self, logits: torch.Tensor, batch: Batch) -> Counts:
        return {"accuracy": masked_accuracy(logits, batch, batch.mask)}

    def distances(self, batch: Batch) -> torch.Tensor:
        """Tokens from the write of a query's nearest key (the answer) to the query; −1 off the queries."""
        cfg = self.config
        nearest = batch.meta["nearest"]  # (B, Q) the write index, = its token
        query_at = cfg.writes + cfg.distractors + torch.arange(cfg.queries)  # (Q,)
        since = query_at[None, :] - nearest  # (B, Q)
        return torch.cat([torch.full((nearest.shape[0], self.tokens - cfg.queries), -1), since], dim=1)

    def true_places(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Each token at its key (a query's key repeats the written one it asks for): (B, N, 3)."""
        return inputs["key"]
