"""Everything a checkpoint holds is checked against what it was trained with, before any model loads: config.json's
deciding sections against the record in the weights file, the files beside the weights (a tokenizer) against their
SHA-256 there, for task checkpoints and the memory on MiniLM alike. Migrating an older checkpoint adds the records
and leaves its tensors byte for byte."""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from tensor_memory import load_checkpoint
from tensor_memory.pretrained import checkpoint as P
from tensor_memory.pretrained.recall import RecallConfig
from tensor_memory.storage.checkpoint import SIDE_FILES_KEY, CheckpointError, migrate_checkpoint

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"


def copied(name: str, tmp_path: Path) -> Path:
    folder = tmp_path / name
    shutil.copytree(CHECKPOINTS / name, folder)
    return folder


def refused_quickly(load, folder: Path) -> str:
    start = time.perf_counter()
    with pytest.raises(CheckpointError) as refused:
        load(folder)
    assert time.perf_counter() - start < 1.0  # before any model is built
    assert "\n" not in str(refused.value)
    return str(refused.value)


def swap_two_ids(text: str) -> str:
    tokenizer = json.loads(text)
    vocab = tokenizer["model"]["vocab"]
    a, b = list(vocab)[100:102]
    vocab[a], vocab[b] = vocab[b], vocab[a]
    return json.dumps(tokenizer)


def add_a_normalizer(text: str) -> str:
    tokenizer = json.loads(text)
    tokenizer["normalizer"] = {"type": "Lowercase"}
    return json.dumps(tokenizer)


@pytest.mark.parametrize(
    "edit",
    [swap_two_ids, add_a_normalizer, lambda text: text + "\n"],
    ids=["ids swapped", "normalizer added", "a newline added"],
)
def test_a_language_checkpoint_with_another_tokenizer_is_refused_naming_it(tmp_path, edit):
    folder = copied("language_modelling-tensor", tmp_path)
    tokenizer = folder / "tokenizer.json"
    tokenizer.write_text(edit(tokenizer.read_text()))
    said = refused_quickly(load_checkpoint, folder)
    assert said.startswith(f"{tokenizer}: is not the tokenizer.json these weights were saved with")


def test_every_shipped_language_checkpoint_records_its_tokenizer():
    for folder in sorted(CHECKPOINTS.glob("language_modelling-*")):
        with safe_open(str(folder / "model.safetensors"), framework="pt") as handle:
            assert set(json.loads(handle.metadata()[SIDE_FILES_KEY])) == {"tokenizer.json"}, folder
        load_checkpoint(folder)


def test_an_older_checkpoint_is_refused_until_migrated_and_migrating_keeps_its_tensors(tmp_path):
    folder = copied("language_modelling-tensor", tmp_path)
    weights = folder / "model.safetensors"
    with safe_open(str(weights), framework="pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
        metadata = {k: v for k, v in handle.metadata().items() if k != SIDE_FILES_KEY}  # as saved before the record
    save_file(tensors, weights, metadata=metadata)
    assert "tensor-memory migrate --checkpoint" in refused_quickly(load_checkpoint, folder)
    migrate_checkpoint(folder)
    with safe_open(str(weights), framework="pt") as handle:
        assert all(
            torch.equal(handle.get_tensor(name), value) and handle.get_tensor(name).dtype == value.dtype
            for name, value in tensors.items()
        )  # byte for byte, in the precision stored (float16 here)
    load_checkpoint(folder)
    (folder / "tokenizer.json").write_text(swap_two_ids((folder / "tokenizer.json").read_text()))
    refused_quickly(load_checkpoint, folder)  # and what it recorded now guards it


def test_an_edited_minilm_config_is_refused_naming_the_field_before_minilm_loads(tmp_path, monkeypatch):
    folder = copied("minilm-tensor", tmp_path)
    monkeypatch.setattr(P, "RecallModel", lambda *a, **k: pytest.fail("MiniLM was loaded"))
    config = json.loads((folder / "config.json").read_text())
    for section, key, value, shown in (
        ("recall", "grid", [12, 12, 12], "recall.grid is [12, 12, 12]"),
        ("recall", "layers", "5", "recall.layers is '5'"),
        ("recall", "gate_init", -2.0, "recall.gate_init is -2.0"),
    ):
        edited = json.loads(json.dumps(config))
        edited[section][key] = value
        (folder / "config.json").write_text(json.dumps(edited))
        said = refused_quickly(P.load_minilm_checkpoint, folder)
        assert said.startswith(f"{folder / 'config.json'}: {shown}, but the weights were trained with"), said
    edited = {**config, "memory": False}
    (folder / "config.json").write_text(json.dumps(edited))
    assert "memory is False, but the weights were trained with True" in refused_quickly(
        P.load_minilm_checkpoint, folder
    )


@pytest.mark.parametrize(
    "field, value, problem",
    [
        ("layers", "5", "layers must be a non-empty list of distinct MiniLM layers (0 to 5), got '5'"),
        ("layers", [6], "layers must be a non-empty list"),
        ("layers", [], "layers must be a non-empty list"),
        ("grid", [6, 6], "grid must be a list of three sides"),
        ("grid", [6, 6, 1], "grid[] must be an integer >= 2"),
        ("channels", 2.5, "channels must be an integer"),
        ("gate_init", "closed", "gate_init must be a finite number"),
        ("window", "32", "window must be an integer"),
    ],
)
def test_every_minilm_config_field_is_type_checked(field, value, problem):
    with pytest.raises(ValueError) as refused:
        RecallConfig.from_dict({field: value})
    assert str(refused.value).startswith(f"RecallConfig.{problem}"), str(refused.value)


@pytest.mark.parametrize(
    "name, edit, shown",
    [
        ("occlusion-tensor", lambda c: c["model"]["memory"].update(gate_init=3.0), "model.memory.gate_init is 3.0"),
        ("minilm-tensor", lambda c: c["recall"].update(gate_init=-2.0), "recall.gate_init is -2.0"),
    ],
)
def test_migrating_never_launders_an_edited_checkpoint(tmp_path, name, edit, shown):
    folder = copied(name, tmp_path)
    config = json.loads((folder / "config.json").read_text())
    edit(config)
    (folder / "config.json").write_text(json.dumps(config))
    weights = (folder / "model.safetensors").read_bytes()
    migrate = P.migrate_minilm if name.startswith("minilm") else migrate_checkpoint
    with pytest.raises(CheckpointError, match=re.escape(shown)):
        migrate(folder)
    assert (folder / "model.safetensors").read_bytes() == weights  # its record untouched: loading still refuses
    said = refused_quickly(P.load_minilm_checkpoint if name.startswith("minilm") else load_checkpoint, folder)
    assert (
        "the two files do not belong together; restore the checkpoint's own config.json, or its own "
        "model.safetensors" in said
    )


def test_migrating_does_not_launder_an_edited_tokenizer(tmp_path):
    folder = copied("language_modelling-tensor", tmp_path)
    tokenizer = folder / "tokenizer.json"
    tokenizer.write_text(swap_two_ids(tokenizer.read_text()))
    with pytest.raises(CheckpointError, match="is not the tokenizer.json these weights were saved with"):
        migrate_checkpoint(folder)
