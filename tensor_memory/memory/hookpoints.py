"""Hook points on the memory path: named values that a hook can read or replace.

Every memory layer passes the quantities of its mechanism through named :class:`HookPoint`\\ s
(``mu_write = self.hook("mu_write", mu_write)``), as TransformerLens's hook points do. The points
and their kinds are listed once, in :data:`POINTS`; what recordings and traces keep is derived
from it. The functions that run on the points live in a context variable for the duration of a
``hooks`` or ``record`` block (:mod:`~tensor_memory.memory.hooking`,
:mod:`~tensor_memory.memory.recording`), so two threads (two users of the app) can hook one model
at once and each sees only its own; with nothing active a point costs one context-variable lookup.
"""

from __future__ import annotations

import contextlib
import contextvars
import types
from collections.abc import Callable, Iterator, Mapping

import torch
from torch import nn

Hook = Callable[[torch.Tensor], torch.Tensor | None]

# The points of a memory layer: (the shape of the value per forward call, its kind). K = chunks
# in the call; Kw = complete chunks written; volumes are (C, D, H, W). The kinds:
#   "incoming"  the state a call starts from; replaceable, not recorded (it is the last call's h, c)
#   "vector"    one value per chunk on the way to the update; replaceable
#   "scalar"    σ(γ), the read gate; replaceable
#   "volume"    the state after each chunk's update; read-only
#   "gate"      the ConvLSTM gates of each chunk; read-only, computed only while observed
# Replaceable points feed the rest of the forward; at the others a replacement is refused.
POINTS = {
    "h_in": ("(B, C, D, H, W) hidden volume entering the call (zeros at a sequence's start)", "incoming"),
    "c_in": ("(B, C, D, H, W) cell volume entering the call", "incoming"),
    "mu_read": ("(B, K, 3) read coordinates (x, y, z) in [-1, 1]", "vector"),
    "mu_write": ("(B, Kw, 3) write coordinates", "vector"),
    "sigma": ("(B, Kw) write spread in normalised units", "vector"),
    "content": ("(B, Kw, C) write content", "vector"),
    "read": ("(B, K, C) vector read from h before the chunk's write", "vector"),
    "gate_scale": ("(1,) sigma(gamma), the read gate of the layer", "scalar"),
    "h": ("(B, Kw, C, D, H, W) hidden volume after each chunk's update (read-only)", "volume"),
    "c": ("(B, Kw, C, D, H, W) cell volume after each chunk's update (read-only)", "volume"),
    "gate_i": ("(B, Kw, C, D, H, W) input gate (read-only, computed only when hooked)", "gate"),
    "gate_f": ("(B, Kw, C, D, H, W) forget gate (read-only)", "gate"),
    "gate_o": ("(B, Kw, C, D, H, W) output gate (read-only)", "gate"),
    "gate_g": ("(B, Kw, C, D, H, W) candidate cell values (read-only)", "gate"),
}
REPLACEABLE_KINDS = ("incoming", "vector", "scalar")


def points_of(*kinds: str) -> tuple[str, ...]:
    """The names of the points of ``kinds``, in :data:`POINTS`' order."""
    return tuple(name for name, (_, kind) in POINTS.items() if kind in kinds)


# What recordings and traces keep, by kind: every point but the incoming state.
VECTOR_POINTS = points_of("vector")
SCALAR_POINTS = points_of("scalar")
VOLUME_POINTS = points_of("volume")
GATE_POINTS = points_of("gate")
RECORDED_POINTS = points_of("vector", "scalar", "volume", "gate")

# {point: (hooks in the order they run, observers)}; empty outside every ``hooks`` block. Observers
# (recordings) run after every hook, so a recording sees the value the forward goes on with.
_ACTIVE: contextvars.ContextVar[Mapping[HookPoint, tuple[tuple[Hook, ...], tuple[Hook, ...]]]] = contextvars.ContextVar(
    "tensor_memory_hooks",
    default=types.MappingProxyType({}),  # read-only: every block sets a new mapping
)


class HookPoint(nn.Module):
    """An identity on the memory path, named ``name``, that runs the hooks active on it."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.replaceable = POINTS[name][1] in REPLACEABLE_KINDS

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
                raise ValueError(
                    f"hook point {self.name!r} is read-only: its hook must return None or the "
                    f"value it was given (replace 'h_in'/'c_in' to change the state)"
                )
            if not isinstance(out, torch.Tensor) or out.shape != value.shape:
                got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
                raise ValueError(
                    f"the hook on {self.name!r} must return a tensor of shape {tuple(value.shape)}, got {got}"
                )
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


@contextlib.contextmanager
def observers(points: Mapping[HookPoint, Hook]) -> Iterator[None]:
    """Attach read-only observers to ``points`` (what ``record`` uses); they run after every hook."""
    with attached(points, observe=True):
        yield


@contextlib.contextmanager
def attached(points: Mapping[HookPoint, Hook], observe: bool) -> Iterator[None]:
    """Run each function of ``points`` ({point: fn}) on its point while the block runs: as a hook that may
    replace the value, or (``observe``) as an observer that sees it after every hook."""
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


__all__ = [
    "HookPoint",
    "POINTS",
    "VECTOR_POINTS",
    "SCALAR_POINTS",
    "VOLUME_POINTS",
    "GATE_POINTS",
    "RECORDED_POINTS",
    "Hook",
    "observers",
    "attached",
    "any_active",
    "nothing_hooked",
]
