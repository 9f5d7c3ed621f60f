"""Checkpoints: save a :class:`TaskModel` with its config, and load one back safely.

A checkpoint is a directory::

    model.safetensors   the TaskModel state_dict (safetensors: a JSON header, then raw tensor bytes)
    config.json         {"schema_version": 2, "task": {"name", "params"}, "model": {...}, "training": {...}}
    metrics.json        optional: evaluation results with their seeds
    …                   anything else (train_log.jsonl, optimizer state for resuming) is ignored here

Loading never unpickles: the safetensors header is checked by hand (length, JSON, dtypes,
shapes, offsets against the file size) before the safetensors library reads the tensors, and
JSON is read with :mod:`json`. Every malformed input raises one :class:`CheckpointError`
naming the file, the problem and what to do about it.

Writes are atomic per file (a temp file in the same directory, fsync, ``os.replace``): a run
killed mid-save leaves each file either complete-old or complete-new, never half written.
The weights are written before ``config.json``, so an interrupted re-save of a checkpoint whose
architecture changed leaves weights that the old config refuses (shape mismatch), never a
silently wrong model.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
import struct
import tempfile
from pathlib import Path
from typing import Any, Optional, Union

import torch

from .backbone import BackboneConfig
from .model import TaskModel
from .tasks import TASKS, Task, make_task

SCHEMA_VERSION = 2
# Version 1 predates the defaults that made the memory trainable (docs/trainability.md). Its configs
# omit settings whose defaults changed; they are read with the values those models were built with.
V1_DEFAULTS = {"model": {"positions": "sinusoidal"}, "memory": {"summary_norm": False},
               "task_params": {"occlusion": {"head": "joint"}}}
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.json"

MAX_CONFIG_BYTES = 1 << 20  # 1 MiB: a config is a few kilobytes
MAX_METRICS_BYTES = 16 << 20  # sweeps with many points still fit easily
MAX_MODEL_BYTES = 512 << 20  # 512 MiB: far above any model this project trains
MAX_HEADER_BYTES = 8 << 20  # safetensors JSON header: ~150 bytes per tensor

# safetensors dtype name → (torch dtype, bytes per element). Weights must be one of the floating ones.
FLOAT_DTYPES = {"F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2), "F32": (torch.float32, 4),
                "F64": (torch.float64, 8)}
OTHER_DTYPES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8, "U64": 8,
                "F8_E4M3": 1, "F8_E5M2": 1}

PathLike = Union[str, os.PathLike]


class CheckpointError(ValueError):
    """A checkpoint (or a config for one) that cannot be loaded; the message says which file and why."""


@dataclasses.dataclass
class Checkpoint:
    model: TaskModel  # in eval mode
    config: dict[str, Any]  # config.json as read
    task: Task  # built from config["task"]
    path: Path  # the checkpoint directory
    metrics: Optional[dict[str, Any]] = None  # metrics.json, if present


# ---------------------------------------------------------------------------------------
# Atomic writes
# ---------------------------------------------------------------------------------------

def _fsync_dir(directory: Path) -> None:
    try:  # makes the rename itself durable; not possible on every platform/filesystem
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the complete old file or the complete new one.

    The bytes go to a temp file in the same directory, are fsynced, then ``os.replace``d over
    ``path``. On any error the temp file is removed and ``path`` is untouched.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:  # mkstemp makes 0600 files; keep the old file's mode, or use the usual 0644
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            mode = 0o644
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    _fsync_dir(path.parent)


def atomic_write_text(path: PathLike, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def _finite_or_none(value: Any) -> Any:
    """Metrics: NaN/inf (a diverged loss) become null, so the file stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return _finite_or_none(value.item())
    return value


def dumps_json(data: Any) -> str:
    """Strict JSON (no NaN), indented, with a trailing newline."""
    return json.dumps(data, indent=2, allow_nan=False, default=_json_default) + "\n"


