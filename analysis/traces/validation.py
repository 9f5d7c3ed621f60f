"""The checks a trace file passes before it is used: its header, the arrays it must hold, their values.

:func:`expected_shapes` says, from the header alone, every array a trace must hold with its shape and
dtype kind, so a file that claims shapes its arrays do not have is refused before anything is read.
:func:`check_values` checks dtypes and finiteness; :func:`check_consistency` checks what the arrays
say against the header (classes in range, tokens that decode) and, for a trace of one of this
project's checkpoints, against its task (the metadata the views index with).

Two sources write traces: ``capture`` (a checkpoint of ours on one task sample; ``info["source"]``
absent or ``"checkpoint"``) and ``trace_model`` (any model, ``info["source"] = "model"``: no task, and
the predictions optional).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from analysis.traces.quantized import INT8_LEVELS
from tensor_memory.memory.hookpoints import GATE_POINTS
from tensor_memory.tasks import make_task

TRACE_FORMAT = "tensor-memory-trace"
TRACE_VERSION = 1
MAX_TRACE_BYTES = 2 << 30  # 2 GiB: a 1,000-chunk trace at C = 32 and 16³ is ~0.5 GB in float16
MAX_INFO_CHARS = 1 << 20  # the JSON header is a few kilobytes

# info["outputs"]: what a chunk's prediction is. "classes" (absent too): a class with every class's
# probability; "values": a vector (masked patches); "tokens": a class of a vocabulary too large to keep
# every probability (a language model), with p(target) and p(prediction); "none": no predictions.
OUTPUT_KINDS = ("classes", "values", "tokens", "none")
MODEL_OUTPUTS = ("tokens", "none")  # what trace_model records
VOLUME_DTYPES = ("float16", "int8")  # how h, c and the gate volumes are stored
SCALE_SUFFIX = "_scale"  # int8 volumes: layer/<path>/<field>_scale (K, C) beside the codes
MODEL_SOURCE = "model"  # info["source"] of a trace_model trace
TEXT_ARRAYS = ("tokens/utf8", "tokens/offsets")  # the tokens' UTF-8 bytes and each token's (start) offset, N + 1
TARGET_ARRAYS = ("tokens/target", "tokens/prediction", "tokens/p_target")  # per position, with targets
# The header's entries that announce the text arrays: the tokens', the per-position targets', the vocabulary's
TEXT_ENTRIES = ("tokens", "token_bytes", "position_targets", "vocabulary_size", "vocabulary_bytes")
CHUNK_FIELDS = ("prediction", "target", "scored", "probs", "p_target", "p_prediction")  # per chunk: chunk/<field>

# What a sigmoid, a tanh or a softmax bounds, by an array's last name part: (lowest, highest, what its values
# are). Closed bounds: a sigmoid rounds to exactly 0 or 1 in float32 and float16 alike.
VALUE_BOUNDS = {
    "p_target": (0, 1, "probabilities"),
    "p_prediction": (0, 1, "probabilities"),
    "probs": (0, 1, "probabilities"),
    "gate_scale": (0, 1, "a read gate σ(γ) (a sigmoid)"),
    "gate_i": (0, 1, "input gate values (a sigmoid's)"),
    "gate_f": (0, 1, "forget gate values (a sigmoid's)"),
    "gate_o": (0, 1, "output gate values (a sigmoid's)"),
    "gate_g": (-1, 1, "candidate values (a tanh's)"),
}
INT8_SCALE_SLACK = (
    1e-6  # an int8 volume's scale is peak / 127 in float32: 127 · scale may exceed the peak by a rounding
)

REDO = "capture it again with `tensor-memory trace` (or `analysis.trace_model`)"


class TraceError(ValueError):
    """A trace file (or trace) that cannot be used; the message names the file and the problem."""


def fail(path: Path, problem: str) -> TraceError:
    return TraceError(f"{path}: {problem}; {REDO}")


def parse_header(path: Path, metadata: dict[str, str]) -> dict[str, Any]:
    """The header's ``info`` object, after checking the format name and version."""
    text = metadata.get("trace")
    if text is None:
        raise fail(
            path,
            "not a trace file (a safetensors file without the trace header; is it a checkpoint's model.safetensors?)",
        )
    if len(text) > MAX_INFO_CHARS:
        raise fail(path, f"the trace header is {len(text)} characters, over the {MAX_INFO_CHARS} limit")
    try:
        header = json.loads(text, parse_constant=lambda name: (_ for _ in ()).throw(ValueError(name)))
    except (ValueError, RecursionError) as error:
        raise fail(path, f"the trace header is not valid JSON ({error})") from None
    if not isinstance(header, dict) or header.get("format") != TRACE_FORMAT:
        raise fail(path, "the header does not name the trace format")
    version = header.get("version")
    if version != TRACE_VERSION:
        raise TraceError(
            f"{path}: trace format version {version!r}, this version of tensor-memory reads "
            f"version {TRACE_VERSION}; {REDO}"
        )
    info = header.get("info")
    if not isinstance(info, dict):
        raise fail(path, "the trace header has no info object")
    return info


