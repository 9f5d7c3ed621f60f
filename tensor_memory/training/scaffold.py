"""Address scaffold: the task's true places steer a memory's addressing early in training, then go.

For the first ``steps`` training steps each memory layer's read and write coordinates are blended
with the places the task knows (:meth:`Task.true_places`),

    mu ← w · place + (1 − w) · mu,    w = 1 − step / steps   (0 from ``steps`` on),

through the layers' hook points (no weight is touched), so the coordinate head trains, with
(1 − w) of the gradient, in a memory that already holds the layout, and takes the addressing
over as w falls. From ``steps`` on, and in every evaluation, the model addresses on its own. Why a
memory needs it, and when: ``docs/trainability.md``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from ..memory import hooks, memory_layers


def scaffold_weight(step: int, steps: int) -> float:
    """The places' share of the coordinates at training step ``step`` (0-based): 1 → 0 over ``steps``."""
    return max(0.0, 1.0 - step / steps) if steps > 0 else 0.0


def check_scaffold(model: nn.Module, task, steps: int) -> None:
    """Refuse a scaffold that cannot act: no memory layer, a task without places, chunks of several tokens."""
    if steps <= 0:
        return
    memories = list(memory_layers(model).values())
    where = "training.address_scaffold_steps"
    if not memories:
        raise ValueError(f"{where}={steps}: the model has no memory layer to steer; set it to 0 for this backbone")
    if task.true_places(task.sample(1, 0).inputs) is None:
        raise ValueError(f"{where}={steps}: task {task.name!r} gives no true places to steer towards; set it to 0")
    if any(m.config.chunk_size != 1 for m in memories):
        raise ValueError(
            f"{where}={steps}: the scaffold places one token per chunk; it needs model.memory.chunk_size = 1"
        )


@contextlib.contextmanager
def address_scaffold(model: nn.Module, places: torch.Tensor | None, weight: float) -> Iterator[None]:
    """While the block runs, every memory layer's μ_read and μ_write become ``weight · places + (1 − weight) · μ``.

    places: (B, N, 3), one per token (chunks of one token, so one per read and per write). Nothing is
    hooked at weight 0.
    """
    if weight == 0.0:
        yield
        return

    def blend(mu: torch.Tensor) -> torch.Tensor:  # (B, K, 3): the first K tokens' coordinates
        return weight * places[:, : mu.shape[1]].to(mu.dtype) + (1.0 - weight) * mu

    spec = {f"{name}.{point}": blend for name in memory_layers(model) for point in ("mu_read", "mu_write")}
    with hooks(model, spec):
        yield


__all__ = ["scaffold_weight", "check_scaffold", "address_scaffold"]
