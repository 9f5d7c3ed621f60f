"""Traces: the record of one sequence through one model, chunk by chunk (:class:`Trace`, one :class:`LayerTrace` per
memory layer), saved as one safetensors file and loaded with every array checked against the header. The file
layout and what loading checks: ``docs/formats.md``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np

from analysis.traces.arguments import check_layer_fields, check_trace_fields
from analysis.traces.quantized import QuantizedVolumes
from analysis.traces.store_reader import read_store
from analysis.traces.summaries import summarize
from analysis.traces.validation import (
    CHUNK_FIELDS,
    MAX_TRACE_BYTES,
    REDO,
    SCALE_SUFFIX,
    TARGET_ARRAYS,
    TEXT_ENTRIES,
    TRACE_FORMAT,
    TRACE_VERSION,
    VOLUME_DTYPES,
    TraceError,
    check_consistency,
    check_names,
    check_values,
    decode_tokens,
    expected_shapes,
    fail,
    is_model_trace,
    parse_header,
)
from tensor_memory.memory.hookpoints import GATE_POINTS, VECTOR_POINTS, VOLUME_POINTS
from tensor_memory.storage.files import FileFormatError, atomic_write_bytes
from tensor_memory.storage.user_files import NUMPY_DTYPES, read_safetensors

Volumes = np.ndarray | QuantizedVolumes


@dataclasses.dataclass
class LayerTrace:
    """One memory layer over K chunks: one field per recorded hook point (``RECORDED_POINTS`` of
    ``tensor_memory.memory.hookpoints``). Volumes are (K, C, D, H, W): float16 arrays, or
    :class:`~analysis.traces.quantized.QuantizedVolumes` (int8, decoded on access) when captured with
    ``volumes="int8"``."""

    mu_read: np.ndarray  # (K, 3) read coordinates (x, y, z) in [-1, 1]
    read: np.ndarray  # (K, C) vector read before the chunk's write
    mu_write: np.ndarray  # (K, 3)
    sigma: np.ndarray  # (K,) write spread, normalised units
    content: np.ndarray  # (K, C)
    h: Volumes  # (K, C, D, H, W) after the chunk's update
    c: Volumes | None  # (K, C, D, H, W), or None when captured with cell_state=False
    gate_scale: float  # σ(γ)
    gate_i: Volumes | None = None  # (K, C, D, H, W) or None when captured without gates
    gate_f: Volumes | None = None
    gate_o: Volumes | None = None
    gate_g: Volumes | None = None

    def __post_init__(self) -> None:
        check_layer_fields(self, (*VOLUME_POINTS, *GATE_POINTS))

    @property
    def has_gates(self) -> bool:
        return self.gate_i is not None

    @property
    def grid(self) -> tuple[int, int, int]:
        return tuple(self.h.shape[2:])  # type: ignore[return-value]

    @property
    def channels(self) -> int:
        return self.h.shape[1]


@dataclasses.dataclass
class Trace:
    """One sample through one model. ``info`` is JSON: task, params, backbone, seed, index, … (a checkpoint's
    trace) or source "model", the model's class, chunk size, … (``trace_model``)."""

    info: dict[str, Any]
    layers: dict[str, LayerTrace]  # by module path, e.g. "backbone.blocks.1.memory"
    chunks: dict[str, np.ndarray]  # prediction, target, scored, probs — one row per chunk
    meta: dict[str, np.ndarray]  # the task's metadata for this sample
    tokens: list[str] | None = None  # the input's tokens as text, one per position, when recorded
    per_token: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)  # target, prediction, p_target (N,)
    # Per memory layer, its per-chunk summaries and totals (analysis.traces.summaries), stored or computed once;
    # derived from ``layers``: a trace given other layers (dataclasses.replace) must be given its own, or none.
    summaries: dict[str, dict[str, np.ndarray]] = dataclasses.field(default_factory=dict)
    # Each class's text by id (vocabulary[i] is class i's), when known: a language model's predictions read as words.
    vocabulary: list[str] | None = None

    def __post_init__(self) -> None:
        check_trace_fields(self, LayerTrace)

    @property
    def num_chunks(self) -> int:
        return int(self.chunks["scored"].shape[0])

    def chunk_positions(self, chunk: int) -> range:
        """The sequence positions of a chunk (the last chunk of a memory that pads ends at the last token)."""
        size = int(self.info.get("chunk_size", 1))
        return range(chunk * size, min((chunk + 1) * size, int(self.info.get("num_tokens", (chunk + 1) * size))))

    @property
    def incomplete(self) -> str | None:
        """What is missing from a trace store whose capture was cut short ("cut short: N of M positions recorded"),
        None for a complete trace."""
        return self.info.get("incomplete")

    @property
    def is_model_trace(self) -> bool:
        """A trace of someone's own model (``trace_model``): no task of ours, no checkpoint to run again."""
        return is_model_trace(self.info)

    @property
    def has_predictions(self) -> bool:
        return self.info.get("outputs", "classes") != "none"

    def target_probabilities(self) -> tuple[np.ndarray, np.ndarray]:
        """Per chunk (p(target), p(prediction)), NaN where the chunk is not scored or has no class target."""
        K = self.num_chunks
        p_target, p_prediction = np.full(K, np.nan), np.full(K, np.nan)
        if not self.has_predictions or self.predicts_values:
            return p_target, p_prediction
        target, scored = self.chunks["target"], self.chunks["scored"].astype(bool)
        valid = scored & (target >= 0)
        if "probs" in self.chunks:
            probs = self.chunks["probs"]
            p_target[valid] = probs[valid, target[valid]]
            p_prediction[valid] = probs[valid, self.chunks["prediction"][valid]]
        else:
            p_target[valid], p_prediction[valid] = self.chunks["p_target"][valid], self.chunks["p_prediction"][valid]
        return p_target, p_prediction

    @property
    def predicts_values(self) -> bool:
        """Whether each chunk's prediction is a vector of values (masked patches' pixels), not a class."""
        return self.info.get("outputs", "classes") == "values"

    @property
    def layer_names(self) -> list[str]:
        return list(self.layers)

    def layer(self, name: str | None = None) -> LayerTrace:
        """The named memory layer, or the last one (the one nearest the output)."""
        if name is None:
            return self.layers[self.layer_names[-1]]
        if name not in self.layers:
            raise KeyError(f"no memory layer {name!r} in this trace; it has {', '.join(self.layers)}")
        return self.layers[name]

    def summary(self, layer: str | None = None) -> dict[str, np.ndarray]:
        """The named memory layer's (the last one's) per-chunk summaries and totals: stored ones, or computed from
        its volumes by :func:`~analysis.traces.summaries.summarize` and kept, so a second call is free."""
        name = self.layer_names[-1] if layer is None else layer
        if name not in self.summaries:
            self.summaries[name] = summarize(self.layer(name))
        return self.summaries[name]

    def arrays(self) -> dict[str, np.ndarray]:
        """Every recorded array by its file name (``layer/<path>/<field>``, ``chunk/…``, ``meta/…``),
        as stored: an int8 volume is its codes under its own name and its scales under ``<field>_scale``."""
        out: dict[str, np.ndarray] = {}
        for path, layer in self.layers.items():
            for field in (*VECTOR_POINTS, *VOLUME_POINTS, *GATE_POINTS):
                value = getattr(layer, field)
                if isinstance(value, QuantizedVolumes):
                    out[f"layer/{path}/{field}"] = value.codes
                    out[f"layer/{path}/{field}{SCALE_SUFFIX}"] = value.scale
                elif value is not None:
                    out[f"layer/{path}/{field}"] = value
            out[f"layer/{path}/gate_scale"] = np.array([layer.gate_scale], dtype=np.float32)  # (1,)
        out.update({f"chunk/{k}": v for k, v in self.chunks.items()})
        out.update({f"meta/{k}": v for k, v in self.meta.items()})
        for name, strings in (("tokens", self.tokens), ("vocabulary", self.vocabulary)):
            if strings is not None:
                encoded = [t.encode("utf-8") for t in strings]
                out[f"{name}/utf8"] = np.frombuffer(b"".join(encoded), dtype=np.uint8)
                out[f"{name}/offsets"] = np.cumsum([0] + [len(t) for t in encoded], dtype=np.int64)  # (n + 1,)
        out.update({f"tokens/{k}": v for k, v in self.per_token.items()})
        return out

    def text_info(self, arrays: dict[str, np.ndarray]) -> dict[str, Any]:
        """``info`` with the header entries that announce the token arrays set from what the trace holds."""
        info = {k: v for k, v in self.info.items() if k not in TEXT_ENTRIES}
        if self.tokens is not None:
            info.update(tokens=True, token_bytes=int(arrays["tokens/utf8"].size))
        if self.vocabulary is not None:
            info.update(vocabulary_size=len(self.vocabulary), vocabulary_bytes=int(arrays["vocabulary/utf8"].size))
        if self.per_token:
            info["position_targets"] = True
        return info

    def class_text(self, value: int) -> str:
        """Class ``value`` as shown: its text from the vocabulary, quoted as Python writes a string (a space, a
        newline visible: ``' the'``, ``'\\n'``), or its id where the trace holds no text for it."""
        value = int(value)
        if self.vocabulary is not None and 0 <= value < len(self.vocabulary):
            return repr(self.vocabulary[value])
        return str(value)

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays().values())

    def save(self, path: str | Path) -> Path:
        """Write the trace as one safetensors file, atomically; returns the path."""
        from safetensors.numpy import save

        arrays = {k: np.require(v, requirements="C") for k, v in self.arrays().items()}  # keeps 0-d as 0-d
        header = json.dumps({"format": TRACE_FORMAT, "version": TRACE_VERSION, "info": self.text_info(arrays)})
        data = save(arrays, metadata={"trace": header})
        path = Path(path)
        atomic_write_bytes(path, data)
        return path


