"""Step 2's component: the coordinate head's outputs as read and write coordinates (x, y, z) in [-1, 1]."""

from __future__ import annotations

import torch
from torch import nn

from ..config import MemoryConfig
from ..geometry import voxel_centres


def head_width(config: MemoryConfig) -> int:
    """Outputs of a coordinate head: three numbers before tanh, or one logit per voxel of each axis (soft-argmax)."""
    return 3 if config.addressing.coordinates == "tanh" else sum(config.grid)


class Tanh(nn.Module):
    """(…, 3) → tanh, the mechanism as written."""

    def forward(self, out: torch.Tensor) -> torch.Tensor:
        return torch.tanh(out)


class SoftArgmax(nn.Module):
    """(…, W+H+D) logits → (…, 3): along each axis the expected voxel centre under a softmax over its voxels."""

    def __init__(self, grid: tuple[int, int, int]) -> None:
        super().__init__()
        self.grid = grid

    def forward(self, out: torch.Tensor) -> torch.Tensor:
        D, H, W = self.grid
        logits = out.split((W, H, D), dim=-1)  # (…, W), (…, H), (…, D): x's voxels, y's, z's
        return torch.stack(
            [
                axis.softmax(-1) @ voxel_centres(n, axis.dtype, axis.device)
                for axis, n in zip(logits, (W, H, D), strict=True)
            ],
            dim=-1,
        )  # (…, 3)


class FreePath(nn.Module):
    """Each write placed by its own summary: the head's output as it is."""

    def initialise(self) -> None:
        """Nothing to set: the path has no parameters."""

    def forward(self, head: nn.Module, summaries: torch.Tensor, place: torch.Tensor | None):
        return head(summaries), place  # (B, n_write, width); nothing to carry


class IntegratedPath(nn.Module):
    """Path integration: a sequence's first write is free, each later one the last write's place plus a step that
    ``step_head`` predicts from its chunk, summed before tanh so the path stays in the grid. ``place`` (B, 3), the
    last write's place before tanh, carries the path across calls."""

    def __init__(self, token_dim: int) -> None:
        super().__init__()
        self.step_head = nn.Linear(token_dim, 3)

    def initialise(self) -> None:
        """Steps a tenth of the default init: a path drifts, it does not jump."""
        with torch.no_grad():
            self.step_head.weight.mul_(0.1)
            nn.init.zeros_(self.step_head.bias)

    def forward(self, head: nn.Module, summaries: torch.Tensor, place: torch.Tensor | None):
        raw = head(summaries)  # (B, n_write, 3)
        if not raw.shape[1]:
            return raw, place
        steps = self.step_head(summaries)  # (B, n_write, 3)
        first = raw[:, :1] if place is None else place[:, None] + steps[:, :1]  # (B, 1, 3)
        raw = torch.cat([first, steps[:, 1:]], dim=1).cumsum(1)  # (B, n_write, 3)
        return raw, raw[:, -1]


class Addressing(nn.Module):
    """μ_read and μ_write from the layer's coordinate head (reads use ``read_head`` instead when they have their own),
    through tanh or soft-argmax; writes free or path-integrated."""

    def __init__(self, config: MemoryConfig) -> None:
        super().__init__()
        variant, d = config.addressing, config.token_dim
        self.read_head = nn.Linear(d, head_width(config)) if variant.separate_heads else None
        self.path = IntegratedPath(d) if variant.write_path == "integrated" else FreePath()
        self.to_coordinates = Tanh() if variant.coordinates == "tanh" else SoftArgmax(config.grid)

    def reads(self, head: nn.Module, queries: torch.Tensor) -> torch.Tensor:
        """(B, n_read, d) queries → μ_read (B, n_read, 3)."""
        return self.to_coordinates((head if self.read_head is None else self.read_head)(queries))

    def writes(self, head: nn.Module, summaries: torch.Tensor, place: torch.Tensor | None):
        """(B, n_write, d) summaries → μ_write (B, n_write, 3) and the place a later call's writes continue from."""
        raw, place = self.path(head, summaries, place)
        return self.to_coordinates(raw), place

    def initialise(self, centre: bool) -> None:
        """The path's own initialisation; with ``centre`` (``coord_init="centre"``) a read head of its own starts at
        zero, as the layer's coordinate head does, so every read starts at the grid's centre."""
        self.path.initialise()
        if centre and self.read_head is not None:
            with torch.no_grad():
                nn.init.zeros_(self.read_head.weight)
                nn.init.zeros_(self.read_head.bias)
