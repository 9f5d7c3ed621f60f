"""Step 3's component: the trilinear sample of ``h`` at μ_read, with the read's variants."""

from __future__ import annotations

import torch
from torch import nn

from ..config import MemoryConfig
from ..geometry import jittered_sample, sample_channels_last, voxel_grid


class Sampler(nn.Module):
    """Reads of volumes (M, D, H, W, C) at xyz (M, 3) → (M, C): trilinear, as ``grid_sample`` with border padding.

    ``jitter`` r > 0 takes the read's gradient to xyz from six probes r voxel spacings around it (its value is
    untouched); ``codes`` (D, H, W, C), when the config asks for voxel codes, is added to every volume read, so a read
    also says where it is.
    """

    def __init__(self, config: MemoryConfig) -> None:
        super().__init__()
        self.grid, self.jitter = config.grid, config.read.jitter
        codes = torch.zeros(*config.grid, config.channels) if config.read.voxel_codes else None
        self.codes = None if codes is None else nn.Parameter(codes)

    def initialise(self) -> None:
        """Voxel codes start as each voxel's (x, y, z) mixed into the C channels by a fixed random matrix, so nearby
        voxels start with nearby codes."""
        if self.codes is not None:
            with torch.no_grad():
                self.codes.copy_(voxel_grid(self.grid) @ torch.randn(3, self.codes.shape[-1]))

    def forward(self, volumes: torch.Tensor, xyz: torch.Tensor) -> torch.Tensor:
        if self.codes is not None:
            volumes = volumes + self.codes  # (M, D, H, W, C)
        if self.jitter == 0:
            return sample_channels_last(volumes, xyz)
        return jittered_sample(volumes, xyz, self.jitter, self.grid)