def save_checkpoint(directory: PathLike, model: TaskModel, config: dict[str, Any],
                    metrics: Optional[dict[str, Any]] = None) -> Path:
    """Write ``model.safetensors``, ``config.json`` (and ``metrics.json``) into ``directory``.

    ``config`` is the full config dict (``schema_version`` is filled in when missing). It is
    checked before anything is written: its ``model`` section must describe ``model``'s
    backbone and its task section must build. Returns the directory.
    """
    from safetensors.torch import save as save_safetensors

    directory = Path(directory)
    if not isinstance(config, dict):
        raise CheckpointError(f"save_checkpoint: config must be a dict, got {type(config).__name__}")
    config = {"schema_version": SCHEMA_VERSION, **config}
    config, task, backbone = _parse_config(config, "save_checkpoint config")
    if isinstance(model, TaskModel) and backbone.to_dict() != model.backbone.config.to_dict():
        raise CheckpointError("save_checkpoint: config['model'] does not describe the model's backbone "
                              f"(config: {backbone.to_dict()}, model: {model.backbone.config.to_dict()})")
    config_text = dumps_json(config)
    metrics_text = None if metrics is None else dumps_json(_finite_or_none(metrics))

    # Each tensor is copied to its own contiguous CPU storage: no shared storage (tied weights,
    # views) for safetensors to refuse, and no aliasing with the live model while writing.
    tensors = {name: value.detach().to("cpu", copy=True).contiguous()
               for name, value in model.state_dict().items()}
    data = save_safetensors(tensors, metadata={"format": "pt", "schema_version": str(SCHEMA_VERSION)})

    directory.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(directory / MODEL_FILE, data)
    atomic_write_text(directory / CONFIG_FILE, config_text)
    if metrics_text is not None:
        atomic_write_text(directory / METRICS_FILE, metrics_text)
    return directory


# ---------------------------------------------------------------------------------------
# Config
# ---------------------------------------------------------------------------------------

def _upgrade_v1(config: dict[str, Any]) -> dict[str, Any]:
    """A schema-1 config as schema 2: the settings whose defaults changed, filled with their old values."""
    config = json.loads(json.dumps(config))  # a deep copy of plain JSON
    model, task = config.get("model"), config.get("task")
    if isinstance(model, dict):
        for key, value in V1_DEFAULTS["model"].items():
            model.setdefault(key, value)
        if isinstance(model.get("memory"), dict):
            for key, value in V1_DEFAULTS["memory"].items():
                model["memory"].setdefault(key, value)
    if isinstance(task, dict) and isinstance(task.get("params", {}), dict):
        old = V1_DEFAULTS["task_params"].get(task.get("name"), {})
        if old:
            task["params"] = {**old, **task.get("params", {})}
    config["schema_version"] = SCHEMA_VERSION
    return config


def _parse_config(config: Any, source: str, fix: str = "") -> tuple[dict[str, Any], Task, BackboneConfig]:
    """Validate a config dict: (the config at the current schema, its task, its backbone config).

    Errors name ``source`` and end with ``fix``. A schema-1 config is upgraded (:func:`_upgrade_v1`).
    """
    if not isinstance(config, dict):
        raise CheckpointError(f"{source}: the top level must be a JSON object, got {_json_type(config)}")
    if "schema_version" not in config:
        raise CheckpointError(f"{source}: missing 'schema_version' (this version of tensor_memory reads "
                              f"schema_version {SCHEMA_VERSION}); is this a tensor_memory checkpoint?")
    version = config["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version not in (1, SCHEMA_VERSION):
        raise CheckpointError(f"{source}: unknown schema_version {version!r}; this version of tensor_memory "
                              f"reads schema_version 1 and {SCHEMA_VERSION} only (upgrade tensor_memory for newer "
                              f"checkpoints)")
    if version == 1:
        config = _upgrade_v1(config)
    for key in ("task", "model"):
        if key not in config:
            raise CheckpointError(f"{source}: missing the '{key}' section{fix}")
        if not isinstance(config[key], dict):
            raise CheckpointError(f"{source}: '{key}' must be an object, got {_json_type(config[key])}{fix}")
    if "training" in config and not isinstance(config["training"], dict):
        raise CheckpointError(f"{source}: 'training' must be an object, got {_json_type(config['training'])}{fix}")

    section = config["task"]
    name = section.get("name")
    if not isinstance(name, str):
        raise CheckpointError(f"{source}: task.name must be a string naming a task, got {name!r}{fix}")
    if name not in TASKS:
        raise CheckpointError(f"{source}: unknown task {name!r}; this version of tensor_memory knows "
                              f"{', '.join(sorted(TASKS))}")
    params = section.get("params", {})
    if not isinstance(params, dict):
        raise CheckpointError(f"{source}: task.params must be an object, got {_json_type(params)}{fix}")
    try:
        task = make_task(name, params)
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"{source}: invalid task.params for task {name!r}: {error}{fix}") from None
    try:
        backbone = BackboneConfig.from_dict(config["model"])
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"{source}: invalid model config: {error}{fix}") from None
    return config, task, backbone


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
             int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def build_model(config: dict[str, Any], source: str = "config") -> tuple[TaskModel, Task]:
    """A freshly initialised (TaskModel, Task) from a checkpoint config dict (validated first)."""
    _, task, backbone = _parse_config(config, source)
    return TaskModel(task, backbone), task