def load_trace(path: str | Path) -> Trace:
    """Read and validate a trace file written by :meth:`Trace.save`, or open a trace store (a folder; see
    :func:`~analysis.traces.store_reader.read_store`: its volumes are read when indexed).

    Raises :class:`TraceError` naming the file and the problem for anything malformed:
    not a safetensors file, a pickle, truncated or corrupt data, another format or version,
    missing or unexpected arrays, shapes that disagree, NaN or infinite values.
    """
    path = Path(path)
    if path.is_dir():
        info, arrays, summaries = read_store(path)
        return dataclasses.replace(from_arrays(info, arrays), summaries=summaries)
    try:
        stored = read_safetensors(path, MAX_TRACE_BYTES, "the trace file", REDO)
    except FileFormatError as error:
        raise TraceError(str(error)) from None
    tensors, metadata = stored.layout, stored.metadata
    info = parse_header(path, metadata)
    expected = expected_shapes(info, path)
    check_names(path, expected, tensors)
    for name, (shape, _) in expected.items():
        if tensors[name].shape != shape:
            raise fail(path, f"array {name!r} has shape {list(tensors[name].shape)}, the header implies {list(shape)}")
    unreadable = [name for name, info in tensors.items() if info.dtype not in NUMPY_DTYPES]
    if unreadable:  # numpy has no bfloat16 or 8-bit floats; no trace writes them
        raise fail(
            path, f"array {unreadable[0]!r} is stored as {tensors[unreadable[0]].dtype}, a type traces never hold"
        )
    arrays = {name: stored.tensor(name).numpy() for name in tensors}
    for name, (_, kind) in expected.items():
        check_values(path, name, arrays[name], kind)
    check_consistency(path, info, arrays)
    return from_arrays(info, arrays)


