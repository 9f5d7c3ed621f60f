"""What a checkpoint's weights file records of what they were trained with, and the checks against it.

The weights file's safetensors metadata keeps the sections of ``config.json`` that decide what the weights mean
(a task checkpoint's task and model; a memory on MiniLM's base, recall and memory) as canonical JSON, and the
SHA-256 of every file saved beside them (a language model's ``tokenizer.json``). Loading compares both before any
model is built, so an edited ``config.json`` or another tokenizer is refused in milliseconds, naming the field or
the file, instead of giving wrong results without a word. The ``training`` section (learning rate, steps, seed) is
left out on purpose: it says how the weights were made, not what they compute, so no result depends on it; a
training run's own record of it is ``train_log.jsonl`` and the resume file, which checks it whole.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from .files import FileFormatError as CheckpointError
from .files import atomic_write_bytes
from .user_files import read_safetensors, read_user_file

RECORD_KEY = "trained_config"  # safetensors metadata: the sections the weights were trained with
SIDE_FILES_KEY = "side_files_sha256"  # safetensors metadata: {file beside the weights: its SHA-256}, e.g. a tokenizer
MAX_SIDE_FILE_BYTES = 64 << 20  # a tokenizer of a 267k-word vocabulary is ~6 MB


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def weights_metadata(config: dict[str, Any], digests: dict[str, str]) -> dict[str, str]:
    """The weights file's metadata: the training configuration and the SHA-256 of each file saved beside it."""
    return {
        "format": "pt",
        "schema_version": str(config["schema_version"]),
        RECORD_KEY: trained_record(config),
        SIDE_FILES_KEY: json.dumps(digests, sort_keys=True),
    }


def trained_record(config: dict[str, Any]) -> str:
    """The part of a config that decides what the weights mean (task and model), as canonical JSON."""
    return record_of(decisive(config))


def decisive(config: dict[str, Any]) -> dict[str, Any]:
    """The sections of a task checkpoint's config that decide what its weights mean."""
    return {"task": config["task"], "model": config["model"]}


def record_of(sections: dict[str, Any]) -> str:
    """Config sections as the canonical JSON a weights file records."""
    return json.dumps(sections, sort_keys=True, separators=(",", ":"))


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        return {k: v for key in sorted(value) for k, v in _flat(value[key], f"{prefix}{key}.").items()}
    return {prefix.rstrip("."): value}


def check_record(model_path: Path, config_path: Path, metadata: dict[str, str], sections: dict[str, Any]) -> None:
    """config.json's ``sections`` must still say what the weights were trained with (the record in the weights file's
    metadata); the first field that differs is named."""
    if RECORD_KEY not in metadata:
        raise CheckpointError(
            f"{model_path}: holds no record of the configuration it was trained with (saved by "
            f"an older version); if {config_path.name} is unchanged since training, add the record "
            f"with: tensor-memory migrate --checkpoint {model_path.parent}"
        )
    try:
        recorded = _flat(json.loads(metadata[RECORD_KEY]))
    except (ValueError, RecursionError):
        raise CheckpointError(
            f"{model_path}: its record of the training configuration is not valid JSON; re-save the checkpoint"
        ) from None
    now = _flat(sections)
    for key in sorted(set(recorded) | set(now)):
        if recorded.get(key, "(absent)") != now.get(key, "(absent)"):
            raise CheckpointError(
                f"{config_path}: {key} is {now.get(key, '(absent)')!r}, but the weights were "
                f"trained with {recorded.get(key, '(absent)')!r} ({model_path.name} records it): "
                f"the two files do not belong together; restore the checkpoint's own "
                f"{config_path.name}, or its own {model_path.name}"
            )


def check_migratable(
    model_path: Path, config_path: Path, cap: int, sections: dict[str, Any], side_files: tuple[str, ...] = ()
) -> None:
    """Migrating adds what a weights file saved by an older version does not record; whatever it does record must
    still hold (else rewriting it would make an edited config.json or tokenizer look like the trained ones)."""
    metadata = read_safetensors(model_path, cap).metadata
    if RECORD_KEY in metadata:
        check_record(model_path, config_path, metadata, sections)
    if SIDE_FILES_KEY in metadata:
        check_side_files(model_path, metadata, side_files)


def side_file_digests(directory: Path, names: tuple[str, ...]) -> dict[str, str]:
    """The SHA-256 of each file ``names`` lists in ``directory``, read as every user file is (never blocking)."""
    digests = {}
    for name in names:
        path = directory / name
        try:
            digests[name] = sha256(read_user_file(path, MAX_SIDE_FILE_BYTES, f"the checkpoint's {name}"))
        except FileNotFoundError:
            raise CheckpointError(
                f"{path}: missing {name}; the checkpoint keeps it beside the weights (copy the whole directory)"
            ) from None
    return digests


def check_side_files(model_path: Path, metadata: dict[str, str], names: tuple[str, ...]) -> None:
    """Each file ``names`` lists beside the weights must be the one they were saved with (its SHA-256 in the weights
    file's metadata): another valid tokenizer would give wrong results without a word."""
    if not names:
        return
    try:
        recorded = json.loads(metadata[SIDE_FILES_KEY])
    except KeyError:
        raise CheckpointError(
            f"{model_path}: holds no record of the files saved beside it ({', '.join(names)}; "
            f"saved by an older version); if they are unchanged since training, add the record "
            f"with: tensor-memory migrate --checkpoint {model_path.parent}"
        ) from None
    except ValueError:
        recorded = None
    if not isinstance(recorded, dict):
        raise CheckpointError(
            f"{model_path}: its record of the files saved beside it is not a JSON object; re-save the checkpoint"
        )
    for name, digest in side_file_digests(model_path.parent, names).items():
        if digest != recorded.get(name):
            raise CheckpointError(
                f"{model_path.parent / name}: is not the {name} these weights were saved with (its "
                f"SHA-256 differs from the one {model_path.name} records); restore the checkpoint's "
                f"own {name}"
            )


def rewrite_metadata(weights: Path, metadata: dict[str, str], cap: int) -> None:
    """Write ``metadata`` into safetensors file ``weights`` (atomically), its tensors back byte for byte in the
    precision they were stored in: what migrating an older checkpoint changes. ``cap``: the weights file's size
    limit."""
    from safetensors.torch import save as save_safetensors

    tensors = read_safetensors(weights, cap).tensors()
    atomic_write_bytes(weights, save_safetensors(tensors, metadata=metadata))


__all__ = [
    "RECORD_KEY",
    "SIDE_FILES_KEY",
    "sha256",
    "weights_metadata",
    "trained_record",
    "decisive",
    "record_of",
    "check_record",
    "check_migratable",
    "side_file_digests",
    "check_side_files",
    "rewrite_metadata",
]