# ---------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------

def _regular_file(path: Path, cap: int, what: str) -> int:
    """The size of ``path``, a regular file no larger than ``cap`` bytes."""
    try:
        info = path.stat()
    except OSError as error:
        raise CheckpointError(f"{path}: cannot read {what}: {error.strerror or error}") from None
    if not stat.S_ISREG(info.st_mode):
        raise CheckpointError(f"{path}: {what} is not a regular file; replace it with the file itself")
    if info.st_size > cap:
        raise CheckpointError(f"{path}: {what} is {info.st_size / 2**20:.1f} MB, over the {cap / 2**20:.0f} MB "
                              f"limit for this file; it is not a checkpoint this project writes")
    return info.st_size


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def read_json(path: PathLike, cap: int = MAX_CONFIG_BYTES, what: str = "the JSON file") -> dict[str, Any]:
    """A JSON object from ``path``: strict JSON (no NaN, no duplicate keys), UTF-8, at most ``cap`` bytes."""
    path = Path(path)
    _regular_file(path, cap, what)
    raw = path.read_bytes()
    if not raw.strip():
        raise CheckpointError(f"{path}: {what} is empty; it should hold a JSON object (re-save the checkpoint)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CheckpointError(f"{path}: {what} is not UTF-8 text, so not valid JSON "
                              f"(re-save the checkpoint)") from None
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        raise CheckpointError(f"{path}: invalid JSON in {what}: {error.msg} at line {error.lineno} column "
                              f"{error.colno} (fix the file or re-save the checkpoint)") from None
    except (ValueError, RecursionError) as error:
        problem = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise CheckpointError(f"{path}: invalid JSON in {what}: {problem}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path}: {what} must hold a JSON object ({{...}}), got {_json_type(data)}")
    return data


@dataclasses.dataclass
class _TensorInfo:
    dtype: str
    shape: tuple[int, ...]


def _looks_pickled(head: bytes) -> Optional[str]:
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (what torch.save writes: it holds a pickle)"
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "a pickle (e.g. written by torch.save or pickle.dump)"
    return None


def read_safetensors_header(path: PathLike) -> dict[str, _TensorInfo]:
    """Check a checkpoint's weights file without reading its tensors; name → (dtype, shape)."""
    return read_safetensors_layout(path)[0]


