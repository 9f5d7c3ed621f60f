"""Whether a trace can be drawn: NaN or infinite values, named by layer, field and chunk.

A captured trace can hold non-finite values when a checkpoint's weights blow up on some input
(the outputs may still be finite). :func:`nonfinite_fields` says where, so a viewer can refuse
those views with a reason instead of drawing garbage.
"""

from __future__ import annotations

import numpy as np

from analysis.traces.trace import CHUNK_FIELDS, Trace
from tensor_memory.memory.hookpoints import GATE_POINTS, VECTOR_POINTS, VOLUME_POINTS


def _chunks(array: np.ndarray) -> np.ndarray:
    """Indices along the first axis where any value is not finite."""
    bad = ~np.isfinite(array.astype(np.float32, copy=False))
    return np.flatnonzero(bad.reshape(len(bad), -1).any(axis=1)) if bad.ndim > 1 else np.flatnonzero(bad)


def _listed(chunks: np.ndarray) -> str:
    shown = ", ".join(str(int(k)) for k in chunks[:8])
    return shown + (f" and {len(chunks) - 8} more" if len(chunks) > 8 else "")


def nonfinite_fields(trace: Trace, volumes: bool = True) -> list[str]:
    """One line per array with NaN or infinite values, e.g. ``"layer backbone.blocks.1.memory: h at chunks 3, 4"``.
    ``volumes=False`` leaves the volumes out: a trace store's are checked chunk by chunk as they are read, and
    reading them all here would read the whole store."""
    found = []
    fields = (*VECTOR_POINTS, *VOLUME_POINTS, *GATE_POINTS) if volumes else VECTOR_POINTS
    for name, layer in trace.layers.items():
        for field in fields:
            value = getattr(layer, field)
            if value is not None and value.dtype.kind == "f":
                chunks = _chunks(value)
                if len(chunks):
                    found.append(f"layer {name}: {field} at chunks {_listed(chunks)}")
        if not np.isfinite(layer.gate_scale):
            found.append(f"layer {name}: σ(γ) is {layer.gate_scale}")
    for field in CHUNK_FIELDS:
        value = trace.chunks.get(field)
        if value is not None and value.dtype.kind == "f":
            chunks = _chunks(value)
            if len(chunks):
                found.append(f"predictions: {field} at chunks {_listed(chunks)}")
    return found


__all__ = ["nonfinite_fields"]
