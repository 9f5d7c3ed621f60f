"""A context that records the memory path's hook points into a typed object.

``record(model)`` attaches a read-only observer to every hook point of every memory layer
(:mod:`tensor_memory.hookpoints`) for the duration of a ``with`` block and hands back a
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
from typing import Callable, Iterator, Optional

import torch
from torch import nn

from .hookpoints import POINTS, HookPoint, observers

# The quantities a recording keeps: every hook point but the incoming state (the state a call
# starts from is the previous call's last h and c, or zeros).
RECORD_FIELDS = {name: doc for name, (doc, _) in POINTS.items() if name not in ("h_in", "c_in")}


@dataclasses.dataclass
class MemoryRecord:
    """Everything one memory layer marked during the recording, concatenated over calls along K."""

    mu_read: torch.Tensor
    read: torch.Tensor
    mu_write: torch.Tensor
    sigma: torch.Tensor
    content: torch.Tensor
    h: torch.Tensor
    c: torch.Tensor
    gate_i: Optional[torch.Tensor]
    gate_f: Optional[torch.Tensor]
    gate_o: Optional[torch.Tensor]
    gate_g: Optional[torch.Tensor]
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


def _points(model: nn.Module) -> dict[str, dict[str, HookPoint]]:
    """Recorded hook points of every memory layer in ``model``: {layer path: {field: point}}."""
    found: dict[str, dict[str, HookPoint]] = {}
    for name, module in model.named_modules():
        points = getattr(module, "hook_points", None)
        if isinstance(points, nn.ModuleDict):
            found[name] = {field: points[field] for field in RECORD_FIELDS}  # type: ignore[misc]
    return found


@contextlib.contextmanager
def record(model: nn.Module, gates: bool = True) -> Iterator[Recording]:
    """Record every memory layer of ``model`` while the block runs.

    ``gates=False`` skips the four gate volumes (the largest records). The returned
    :class:`Recording` is filled in when the block exits.
    """
    layers = _points(model)
    if not layers:
        raise ValueError("record(model): the model has no memory layers to record")
    collected: dict[str, dict[str, list[torch.Tensor]]] = {name: {} for name in layers}
    sinks: dict[HookPoint, Callable[[torch.Tensor], None]] = {}
    for name, points in layers.items():
        for field, point in points.items():
            if field.startswith("gate_") and field != "gate_scale" and not gates:
                continue
            keep = collected[name].setdefault(field, []).append
            sinks[point] = lambda value, keep=keep: keep(value.detach().clone())
    recording = Recording(layers={})
    with observers(sinks):
        yield recording
    for name, fields in collected.items():
        values: dict[str, Optional[torch.Tensor]] = {}
        for field in RECORD_FIELDS:
            parts = fields.get(field, [])
            if field == "gate_scale":
                values[field] = parts[-1] if parts else torch.empty(0)
            elif parts:
                values[field] = torch.cat(parts, dim=1)
            else:
                values[field] = None
        if values["mu_read"] is None:  # the layer never ran inside the block
            continue
        recording.layers[name] = MemoryRecord(**values)  # type: ignore[arg-type]
