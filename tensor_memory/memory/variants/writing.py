"""Step 4's component: the write's profile along each axis, ``V = content ⊗ gz ⊗ gy ⊗ gx``."""

from __future__ import annotations

import torch
from torch import nn

from ..config import MemoryConfig
from ..geometry import gaussian_profiles, nearest_profiles


class GaussianProfile(nn.Module):
    """exp(−(p − μ)² / (2σ² + eps)) along each axis, cut to the ±kσ box when the write is windowed or local."""

    def __init__(self, config: MemoryConfig) -> None:
        super().__init__()
        self.grid, self.window, self.eps = config.grid, config.write.window, config.public_code.write_eps

    def forward(self, xyz: torch.Tensor, sigma: torch.Tensor):
        """xyz (M, 3), sigma (M,) → (gz (M, D), gy (M, H), gx (M, W))."""
        return gaussian_profiles(xyz, sigma, self.grid, self.window, self.eps)


class NearestProfile(nn.Module):
    """All of a write on the voxel nearest μ_write: a hard write, through which no gradient reaches μ or σ."""

    def __init__(self, config: MemoryConfig) -> None:
        super().__init__()
        self.grid = config.grid

    def forward(self, xyz: torch.Tensor, sigma: torch.Tensor):
        """xyz (M, 3) → one-hot (gz (M, D), gy (M, H), gx (M, W)); sigma is not used."""
        return nearest_profiles(xyz, self.grid)


def write_profile(config: MemoryConfig) -> nn.Module:
    """The profile the config asks for."""
    return NearestProfile(config) if config.write.profile == "nearest" else GaussianProfile(config)
