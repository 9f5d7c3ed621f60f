"""Traces: the record of one sequence through one checkpoint, chunk by chunk.

A :class:`Trace` holds, for every memory layer and chunk, the state after the update (``h``,
``c``), the addressing (``mu_read``, ``mu_write``, ``sigma``), the write content, the read vector,
optionally the gate volumes ``i, f, o, g``, and σ(γ); per chunk the model's prediction, its
class probabilities at the scored position, the target; and the task's metadata for the sample.

File layout (one safetensors file, format version :data:`TRACE_VERSION`)::

    __metadata__["trace"]            JSON: {"format", "version", "info": {...}}
    layer/<path>/<field>             per memory layer, K = chunks written
        mu_read (K, 3) f32   read (K, C) f32   mu_write (K, 3) f32   sigma (K,) f32
        content (K, C) f32   h (K, C, D, H, W) f16   c (same, optional)   gate_i/f/o/g (same, optional)
        gate_scale (1,) f32
        with volumes = "int8": each volume is int8 codes (K, C, D, H, W) plus <field>_scale (K, C) f32
    chunk/<field>                    per chunk: prediction, target (K,) i64, scored (K,) bool,
                                     probs (K, classes) f32; a values task (info "outputs" =
                                     "values", e.g. masked_patches): prediction, target (K, width)
                                     f32 (the model's outputs and targets at the chunk), scored
    meta/<name>                      the task's metadata for this sample (frames, keys, …)

Volumes are float16 (they are what makes a trace large), or int8 with a float32 scale per chunk
and channel (``volumes="int8"``, half the size; see :mod:`analysis.traces.quantized`); everything else
keeps float32.
Loading checks the file like a checkpoint: structure, version, the fields each layer must
have and that their shapes agree with each other and with ``info``; no pickle is involved.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Optional, Union

import numpy as np

from tensor_memory.files import FileFormatError, atomic_write_bytes, read_safetensors_layout
from tensor_memory.memory.hookpoints import GATE_POINTS, VECTOR_POINTS, VOLUME_POINTS
from tensor_memory.tasks import make_task

from analysis.traces.quantized import QuantizedVolumes

TRACE_FORMAT = "tensor-memory-trace"
TRACE_VERSION = 1
MAX_TRACE_BYTES = 2 << 30  # 2 GiB: a 1,000-chunk trace at C = 32 and 16³ is ~0.5 GB in float16
MAX_INFO_CHARS = 1 << 20  # the JSON header is a few kilobytes

CHUNK_FIELDS = ("prediction", "target", "scored", "probs")
OUTPUT_KINDS = ("classes", "values")  # info["outputs"]: what a chunk's prediction is (absent: classes)
VOLUME_DTYPES = ("float16", "int8")  # how h, c and the gate volumes are stored
SCALE_SUFFIX = "_scale"  # int8 volumes: layer/<path>/<field>_scale (K, C) beside the codes


class TraceError(ValueError):
    """A trace file (or trace) that cannot be used; the message names the file and the problem."""


Volumes = Union[np.ndarray, QuantizedVolumes]


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
    c: Optional[Volumes]  # (K, C, D, H, W), or None when captured with cells=False
    gate_scale: float  # σ(γ)
    gate_i: Optional[Volumes] = None  # (K, C, D, H, W) or None when captured without gates
    gate_f: Optional[Volumes] = None
    gate_o: Optional[Volumes] = None
    gate_g: Optional[Volumes] = None

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
    """One sample through one checkpoint. ``info`` is JSON: task, params, backbone, seed, index, …"""

    info: dict[str, Any]
    layers: dict[str, LayerTrace]  # by module path, e.g. "backbone.blocks.1.memory"
    chunks: dict[str, np.ndarray]  # prediction, target, scored, probs — one row per chunk
    meta: dict[str, np.ndarray]  # the task's metadata for this sample

    @property
    def num_chunks(self) -> int:
        return int(self.chunks["prediction"].shape[0])

    @property
    def predicts_values(self) -> bool:
        """Whether each chunk's prediction is a vector of values (masked patches' pixels), not a class."""
        return self.info.get("outputs", "classes") == "values"

    @property
    def layer_names(self) -> list[str]:
        return list(self.layers)

    def layer(self, name: Optional[str] = None) -> LayerTrace:
        """The named memory layer, or the last one (the one nearest the output)."""
        if name is None:
            return self.layers[self.layer_names[-1]]
        if name not in self.layers:
            raise KeyError(f"no memory layer {name!r} in this trace; it has {', '.join(self.layers)}")
        return self.layers[name]

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
        return out

    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.arrays().values())

    def save(self, path: Union[str, Path]) -> Path:
        """Write the trace as one safetensors file, atomically; returns the path."""
        from safetensors.numpy import save

        header = json.dumps({"format": TRACE_FORMAT, "version": TRACE_VERSION, "info": self.info})
        arrays = {k: np.require(v, requirements="C") for k, v in self.arrays().items()}  # keeps 0-d as 0-d
        data = save(arrays, metadata={"trace": header})
        path = Path(path)
        atomic_write_bytes(path, data)
        return path


# ---------------------------------------------------------------------------------------
# Loading and validation
# ---------------------------------------------------------------------------------------

REDO = "capture it again with `tensor-memory trace`"


def _fail(path: Path, problem: str) -> TraceError:
    return TraceError(f"{path}: {problem}; {REDO}")


def _parse_header(path: Path, metadata: dict[str, str]) -> dict[str, Any]:
    text = metadata.get("trace")
    if text is None:
        raise _fail(path, "not a trace file (a safetensors file without the trace header; is it a checkpoint's "
                          "model.safetensors?)")
    if len(text) > MAX_INFO_CHARS:
        raise _fail(path, f"the trace header is {len(text)} characters, over the {MAX_INFO_CHARS} limit")
    try:
        header = json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    except (ValueError, RecursionError) as error:
        raise _fail(path, f"the trace header is not valid JSON ({error})") from None
    if not isinstance(header, dict) or header.get("format") != TRACE_FORMAT:
        raise _fail(path, "the header does not name the trace format")
    version = header.get("version")
    if version != TRACE_VERSION:
        raise TraceError(f"{path}: trace format version {version!r}, this version of tensor-memory reads "
                         f"version {TRACE_VERSION}; {REDO}")
    info = header.get("info")
    if not isinstance(info, dict):
        raise _fail(path, "the trace header has no info object")
    return info


def _expected_shapes(info: dict[str, Any], path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """name → (shape, numpy dtype kind) for every array a trace with this ``info`` must hold."""
    try:
        K, classes = int(info["num_chunks"]), int(info["num_classes"])
        layers = info["layers"]
        outputs = info.get("outputs", "classes")
        width = int(info.get("output_width", classes))
        assert isinstance(layers, dict) and K >= 0 and outputs in OUTPUT_KINDS
        assert (classes >= 1) if outputs == "classes" else (width >= 1)
    except (KeyError, TypeError, ValueError, AssertionError):
        raise _fail(path, "the trace header lacks num_chunks, num_classes, layers or a valid outputs kind") from None
    out: dict[str, tuple[tuple[int, ...], str]] = {
        "chunk/prediction": ((K,), "i"), "chunk/target": ((K,), "i"), "chunk/scored": ((K,), "b"),
        "chunk/probs": ((K, classes), "f")}
    if outputs == "values":
        out = {"chunk/prediction": ((K, width), "f"), "chunk/target": ((K, width), "f"), "chunk/scored": ((K,), "b")}
    for name, layer in layers.items():
        try:
            C = int(layer["channels"])
            grid = tuple(int(n) for n in layer["grid"])
            gates, cells = bool(layer["gates"]), bool(layer.get("cells", True))
            volumes = layer.get("volumes", "float16")
            assert C >= 1 and len(grid) == 3 and min(grid) >= 1 and volumes in VOLUME_DTYPES
        except (KeyError, TypeError, ValueError, AssertionError):
            raise _fail(path, f"the trace header's entry for layer {name!r} lacks channels, grid or gates, "
                              f"or names volumes other than {' or '.join(VOLUME_DTYPES)}") from None
        pre = f"layer/{name}/"
        out.update({pre + "mu_read": ((K, 3), "f"), pre + "read": ((K, C), "f"), pre + "mu_write": ((K, 3), "f"),
                    pre + "sigma": ((K,), "f"), pre + "content": ((K, C), "f"), pre + "gate_scale": ((1,), "f")})
        for field in ("h",) + (("c",) if cells else ()) + (GATE_POINTS if gates else ()):
            if volumes == "int8":
                out[pre + field] = ((K, C, *grid), "int8")
                out[pre + field + SCALE_SUFFIX] = ((K, C), "f")
            else:
                out[pre + field] = ((K, C, *grid), "f")
    return out


def _check_values(path: Path, name: str, array: np.ndarray, kind: str) -> None:
    """The dtype ``kind`` ("f", "i", "b", or "int8" exactly) and, for floats, finite values."""
    kinds = dict(f="float", i="integer", b="bool", int8="int8")
    if kind == "int8":
        wrong = array.dtype != np.int8
    else:
        wrong = array.dtype.kind != kind and not (kind == "i" and array.dtype.kind == "u")
    if wrong:
        raise _fail(path, f"array {name!r} is {array.dtype}, expected a{'n' if kind in ('i', 'int8') else ''} "
                          f"{kinds[kind]} array")
    if kind == "f" and not np.isfinite(array).all():
        raise _fail(path, f"array {name!r} contains NaN or infinite values (was the model diverged?)")
    if name.endswith(SCALE_SUFFIX) and (array < 0).any():
        raise _fail(path, f"array {name!r} holds negative scales; int8 volumes need scales ≥ 0")


def load_trace(path: Union[str, Path]) -> Trace:
    """Read and validate a trace file written by :meth:`Trace.save`.

    Raises :class:`TraceError` naming the file and the problem for anything malformed:
    not a safetensors file, a pickle, truncated or corrupt data, another format or version,
    missing or unexpected arrays, shapes that disagree, NaN or infinite values.
    """
    from safetensors.numpy import load_file

    path = Path(path)
    try:
        tensors, metadata = read_safetensors_layout(path, MAX_TRACE_BYTES, "the trace file", REDO)
    except FileFormatError as error:
        raise TraceError(str(error)) from None
    info = _parse_header(path, metadata)
    expected = _expected_shapes(info, path)
    meta_names = [n for n in tensors if n.startswith("meta/")]
    missing = [n for n in expected if n not in tensors]
    if missing:
        raise _fail(path, f"missing arrays: {', '.join(missing[:5])}")
    unexpected = [n for n in tensors if n not in expected and n not in meta_names]
    if unexpected:
        raise _fail(path, f"unexpected arrays: {', '.join(unexpected[:5])}")
    for name, (shape, _) in expected.items():
        if tensors[name].shape != shape:
            raise _fail(path, f"array {name!r} has shape {list(tensors[name].shape)}, the header implies "
                              f"{list(shape)}")
    try:
        arrays = load_file(path)
    except Exception as error:  # the structure was validated above; this is the library's own check
        raise _fail(path, f"corrupt trace data ({error})") from None
    for name, (_, kind) in expected.items():
        _check_values(path, name, arrays[name], kind)
    _check_consistency(path, info, arrays)
    return _from_arrays(info, arrays)


# Task metadata the views index with, and the task parameter that bounds it: 0 <= value < params[bound].
META_BOUNDS = {("occlusion", "positions"): "size", ("moving_digits", "positions"): "size",
               ("map_building", "query_cells"): "map_size",
               ("map_building", "obs_positions"): "map_size"}


def _check_consistency(path: Path, info: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """The header agrees with the arrays: chunks, names, classes, and the task's metadata (shapes, bounds)."""
    K, classes = int(info["num_chunks"]), int(info["num_classes"])
    if K < 1:
        raise _fail(path, "the trace holds no chunks (num_chunks is 0)")
    for key in ("checkpoint_name", "task"):
        if not isinstance(info.get(key), str) or not info[key]:
            raise _fail(path, f"the trace header lacks the {key.replace('_', ' ')}")
    for name in ("chunk/prediction", "chunk/target") if info.get("outputs", "classes") == "classes" else ():
        values = arrays[name][arrays["chunk/scored"]] if name == "chunk/target" else arrays[name]
        if len(values) and not (0 <= values.min() and values.max() < classes):
            raise _fail(path, f"array {name!r} holds classes outside [0, {classes})")
    try:
        task = make_task(info["task"], info.get("task_params"))
    except (ValueError, TypeError) as error:
        raise _fail(path, f"the trace header names a task it cannot be: {error}") from None
    if info.get("outputs", "classes") != task.outputs or (task.outputs == "values"
                                                         and int(info["output_width"]) != task.output_width):
        raise _fail(path, f"the trace header says its predictions are {info.get('outputs', 'classes')} of width "
                          f"{info.get('output_width', classes)}; a {info['task']} model predicts {task.outputs} "
                          f"of width {task.output_width}")
    sample = {k: v[0].numpy() for k, v in task.sample(1, 0).meta.items()}  # the shapes this task's metadata has
    for key, like in sample.items():
        have = arrays.get(f"meta/{key}")
        if have is None or have.shape != like.shape:
            got = "missing" if have is None else f"of shape {list(have.shape)}"
            raise _fail(path, f"the task's metadata {key!r} is {got}, a {info['task']} sample has {list(like.shape)}")
        bound = META_BOUNDS.get((info["task"], key))
        if bound is not None and have.size and not (0 <= have.min() and have.max() < task.config.to_dict()[bound]):
            raise _fail(path, f"the task's metadata {key!r} lies outside [0, {bound} = "
                              f"{task.config.to_dict()[bound]})")


