"""Hostile sizes and edited configs: refused at once, with one line naming the field, nothing allocated.

Every case is built here from a shipped checkpoint copied into a temporary folder (never changed in
place) or from a config dict; each must be refused well inside a second.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.torch import save_file

from tensor_memory import BackboneConfig, MemoryConfig, load_checkpoint
from tensor_memory import limits as L
from tensor_memory.backbone import check_budget, estimated_bytes
from tensor_memory.pretrained.checkpoint import is_pretrained_memory
from tensor_memory.storage.checkpoint import RECORD_KEY, CheckpointError, migrate_checkpoint, trained_record
from tensor_memory.storage.user_files import read_safetensors
from tensor_memory.tasks import make_task
from tensor_memory.training import TrainConfig

ROOT = Path(__file__).resolve().parents[1]
SMALL = ROOT / "checkpoints" / "no_harm-tensor"  # 4³ grid
OCCLUSION = ROOT / "checkpoints" / "occlusion-tensor"


def copy(tmp_path: Path, source: Path = SMALL) -> Path:
    return Path(shutil.copytree(source, tmp_path / source.name))


def edited(directory: Path, edit) -> Path:
    path = directory / "config.json"
    config = json.loads(path.read_text())
    edit(config)
    path.write_text(json.dumps(config))
    return directory


def refused(directory: Path) -> str:
    start = time.perf_counter()
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(directory)
    assert time.perf_counter() - start < 1.0
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    "edit, field",
    [
        (lambda c: c["model"].update(layers=1_000_000), "BackboneConfig.layers must be at most 64"),
        (lambda c: c["model"]["memory"].update(grid=[10000] * 3), "MemoryConfig.grid[D] must be at most 256"),
        (lambda c: c["model"]["memory"].update(grid=[2**40] * 3), "MemoryConfig.grid[D] must be at most 256"),
        (lambda c: c["model"]["memory"].update(channels=1_000_000_000), "MemoryConfig.channels must be at most"),
        (lambda c: c["task"]["params"].update(length=10**9), "NoHarmConfig.length must be at most"),
        (lambda c: c["model"].update(dim=1 << 20), "BackboneConfig.dim must be at most"),
    ],
)
def test_hostile_sizes_in_config_json_are_refused_naming_the_field(tmp_path, edit, field):
    assert field in refused(edited(copy(tmp_path), edit))


def test_a_config_edited_after_training_is_refused_naming_the_field(tmp_path):
    """A 4³-trained checkpoint claiming 12³ (its parameters do not depend on the grid, so shapes alone
    cannot tell) is refused by the record the weights file keeps."""
    message = refused(edited(copy(tmp_path), lambda c: c["model"]["memory"].update(grid=[12, 12, 12])))
    assert "model.memory.grid is [12, 12, 12], but the weights were trained with [4, 4, 4]" in message
    message = refused(edited(copy(tmp_path / "b"), lambda c: c["task"]["params"].update(modulus=12)))
    assert "task.params.modulus is 12" in message


def test_every_shipped_checkpoint_records_its_training_configuration():
    for directory in sorted((ROOT / "checkpoints").iterdir()):  # minilm-tensor records its base instead (test_minilm)
        if (directory / "model.safetensors").exists() and not is_pretrained_memory(directory):
            metadata = read_safetensors(directory / "model.safetensors", 64 << 20).metadata
            recorded = json.loads(metadata[RECORD_KEY])
            config = json.loads((directory / "config.json").read_text())
            assert recorded == {"task": config["task"], "model": config["model"]}, directory.name


def test_a_checkpoint_without_the_record_is_refused_until_migrated(tmp_path):
    from safetensors.torch import load_file, save_file

    directory = copy(tmp_path)
    weights = directory / "model.safetensors"
    save_file(load_file(weights), weights, metadata={"format": "pt"})  # as an older version wrote it
    assert "tensor-memory migrate --checkpoint" in refused(directory)
    before = load_checkpoint(directory, require_record=False).model.state_dict()
    migrate_checkpoint(directory)
    after = load_checkpoint(directory).model.state_dict()
    assert all((before[k] == after[k]).all() for k in before)


def test_a_model_over_the_memory_budget_is_refused_before_it_is_built(tmp_path):
    # Each size within its ceiling, together far over the budget: 1,024 channels on 64³, 64 layers.
    def big(c):
        c["model"].update(layers=64, memory_layers=None)
        c["model"]["memory"].update(channels=128, grid=[64, 64, 64])

    directory = edited(copy(tmp_path), big)
    weights = directory / "model.safetensors"  # a hostile pair: the weights' record claims the same model
    with safe_open(str(weights), framework="pt") as handle:
        tensors, metadata = {k: handle.get_tensor(k) for k in handle.keys()}, dict(handle.metadata())
    config = json.loads((directory / "config.json").read_text())
    save_file(tensors, weights, metadata={**metadata, RECORD_KEY: trained_record(config)})
    message = refused(directory)
    assert "over the 16 GiB budget" in message or "state numbers" in message


def test_ceilings_in_code_and_the_budget_estimate():
    with pytest.raises(ValueError, match="grid \\(D·H·W voxels\\) must be at most 262,144"):
        MemoryConfig(grid=(64, 64, 128))
    with pytest.raises(ValueError, match="state numbers"):
        MemoryConfig(channels=1024, grid=(64, 64, 64))
    with pytest.raises(ValueError, match="TrainConfig.batch_size must be at most 4,096"):
        TrainConfig(batch_size=100_000_000)
    with pytest.raises(ValueError, match="OcclusionConfig.frames must be at most"):
        make_task("occlusion", {"frames": 100_000_000})
    for directory in sorted((ROOT / "checkpoints").glob("*-*")):  # every shipped run fits with room to spare
        if is_pretrained_memory(directory):
            continue
        config = json.loads((directory / "config.json").read_text())
        backbone = BackboneConfig.from_dict(config["model"])
        tokens = make_task(config["task"]["name"], config["task"]["params"]).tokens
        assert estimated_bytes(backbone, tokens, config["training"]["batch_size"], True) < L.MEMORY_BUDGET_BYTES / 4
    wide = BackboneConfig(kind="tensor", dim=64, memory=MemoryConfig(token_dim=64, channels=64, grid=(32, 32, 32)))
    with pytest.raises(ValueError, match="needs about .* GiB, over the 16 GiB budget"):
        check_budget(wide, 4096, 64, training=True, where="test")
    check_budget(wide, 4096, 1, training=False, where="test")  # one sequence at inference fits
