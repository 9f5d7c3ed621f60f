"""The shipped checkpoints load, keep to the equal-state-budget rule, and re-evaluate to the
figures recorded in their metrics.json."""

import json
from pathlib import Path

import pytest

from tensor_memory import load_checkpoint
from tensor_memory.training.evaluation import evaluate_checkpoint

ROOT = Path(__file__).resolve().parents[1]
TASKS = ("coordinate_binding", "occlusion", "map_building", "no_harm", "language_modelling", "moving_digits")
BACKBONES = ("tensor", "base", "local")
IMAGES = [f"masked_patches-{b}" for b in ("tensor", "base", "local", "registers")]  # bidirectional: no state to budget
LOCAL_UPDATE = "tensor_local_update"  # the tensor backbone retrained with MemoryConfig.write.mode = "local"
SHARED_STATE = "tensor_shared_state"  # the leaky variant, shipped to show the audit catching it
WINDOWED = "tensor_windowed"  # the memory on the local baseline's attention window (masked patches: 7)
# variant: (where in the backbone's config it differs, what it holds there)
VARIANTS = {LOCAL_UPDATE: ("memory.write.mode", "local"), SHARED_STATE: ("share_state", True), WINDOWED: ("window", 7)}
SHIPPED = (
    [ROOT / "checkpoints" / f"{t}-{b}" for t in TASKS for b in BACKBONES]
    + sorted(d for v in VARIANTS for d in (ROOT / "checkpoints").glob(f"*-{v}"))
    + [ROOT / "checkpoints" / f"language_modelling-{b}" for b in ("xl", "linear")]
    + [ROOT / "checkpoints" / name for name in IMAGES]
)


@pytest.mark.parametrize("directory", SHIPPED, ids=lambda d: d.name)
def test_shipped_checkpoint_reproduces_its_metrics(directory):
    ckpt = load_checkpoint(directory)
    task, variant = directory.name.split("-", 1)
    assert ckpt.task.name == task
    kind = ckpt.config["model"]["kind"]
    if variant in VARIANTS:
        field, value = VARIANTS[variant]
        held = ckpt.model.backbone.config
        for part in field.split("."):
            held = getattr(held, part)
        assert kind == "tensor" and held == value
    else:
        assert kind == variant
    assert directory.stat().st_size and (directory / "model.safetensors").stat().st_size < 5_000_000  # a few MB
    recorded = json.loads((directory / "metrics.json").read_text())
    seed = recorded["eval_seeds"][0]
    result = evaluate_checkpoint(
        ckpt, seed, recorded["batches"], recorded["batch_size"], task_params=recorded["trained"]["params"]
    )
    expected = recorded["trained"]["per_seed"][str(seed)]
    for name, value in expected.items():
        if isinstance(value, float):
            assert result["metrics"][name] == pytest.approx(value, abs=2e-3), name


@pytest.mark.parametrize("task", TASKS)
def test_local_baseline_holds_about_as_many_numbers_as_the_tensor_state(task):
    budgets = {
        b: json.loads((ROOT / "checkpoints" / f"{task}-{b}" / "config.json").read_text())["state_budget"]
        for b in ("tensor", "local")
    }
    tensor, local = budgets["tensor"]["total_state_numbers"], budgets["local"]["total_state_numbers"]
    assert abs(local - tensor) <= 0.1 * tensor


def test_shipped_language_models_pass_the_audit_and_the_shared_state_one_fails_it():
    from analysis.measures.causality import audit_checkpoint

    for name in ("tensor", "base", "local", SHARED_STATE):
        directory = ROOT / "checkpoints" / f"language_modelling-{name}"
        result = audit_checkpoint(load_checkpoint(directory))
        recorded = json.loads((directory / "metrics.json").read_text())["audit"]
        assert result["verdict"] == recorded["verdict"] == ("leaks" if name == SHARED_STATE else "causal")
        assert result["max_change"] == pytest.approx(recorded["max_change"], abs=1e-6)
