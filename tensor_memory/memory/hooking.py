"""Hooks: functions that read or replace values on a model's memory path while a block runs.

A hook is ``fn(value) -> value``: it returns the value to use from there on (or ``None`` to leave
it as it is)::

    from tensor_memory import hooks

    def to_centre(mu):  # every write of layer 1 at the grid's centre
        return torch.zeros_like(mu)

    with hooks(model, {"backbone.blocks.1.memory.mu_write": to_centre}):
        logits, _ = model(inputs)

A point's path is the memory layer's name in ``model.named_modules()`` and the point's name
(:data:`~tensor_memory.memory.hookpoints.POINTS`). Nothing about the model changes: interventions
are hooks, never edited weights.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

import torch
from torch import nn

from .hookpoints import POINTS, Hook, HookPoint, attached
from .layer import memory_layers


def hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """Every hook point of ``model`` by path: ``"<memory module path>.<point>"`` ("<point>" for a bare layer)."""
    return {
        f"{name}.{point}" if name else point: hook_point  # type: ignore[misc]
        for name, memory in memory_layers(model).items()
        for point, hook_point in memory.hook_points.items()
    }


def _resolve(model: nn.Module, spec: Mapping[str, Hook]) -> dict[HookPoint, Hook]:
    points = hook_points(model)
    if not points:
        raise ValueError("hooks(model, ...): the model has no memory layers, so no hook points")
    resolved = {}
    for path, fn in spec.items():
        if path not in points:
            layers = sorted({p.rsplit(".", 1)[0] for p in points if "." in p}) or ["(the layer itself)"]
            raise ValueError(
                f"no hook point {path!r}; points are '<layer>.<point>' with <layer> one of "
                f"{', '.join(layers)} and <point> one of {', '.join(POINTS)}"
            )
        if not callable(fn):
            raise ValueError(f"the hook for {path!r} must be a function value -> value, got {type(fn).__name__}")
        resolved[points[path]] = fn
    return resolved


@contextlib.contextmanager
def hooks(model: nn.Module, spec: Mapping[str, Hook]) -> Iterator[None]:
    """Run ``spec``'s hooks ({point path: fn}) on ``model``'s hook points while the block runs.

    Blocks nest: an inner block's hooks run after the outer ones on the same point.
    """
    with attached(_resolve(model, spec), observe=False):
        yield


def reads_off(layers: Sequence[str]) -> dict[str, Hook]:
    """The hooks that hold each of memory ``layers``' read gate σ(γ) at 0: what the model does without its memory's
    read (a control every evaluation of what the memory is worth runs)."""
    return {f"{name}.gate_scale": torch.zeros_like for name in layers}


__all__ = ["hooks", "hook_points", "reads_off"]
