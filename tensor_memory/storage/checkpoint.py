"""Checkpoints: save a :class:`TaskModel` with its config, and load one back safely.

A checkpoint is a directory holding ``model.safetensors``, ``config.json`` and, optionally, ``metrics.json``
(``docs/formats.md``). Loading never unpickles and refuses every malformed input with one :class:`CheckpointError`
naming the file, the problem and what to do. Writes are atomic per file, the weights before ``config.json``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

from ..accelerator.device import check_device_memory, resolve_device
from ..backbone import BackboneConfig, check_budget
from ..backbone.budget import task_bytes
from ..shipped import checkpoint_folder, shipped_names
from ..tasks import TASKS, Task, TaskModel, make_task
from .files import (
    FileFormatError,
    PathLike,
    atomic_write_bytes,
    atomic_write_text,
    dumps_json,
    finite_or_none,
    json_type,
    read_json,
    remove_stale_temp_files,
)
from .integrity import (
    RECORD_KEY,
    SIDE_FILES_KEY,
    check_migratable,
    check_record,
    check_side_files,
    decisive,
    record_of,
    rewrite_metadata,
    sha256,
    side_file_digests,
    trained_record,
    weights_metadata,
)
from .user_files import FLOAT_DTYPES, SafetensorsFile, TensorInfo, read_safetensors

SCHEMA_VERSION = 2
# Version 1 predates the defaults that made the memory trainable (docs/trainability.md). Its configs
# omit settings whose defaults changed; they are read with the values those models were built with.
V1_DEFAULTS = {
    "model": {"positions": "sinusoidal"},
    "memory": {"summary_norm": False},
    "task_params": {"occlusion": {"head": "joint"}},
}
MODEL_FILE = "model.safetensors"
CONFIG_FILE = "config.json"
METRICS_FILE = "metrics.json"

MAX_CONFIG_BYTES = 1 << 20  # 1 MiB: a config is a few kilobytes
MAX_METRICS_BYTES = 16 << 20  # sweeps with many points still fit easily
MAX_MODEL_BYTES = 512 << 20  # 512 MiB: far above any model this project trains
# A checkpoint (or a config for one) that cannot be loaded: the file error of files.py, under the name
# callers catch. Its message says which file, why, and what to do.
CheckpointError = FileFormatError


@dataclasses.dataclass
class Checkpoint:
    model: TaskModel  # in eval mode
    config: dict[str, Any]  # config.json as read
    task: Task  # built from config["task"]
    path: Path  # the checkpoint directory
    metrics: dict[str, Any] | None = None  # metrics.json, if present


def save_checkpoint(
    directory: PathLike,
    model: TaskModel,
    config: dict[str, Any],
    metrics: dict[str, Any] | None = None,
    task: Task | None = None,
    dtype: torch.dtype | None = None,
) -> Path:
    """Write ``model.safetensors``, ``config.json`` (and ``metrics.json``) into ``directory``.

    ``config`` is the full config dict (``schema_version`` is filled in when missing). It is
    checked before anything is written: its ``model`` section must describe ``model``'s
    backbone and its task section must build. ``task``: the task the model was trained on, whose
    :meth:`~tensor_memory.tasks.Task.files_to_save` (a language model's tokenizer) are written
    beside the weights; by default the task the config builds. ``dtype`` (e.g. ``torch.float16``)
    stores the floating weights at that precision; loading casts them back to the model's.
    Returns the directory.
    """
    from safetensors.torch import save as save_safetensors

    directory = Path(directory)
    if not isinstance(config, dict):
        raise CheckpointError(f"save_checkpoint: config must be a dict, got {type(config).__name__}")
    config = {"schema_version": SCHEMA_VERSION, **config}
    config, parsed, backbone = _parse_config(config, "save_checkpoint config")
    task = task or parsed
    if isinstance(model, TaskModel) and backbone.to_dict() != model.backbone.config.to_dict():
        raise CheckpointError(
            "save_checkpoint: config['model'] does not describe the model's backbone "
            f"(config: {backbone.to_dict()}, model: {model.backbone.config.to_dict()})"
        )
    config_text = dumps_json(config)
    metrics_text = None if metrics is None else dumps_json(finite_or_none(metrics))

    # Each tensor is copied to its own contiguous CPU storage: no shared storage (tied weights,
    # views) for safetensors to refuse, and no aliasing with the live model while writing.
    tensors = {
        name: value.detach()
        .to("cpu", dtype=dtype if dtype and value.is_floating_point() else None, copy=True)
        .contiguous()
        for name, value in model.state_dict().items()
    }
    side_files = task.files_to_save()
    digests = {name: sha256(text.encode("utf-8")) for name, text in side_files.items()}  # as atomic_write_text writes
    data = save_safetensors(tensors, metadata=weights_metadata(config, digests))

    directory.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(directory)  # what an earlier save, killed mid-write, left behind
    atomic_write_bytes(directory / MODEL_FILE, data)
    for name, text in side_files.items():
        atomic_write_text(directory / name, text)
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
        raise CheckpointError(f"{source}: the top level must be a JSON object, got {json_type(config)}")
    if "schema_version" not in config:
        raise CheckpointError(
            f"{source}: missing 'schema_version' (this version of tensor_memory reads "
            f"schema_version {SCHEMA_VERSION}); is this a tensor_memory checkpoint?"
        )
    version = config["schema_version"]
    if isinstance(version, bool) or not isinstance(version, int) or version not in (1, SCHEMA_VERSION):
        raise CheckpointError(
            f"{source}: unknown schema_version {version!r}; this version of tensor_memory "
            f"reads schema_version 1 and {SCHEMA_VERSION} only (upgrade tensor_memory for newer "
            f"checkpoints)"
        )
    if version == 1:
        config = _upgrade_v1(config)
    for key in ("task", "model"):
        if key not in config:
            raise CheckpointError(f"{source}: missing the '{key}' section{fix}")
        if not isinstance(config[key], dict):
            raise CheckpointError(f"{source}: '{key}' must be an object, got {json_type(config[key])}{fix}")
    if "training" in config and not isinstance(config["training"], dict):
        raise CheckpointError(f"{source}: 'training' must be an object, got {json_type(config['training'])}{fix}")

    section = config["task"]
    name = section.get("name")
    if not isinstance(name, str):
        raise CheckpointError(f"{source}: task.name must be a string naming a task, got {name!r}{fix}")
    if name not in TASKS:
        raise CheckpointError(
            f"{source}: unknown task {name!r}; this version of tensor_memory knows {', '.join(sorted(TASKS))}"
        )
    params = section.get("params", {})
    if not isinstance(params, dict):
        raise CheckpointError(f"{source}: task.params must be an object, got {json_type(params)}{fix}")
    try:
        task = make_task(name, params)
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"{source}: invalid task.params for task {name!r}: {error}{fix}") from None
    try:
        backbone = BackboneConfig.from_dict(config["model"])
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"{source}: invalid model config: {error}{fix}") from None
    return config, task, backbone


# ---------------------------------------------------------------------------------------
# Weights
# ---------------------------------------------------------------------------------------


def check_against_model(path: Path, header: dict[str, TensorInfo], expected: dict[str, torch.Tensor]) -> None:
    """The file holds exactly the model's tensors, with the shapes its config implies, as floats."""
    hint = f"was it saved from a model with this {CONFIG_FILE}?"
    missing = [k for k in expected if k not in header]
    if missing:
        listed = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        raise CheckpointError(
            f"{path}: missing weights for {len(missing)} parameter(s) the config needs: {listed}; {hint}"
        )
    unexpected = [k for k in header if k not in expected]
    if unexpected:
        listed = ", ".join(unexpected[:5]) + (f" and {len(unexpected) - 5} more" if len(unexpected) > 5 else "")
        raise CheckpointError(f"{path}: unexpected weights the config's model does not have: {listed}; {hint}")
    for name, value in expected.items():
        info = header[name]
        if info.shape != tuple(value.shape):
            raise CheckpointError(
                f"{path}: shape mismatch for {name!r}: the file holds {list(info.shape)}, "
                f"{CONFIG_FILE} implies {list(value.shape)}; {hint}"
            )
        if value.dtype.is_floating_point and info.dtype not in FLOAT_DTYPES:
            raise CheckpointError(
                f"{path}: non-floating weights: {name!r} is stored as {info.dtype}, expected a "
                f"floating dtype (F16, BF16, F32 or F64)"
            )


def load_checkpoint(path: PathLike, device: str | torch.device = "cpu", *, require_record: bool = True) -> Checkpoint:
    """Load the checkpoint in directory ``path`` (or the shipped checkpoint it names: ``occlusion-tensor``): the
    model (eval mode, on ``device``: "cpu", "auto", "cuda", "cuda:N" or a torch.device, refused in one line when
    this machine has no such device), config, task, metrics.

    Never unpickles. Raises :class:`CheckpointError` (a ``ValueError``) naming the file and the
    problem for anything malformed, for a ``config.json`` that no longer says what the weights were
    trained with, and for a model over the memory budget (``backbone/budget.py``).
    The same for a file kept beside the weights (a tokenizer) that is not the one they were saved with.
    ``require_record=False`` skips those two for a checkpoint saved before the weights kept the
    records; only :func:`migrate_checkpoint` should need it.
    """
    directory = _checkpoint_folder(checkpoint_folder(str(path)))  # a shipped checkpoint by name too
    model_path, config_path = directory / MODEL_FILE, directory / CONFIG_FILE
    config = read_json(config_path, MAX_CONFIG_BYTES, CONFIG_FILE)
    config, task, backbone = _parse_config(config, str(config_path), f" (fix {CONFIG_FILE} or re-save the checkpoint)")
    weights = read_safetensors(model_path, MAX_MODEL_BYTES)  # read once, checked; no tensor built yet
    if require_record:  # before anything is built: an edited checkpoint is refused in well under a second
        check_record(model_path, config_path, weights.metadata, decisive(config))
        check_side_files(model_path, weights.metadata, task.side_files)
    try:  # one sequence at inference must fit: the smallest use of a checkpoint
        check_budget(backbone, task.tokens, 1, training=False, where=str(config_path), task=task)
    except ValueError as error:
        raise CheckpointError(str(error)) from None
    task.restore(directory)  # what the task keeps beside the weights (a tokenizer), validated
    device = resolve_device(device)
    check_device_memory(task_bytes(backbone, task.tokens, 1, False, task), device, str(config_path))
    model = _load_model(weights, task, backbone, config_path).to(device).eval()
    metrics_path = directory / METRICS_FILE
    metrics = read_json(metrics_path, MAX_METRICS_BYTES, METRICS_FILE) if metrics_path.exists() else None
    return Checkpoint(model=model, config=config, task=task, path=directory, metrics=metrics)


def _checkpoint_folder(directory: Path) -> Path:
    """``directory`` if it is a folder holding a checkpoint's two files, else a CheckpointError saying what it is."""
    if not directory.exists():
        raise CheckpointError(
            f"{directory}: no such checkpoint directory; pass the folder that holds {MODEL_FILE} and {CONFIG_FILE}, "
            f"or the name of a checkpoint shipped with the package ({shipped_names()})"
        )
    if not directory.is_dir():
        parent = (
            f" (its folder {directory.parent} may be the checkpoint)"
            if directory.name in (MODEL_FILE, CONFIG_FILE, METRICS_FILE)
            else ""
        )
        raise CheckpointError(
            f"{directory}: is a file, not a checkpoint directory; pass the folder that holds "
            f"{MODEL_FILE} and {CONFIG_FILE}{parent}"
        )
    try:
        empty = not any(directory.iterdir())
    except OSError as error:
        raise CheckpointError(f"{directory}: cannot list the checkpoint directory: {error.strerror or error}") from None
    if empty:
        raise CheckpointError(
            f"{directory}: the checkpoint directory is empty; expected {MODEL_FILE} and "
            f"{CONFIG_FILE} (was the training run stopped before its first save?)"
        )
    for required in (directory / CONFIG_FILE, directory / MODEL_FILE):
        if not required.exists():
            raise CheckpointError(
                f"{required}: missing {required.name}; a checkpoint directory holds "
                f"{MODEL_FILE} and {CONFIG_FILE} (copy the whole directory)"
            )
    return directory


def _load_model(weights: SafetensorsFile, task: Task, backbone: BackboneConfig, config_path: Path) -> TaskModel:
    """The task model with ``weights``, once they are checked against what the config builds."""
    model_path = weights.path
    # Shapes are checked against a model built on the meta device (no memory), so a config that
    # claims an enormous model is refused by the comparison rather than by running out of memory.
    try:
        with torch.device("meta"):
            expected = TaskModel(task, backbone).state_dict()
    except (ValueError, TypeError, RuntimeError) as error:
        raise CheckpointError(f"{config_path}: invalid model config: cannot build the model: {error}") from None
    check_against_model(model_path, weights.layout, expected)
    tensors = weights.tensors()
    for name, value in tensors.items():
        if value.is_floating_point() and not bool(torch.isfinite(value).all()):
            raise CheckpointError(
                f"{model_path}: weights of {name!r} contain NaN or inf values (the training run "
                f"diverged?); use an earlier checkpoint"
            )
    model = TaskModel(task, backbone)
    model.load_state_dict(
        {name: tensors[name].to(value.dtype) for name, value in model.state_dict().items()}, strict=True
    )
    return model


def migrate_checkpoint(path: PathLike) -> Path:
    """Rewrite an older checkpoint's weights file so that its metadata records ``config.json`` and the files beside
    it (a tokenizer) as they are now.

    Trusts them: run it only on a checkpoint whose files are the ones it was trained with. Every other check of
    loading still applies; the tensors are written back byte for byte, in the precision they were stored in, and no
    other file is touched. Returns the checkpoint's directory.
    """
    ckpt = load_checkpoint(path, require_record=False)
    check_migratable(
        ckpt.path / MODEL_FILE, ckpt.path / CONFIG_FILE, MAX_MODEL_BYTES, decisive(ckpt.config), ckpt.task.side_files
    )
    digests = side_file_digests(ckpt.path, ckpt.task.side_files)  # the files as they are on disk
    rewrite_metadata(ckpt.path / MODEL_FILE, weights_metadata(ckpt.config, digests), MAX_MODEL_BYTES)
    return ckpt.path


def store_half_precision(path: PathLike) -> Path:
    """Re-save a checkpoint's weights as float16 (half the file; the language models' 4,096-row embedding
    and head dominate theirs). Evaluate it afterwards: its metrics are those of the float16 weights."""
    ckpt = load_checkpoint(path)
    return save_checkpoint(ckpt.path, ckpt.model, ckpt.config, ckpt.metrics, task=ckpt.task, dtype=torch.float16)


__all__ = [
    "check_record",
    "record_of",
    "trained_record",
    "RECORD_KEY",
    "SIDE_FILES_KEY",
    "SCHEMA_VERSION",
    "CheckpointError",
    "Checkpoint",
    "save_checkpoint",
    "load_checkpoint",
    "migrate_checkpoint",
    "check_against_model",
    "store_half_precision",
    "MODEL_FILE",
    "CONFIG_FILE",
    "METRICS_FILE",
]
