"""σ pulled toward a target width: a penalty on how far each write's spread strays from its layer's ``sigma_init``
(a remedy of issue 30 for a σ that explodes, after DSNT's regulariser, arXiv 1801.07372; off by default).

    penalty = training.sigma_pull · mean over memory layers of mean over writes of (log σ − log sigma_init)²

Squared in log space, so doubling and halving cost the same. Read through the ``sigma`` hook point (the value is
left as it is); with ``sigma_pull`` 0 nothing is hooked and the loss is the task's alone.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch
from torch import nn

from ..memory import hooks, memory_layers


@contextlib.contextmanager
def sigma_pull(model: nn.Module, weight: float) -> Iterator[Callable[[], torch.Tensor]]:
    """While the block runs, every memory layer's write spreads are collected; yields a function that returns the
    weighted penalty on them (a zero tensor when ``weight`` is 0 or nothing was written)."""
    layers = memory_layers(model)
    seen: list[torch.Tensor] = []  # each call's (log σ − log sigma_init)², mean over its writes

    def collect(target: float):
        def keep(sigma: torch.Tensor) -> None:  # (B, K)
            if sigma.numel():
                seen.append((sigma.log() - torch.log(sigma.new_tensor(target))).square().mean())
        return keep

    def penalty() -> torch.Tensor:
        return weight * torch.stack(seen).mean() if seen else torch.zeros(())

    if not weight or not layers:
        yield penalty
        return
    spec = {f"{name}.sigma" if name else "sigma": collect(layer.config.sigma_init) for name, layer in layers.items()}
    with hooks(model, spec):
        yield penalty


__all__ = ["sigma_pull"]
