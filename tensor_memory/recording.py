"""Named record points on the memory path and a context that collects them.

The model code only *marks* values (``self.record("mu_read", mu_read)``); it carries no
analysis or visualisation logic. ``record(model)`` switches the points on for the duration
of a ``with`` block and hands back a typed :class:`Recording`::

    with record(model) as rec:
        model(x)
    rec.layers["blocks.0.memory"].mu_write      # (B, K, 3)

With no recording active a record point is a single ``is None`` check, and quantities that
are only needed for inspection (the gate volumes) are not computed at all.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable, Iterator, Optional

import torch
from torch import nn

# The quantities a memory layer marks, each with its shape per forward call
# (K = chunks in the call; Kw = complete chunks written; volumes are (C, D, H, W)).
RECORD_FIELDS = {
    "mu_read": "(B, K, 3) read coordinates (x, y, z) in [-1, 1]",
    "read": "(B, K, C) vector read from h before the chunk's write",
    "mu_write": "(B, Kw, 3) write coordinates",
    "sigma": "(B, Kw) write spread in normalised units",
    "content": "(B, Kw, C) write content",
    "h": "(B, Kw, C, D, H, W) hidden volume after each chunk's update",
    "c": "(B, Kw, C, D, H, W) cell volume after each chunk's update",
    "gate_i": "(B, Kw, C, D, H, W) input gate",
    "gate_f": "(B, Kw, C, D, H, W) forget gate",
    "gate_o": "(B, Kw, C, D, H, W) output gate",
    "gate_g": "(B, Kw, C, D, H, W) candidate cell values",
    "gate_scale": "(1,) sigma(gamma), the read gate of the layer",
}


class RecordPoint(nn.Module):
    """An identity on the memory path that hands what passes through it to a sink when recording."""

    def __init__(self) -> None:
        super().__init__()
        self.sink: Optional[Callable[[torch.Tensor], None]] = None

    @property
    def active(self) -> bool:
        return self.sink is not None

    def forward(self, value: torch.Tensor) -> torch.Tensor:
        if self.sink is not None:
            self.sink(value.detach().clone())
        return value


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


def _points(model: nn.Module) -> dict[str, dict[str, RecordPoint]]:
    """Record points of every memory layer in ``model``: {layer path: {field: point}}."""
    found: dict[str, dict[str, RecordPoint]] = {}
    for name, module in model.named_modules():
        points = getattr(module, "record_points", None)
        if isinstance(points, nn.ModuleDict):
            found[name] = {field: points[field] for field in points}  # type: ignore[misc]
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
    for name, points in layers.items():
        for field, point in points.items():
            if field.startswith("gate_") and field != "gate_scale" and not gates:
                continue
            point.sink = collected[name].setdefault(field, []).append
    recording = Recording(layers={})
    try:
        yield recording
    finally:
        for points in layers.values():
            for point in points.values():
                point.sink = None
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
