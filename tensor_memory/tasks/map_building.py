"""Map building: assemble a hidden binary map from local glimpses, then answer cell queries.

A hidden ``map_size × map_size`` grid has each cell 1 with probability ``density``.
``observations`` tokens each reveal a ``patch × patch`` patch at a uniformly random top-left
position (within bounds): its cell values (row-major) and its position. Then ``queries`` query
tokens each ask the occupancy of a uniformly random cell (its position and a query flag).
Only queries are scored. ``oracle_accuracy`` is the ceiling of a perfect memory: a query whose
cell some observation revealed counts 1, an unrevealed one 0.5 (a guess).
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from .. import limits as L
from ..config import ConfigBase, require_float, require_int
from .base import Batch, Counts, Task, embedding, generator, masked_accuracy

# The map's plane in a memory's (x, y, z) space, for the address scaffold (true_places): near the z = −1
# face, where every grid has a layer of voxel centres (the shipped 2-deep sheet has none at z = 0, where
# a write of σ 0.4 reaches 4 % of a voxel and the scaffold taught nothing), yet inside the band where
# tanh passes a gradient on a deeper grid (addressing.BOUNDARY_EPS).
PLANE_Z = -0.9


@dataclasses.dataclass
class MapBuildingConfig(ConfigBase):
    observations: int = 32  # T, observation tokens
    map_size: int = 8  # the hidden map is map_size × map_size cells
    patch: int = 2  # an observation reveals patch × patch cells
    queries: int = 16  # query tokens after the observations
    density: float = 0.5  # probability that a cell is 1

    def __post_init__(self) -> None:
        owner = "MapBuildingConfig"
        require_int(owner, "observations", self.observations, 1, L.MAX_TASK_ITEMS)
        require_int(owner, "map_size", self.map_size, 1, L.MAX_GRID_SIDE)
        require_int(owner, "patch", self.patch, 1)
        if self.patch > self.map_size:
            raise ValueError(
                f"{owner}.patch must be an integer in [1, {self.map_size}] (at most map_size), got {self.patch!r}"
            )
        require_int(owner, "queries", self.queries, 1, L.MAX_TASK_ITEMS)
        require_float(owner, "density", self.density, 0.0, 1.0)


class MapEncoder(nn.Module):
    """values (B, N, patch²) → Linear; row, col (B, N) → summed Embeddings; is_query (B, N) → Embedding."""

    def __init__(self, patch: int, map_size: int, dim: int) -> None:
        super().__init__()
        self.values = nn.Linear(patch * patch, dim)
        self.row = embedding(map_size, dim)  # shared by observations (top-left) and queries (cell)
        self.col = embedding(map_size, dim)
        self.flag = embedding(2, dim)  # 0: observation, 1: query

    def forward(
        self, values: torch.Tensor, row: torch.Tensor, col: torch.Tensor, is_query: torch.Tensor
    ) -> torch.Tensor:
        return self.values(values) + self.row(row) + self.col(col) + self.flag(is_query)


class MapBuilding(Task):
    name = "map_building"
    Config = MapBuildingConfig
    sweep_field = "observations"
    sweep_values = (16, 32, 64)
    distance_unit = "tokens"
    horizon = "observations"

    @property
    def num_classes(self) -> int:
        return 2

    @property
    def tokens(self) -> int:
        return self.config.observations + self.config.queries

    def sample(self, batch_size: int, seed: int) -> Batch:
        cfg = self.config
        B, T, Q, S, p = batch_size, cfg.observations, cfg.queries, cfg.map_size, cfg.patch
        g = generator(seed)
        grid = (torch.rand(B, S, S, generator=g) < cfg.density).long()  # (B, S, S)
        obs_positions = torch.randint(S - p + 1, (B, T, 2), generator=g)  # (B, T, 2) top-left (row, col)
        query_cells = torch.randint(S, (B, Q, 2), generator=g)  # (B, Q, 2) (row, col)

        offsets = torch.arange(p)
        rows = (obs_positions[..., 0, None, None] + offsets[:, None]).expand(B, T, p, p)  # (B, T, p, p)
        cols = (obs_positions[..., 1, None, None] + offsets[None, :]).expand(B, T, p, p)
        b = torch.arange(B)[:, None, None, None].expand(B, T, p, p)
        revealed = grid[b, rows, cols].reshape(B, T, p * p).float()  # (B, T, p²) row-major in the patch
        observed = torch.zeros(B, S, S, dtype=torch.bool)
        observed[b, rows, cols] = True

        qb = torch.arange(B)[:, None].expand(B, Q)
        answer = grid[qb, query_cells[..., 0], query_cells[..., 1]]  # (B, Q)

        values = torch.cat([revealed, torch.zeros(B, Q, p * p)], dim=1)  # (B, N, p²)
        row = torch.cat([obs_positions[..., 0], query_cells[..., 0]], dim=1)  # (B, N)
        col = torch.cat([obs_positions[..., 1], query_cells[..., 1]], dim=1)
        is_query = torch.cat([torch.zeros(B, T, dtype=torch.long), torch.ones(B, Q, dtype=torch.long)], dim=1)
        targets = torch.cat([torch.zeros(B, T, dtype=torch.long), answer], dim=1)
        mask = is_query.bool()
        meta = {"map": grid, "observed": observed, "obs_positions": obs_positions, "query_cells": query_cells}
        inputs = {"values": values, "row": row, "col": col, "is_query": is_query}
        return Batch(inputs, targets, mask, meta)

    def encoder(self, dim: int) -> nn.Module:
        cfg = self.config
        return MapEncoder(cfg.patch, cfg.map_size, dim)

    def true_places(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """A query at its cell, an observation at its patch's centre, on the plane z = PLANE_Z: (B, N, 3)."""
        cfg = self.config
        centre = (cfg.patch - 1) / 2 * (1 - inputs["is_query"].float())  # (B, N) observations: patch centre
        to_unit = lambda cell: (cell.float() + centre) / max(cfg.map_size - 1, 1) * 2 - 1  # noqa: E731
        x, y = to_unit(inputs["col"]), to_unit(inputs["row"])  # (B, N) each
        return torch.stack([x, y, torch.full_like(x, PLANE_Z)], dim=-1)

    def distances(self, batch: Batch) -> torch.Tensor:
        """Tokens from the last observation that revealed a query's cell to the query; −1 for a cell no
        observation revealed, and off the queries."""
        cfg = self.config
        T, p = cfg.observations, cfg.patch
        top_left = batch.meta["obs_positions"]  # (B, T, 2)
        cells = batch.meta["query_cells"]  # (B, Q, 2)
        offset = cells[:, None, :, :] - top_left[:, :, None, :]  # (B, T, Q, 2) the cell within each glimpse
        revealed = ((offset >= 0) & (offset < p)).all(-1)  # (B, T, Q)
        index = torch.arange(T)[None, :, None]  # (1, T, 1) observation t is token t
        last = torch.where(revealed, index, -1).amax(1)  # (B, Q) the last glimpse of the cell, −1 if none
        query_at = T + torch.arange(cfg.queries)  # (Q,) query q is token T + q
        since = torch.where(last >= 0, query_at[None, :] - last, -1)  # (B, Q)
        return torch.cat([torch.full((since.shape[0], T), -1), since], dim=1)  # (B, N)

    def counts(self, logits: torch.Tensor, batch: Batch) -> Counts:
        cells = batch.meta["query_cells"]  # (B, Q, 2)
        B, Q, _ = cells.shape
        seen = batch.meta["observed"][torch.arange(B)[:, None], cells[..., 0], cells[..., 1]]  # (B, Q)
        oracle = float(seen.float().add(1.0).mul(0.5).sum())  # 1 where seen, 0.5 where a guess
        return {
            "accuracy": masked_accuracy(logits, batch, batch.mask),
            "oracle_accuracy": (oracle, float(seen.numel())),
        }
