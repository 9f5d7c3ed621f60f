"""Penalties on the memory's addressing, added to the task's loss while training (remedies of issue 30, each off
by default, each read through a hook point without changing the value):

- **σ pulled toward a target width** (``training.sigma_pull``), for a σ that explodes, after DSNT's regulariser
  (arXiv 1801.07372): ``sigma_pull · mean over writes of (log σ − log sigma_init)²``, squared in log space so that
  doubling and halving cost the same.
- **writes spread over the grid** (``training.occupancy_weight``), for writes that collapse to one place: each
  sample's occupancy ``p`` is the mean over its writes of a normalised Gaussian of width ``sigma_init`` around
  μ_write (the learned σ is left out: a flat write would otherwise raise the entropy by itself), and the penalty is
  ``occupancy_weight · (1 − H(p) / log(D·H·W))``, 0 when the writes cover the grid evenly, 1 when they all land on
  one voxel.

Each is a mean over the memory layers and the forward calls of a step. With both weights 0 nothing is hooked.
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable, Iterator, Optional

import torch
from torch import nn

from ..memory import hooks, memory_layers
from ..memory.geometry import gaussian_profiles
from .config import TrainConfig


def log_ratio_squared(sigma: torch.Tensor, target: float) -> torch.Tensor:
    """mean of (log σ − log target)² over σ (B, K)."""
    return (sigma.log() - math.log(target)).square().mean()


def occupancy_shortfall(mu: torch.Tensor, sigma: float, grid: tuple[int, int, int]) -> torch.Tensor:
    """1 − H(p)/log(D·H·W), mean over samples, for writes at μ (B, K, 3) each spread as a normalised Gaussian of
    width ``sigma``: p (B, D, H, W) is the mean of the writes' masses."""
    B, K, _ = mu.shape
    profiles = gaussian_profiles(mu.reshape(-1, 3), mu.new_full((B * K,), sigma), grid)  # (B·K, n) per axis
    gz, gy, gx = (g / g.sum(-1, keepdim=True) for g in profiles)  # each axis sums to 1, so each write's mass does
    mass = torch.einsum("md,mh,mw->mdhw", gz, gy, gx).view(B, K, *grid)  # (B, K, D, H, W)
    p = mass.mean(1).flatten(1)  # (B, D·H·W)
    entropy = -(p * p.clamp_min(1e-12).log()).sum(-1)  # (B,)
    return (1 - entropy / math.log(p.shape[-1])).mean()


@contextlib.contextmanager
def addressing_penalties(model: nn.Module, cfg: TrainConfig) -> Iterator[Callable[[], Optional[torch.Tensor]]]:
    """While the block runs, the values the penalties need are collected; yields a function that returns their
    weighted sum (None when both weights are 0 or nothing was written: the loss is the task's alone)."""
    terms: dict[str, list[torch.Tensor]] = {"sigma": [], "mu_write": []}
    weights = {"sigma": cfg.sigma_pull, "mu_write": cfg.occupancy_weight}

    def collect(point: str, layer) -> Callable[[torch.Tensor], None]:
        def keep(value: torch.Tensor) -> None:  # σ (B, K) or μ_write (B, K, 3); returns None: the value is kept
            if value.numel():
                terms[point].append(log_ratio_squared(value, layer.config.sigma_init) if point == "sigma" else
                                    occupancy_shortfall(value, layer.config.sigma_init, layer.config.grid))
        return keep

    def total() -> Optional[torch.Tensor]:
        parts = [weights[point] * torch.stack(values).mean() for point, values in terms.items() if values]
        return sum(parts) if parts else None

    if not any(weights.values()):  # off (the default): nothing is looked up or hooked on the training step
        yield total
        return
    spec = {f"{name}.{point}" if name else point: collect(point, layer)
            for name, layer in memory_layers(model).items() for point in terms if weights[point]}
    with hooks(model, spec):
        yield total


__all__ = ["addressing_penalties", "log_ratio_squared", "occupancy_shortfall"]
