"""A context that records the memory path's hook points into a typed object.

``record(model)`` attaches a read-only observer to every hook point of every memory layer
(:mod:`~tensor_memory.memory.hookpoints`) for the duration of a ``with`` block and hands back a
:class:`Recording`::

    with record(model) as rec:
        model(x)
    rec.layers["blocks.0.memory"].mu_write      # (B, K, 3)

Observers run after any hook, so inside a ``hooks`` block the recording holds the values the
forward went on with. Quantities needed only for inspection (the gate volumes) are computed
only while something observes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator

import torch
from torch import nn

from .hookpoints import GATE_POINTS, RECORDED_POINTS, SCALAR_POINTS, HookPoint, observers
from .layer import memory_layers


@dataclasses.dataclass
class MemoryRecord:
    """Everything one memory layer marked during the recording, concatenated over calls along K: one field
    per point of :data:`~tensor_memory.memory.hookpoints.RECORDED_POINTS`."""

    mu_read: torch.Tensor
    read: torch.Tensor
    mu_write: torch.Tensor
    sigma: torch.Tensor
    content: torch.Tensor
    h: torch.Tensor
    c: torch.Tensor
    gate_i: torch.Tensor | None
    gate_f: torch.Tensor | None
    gate_o: torch.Tensor | None
    gate_g: torch.Tensor | None
    gate_scale: torch.Tensor

    @property
    def num_chunks(self) -> int:
        """Chunks read (a trailing incomplete chunk is read but not yet written)."""
        return self.mu_read.shape[1]


@dataclasses.dataclass
class Recording:
    """What a ``record`` block captured: one :class:`MemoryRecord` per memory layer, by module path."""

    layers: dict[str, MemoryRecord]

    def __getitem__(self, name: str) -> MemoryRecord:
        return self.layers[name]

    def __len__(self) -> int:
        return len(self.layers)


@contextlib.contextmanager
def record(model: nn.Module, gates: bool = True) -> Iterator[Recording]:
    """Record every memory layer of ``model`` while the block runs.

    ``gates=False`` skips the four gate volumes (the largest records). The returned
    :class:`Recording` is filled in when the block exits.
    """
    layers = memory_layers(model)
    if not layers:
        raise ValueError("record(model): the model has no memory layers to record")
    kept = [field for field in RECORDED_POINTS if gates or field not in GATE_POINTS]
    collected: dict[str, dict[str, list[torch.Tensor]]] = {name: {} for name in layers}
    sinks: dict[HookPoint, Callable[[torch.Tensor], None]] = {}
    for name, memory in layers.items():
        for field in kept:
            keep = collected[name].setdefault(field, []).append
            sinks[memory.hook_points[field]] = lambda value, keep=keep: keep(value.detach().clone())
    recording = Recording(layers={})
    with observers(sinks):
        yield recording
    for name, fields in collected.items():
        values: dict[str, torch.Tensor | None] = {}
        for field in RECORDED_POINTS:
            parts = fields.get(field, [])
            if field in SCALAR_POINTS:  # σ(γ) is the layer's, not a chunk's: the last call's value
                values[field] = parts[-1] if parts else torch.empty(0)
            elif parts:
                values[field] = torch.cat(parts, dim=1)
            else:
                values[field] = None
        if values["mu_read"] is None:  # the layer never ran inside the block
            continue
        recording.layers[name] = MemoryRecord(**values)  # type: ignore[arg-type]