def _from_arrays(info: dict[str, Any], arrays: dict[str, np.ndarray]) -> Trace:
    layers = {}
    for name in info["layers"]:
        pre = f"layer/{name}/"
        fields = {f: arrays.get(pre + f) for f in (*VECTOR_POINTS, *VOLUME_POINTS, *GATE_POINTS)}
        for field in (*VOLUME_POINTS, *GATE_POINTS):
            if pre + field + SCALE_SUFFIX in arrays:
                fields[field] = QuantizedVolumes(arrays[pre + field], arrays[pre + field + SCALE_SUFFIX])
        layers[name] = LayerTrace(gate_scale=float(arrays[pre + "gate_scale"][0]), **fields)  # type: ignore[arg-type]
    chunks = {f: arrays[f"chunk/{f}"] for f in CHUNK_FIELDS if f"chunk/{f}" in arrays}
    meta = {n[len("meta/"):]: a for n, a in arrays.items() if n.startswith("meta/")}
    return Trace(info=info, layers=layers, chunks=chunks, meta=meta)


def check_volume_dtype(volumes: str) -> None:
    """A ValueError unless ``volumes`` names a storage type traces support."""
    if volumes not in VOLUME_DTYPES:
        raise ValueError(f"volumes must be one of {', '.join(VOLUME_DTYPES)}, got {volumes!r}")


__all__ = ["Trace", "LayerTrace", "TraceError", "load_trace", "TRACE_VERSION", "VOLUME_DTYPES"]
