"""Penalties on the memory's addressing, added to the task's loss while training (each off by default, each read
through a hook point without changing the value):

- **σ pulled toward a target width** (``training.sigma_pull``), for a σ that explodes, after DSNT's regulariser
  (arXiv 1801.07372): ``sigma_pull · mean over writes of (log σ − log sigma_init)²``, squared in log space so that
  doubling and halving cost the same.
- **writes spread over the grid** (``training.occupancy_weight``), for writes that collapse to one place: each
  sample's occupancy ``p`` is the mean over its writes of a normalised Gaussian of width ``sigma_init`` around
  μ_write (the learned σ is left out: a flat write would otherwise raise the entropy by itself), and the penalty is
  ``occupancy_weight · (1 − H(p) / log(D·H·W))``, 0 when the writes cover the grid evenly, 1 when they all land on
  one voxel.
- **what was written stays findable where it was written** (``training.recall_weight``), a self-supervised address
  loss: for each chunk k, the state ``recall_lag`` chunks later is read at μ_write_k and has to pick out, among the
  reads of the sample's chunks just after their own writes, chunk k's (InfoNCE over cosine similarity at
  temperature ``RECALL_TEMPERATURE``). Writes that pile onto one place, fade, or carry nothing of their input all
  fail it, and it needs no decoder: both sides are the memory's own h.
- **reads that go where something was written** (``training.reach_weight``): the squared distance, in normalised
  units, from each chunk's read to the nearest write of an earlier chunk, with the writes held where they are
  (no gradient to them), so the reads come to the writes and not the writes to one another.

Each is a mean over the memory layers and the forward calls of a step. With every weight 0 nothing is hooked.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

from ..memory import hooks, memory_layers
from ..memory.geometry import gaussian_profiles, sample_channels_last
from .config import TrainConfig

RECALL_TEMPERATURE = 0.1  # sharp enough that a read half-way between two writes is a poor answer
# The hook points each penalty reads.
POINTS_READ = {
    "sigma_pull": ("sigma",),
    "occupancy": ("mu_write",),
    "recall": ("mu_write", "h"),
    "reach": ("mu_read", "mu_write"),
}


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


def recall_shortfall(h: torch.Tensor, mu: torch.Tensor, lag: int) -> torch.Tensor | None:
    """InfoNCE of finding each chunk's write again ``lag`` chunks later; h (B, K, C, D, H, W) the states after each
    chunk, μ (B, K, 3) where each chunk wrote. None when no chunk has ``lag`` chunks after it."""
    B, K, C, D, H, W = h.shape
    asked = K - lag  # chunks k with a state k + lag to read
    if asked < 1:
        return None
    states = h.permute(0, 1, 3, 4, 5, 2)  # (B, K, D, H, W, C), the layout the layer reads from

    def read(volumes: torch.Tensor, xyz: torch.Tensor) -> torch.Tensor:  # (B, n, D, H, W, C) at (B, n, 3) → (B, n, C)
        n = xyz.shape[1]
        return sample_channels_last(volumes.reshape(B * n, D, H, W, C), xyz.reshape(B * n, 3)).view(B, n, C)

    just_after = F.normalize(read(states, mu), dim=-1)  # (B, K, C) chunk j read from its own state at its place
    later = F.normalize(read(states[:, lag:], mu[:, :asked]), dim=-1)  # (B, asked, C) chunk k from state k + lag
    logits = later @ just_after.transpose(1, 2) / RECALL_TEMPERATURE  # (B, asked, K)
    target = torch.arange(asked, device=h.device).repeat(B)  # chunk k's own earlier read
    return F.cross_entropy(logits.reshape(B * asked, K), target)


def reach_shortfall(mu_read: torch.Tensor, mu_write: torch.Tensor) -> torch.Tensor | None:
    """Mean over reads k ≥ 1 of min over writes j < k of |μ_read_k − μ_write_j|²; μ_read (B, n_read, 3), μ_write
    (B, n_write, 3) of one call, the writes detached. None when no read has an earlier write."""
    n = min(mu_read.shape[1], mu_write.shape[1] + 1)  # reads 1 … n−1 each follow a write
    if n < 2:
        return None
    # (B, n−1, n−1): read k+1 against write j, as differences (torch.cdist's matrix product is not exact at 0)
    squared = (mu_read[:, 1:n, None] - mu_write[:, None, : n - 1].detach()).square().sum(-1)
    earlier = torch.ones(n - 1, n - 1, dtype=torch.bool, device=mu_read.device).tril()  # read k+1 sees writes ≤ k
    return squared.masked_fill(~earlier, math.inf).amin(-1).mean()


@contextlib.contextmanager
def addressing_penalties(model: nn.Module, cfg: TrainConfig) -> Iterator[Callable[[], torch.Tensor | None]]:
    """While the block runs, the values the penalties need are collected; yields a function that returns their
    weighted sum (None when every weight is 0 or nothing was written: the loss is the task's alone)."""
    weights = {
        "sigma_pull": cfg.sigma_pull,
        "occupancy": cfg.occupancy_weight,
        "recall": cfg.recall_weight,
        "reach": cfg.reach_weight,
    }
    terms: dict[str, list[torch.Tensor]] = {term: [] for term in weights}

    def collectors(layer) -> dict[str, Callable[[torch.Tensor], None]]:
        """A hook per point the penalties read; each returns None, so the value is kept."""
        # A forward call marks μ_read, then μ_write (step 2), then h (step 5): the later points pair with the call's
        # earlier ones through these.
        memory, last_mu_read, last_mu_write = layer.config, [], []

        def on_sigma(sigma: torch.Tensor) -> None:  # (B, K)
            if sigma.numel():
                terms["sigma_pull"].append(log_ratio_squared(sigma, memory.sigma_init))

        def on_mu_read(mu: torch.Tensor) -> None:  # (B, n_read, 3)
            last_mu_read[:] = [mu]

        def on_mu_write(mu: torch.Tensor) -> None:  # (B, K, 3)
            last_mu_write[:] = [mu]
            if mu.numel() and weights["occupancy"]:
                terms["occupancy"].append(occupancy_shortfall(mu, memory.sigma_init, memory.grid))
            found = reach_shortfall(last_mu_read[0], mu) if weights["reach"] else None
            if found is not None:
                terms["reach"].append(found)

        def on_h(h: torch.Tensor) -> None:  # (B, K, C, D, H, W)
            found = recall_shortfall(h, last_mu_write[0], cfg.recall_lag) if h.numel() else None
            if found is not None:
                terms["recall"].append(found)

        return {"sigma": on_sigma, "mu_read": on_mu_read, "mu_write": on_mu_write, "h": on_h}

    def total() -> torch.Tensor | None:
        parts = [weights[term] * torch.stack(values).mean() for term, values in terms.items() if values]
        return sum(parts) if parts else None

    if not any(weights.values()):  # off (the default): nothing is looked up or hooked on the training step
        yield total
        return
    needed = {point for term, points in POINTS_READ.items() if weights[term] for point in points}
    spec = {
        f"{name}.{point}" if name else point: hook
        for name, layer in memory_layers(model).items()
        for point, hook in collectors(layer).items()
        if point in needed
    }
    with hooks(model, spec):
        yield total


__all__ = ["addressing_penalties", "log_ratio_squared", "occupancy_shortfall", "reach_shortfall", "recall_shortfall"]
