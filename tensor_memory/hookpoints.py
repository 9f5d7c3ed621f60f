"""Hook points on the memory path: named values that a hook can read or replace.

Every memory layer passes the quantities of its mechanism through named :class:`HookPoint`\\ s
(``mu_write = self.hook("mu_write", mu_write)``), as TransformerLens's hook points do. A hook
is ``fn(value) -> value``: it returns the value to use from there on (or ``None`` to leave it
as it is)::

    from tensor_memory import hooks

    def to_centre(mu):  # every write of layer 1 at the grid's centre
        return torch.zeros_like(mu)

    with hooks(model, {"backbone.blocks.1.memory.mu_write": to_centre}):
        logits, _ = model(inputs)

A point's path is the memory module's name in ``model.named_modules()`` and the point's name
(:data:`POINTS`). Nothing about the model changes: the hooks live in a context variable for the
duration of the block, so two threads (two users of the app) can hook one model at once and
each sees only its own hooks. With no hook active a point costs one context-variable lookup.
Recording (:mod:`tensor_memory.recording`) is built on the same points.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import Callable, Iterator, Mapping, Optional

import torch
from torch import nn

Hook = Callable[[torch.Tensor], Optional[torch.Tensor]]

# The points of a memory layer, with the shape of their value per forward call (K = chunks in
# the call; Kw = complete chunks written; volumes are (C, D, H, W)). "Replaceable" points feed
# the rest of the forward; the others are read-only views (a replacement there is refused).
POINTS = {
    "h_in": ("(B, C, D, H, W) hidden volume entering the call (zeros at a sequence's start)", True),
    "c_in": ("(B, C, D, H, W) cell volume entering the call", True),
    "mu_read": ("(B, K, 3) read coordinates (x, y, z) in [-1, 1]", True),
    "mu_write": ("(B, Kw, 3) write coordinates", True),
    "sigma": ("(B, Kw) write spread in normalised units", True),
    "content": ("(B, Kw, C) write content", True),
    "read": ("(B, K, C) vector read from h before the chunk's write", True),
    "gate_scale": ("(1,) sigma(gamma), the read gate of the layer", True),
    "h": ("(B, Kw, C, D, H, W) hidden volume after each chunk's update (read-only)", False),
    "c": ("(B, Kw, C, D, H, W) cell volume after each chunk's update (read-only)", False),
    "gate_i": ("(B, Kw, C, D, H, W) input gate (read-only, computed only when hooked)", False),
    "gate_f": ("(B, Kw, C, D, H, W) forget gate (read-only)", False),
    "gate_o": ("(B, Kw, C, D, H, W) output gate (read-only)", False),
    "gate_g": ("(B, Kw, C, D, H, W) candidate cell values (read-only)", False),
}

# {point: (hooks in the order they run, observers)}; empty outside every ``hooks`` block. Observers
# (recordings) run after every hook, so a recording sees the value the forward goes on with.
_ACTIVE: contextvars.ContextVar[Mapping["HookPoint", tuple[tuple[Hook, ...], tuple[Hook, ...]]]] = \
    contextvars.ContextVar("tensor_memory_hooks", default={})


class HookPoint(nn.Module):
    """An identity on the memory path, named ``name``, that runs the hooks active on it."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.replaceable = POINTS[name][1]

    @property
    def active(self) -> bool:
        """Whether a hook is attached to this point in the current context."""
        return self in _ACTIVE.get()

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        replacers, observers = _ACTIVE.get().get(self, ((), ()))
        for fn in replacers:
            out = fn(value)
            if out is None or out is value:
                continue
            if not self.replaceable:
                raise ValueError(f"hook point {self.name!r} is read-only: its hook must return None or the "
                                 f"value it was given (replace 'h_in'/'c_in' to change the state)")
            if not isinstance(out, torch.Tensor) or out.shape != value.shape:
                got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                raise ValueError(f"the hook on {self.name!r} must return a tensor of shape {tuple(value.shape)}, "
                                 f"got {got}")
            value = out.to(value.dtype)
        for fn in observers:
            fn(value)
        return value


def nothing_hooked() -> bool:
    """True outside every ``hooks`` and ``record`` block: the fast path, one context-variable lookup."""
    return not _ACTIVE.get()


def any_active(points: Mapping[str, HookPoint]) -> bool:
    """Whether any of ``points`` has a hook in the current context (one lookup when none has)."""
    active = _ACTIVE.get()
    return bool(active) and any(point in active for point in points.values())


def hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """Every hook point of ``model`` by path: ``"<memory module path>.<point>"`` ("<point>" for a bare layer)."""
    found: dict[str, HookPoint] = {}
    for name, module in model.named_modules():
        points = getattr(module, "hook_points", None)
        if isinstance(points, nn.ModuleDict):
            for point, value in points.items():
                found[f"{name}.{point}" if name else point] = value  # type: ignore[assignment]
    return found


def _resolve(model: nn.Module, spec: Mapping[str, Hook]) -> dict[HookPoint, Hook]:
    points = hook_points(model)
    if not points:
        raise ValueError("hooks(model, ...): the model has no memory layers, so no hook points")
    resolved = {}
    for path, fn in spec.items():
        if path not in points:
            layers = sorted({p.rsplit(".", 1)[0] for p in points if "." in p}) or ["(the layer itself)"]
            raise ValueError(f"no hook point {path!r}; points are '<layer>.<point>' with <layer> one of "
                             f"{', '.join(layers)} and <point> one of {', '.join(POINTS)}")
        if not callable(fn):
            raise ValueError(f"the hook for {path!r} must be a function value -> value, got {type(fn).__name__}")
        resolved[points[path]] = fn
    return resolved


@contextlib.contextmanager
def hooks(model: nn.Module, spec: Mapping[str, Hook]) -> Iterator[None]:
    """Run ``spec``'s hooks ({point path: fn}) on ``model``'s hook points while the block runs.

    Blocks nest: an inner block's hooks run after the outer ones on the same point.
    """
    with _attached(_resolve(model, spec), observe=False):
        yield


@contextlib.contextmanager
def observers(points: Mapping[HookPoint, Hook]) -> Iterator[None]:
    """Attach read-only observers to ``points`` (what ``record`` uses); they run after every hook."""
    with _attached(points, observe=True):
        yield


@contextlib.contextmanager
def _attached(points: Mapping[HookPoint, Hook], observe: bool) -> Iterator[None]:
    current = _ACTIVE.get()
    merged = dict(current)
    for point, fn in points.items():
        replacers, watchers = current.get(point, ((), ()))
        merged[point] = (replacers, watchers + (fn,)) if observe else (replacers + (fn,), watchers)
    token = _ACTIVE.set(merged)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


__all__ = ["hooks", "observers", "hook_points", "HookPoint", "POINTS", "Hook", "any_active", "nothing_hooked"]