def read_safetensors_layout(path: PathLike, max_bytes: int = MAX_MODEL_BYTES, what: str = "the weights file",
                            redo: str = "re-save the checkpoint (save_checkpoint writes safetensors)",
                            ) -> tuple[dict[str, _TensorInfo], dict[str, str]]:
    """Check a safetensors file's structure without reading its tensors: ({name: (dtype, shape)}, metadata).

    Checks: size caps, pickle/zip magic, header length, header JSON, every entry's dtype,
    shape and data offsets, and that the data section is exactly as long as the header says.
    ``what`` names the file and ``redo`` says how to fix it in the error messages.
    """
    path = Path(path)
    size = _regular_file(path, max_bytes, what)
    with open(path, "rb") as handle:
        head = handle.read(8)
        pickled = _looks_pickled(head)
        if pickled:
            raise CheckpointError(f"{path}: looks like {pickled}, not safetensors; pickles can run code when "
                                  f"loaded, so this file is refused and was not opened as one. Convert it in a "
                                  f"trusted environment with safetensors.torch.save_file(state_dict, ...)")
        if size == 0:
            raise CheckpointError(f"{path}: {what} is empty (0 bytes); {redo}")
        if len(head) < 8:
            raise CheckpointError(f"{path}: truncated safetensors file: {size} bytes, shorter than the 8-byte "
                                  f"header length; {redo}")
        (header_len,) = struct.unpack("<Q", head)
        if header_len < 2 or header_len > MAX_HEADER_BYTES:
            raise CheckpointError(f"{path}: corrupt safetensors file: bad header length {header_len} (expected "
                                  f"2 to {MAX_HEADER_BYTES} bytes); is this a safetensors file? {redo}")
        if 8 + header_len > size:
            raise CheckpointError(f"{path}: truncated safetensors file: the header says it is {header_len} "
                                  f"bytes but the file has only {size - 8} after the length; {redo}")
        header_bytes = handle.read(header_len)
    try:
        header = json.loads(header_bytes.decode("utf-8"), object_pairs_hook=_unique_keys,
                            parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        problem = "not UTF-8" if isinstance(error, UnicodeDecodeError) else (
            "nested too deeply" if isinstance(error, RecursionError) else str(error))
        raise CheckpointError(f"{path}: corrupt safetensors file: bad JSON header ({problem}); {redo}") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path}: corrupt safetensors file: bad JSON header (not an object); {redo}")

    data_len = size - 8 - header_len
    out: dict[str, _TensorInfo] = {}
    metadata: dict[str, str] = {}
    spans = []
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise CheckpointError(f"{path}: corrupt safetensors file: __metadata__ must map strings to "
                                      f"strings; {redo}")
            metadata = entry
            continue
        bad = f"{path}: corrupt safetensors file: entry {name!r} "
        if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
            raise CheckpointError(bad + f"must have exactly dtype, shape and data_offsets; {redo}")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if dtype in FLOAT_DTYPES:
            itemsize = FLOAT_DTYPES[dtype][1]
        elif dtype in OTHER_DTYPES:
            itemsize = OTHER_DTYPES[dtype]
        else:
            raise CheckpointError(bad + f"has unknown dtype {dtype!r}; {redo}")
        if not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                  for n in shape):
            raise CheckpointError(bad + f"has an invalid shape {shape!r}; {redo}")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(isinstance(n, int) and not isinstance(n, bool) for n in offsets)
                or not 0 <= offsets[0] <= offsets[1]):
            raise CheckpointError(bad + f"has invalid data_offsets {offsets!r}; {redo}")
        numel = math.prod(shape)
        if offsets[1] - offsets[0] != numel * itemsize:
            raise CheckpointError(bad + f"spans {offsets[1] - offsets[0]} bytes but shape {shape} of {dtype} "
                                        f"needs {numel * itemsize}; {redo}")
        if offsets[1] > data_len:
            raise CheckpointError(f"{path}: truncated safetensors file: data shorter than the offsets in its "
                                  f"header (tensor {name!r} ends at byte {offsets[1]}, the data section has "
                                  f"{data_len}); {redo}")
        spans.append((offsets[0], offsets[1]))
        out[name] = _TensorInfo(dtype, tuple(shape))
    position = 0
    for begin, end in sorted(spans):  # the tensors must tile the data section exactly
        if begin != position:
            raise CheckpointError(f"{path}: corrupt safetensors file: tensor data overlaps or leaves a gap at byte "
                                  f"{position}; {redo}")
        position = end
    if position != data_len:
        raise CheckpointError(f"{path}: corrupt safetensors file: {data_len - position} unexpected bytes after "
                              f"the last tensor; {redo}")
    return out, metadata


def _check_against_model(path: Path, header: dict[str, _TensorInfo], expected: dict[str, torch.Tensor]) -> None:
    """The file holds exactly the model's tensors, with the shapes its config implies, as floats."""
    hint = f"was it saved from a model with this {CONFIG_FILE}?"
    missing = [k for k in expected if k not in header]
    if missing:
        listed = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise CheckpointError(f"{path}: missing weights for {len(missing)} parameter(s) the config needs: "
                              f"{listed}; {hint}")
    unexpected = [k for k in header if k not in expected]
    if unexpected:
        listed = ", ".join(unexpected[:5]) + (f" and {len(unexpected) - 5} more" if len(unexpected) > 5 else "")
        raise CheckpointError(f"{path}: unexpected weights the config's model does not have: {listed}; {hint}")
    for name, value in expected.items():
        info = header[name]
        if info.shape != tuple(value.shape):
            raise CheckpointError(f"{path}: shape mismatch for {name!r}: the file holds {list(info.shape)}, "
                                  f"{CONFIG_FILE} implies {list(value.shape)}; {hint}")
        if value.dtype.is_floating_point and info.dtype not in FLOAT_DTYPES:
            raise CheckpointError(f"{path}: non-floating weights: {name!r} is stored as {info.dtype}, expected a "
                                  f"floating dtype (F16, BF16, F32 or F64)")


