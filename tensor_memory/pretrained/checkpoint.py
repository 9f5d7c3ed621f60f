"""Checkpoints of a memory trained on frozen MiniLM: the memory and head weights, and a reference to the base.

    model.safetensors   the memories and the head only (a few MB); never MiniLM's weights
    config.json         {"schema_version", "kind": "pretrained_memory", "base": {"package", "version",
                         "weights_sha256"}, "recall": RecallConfig, "memory": bool, "training", ...}
    metrics.json        the test-document figures it was shipped with

Loading checks the installed base model against the reference (a different MiniLM would make the
memory's weights meaningless), validates the weights file as ``tensor_memory/storage/checkpoint.py`` does
(never unpickled), and rebuilds the model around the installed MiniLM.
"""

from __future__ import annotations

from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from ..accelerator import resolve_device
from ..storage.checkpoint import MAX_CONFIG_BYTES, MAX_METRICS_BYTES, CheckpointError, check_against_model
from ..storage.files import atomic_write_bytes, atomic_write_text, dumps_json, read_json
from ..storage.integrity import RECORD_KEY, check_migratable, check_record, record_of, rewrite_metadata
from ..storage.user_files import SafetensorsFile, read_safetensors
from .minilm import PACKAGE, weights_digest
from .recall import RecallConfig, RecallModel

KIND = "pretrained_memory"
SCHEMA_VERSION = 1
MAX_WEIGHTS_BYTES = 64 << 20


def base_reference() -> dict[str, str]:
    return {"package": PACKAGE, "version": metadata.version(PACKAGE), "weights_sha256": weights_digest()}


def is_pretrained_memory(path: Path) -> bool:
    """Whether folder ``path`` holds a memory-on-MiniLM checkpoint (its config.json says so)."""
    try:
        return read_json(Path(path) / "config.json", MAX_CONFIG_BYTES, "config.json").get("kind") == KIND
    except (CheckpointError, OSError):
        return False


def save_minilm(
    directory: Path,
    model: RecallModel,
    training: dict[str, Any],
    metrics: dict[str, Any] | None = None,
    half: bool = False,
) -> Path:
    """Write the checkpoint; ``half`` stores the weights as float16 (the memory's chunk-summary matrix,
    34·384 × 384, is most of them). Loading casts them back to float32."""
    from safetensors.torch import save as save_safetensors

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    dtype = torch.float16 if half else None
    tensors = {k: v.detach().to("cpu", dtype=dtype, copy=True).contiguous() for k, v in model.trained_state().items()}
    config = {
        "schema_version": SCHEMA_VERSION,
        "kind": KIND,
        "base": base_reference(),
        "recall": model.config.to_dict(),
        "memory": len(model.memories) > 0,
        "training": training,
    }
    record = {"format": "pt", RECORD_KEY: record_of(decisive(config))}  # what the weights were trained with
    atomic_write_bytes(directory / "model.safetensors", save_safetensors(tensors, metadata=record))
    atomic_write_text(directory / "config.json", dumps_json(config))
    if metrics is not None:
        atomic_write_text(directory / "metrics.json", dumps_json(metrics))
    return directory


def decisive(config: dict[str, Any]) -> dict[str, Any]:
    """The sections of a memory-on-MiniLM config that decide what its weights mean (absent ones as null)."""
    return {key: config.get(key) for key in ("base", "recall", "memory")}


def check_minilm_checkpoint(
    path: Path,
    *,
    require_record: bool = True,
) -> tuple[dict[str, Any], RecallConfig, SafetensorsFile]:
    """(config, its recall config, the weights file read and checked) of a memory-on-MiniLM checkpoint, checked as
    loading checks it but without loading MiniLM or building any weight (milliseconds); CheckpointError if
    unusable."""
    directory = Path(path)
    config_path, weights = directory / "config.json", directory / "model.safetensors"
    config = read_json(config_path, MAX_CONFIG_BYTES, "config.json")
    if config.get("kind") != KIND or config.get("schema_version") != SCHEMA_VERSION:
        raise CheckpointError(f"{config_path}: not a {KIND} checkpoint of schema {SCHEMA_VERSION}")
    weights_file = read_safetensors(weights, MAX_WEIGHTS_BYTES)  # read once, checked; no tensor built yet
    if require_record:
        check_record(weights, config_path, weights_file.metadata, decisive(config))
    installed, wanted = base_reference(), config.get("base")
    if wanted != installed:
        raise CheckpointError(
            f"{directory}: trained on base model {wanted}, but the installed one is {installed}; "
            f"install {PACKAGE}=={(wanted or {}).get('version')} (make setup)"
        )
    try:
        recall = RecallConfig.from_dict(config.get("recall"))
    except (ValueError, TypeError) as error:
        raise CheckpointError(f"{config_path}: invalid recall config: {error}") from None
    if not isinstance(config.get("memory"), bool):
        raise CheckpointError(f"{config_path}: 'memory' must be true or false, got {config.get('memory')!r}")
    return config, recall, weights_file


def load_minilm_checkpoint(
    path: Path,
    *,
    require_record: bool = True,
) -> tuple[RecallModel, dict[str, Any], dict[str, Any] | None]:
    """(model in eval mode, config, metrics) of a memory-on-MiniLM checkpoint; CheckpointError if unusable.

    ``config.json`` must say what the weights were trained with (the record in their metadata), checked before
    MiniLM loads; ``require_record=False`` skips that for a checkpoint saved before the record, only for
    :func:`migrate_minilm`."""
    config, recall, weights_file = check_minilm_checkpoint(Path(path), require_record=require_record)
    weights = weights_file.path
    model = RecallModel(recall, memory=config["memory"])
    expected = model.trained_state()
    check_against_model(weights, weights_file.layout, expected)
    tensors = {name: weights_file.tensor(name).to(value.dtype) for name, value in expected.items()}
    if not all(bool(torch.isfinite(t).all()) for t in tensors.values()):
        raise CheckpointError(f"{weights}: weights contain NaN or inf values")
    missing = model.load_state_dict(tensors, strict=False)
    if missing.unexpected_keys or any(not k.startswith("encoder.") for k in missing.missing_keys):
        raise CheckpointError(f"{weights}: does not fit the model ({missing})")
    metrics_path = weights.parent / "metrics.json"
    metrics = read_json(metrics_path, MAX_METRICS_BYTES, "metrics.json") if metrics_path.exists() else None
    return model.eval(), config, metrics


def migrate_minilm(path: Path) -> Path:
    """Rewrite an older memory-on-MiniLM checkpoint's weights file so that its metadata records ``config.json`` as it
    is now (trusting it: run it only on an unedited checkpoint); the tensors are written back byte for byte."""
    directory = Path(path)
    _, config, _ = load_minilm_checkpoint(directory, require_record=False)
    check_migratable(directory / "model.safetensors", directory / "config.json", MAX_WEIGHTS_BYTES, decisive(config))
    rewrite_metadata(
        directory / "model.safetensors", {"format": "pt", RECORD_KEY: record_of(decisive(config))}, MAX_WEIGHTS_BYTES
    )
    return directory


def require_cpu(path: Any, device: Any, precision: str = "fp32") -> None:
    """A memory on MiniLM runs on the CPU in float32 only (its commands were never checked elsewhere): refuse
    another ``device`` (a command's --device) or ``precision`` in one line."""
    if resolve_device(device).type != "cpu" or precision != "fp32":
        raise ValueError(
            f"{path} is a memory on MiniLM, which runs on the CPU in fp32 only; pass --device cpu and no --precision"
        )
