"""σ annealed broad → narrow: a self-organising map's neighbourhood schedule for the memory's writes (off by
default).

For the first ``training.sigma_anneal_steps`` steps every write spreads at least

    σ_floor(t) = σ₀ · (σ₁ / σ₀)^(t / T),    σ₀ = training.sigma_anneal_from,  σ₁ = the layer's sigma_init,

in normalised units (1 = half the grid), so early writes touch much of the grid and the update's neighbourhood
smooths what lands near each other, as a SOM's shrinking neighbourhood orders its map; the floor falls to the
layer's own starting width by step T, and from T on (and in every evaluation) σ is the layer's alone. Applied
through the ``sigma`` hook point (``σ ← max(σ, σ_floor)``): no weight is touched, and the learned σ keeps its
gradient wherever it is above the floor.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from ..memory import hooks, memory_layers


def sigma_floor(step: int, steps: int, start: float, end: float) -> float:
    """σ₀ (σ₁/σ₀)^(t/T) at training step ``step`` of ``steps``; 0 (no floor) from ``steps`` on or when off."""
    if steps <= 0 or step >= steps:
        return 0.0
    return start * (end / start) ** (step / steps)


@contextlib.contextmanager
def sigma_annealing(model: nn.Module, step: int, steps: int, start: float) -> Iterator[None]:
    """While the block runs, each memory layer's write spread is at least its :func:`sigma_floor` at ``step``;
    nothing is hooked once the schedule is over (or with ``steps`` 0)."""
    layers = memory_layers(model)
    floors = {name: sigma_floor(step, steps, start, layer.config.sigma_init) for name, layer in layers.items()}
    if not any(floors.values()):
        yield
        return

    def at_least(floor: float):
        return lambda sigma: torch.clamp(sigma, min=floor)  # (B, K): gradient to σ where it is above the floor

    with hooks(model, {f"{name}.sigma" if name else "sigma": at_least(floor) for name, floor in floors.items()}):
        yield


__all__ = ["sigma_floor", "sigma_annealing"]