def from_arrays(info: dict[str, Any], arrays: dict[str, Any]) -> Trace:
    """A trace from its checked header and arrays by file name (int8 codes and scales made one volume; a store's
    volumes may be lazy arrays)."""
    layers = {}
    for name in info["layers"]:
        pre = f"layer/{name}/"
        fields = {f: arrays.get(pre + f) for f in (*VECTOR_POINTS, *VOLUME_POINTS, *GATE_POINTS)}
        for field in (*VOLUME_POINTS, *GATE_POINTS):
            if pre + field + SCALE_SUFFIX in arrays:
                fields[field] = QuantizedVolumes(arrays[pre + field], arrays[pre + field + SCALE_SUFFIX])
        layers[name] = LayerTrace(gate_scale=float(arrays[pre + "gate_scale"][0]), **fields)  # type: ignore[arg-type]
    chunks = {f: arrays[f"chunk/{f}"] for f in CHUNK_FIELDS if f"chunk/{f}" in arrays}
    meta = {n[len("meta/") :]: a for n, a in arrays.items() if n.startswith("meta/")}
    tokens = decode_tokens(Path(), arrays["tokens/utf8"], arrays["tokens/offsets"]) if info.get("tokens") else None
    per_token = {n[len("tokens/") :]: arrays[n] for n in TARGET_ARRAYS if n in arrays}
    vocabulary = (
        decode_tokens(Path(), arrays["vocabulary/utf8"], arrays["vocabulary/offsets"])
        if "vocabulary_bytes" in info
        else None
    )
    return Trace(
        info=info, layers=layers, chunks=chunks, meta=meta, tokens=tokens, per_token=per_token, vocabulary=vocabulary
    )


def check_volume_dtype(volumes: str) -> None:
    """A ValueError unless ``volumes`` names a storage type traces support."""
    if volumes not in VOLUME_DTYPES:
        raise ValueError(f"volumes must be one of {', '.join(VOLUME_DTYPES)}, got {volumes!r}")


__all__ = ["Trace", "LayerTrace", "TraceError", "load_trace", "TRACE_VERSION", "VOLUME_DTYPES"]
