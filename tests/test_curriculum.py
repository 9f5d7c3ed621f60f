"""The curriculum over horizon (training.horizon_steps, horizon_from), off by default: short samples first,
grown linearly to the task's own length. Off, training draws the task itself; on, each step draws the length the
schedule says, and the scaffold and the loss see that step's task."""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from tensor_memory.tasks import make_task
from tensor_memory.training import TrainConfig, loop, train
from tensor_memory.training.curriculum import HorizonCurriculum, horizon_at


def map_config(steps: int = 6, **training_fields) -> dict:
    """A tiny map-building run with the address scaffold on (its true places depend on the sample's length)."""
    return {
        "task": {"name": "map_building", "params": {"observations": 8, "queries": 4}},
        "model": {
            "kind": "tensor",
            "dim": 16,
            "layers": 1,
            "heads": 2,
            "window": 4,
            "memory": {"channels": 2, "grid": [2, 4, 4]},
        },
        "training": {
            "steps": steps,
            "batch_size": 4,
            "lr": 3e-3,
            "warmup_steps": 1,
            "eval_every": steps,
            "eval_batches": 1,
            "log_every": 1,
            "address_scaffold_steps": 3,
            **training_fields,
        },
    }


def test_the_schedule_rises_linearly_from_the_start_to_the_tasks_own_length():
    assert [horizon_at(s, 4, 2, 10) for s in range(6)] == [2, 4, 6, 8, 10, 10]
    assert horizon_at(0, 0, 2, 10) == 10  # off: the task's own length from the first step
    assert horizon_at(1, 3, 4, 8) == 5  # 5.33, rounded


def test_the_curriculum_is_off_by_default_and_then_every_step_draws_the_task_itself():
    cfg = TrainConfig()
    assert cfg.horizon_steps == 0
    task = make_task("map_building", {})
    curriculum = HorizonCurriculum(task, cfg)
    assert all(curriculum.task_at(step) is task for step in (0, 1, 500))


def test_on_each_step_draws_the_scheduled_length_and_the_task_itself_once_it_ends():
    task = make_task("map_building", {"observations": 8, "queries": 4})
    curriculum = HorizonCurriculum(task, TrainConfig(horizon_steps=3, horizon_from=2))
    lengths = [curriculum.task_at(step).config.observations for step in range(5)]
    assert lengths == [2, 4, 6, 8, 8]
    assert curriculum.task_at(3) is task and curriculum.task_at(0) is curriculum.task_at(0)  # built once
    batch = curriculum.task_at(0).draw("train", 3, 0, 0)
    assert batch.targets.shape == (3, 2 + 4)  # two observations, then the four queries


def test_training_sees_the_short_samples_and_the_same_start_as_the_end_changes_nothing(tmp_path, monkeypatch):
    seen = []
    original = loop.loss_on

    def recording(model, task, batch, state=None):
        seen.append((task.config.observations, batch.targets.shape[1]))
        return original(model, task, batch, state)

    monkeypatch.setattr(loop, "loss_on", recording)
    train(map_config(horizon_steps=3, horizon_from=2), tmp_path / "grown", progress=False)
    # (the task's observations, the batch's tokens) of each of the six steps: the step's own task, so the scaffold's
    # places and the loss fit the batch
    assert seen == [(2, 6), (4, 8), (6, 10), (8, 12), (8, 12), (8, 12)]
    monkeypatch.setattr(loop, "loss_on", original)
    train(map_config(), tmp_path / "plain", progress=False)
    train(map_config(horizon_steps=3, horizon_from=8), tmp_path / "same", progress=False)
    weights = {name: load_file(tmp_path / name / "model.safetensors") for name in ("plain", "same", "grown")}
    assert all(torch.equal(weights["plain"][k], weights["same"][k]) for k in weights["plain"])
    assert not all(torch.equal(weights["plain"][k], weights["grown"][k]) for k in weights["plain"])


def test_a_curriculum_the_task_cannot_follow_is_refused_with_what_to_change():
    with pytest.raises(ValueError, match="no horizon to grow"):
        HorizonCurriculum(make_task("no_harm", {}), TrainConfig(horizon_steps=10))
    with pytest.raises(ValueError, match="between 1 and its own value, 32"):
        HorizonCurriculum(make_task("map_building", {}), TrainConfig(horizon_steps=10, horizon_from=40))
    with pytest.raises(ValueError, match="frames=2 is refused"):
        HorizonCurriculum(make_task("occlusion", {}), TrainConfig(horizon_steps=10, horizon_from=2))
    with pytest.raises(ValueError, match="horizon_from"):
        TrainConfig(horizon_steps=10, horizon_from=0)
