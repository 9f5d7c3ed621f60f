"""Checkpoints: round trip, atomic writes, and a clear refusal of every malformed input (never unpickling)."""

from __future__ import annotations

import json
import os
import pickle
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save as st_save

import tensor_memory
from tensor_memory.backbone import BackboneConfig
from tensor_memory.memory import MemoryConfig
from tensor_memory.storage import files
from tensor_memory.storage.checkpoint import (
    RECORD_KEY,
    SCHEMA_VERSION,
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
    trained_record,
)
from tensor_memory.storage.files import atomic_write_text
from tensor_memory.tasks import TaskModel, make_task

TASK_PARAMS = {"length": 6, "modulus": 16}


def backbone_config(kind: str = "tensor", dim: int = 8) -> BackboneConfig:
    memory = MemoryConfig(token_dim=dim, channels=2, grid=(2, 2, 2)) if kind == "tensor" else None
    return BackboneConfig(kind=kind, dim=dim, layers=2, heads=2, mlp_ratio=1, memory=memory)


def full_config(kind: str = "tensor", dim: int = 8) -> dict:
    return {
        "schema_version": SCHEMA_VERSION,
        "task": {"name": "no_harm", "params": dict(TASK_PARAMS)},
        "model": backbone_config(kind, dim).to_dict(),
        "training": {"steps": 3, "lr": 1e-3, "seed": 0},
    }


def make_model(kind: str = "tensor", dim: int = 8, seed: int = 0) -> TaskModel:
    torch.manual_seed(seed)
    model = TaskModel(make_task("no_harm", TASK_PARAMS), backbone_config(kind, dim))
    with torch.no_grad():  # move γ off its init so the round trip covers a trained-looking value
        for module in model.modules():
            if hasattr(module, "gate"):
                module.gate.add_(0.25)
    return model


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    directory = tmp_path / "ckpt"
    save_checkpoint(directory, make_model(), full_config(), metrics={"accuracy": 0.5, "seed": 0})
    return directory


def error_of(path) -> str:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "\n" not in message
    return message


# ---------------------------------------------------------------------------------------
# Round trip
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tensor", "base"])
def test_round_trip(tmp_path: Path, kind: str) -> None:
    model = make_model(kind)
    config = full_config(kind)
    out = save_checkpoint(tmp_path / "a" / "b", model, config, metrics={"accuracy": 0.75})
    assert out == tmp_path / "a" / "b"
    ckpt = tensor_memory.load_checkpoint(out)
    assert not ckpt.model.training
    assert ckpt.config == config and ckpt.metrics == {"accuracy": 0.75} and ckpt.path == out
    assert ckpt.task.name == "no_harm" and ckpt.task.config.to_dict() == TASK_PARAMS
    original, loaded = model.state_dict(), ckpt.model.state_dict()
    assert original.keys() == loaded.keys()
    assert all(torch.equal(original[k], loaded[k]) for k in original)
    batch = ckpt.task.sample(3, seed=7)
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(batch.inputs)[0], ckpt.model(batch.inputs)[0])
    # no temp files left behind, and the written files are readable by others
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "metrics.json", "model.safetensors"]
    assert (out / "model.safetensors").stat().st_mode & 0o044 == 0o044


def test_save_fills_schema_version_and_checks_config(tmp_path: Path) -> None:
    config = full_config()
    del config["schema_version"]
    save_checkpoint(tmp_path / "c", make_model(), config)
    assert json.loads((tmp_path / "c" / "config.json").read_text())["schema_version"] == SCHEMA_VERSION
    with pytest.raises(CheckpointError, match="does not describe the model"):
        save_checkpoint(tmp_path / "d", make_model(), full_config(dim=4))
    assert not (tmp_path / "d").exists()


def test_save_handles_shared_storage_and_nonfinite_metrics(tmp_path: Path) -> None:
    model = make_model("base")
    model.head.weight = model.encoder.embed.weight  # tied weights: one storage, two names
    save_checkpoint(tmp_path / "t", model, full_config("base"), metrics={"loss": float("nan")})
    ckpt = load_checkpoint(tmp_path / "t")
    assert torch.equal(ckpt.model.head.weight, model.encoder.embed.weight)
    assert ckpt.metrics == {"loss": None}  # strict JSON: NaN is written as null


