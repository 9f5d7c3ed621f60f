"""Record every memory layer of a model while feeding it one input a segment at a time.

:func:`record_segments` cuts positions [0, N) into segments, calls the model on each with the state its previous
call returned, and yields one :class:`RecordedSegment` per call: where it starts, what the model returned, and
each memory layer's fields as a trace keeps them. Volumes are cut to float16 (or int8 codes and scales) as each
segment is recorded, so a long run never holds more than one segment of float32 volumes. A yielded segment is
complete: what to do with it is its consumer's choice; :func:`joined_layers` joins them in memory along the chunk
axis, and :func:`layer_traces` and :func:`layers_info` turn the joined fields into a trace's layers and header.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from analysis.traces.quantized import QuantizedVolumes, quantize
from analysis.traces.trace import SCALE_SUFFIX, LayerTrace, TraceError
from tensor_memory import memory_layers, record
from tensor_memory.memory.hookpoints import GATE_POINTS, VECTOR_POINTS, VOLUME_POINTS
from tensor_memory.memory.recording import Recording

Inputs = torch.Tensor | dict[str, torch.Tensor]
Forward = Callable[[Inputs, Any], tuple[Any, Any]]  # (segment's inputs, carried state) → (output, state to carry)
LayerFields = dict[str, dict[str, Any]]  # memory path → field → (B, k, …) array; "gate_scale" → float


@dataclasses.dataclass
class RecordedSegment:
    """One call of the model: its first position, its output and every memory layer's kept fields."""

    start: int
    output: Any
    layers: LayerFields


def memory_chunk_size(model: torch.nn.Module) -> int:
    """The chunk size shared by the model's memory layers (a trace is indexed by chunk)."""
    sizes = {memory.config.chunk_size for memory in memory_layers(model).values()}
    if not sizes:
        raise TraceError(
            "no TensorMemory layer in this model (a checkpoint's backbone other than 'tensor'); "
            "traces record memory layers: attach one (tensor_memory.attach_memory) or choose a "
            "tensor checkpoint"
        )
    if len(sizes) > 1:
        raise TraceError(f"memory layers with different chunk sizes {sorted(sizes)} cannot share one trace")
    return sizes.pop()


def segment_of(inputs: Inputs, start: int, stop: int, N: int) -> Inputs:
    """Positions [start, stop) of every tensor whose second axis is the sequence's (the rest as they are)."""
    if isinstance(inputs, torch.Tensor):
        return inputs[:, start:stop]
    return {k: v[:, start:stop] if v.dim() >= 2 and v.shape[1] == N else v for k, v in inputs.items()}


def record_segments(
    model: torch.nn.Module,
    forward: Forward,
    inputs: Inputs,
    N: int,
    segment: int,
    *,
    gates: bool,
    cell_state: bool,
    volumes: str,
    progress: bool | None,
) -> Iterator[RecordedSegment]:
    """Feed ``inputs`` (N positions) to ``forward`` ``segment`` positions at a time, the state carried from each
    call to the next (None before the first), recording ``model``'s memory layers during each call.

    ``gates=False`` / ``cell_state=False`` leave out the gate volumes / the cell state ``c``; ``volumes`` "float16" or
    "int8". ``progress``: show a bar (None: only for four segments or more).
    """
    starts = range(0, N, segment)
    bar = tqdm(
        starts,
        desc="recording",
        unit="segment",
        leave=False,
        disable=progress is False or (progress is None and len(starts) < 4),
    )
    state, memories = None, list(memory_layers(model))
    for start in bar:
        with torch.no_grad(), record(model, gates=gates) as rec:
            output, state = forward(segment_of(inputs, start, start + segment, N), state)
        silent = [name for name in memories if name not in rec.layers]
        if silent:
            raise TraceError(
                f"memory layer {silent[0]!r} never ran on this input: it is not on the model's forward path; a trace "
                f"records every TensorMemory the model holds: call it in forward, or remove it before tracing"
            )
        yield RecordedSegment(start, output, kept_fields(rec, cell_state, volumes))


def kept_fields(rec: Recording, cell_state: bool, volumes: str) -> LayerFields:
    """One segment's recording as a trace keeps it: vectors float32, volumes float16 or int8 codes with
    ``<field>_scale`` (B, k, C) beside them, σ(γ) a float; ``c`` only with ``cell_state``."""
    kept: LayerFields = {}
    for name, layer in rec.layers.items():
        fields = kept[name] = {}
        for field in (*VECTOR_POINTS, *VOLUME_POINTS, *GATE_POINTS):
            value = getattr(layer, field)
            if value is None or (field == "c" and not cell_state):
                continue
            value = value.detach()
            if field not in VOLUME_POINTS and field not in GATE_POINTS:
                fields[field] = value.float().cpu().numpy()
            elif volumes == "int8":  # codes (B, k, C, D, H, W) and their scales (B, k, C)
                fields[field], fields[field + SCALE_SUFFIX] = quantize(value.float().cpu().numpy())
            else:  # cut to float16 on the model's device: a quarter of the bytes cross to the CPU
                fields[field] = value.to(torch.float16).cpu().numpy()
        fields["gate_scale"] = float(layer.gate_scale)
    return kept


def joined_layers(segments: list[LayerFields]) -> LayerFields:
    """The segments' fields joined along the chunk axis (B, K, …); ``gate_scale`` the last segment's."""
    joined: LayerFields = {}
    for name in dict.fromkeys(name for segment in segments for name in segment):
        parts = [segment[name] for segment in segments if name in segment]
        joined[name] = {
            f: parts[-1][f] if f == "gate_scale" else np.concatenate([p[f] for p in parts], axis=1) for f in parts[0]
        }
    return joined


def layer_traces(layers: LayerFields, row: int, K: int) -> dict[str, LayerTrace]:
    """Sample ``row``'s first K chunks of every layer's joined fields, int8 codes and scales as one volume."""
    per_layer = {}
    for name, f in layers.items():
        fields = {k: v[row, :K] for k, v in f.items() if k != "gate_scale"}
        for field in [k for k in fields if k.endswith(SCALE_SUFFIX)]:
            volume = field[: -len(SCALE_SUFFIX)]
            fields[volume] = QuantizedVolumes(np.ascontiguousarray(fields[volume]), fields.pop(field))
        per_layer[name] = LayerTrace(gate_scale=f["gate_scale"], **{"c": None, **fields})
    return per_layer


def layers_info(layers: LayerFields, volumes: str, chunk_size: int) -> dict[str, Any]:
    """Each layer's entry in a trace header: channels, grid, what it holds ("cells": whether the cell state c is kept,
    the file format's name for it)."""
    return {
        name: {
            "channels": int(f["h"].shape[2]),
            "grid": list(f["h"].shape[3:]),
            "gates": "gate_i" in f,
            "cells": "c" in f,
            "volumes": volumes,
            "chunk_size": chunk_size,
        }
        for name, f in layers.items()
    }


__all__ = ["RecordedSegment", "record_segments", "joined_layers", "layer_traces", "layers_info", "memory_chunk_size"]
