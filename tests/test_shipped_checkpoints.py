"""The shipped checkpoints load, keep to the equal-state-budget rule, and re-evaluate to the
figures recorded in their metrics.json."""

import json
from pathlib import Path

import pytest

from tensor_memory import load_checkpoint
from tensor_memory.evaluation import evaluate_checkpoint

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("coordinate_binding", "occlusion", "map_building", "no_harm")
BACKBONES = ("tensor", "base", "local")
LOCAL_UPDATE = "tensor_local_update"  # the tensor backbone retrained with MemoryConfig.write_mode = "local"
SHIPPED = [ROOT / "checkpoints" / f"{t}-{b}" for t in TASKS for b in BACKBONES] + \
    sorted((ROOT / "checkpoints").glob(f"*-{LOCAL_UPDATE}"))


@pytest.mark.parametrize("directory", SHIPPED, ids=lambda d: d.name)
def test_shipped_checkpoint_reproduces_its_metrics(directory):
    ckpt = load_checkpoint(directory)
    task, variant = directory.name.split("-", 1)
    assert ckpt.task.name == task
    kind = ckpt.config["model"]["kind"]
    if variant == LOCAL_UPDATE:
        assert kind == "tensor" and ckpt.config["model"]["memory"]["write_mode"] == "local"
    else:
        assert kind == variant
    assert directory.stat().st_size and (directory / "model.safetensors").stat().st_size < 5_000_000  # a few MB
    recorded = json.loads((directory / "metrics.json").read_text())
    seed = recorded["eval_seeds"][0]
    result = evaluate_checkpoint(ckpt, seed, recorded["batches"], recorded["batch_size"],
                                 task_params=recorded["trained"]["params"])
    expected = recorded["trained"]["per_seed"][str(seed)]
    for name, value in expected.items():
        if isinstance(value, float):
            assert result["metrics"][name] == pytest.approx(value, abs=2e-3), name


@pytest.mark.parametrize("task", TASKS)
def test_local_baseline_holds_about_as_many_numbers_as_the_tensor_state(task):
    budgets = {b: json.loads((ROOT / "checkpoints" / f"{task}-{b}" / "config.json").read_text())["state_budget"]
               for b in ("tensor", "local")}
    tensor, local = budgets["tensor"]["total_state_numbers"], budgets["local"]["total_state_numbers"]
    assert abs(local - tensor) <= 0.1 * tensor