def chunk_shapes(info: dict[str, Any], K: int, classes: int) -> dict[str, tuple[tuple[int, ...], str]]:
    """name → (shape, dtype kind) of the per-chunk arrays for the header's outputs kind."""
    outputs = info.get("outputs", "classes")
    if outputs == "values":
        width = int(info.get("output_width", classes))
        assert width >= 1
        return {"chunk/prediction": ((K, width), "f"), "chunk/target": ((K, width), "f"), "chunk/scored": ((K,), "b")}
    if outputs == "none":
        return {"chunk/scored": ((K,), "b")}
    assert classes >= 1
    out = {"chunk/prediction": ((K,), "i"), "chunk/target": ((K,), "i"), "chunk/scored": ((K,), "b")}
    if outputs == "tokens":
        return {**out, "chunk/p_target": ((K,), "f"), "chunk/p_prediction": ((K,), "f")}
    return {**out, "chunk/probs": ((K, classes), "f")}


def text_shapes(info: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """name → (shape, dtype kind) of the text arrays a header announces: the tokens' (info["tokens"]), the
    per-position targets' (info["position_targets"]), the vocabulary's (info["vocabulary_bytes"]: each class's text)."""
    out: dict[str, tuple[tuple[int, ...], str]] = {}
    if "vocabulary_bytes" in info:
        size, data = int(info["vocabulary_size"]), int(info["vocabulary_bytes"])
        out = {"vocabulary/utf8": ((data,), "u8"), "vocabulary/offsets": ((size + 1,), "i")}
    if not (info.get("tokens") or info.get("position_targets")):
        return out
    N = int(info["num_tokens"])
    if info.get("tokens"):
        out.update({"tokens/utf8": ((int(info["token_bytes"]),), "u8"), "tokens/offsets": ((N + 1,), "i")})
    if info.get("position_targets"):
        out.update({"tokens/target": ((N,), "i"), "tokens/prediction": ((N,), "i"), "tokens/p_target": ((N,), "f")})
    return out


def layer_shapes(name: str, layer: Any, K: int, path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """name → (shape, dtype kind) of one memory layer's arrays, from its header entry."""
    try:
        C = int(layer["channels"])
        grid = tuple(int(n) for n in layer["grid"])
        gates, cell_state = bool(layer["gates"]), bool(layer.get("cells", True))
        volumes = layer.get("volumes", "float16")
        assert C >= 1 and len(grid) == 3 and min(grid) >= 1 and volumes in VOLUME_DTYPES
    except (KeyError, TypeError, ValueError, AssertionError):
        raise fail(
            path,
            f"the trace header's entry for layer {name!r} lacks channels, grid or gates, "
            f"or names volumes other than {' or '.join(VOLUME_DTYPES)}",
        ) from None
    pre = f"layer/{name}/"
    out = {
        pre + "mu_read": ((K, 3), "f"),
        pre + "read": ((K, C), "f"),
        pre + "mu_write": ((K, 3), "f"),
        pre + "sigma": ((K,), "f"),
        pre + "content": ((K, C), "f"),
        pre + "gate_scale": ((1,), "f"),
    }
    for field in ("h",) + (("c",) if cell_state else ()) + (GATE_POINTS if gates else ()):
        if volumes == "int8":
            out[pre + field] = ((K, C, *grid), "int8")
            out[pre + field + SCALE_SUFFIX] = ((K, C), "f")
        else:
            out[pre + field] = ((K, C, *grid), "f")
    return out


def expected_shapes(info: dict[str, Any], path: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """name → (shape, numpy dtype kind) for every array a trace with this ``info`` must hold."""
    try:
        K, classes = int(info["num_chunks"]), int(info["num_classes"])
        layers = info["layers"]
        assert isinstance(layers, dict) and K >= 0 and info.get("outputs", "classes") in OUTPUT_KINDS
        out = chunk_shapes(info, K, classes)
        out.update(text_shapes(info))
        assert all(min(shape, default=0) >= 0 for shape, _ in out.values())
    except (KeyError, TypeError, ValueError, AssertionError):
        raise fail(
            path, "the trace header lacks num_chunks, num_classes, num_tokens, layers or a valid outputs kind"
        ) from None
    for name, layer in layers.items():
        out.update(layer_shapes(name, layer, K, path))
    return out


def check_names(path: Path, expected: dict[str, Any], present: Any, also: Any = ()) -> None:
    """A TraceError naming the arrays the header implies (``expected``) that ``present`` lacks, or that it holds
    beyond them (a task's ``meta/`` arrays, checked against the task, and the names in ``also`` excepted)."""
    missing = [n for n in expected if n not in present]
    if missing:
        raise fail(path, f"missing arrays: {', '.join(missing[:5])}")
    unexpected = [n for n in present if n not in expected and n not in also and not n.startswith("meta/")]
    if unexpected:
        raise fail(path, f"unexpected arrays: {', '.join(unexpected[:5])}")


def check_values(path: Path, name: str, array: np.ndarray, kind: str) -> None:
    """The dtype ``kind`` ("f", "i", "b", or "int8"/"u8" exactly) and, for floats, finite values."""
    kinds = dict(f="a float", i="an integer", b="a bool", int8="an int8", u8="a uint8")
    if kind in ("int8", "u8"):
        wrong = array.dtype != np.dtype(kind.replace("u8", "uint8"))
    else:
        wrong = array.dtype.kind != kind and not (kind == "i" and array.dtype.kind == "u")
    if wrong:
        raise fail(path, f"array {name!r} is {array.dtype}, expected {kinds[kind]} array")
    if kind == "f" and not np.isfinite(array).all():
        raise fail(path, f"array {name!r} contains NaN or infinite values (was the model diverged?)")
    if name.endswith(SCALE_SUFFIX) and (array < 0).any():
        raise fail(path, f"array {name!r} holds negative scales; int8 volumes need scales ≥ 0")
    if name.endswith(("/mu_read", "/mu_write")) and (np.abs(array) > 1 + 1e-3).any():  # tanh-bounded coordinates
        raise fail(
            path, f"array {name!r} holds coordinates outside the grid's [-1, 1]; no memory writes or reads there"
        )
    if name.endswith("/sigma") and (array <= 0).any():
        raise fail(path, f"array {name!r} holds a write spread σ ≤ 0; a memory's σ is positive")
    problem = out_of_bounds(name, array)
    if problem:
        raise fail(path, f"array {name!r} {problem}")


def out_of_bounds(name: str, values: Any) -> str | None:
    """What is wrong with array ``name``'s ``values`` when a sigmoid, a tanh or a softmax bounds them
    (:data:`VALUE_BOUNDS`) and they leave those bounds, else None (NaN is left to the finiteness checks). An int8
    volume's codes and scales (``<field>_scale``) are held to what their decoded values may be."""
    field = name.rpartition("/")[2]
    base = field if field in VALUE_BOUNDS else field.removesuffix(SCALE_SUFFIX)
    values = np.asarray(values)
    if base not in VALUE_BOUNDS or values.size == 0:
        return None
    low, high, what = VALUE_BOUNDS[base]
    bounds = f"[{low}, {high}]"
    if base != field:  # an int8 volume's scales: its values decode to at most 127 · scale in magnitude
        low, high, what = 0, max(-low, high) / INT8_LEVELS * (1 + INT8_SCALE_SLACK), f"int8 scales of {what}"
        bounds = f"[0, {max(-VALUE_BOUNDS[base][0], 1)}/{INT8_LEVELS}]"
    elif values.dtype == np.int8:  # codes: values that are never negative have codes that are never negative
        low, high, what = (0 if low >= 0 else -INT8_LEVELS), INT8_LEVELS, f"int8 codes of {what}"
        bounds = f"[{low}, {high}]"
    if not (np.fmin.reduce(values, axis=None) < low or np.fmax.reduce(values, axis=None) > high):  # NaN ignored
        return None
    at = np.unravel_index(int(np.argmax((values < low) | (values > high))), values.shape)
    where = int(at[0]) if len(at) == 1 else [int(i) for i in at]
    return f"holds {what} outside {bounds} ({values[at].item():g} at index {where}); no memory or softmax gives that"


def decode_tokens(path: Path, utf8: np.ndarray, offsets: np.ndarray) -> list[str]:
    """The token strings: ``utf8[offsets[i]:offsets[i+1]]`` decoded, after checking the offsets."""
    offsets = offsets.astype(np.int64)  # an unsigned array would wrap in np.diff and hide offsets out of order
    if len(offsets) == 0 or offsets[0] != 0 or offsets[-1] != len(utf8) or (np.diff(offsets) < 0).any():
        raise fail(path, "the token offsets do not run from 0 to the end of the token text in order")
    data = utf8.tobytes()
    try:
        return [data[a:b].decode("utf-8") for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True)]
    except UnicodeDecodeError as error:
        raise fail(path, f"a token is not valid UTF-8 ({error.reason})") from None


# Task metadata the views index with, and the task parameter that bounds it: 0 <= value < params[bound].
META_BOUNDS = {
    ("occlusion", "positions"): "size",
    ("moving_digits", "positions"): "size",
    ("map_building", "query_cells"): "map_size",
    ("map_building", "obs_positions"): "map_size",
}


def is_model_trace(info: dict[str, Any]) -> bool:
    """Whether the trace records someone's own model (``trace_model``), not a checkpoint of ours on a task."""
    return info.get("source") == MODEL_SOURCE


def check_consistency(path: Path, info: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """The header agrees with the arrays: chunks, names, classes, tokens, and for a checkpoint's trace the
    task's metadata (shapes, bounds)."""
    K, classes = int(info["num_chunks"]), int(info["num_classes"])
    if K < 1:
        raise fail(path, "the trace holds no chunks (num_chunks is 0)")
    for key in ("checkpoint_name",) + (() if is_model_trace(info) else ("task",)):
        if not isinstance(info.get(key), str) or not info[key]:
            raise fail(path, f"the trace header lacks the {key.replace('_', ' ')}")
    check_positions(path, info, K)
    outputs = info.get("outputs", "classes")
    if is_model_trace(info) and outputs not in MODEL_OUTPUTS:
        raise fail(path, f"a trace of someone's model records outputs {' or '.join(MODEL_OUTPUTS)}, not {outputs!r}")
    if outputs == "none" and arrays["chunk/scored"].any():
        raise fail(path, "the trace says it has no predictions, yet marks chunks as scored")
    if info.get("outputs", "classes") in ("classes", "tokens"):
        for name in ("chunk/prediction", "chunk/target", "tokens/prediction", "tokens/target"):
            if name not in arrays:
                continue
            values = arrays[name]
            if name == "chunk/target":
                unscored = values[~arrays["chunk/scored"]]
                if (unscored != -1).any():
                    raise fail(
                        path,
                        f"array {name!r} holds {unscored[unscored != -1][0]} for a chunk not scored; "
                        f"an unscored chunk's target is −1",
                    )
                values = values[arrays["chunk/scored"]]
            elif name == "tokens/target":
                values = values[values != -1]  # −1: a position without a target
            if len(values) and not (0 <= values.min() and values.max() < classes):
                wrong = values[(values < 0) | (values >= classes)][0]
                raise fail(
                    path,
                    f"array {name!r} holds {wrong}, a class outside [0, {classes})"
                    + (" (a target of none is −1)" if name.startswith("tokens/") else ""),
                )
    for name, announced in (("tokens", info.get("tokens")), ("vocabulary", "vocabulary_bytes" in info)):
        if announced:
            decode_tokens(path, arrays[f"{name}/utf8"], arrays[f"{name}/offsets"])
    if not is_model_trace(info):
        check_task(path, info, arrays)


def check_positions(path: Path, info: dict[str, Any], K: int) -> None:
    """chunk_size and num_tokens: whole numbers that agree with K chunks (the views index positions with them).

    A memory writes N // chunk_size chunks (a trailing part waits for its tokens), or ⌈N / chunk_size⌉ when it
    pads and writes the last one: (K − 1)·chunk_size < N < (K + 1)·chunk_size either way.
    """
    chunk, N = info.get("chunk_size"), info.get("num_tokens")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (chunk, N)):
        raise fail(
            path, f"the trace header's chunk_size and num_tokens must be whole numbers ≥ 1, got {chunk!r} and {N!r}"
        )
    if not (K - 1) * chunk < N < (K + 1) * chunk:
        raise fail(path, f"the trace header's {N} tokens in chunks of {chunk} do not make its {K} chunks")


def check_task(path: Path, info: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """A checkpoint's trace against its task: the outputs it predicts and the metadata a sample has."""
    classes = int(info["num_classes"])
    try:
        task = make_task(info["task"], info.get("task_params"))
    except (ValueError, TypeError) as error:
        raise fail(path, f"the trace header names a task it cannot be: {error}") from None
    if info.get("outputs", "classes") != task.outputs or (
        task.outputs == "values" and int(info["output_width"]) != task.output_width
    ):
        raise fail(
            path,
            f"the trace header says its predictions are {info.get('outputs', 'classes')} of width "
            f"{info.get('output_width', classes)}; a {info['task']} model predicts {task.outputs} "
            f"of width {task.output_width}",
        )
    sample = {k: v[0].numpy() for k, v in task.sample(1, 0).meta.items()}  # the shapes this task's metadata has
    for key, like in sample.items():
        have = arrays.get(f"meta/{key}")
        if have is None or have.shape != like.shape:
            got = "missing" if have is None else f"of shape {list(have.shape)}"
            raise fail(path, f"the task's metadata {key!r} is {got}, a {info['task']} sample has {list(like.shape)}")
        bound = META_BOUNDS.get((info["task"], key))
        if bound is not None and have.size and not (0 <= have.min() and have.max() < task.config.to_dict()[bound]):
            raise fail(path, f"the task's metadata {key!r} lies outside [0, {bound} = {task.config.to_dict()[bound]})")