def test_extra_files_ignored(saved: Path) -> None:
    (saved / "train_log.jsonl").write_text('{"step": 1}\n')
    (saved / "optimizer.pt").write_bytes(pickle.dumps({"state": 1}))  # resume state: never read
    (saved / ".model.safetensors.abc.tmp").write_bytes(b"half")  # a killed run's leftover temp file
    load_checkpoint(saved)


# ---------------------------------------------------------------------------------------
# Atomicity
# ---------------------------------------------------------------------------------------


def test_crash_during_save_keeps_previous_checkpoint(saved: Path, monkeypatch) -> None:
    before = {p.name: p.read_bytes() for p in saved.iterdir()}
    real_replace = os.replace

    def killed(src, dst):  # the process dies right before the rename of the weights
        if Path(dst).name == "model.safetensors":
            raise KeyboardInterrupt("killed")
        return real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(saved, make_model(seed=1), full_config())
    monkeypatch.setattr(files.os, "replace", real_replace)
    assert {p.name: p.read_bytes() for p in saved.iterdir()} == before  # untouched, no temp file
    load_checkpoint(saved)


def test_crash_mid_write_of_a_file(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "config.json"
    atomic_write_text(target, "old")

    def failing_fsync(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "fsync", failing_fsync)
    with pytest.raises(OSError):
        atomic_write_text(target, "new" * 1000)
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["config.json"]


def test_new_weights_with_old_config_are_refused_not_misread(saved: Path, monkeypatch) -> None:
    real_replace = os.replace

    def killed(src, dst):  # weights replaced, then the run dies before config.json
        if Path(dst).name == "config.json":
            raise KeyboardInterrupt("killed")
        return real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(saved, make_model(dim=4), full_config(dim=4))
    monkeypatch.setattr(files.os, "replace", real_replace)
    assert "model.dim is 8, but the weights were trained with 4" in error_of(saved)  # refused, not misread


# ---------------------------------------------------------------------------------------
# Malformed inputs
# ---------------------------------------------------------------------------------------


def header_and_data(path: Path) -> tuple[dict, bytes]:
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8 : 8 + n]), raw[8 + n :]