def load_checkpoint(path: PathLike, device: Union[str, torch.device] = "cpu") -> Checkpoint:
    """Load the checkpoint in directory ``path``: the model (eval mode, on ``device``), config, task, metrics.

    Never unpickles. Raises :class:`CheckpointError` (a ``ValueError``) naming the file and the
    problem for anything malformed.
    """
    from safetensors import safe_open

    directory = Path(path)
    if not directory.exists():
        raise CheckpointError(f"{directory}: no such checkpoint directory; pass the folder that holds "
                              f"{MODEL_FILE} and {CONFIG_FILE}")
    if not directory.is_dir():
        parent = f" (its folder {directory.parent} may be the checkpoint)" if directory.name in (
            MODEL_FILE, CONFIG_FILE, METRICS_FILE) else ""
        raise CheckpointError(f"{directory}: is a file, not a checkpoint directory; pass the folder that holds "
                              f"{MODEL_FILE} and {CONFIG_FILE}{parent}")
    try:
        empty = not any(directory.iterdir())
    except OSError as error:
        raise CheckpointError(f"{directory}: cannot list the checkpoint directory: "
                              f"{error.strerror or error}") from None
    if empty:
        raise CheckpointError(f"{directory}: the checkpoint directory is empty; expected {MODEL_FILE} and "
                              f"{CONFIG_FILE} (was the training run stopped before its first save?)")
    model_path, config_path = directory / MODEL_FILE, directory / CONFIG_FILE
    for required in (config_path, model_path):
        if not required.exists():
            raise CheckpointError(f"{required}: missing {required.name}; a checkpoint directory holds "
                                  f"{MODEL_FILE} and {CONFIG_FILE} (copy the whole directory)")

    config = read_json(config_path, MAX_CONFIG_BYTES, CONFIG_FILE)
    config, task, backbone = _parse_config(config, str(config_path),
                                           f" (fix {CONFIG_FILE} or re-save the checkpoint)")
    header = read_safetensors_header(model_path)

    # Shapes are checked against a model built on the meta device (no memory), so a config that
    # claims an enormous model is refused by the comparison rather than by running out of memory.
    try:
        with torch.device("meta"):
            expected = TaskModel(task, backbone).state_dict()
    except (ValueError, TypeError, RuntimeError) as error:
        raise CheckpointError(f"{config_path}: invalid model config: cannot build the model: {error}") from None
    _check_against_model(model_path, header, expected)

    tensors: dict[str, torch.Tensor] = {}
    try:
        with safe_open(str(model_path), framework="pt", device="cpu") as handle:
            for name in expected:
                tensors[name] = handle.get_tensor(name)
    except Exception as error:  # the library's own checks; the structure was validated above
        raise CheckpointError(f"{model_path}: corrupt safetensors file: {error}") from None
    for name, value in tensors.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CheckpointError(f"{model_path}: weights of {name!r} contain NaN or inf values (the training run "
                                  f"diverged?); use an earlier checkpoint")

    model = TaskModel(task, backbone)
    with torch.no_grad():
        for name, value in model.state_dict().items():
            tensors[name] = tensors[name].to(value.dtype)
    model.load_state_dict(tensors, strict=True)
    model.to(device).eval()

    metrics = None
    metrics_path = directory / METRICS_FILE
    if metrics_path.exists():
        metrics = read_json(metrics_path, MAX_METRICS_BYTES, METRICS_FILE)
    return Checkpoint(model=model, config=config, task=task, path=directory, metrics=metrics)


__all__ = ["SCHEMA_VERSION", "CheckpointError", "Checkpoint", "atomic_write_bytes", "atomic_write_text",
           "save_checkpoint", "build_model", "load_checkpoint", "read_json", "read_safetensors_header",
           "read_safetensors_layout"]