def write_safetensors(path: Path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def rewrite_config(directory: Path, edit) -> None:
    config = json.loads((directory / "config.json").read_text())
    edit(config)
    (directory / "config.json").write_text(json.dumps(config))


def test_missing_directory_file_and_empty_folder(tmp_path: Path, saved: Path) -> None:
    assert "no such checkpoint directory" in error_of(tmp_path / "nowhere")
    message = error_of(saved / "model.safetensors")
    assert "model.safetensors" in message and "is a file, not a checkpoint directory" in message
    (tmp_path / "empty").mkdir()
    message = error_of(tmp_path / "empty")
    assert "empty" in message and "model.safetensors" in message


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_missing_file(saved: Path, name: str) -> None:
    (saved / name).unlink()
    message = error_of(saved)
    assert name in message and f"missing {name}" in message


def test_model_file_that_is_a_directory(saved: Path) -> None:
    (saved / "model.safetensors").unlink()
    (saved / "model.safetensors").mkdir()
    assert "is a folder, not the weights file" in error_of(saved)


class Boom:
    """Unpickling this creates a marker file: proof that a loader executed the pickle."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("zip_format", [True, False])
def test_pickle_renamed_to_safetensors_is_refused_unopened(saved: Path, tmp_path: Path, zip_format: bool) -> None:
    marker = tmp_path / "unpickled.marker"
    torch.save({"weights": Boom(marker)}, saved / "model.safetensors", _use_new_zipfile_serialization=zip_format)
    message = error_of(saved)
    assert "model.safetensors" in message and "pickle" in message and "refused" in message
    assert not marker.exists()
    # control: the same file really does run code when unpickled
    copy = tmp_path / "copy.pt"
    copy.write_bytes((saved / "model.safetensors").read_bytes())
    torch.load(copy, weights_only=False)
    assert marker.exists()


def test_plain_pickle_is_refused(saved: Path) -> None:
    (saved / "model.safetensors").write_bytes(pickle.dumps(make_model().state_dict(), protocol=4))
    assert "looks like a pickle" in error_of(saved)


def test_truncated_and_corrupt_safetensors(saved: Path) -> None:
    path = saved / "model.safetensors"
    good = path.read_bytes()
    header, data = header_and_data(path)
    cases = [
        (good[:-100], "data shorter than the offsets"),
        (good[:5], "truncated"),
        (b"", "empty"),
        (struct.pack("<Q", 1 << 40) + good[8:], "bad header length"),
        (struct.pack("<Q", len(good)) + good[8:], "truncated"),  # header longer than the file
        (struct.pack("<Q", 10) + b"{not json}" + data, "bad JSON header"),
        (struct.pack("<Q", 2) + b"[]" + data, "bad JSON header"),
        (good + b"\0" * 16, "unexpected bytes after"),
    ]
    for content, phrase in cases:
        path.write_bytes(content)
        message = error_of(saved)
        assert "model.safetensors" in message and phrase in message, (phrase, message)
    name = next(k for k in header if k != "__metadata__")
    bad = dict(header, **{name: dict(header[name], dtype="Q99")})
    write_safetensors(path, bad, data)
    assert "unknown dtype" in error_of(saved)
    bad = dict(header, **{name: dict(header[name], shape=[10**6])})
    write_safetensors(path, bad, data)
    assert "needs" in error_of(saved)


def test_oversized_files(saved: Path) -> None:
    path = saved / "model.safetensors"
    with open(path, "r+b") as handle:  # sparse: no real disk used
        handle.truncate(513 * 2**20)
    message = error_of(saved)
    assert "model.safetensors" in message and "over the 512 MB limit" in message
    path.unlink()
    save_checkpoint(saved, make_model(), full_config())
    (saved / "config.json").write_text(json.dumps({**full_config(), "training": {"pad": "x" * (1 << 20)}}))
    message = error_of(saved)
    assert "config.json" in message and "over the 1 MB limit" in message


@pytest.mark.parametrize(
    "text, phrase",
    [
        ("{", "invalid JSON"),
        ("", "is empty"),
        ('{"a": NaN}', "invalid JSON"),
        ('{"a": 1, "a": 2}', "duplicate key"),
        ("[1, 2]", "must hold a JSON object"),
        ('"config"', "must hold a JSON object"),
        ("[" * 100_000 + "]" * 100_000, "invalid JSON"),
    ],
)
def test_bad_config_json(saved: Path, text: str, phrase: str) -> None:
    (saved / "config.json").write_text(text)
    message = error_of(saved)
    assert "config.json" in message and phrase in message


def test_bad_metrics_json(saved: Path) -> None:
    (saved / "metrics.json").write_text("{oops")
    message = error_of(saved)
    assert "metrics.json" in message and "invalid JSON" in message


@pytest.mark.parametrize(
    "edit, phrase",
    [
        (lambda c: c.pop("schema_version"), "missing 'schema_version'"),
        (lambda c: c.update(schema_version=3), "unknown schema_version 3"),
        (lambda c: c.update(schema_version="1"), "unknown schema_version"),
        (lambda c: c.pop("model"), "missing the 'model' section"),
        (lambda c: c.update(task=[]), "'task' must be an object"),
        (lambda c: c["task"].update(name="telepathy"), "unknown task 'telepathy'"),
        (lambda c: c["task"].update(params={"length": 0}), "invalid task.params"),
        (lambda c: c["task"].update(params={"colour": 3}), "invalid task.params"),
        (lambda c: c["model"].update(heads=3), "invalid model config"),
        (lambda c: c["model"]["memory"].update(grid=[2, 2]), "invalid model config"),
    ],
)
def test_bad_config_contents(saved: Path, edit, phrase: str) -> None:
    rewrite_config(saved, edit)
    message = error_of(saved)
    assert "config.json" in message and phrase in message, message


def test_schema_1_checkpoints_load_as_the_models_they_were(tmp_path: Path) -> None:
    """A schema-1 config omits settings whose defaults changed in schema 2; it must load the model it
    was saved from (sinusoidal positions, no summary norm, the joint occlusion head), not today's defaults."""
    task = make_task(
        "occlusion", {"frames": 3, "size": 4, "ball": 1, "patch": 2, "occlusion_length": 1, "head": "joint"}
    )
    backbone = BackboneConfig(
        kind="tensor",
        dim=8,
        layers=1,
        heads=2,
        mlp_ratio=1,
        positions="sinusoidal",
        memory=MemoryConfig(token_dim=8, channels=2, grid=(2, 2, 2), chunk_size=4, summary_norm=False),
    )
    torch.manual_seed(0)
    model = TaskModel(task, backbone).eval()
    config = {"task": {"name": "occlusion", "params": task.config.to_dict()}, "model": backbone.to_dict()}
    save_checkpoint(tmp_path / "old", model, config)

    def as_schema_1(c: dict) -> None:  # what a checkpoint written before schema 2 holds
        c["schema_version"] = 1
        del c["model"]["positions"], c["model"]["memory"]["summary_norm"], c["task"]["params"]["head"]

    rewrite_config(tmp_path / "old", as_schema_1)
    loaded = tensor_memory.load_checkpoint(tmp_path / "old")
    assert loaded.config["schema_version"] == SCHEMA_VERSION
    assert loaded.model.backbone.config.positions == "sinusoidal"
    assert loaded.model.backbone.config.memory.summary_norm is False and loaded.task.config.head == "joint"
    batch = task.sample(2, 0)
    assert torch.equal(loaded.model(batch.inputs)[0], model(batch.inputs)[0])


def test_save_validates_the_config_before_writing(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="unknown task"):
        save_checkpoint(tmp_path / "a", make_model(), {**full_config(), "task": {"name": "nope", "params": {}}})
    with pytest.raises(ValueError, match="invalid model config"):  # CheckpointError is a ValueError
        save_checkpoint(tmp_path / "a", make_model(), {**full_config(), "model": {"kind": "nope"}})
    assert not (tmp_path / "a").exists()  # nothing was written


def test_weights_that_disagree_with_the_config(saved: Path) -> None:
    path = saved / "model.safetensors"
    tensors = make_model().state_dict()

    record = {RECORD_KEY: trained_record(full_config())}  # the weights say what they were trained with

    def write(state) -> str:
        path.write_bytes(st_save({k: v.contiguous() for k, v in state.items()}, metadata=record))
        message = error_of(saved)
        assert "model.safetensors" in message
        return message

    missing = dict(tensors)
    missing.pop("head.weight")
    assert "missing weights" in write(missing) and "head.weight" in write(missing)
    assert "unexpected weights" in write({**tensors, "extra.weight": torch.zeros(2)})
    assert "shape mismatch" in write({**tensors, "head.weight": torch.zeros(3, 3)})
    assert "non-floating" in write({**tensors, "head.bias": torch.zeros(16, dtype=torch.int32)})
    nan = dict(tensors, **{"head.bias": torch.full((16,), float("nan"))})
    assert "NaN or inf" in write(nan)
    # other floating dtypes are accepted and converted
    path.write_bytes(st_save({k: v.to(torch.float16) for k, v in tensors.items()}, metadata=record))
    assert load_checkpoint(saved).model.head.weight.dtype == torch.float32


def test_config_claiming_a_huge_model_is_refused_without_allocating(saved: Path) -> None:
    def huge(c):
        c["model"].update(dim=1 << 16, heads=1, memory=None)

    rewrite_config(saved, huge)
    assert "BackboneConfig.dim must be at most 4,096" in error_of(saved)  # the ceiling, before anything is built
