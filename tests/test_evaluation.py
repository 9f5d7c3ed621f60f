"""Evaluation: seeded, exact metrics; gate drift; checkpoint evaluation and sweeps; the ``eval`` command."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from tensor_memory.backbone import BackboneConfig
from tensor_memory.cli import add_eval_parser
from tensor_memory.memory import MemoryConfig, TensorMemory
from tensor_memory.storage.checkpoint import load_checkpoint, save_checkpoint
from tensor_memory.tasks import TaskModel, derive_seed, make_task
from tensor_memory.tasks.no_harm import NoHarm
from tensor_memory.training.evaluation import evaluate, evaluate_checkpoint, sweep, sweep_points

PARAMS = {"length": 6, "modulus": 16}


def tiny(kind: str = "tensor", seed: int = 0) -> tuple[TaskModel, dict]:
    memory = MemoryConfig(token_dim=8, channels=2, grid=(2, 2, 2), gate_init=-3.0) if kind == "tensor" else None
    backbone = BackboneConfig(kind=kind, dim=8, layers=2, heads=2, mlp_ratio=1, memory=memory)
    torch.manual_seed(seed)
    model = TaskModel(make_task("no_harm", PARAMS), backbone)
    config = {
        "schema_version": 2,
        "task": {"name": "no_harm", "params": dict(PARAMS)},
        "model": backbone.to_dict(),
        "training": {},
    }
    return model, config


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    model, config = tiny()
    return save_checkpoint(tmp_path / "ckpt", model, config)


class Oracle(nn.Module):
    """Predicts the next counter value (shifted by ``offset``: 0 is perfect, 1 always wrong)."""

    def __init__(self, modulus: int, offset: int = 0) -> None:
        super().__init__()
        self.modulus, self.offset = modulus, offset

    def forward(self, inputs, state=None):
        nxt = (inputs["tokens"] + 1 + self.offset) % self.modulus
        return nn.functional.one_hot(nxt, self.modulus).float(), None


class Recording(NoHarm):
    """no_harm that remembers the seeds and batches it was asked for."""

    def __init__(self, config) -> None:
        super().__init__(config)
        self.seeds, self.batches = [], []

    def sample(self, batch_size, seed):
        batch = super().sample(batch_size, seed)
        self.seeds.append(seed)
        self.batches.append(batch)
        return batch


def test_perfect_and_wrong_models() -> None:
    task = make_task("no_harm", PARAMS)
    assert evaluate(Oracle(16), task, batches=2, batch_size=4) == {"accuracy": 1.0, "chance": 1 / 16}
    assert evaluate(Oracle(16, offset=1), task, batches=2, batch_size=4)["accuracy"] == 0.0


def test_seeds_determinism_and_direct_computation() -> None:
    model, _ = tiny()
    task = Recording(NoHarm.Config(**PARAMS))
    model.train()
    first = evaluate(model, task, seed=3, batches=3, batch_size=5)
    assert model.training  # mode restored
    assert task.seeds == [derive_seed("eval", 3, i) for i in range(3)]
    batches = list(task.batches)
    assert evaluate(model, task, seed=3, batches=3, batch_size=5) == first
    evaluate(model, task, seed=4, batches=3, batch_size=5)
    assert not torch.equal(task.batches[0].inputs["tokens"], task.batches[6].inputs["tokens"])
    # the metric is the exact fraction over all scored positions of the same batches
    correct = total = 0
    model.eval()
    with torch.no_grad():
        for batch in batches:
            hit = (model(batch.inputs)[0].argmax(-1) == batch.targets) & batch.mask
            correct, total = correct + int(hit.sum()), total + int(batch.mask.sum())
    assert total == 3 * 5 * PARAMS["length"]
    assert first["accuracy"] == correct / total
    assert first["chance"] == 1 / 16


def test_unscored_metric_is_none() -> None:
    class Sparse(NoHarm):
        def counts(self, logits, batch):
            return {**super().counts(logits, batch), "occluded_accuracy": (0.0, 0.0)}

    metrics = evaluate(Oracle(16), Sparse(NoHarm.Config(**PARAMS)), batches=1, batch_size=2)
    assert metrics["occluded_accuracy"] is None and metrics["accuracy"] == 1.0


def test_gate_drift_matches_hand_computation() -> None:
    model, _ = tiny()
    memories = [m for m in model.modules() if isinstance(m, TensorMemory)]
    assert len(memories) == 2
    task = make_task("no_harm", PARAMS)
    assert evaluate(model, task, batches=1, batch_size=2)["gate_drift"] == 0.0
    sigmoid = lambda v: 1 / (1 + math.exp(-v))  # noqa: E731
    with torch.no_grad():
        memories[0].gate.fill_(-2.5)  # σ up by ~0.03
        memories[1].gate.fill_(-3.5)  # σ down by ~0.018: smaller in size
    drift = evaluate(model, task, batches=1, batch_size=2)["gate_drift"]
    assert drift == pytest.approx(sigmoid(-2.5) - sigmoid(-3.0), abs=1e-7) and drift > 0
    with torch.no_grad():
        memories[1].gate.fill_(-6.0)  # now the larger move, downwards: the sign is kept
    drift = evaluate(model, task, batches=1, batch_size=2)["gate_drift"]
    assert drift == pytest.approx(sigmoid(-6.0) - sigmoid(-3.0), abs=1e-7) and drift < 0
    base, _ = tiny("base")
    assert "gate_drift" not in evaluate(base, task, batches=1, batch_size=2)


def test_evaluate_checkpoint_and_overrides(saved: Path) -> None:
    ckpt = load_checkpoint(saved)
    result = evaluate_checkpoint(ckpt, seed=1, batches=2, batch_size=3)
    assert (result["task"], result["backbone"], result["seed"], result["batches"]) == ("no_harm", "tensor", 1, 2)
    assert result["metrics"] == evaluate(ckpt.model, ckpt.task, seed=1, batches=2, batch_size=3)
    longer = evaluate_checkpoint(ckpt, seed=1, batches=2, batch_size=3, task_params={"length": 9})
    assert longer["params"] == {"length": 9, "modulus": 16}
    with pytest.raises(ValueError, match="change the shapes"):
        evaluate_checkpoint(ckpt, batches=1, batch_size=2, task_params={"modulus": 8})
    with pytest.raises(ValueError, match="length"):
        evaluate_checkpoint(ckpt, batches=1, batch_size=2, task_params={"length": 0})
    with pytest.raises(ValueError, match="batches"):
        evaluate(ckpt.model, ckpt.task, batches=0)


def test_sweep_includes_extra_sweeps(saved: Path, monkeypatch) -> None:
    monkeypatch.setattr(NoHarm, "extra_sweeps", {"length": [4, 32]}, raising=False)
    ckpt = load_checkpoint(saved)
    assert [p["length"] for p in sweep_points(ckpt.task)] == [32, 4]  # 32 only once
    points = sweep(ckpt, seed=0, batches=1, batch_size=2)
    assert [p["params"]["length"] for p in points] == [32, 4]
    assert all(set(p["metrics"]) == {"accuracy", "chance", "gate_drift"} for p in points)


# ---------------------------------------------------------------------------------------
# The eval command
# ---------------------------------------------------------------------------------------


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="tensor-memory")
    add_eval_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_json_and_table(saved: Path, capsys) -> None:
    code, out, _ = run_cli(
        ["eval", "--checkpoint", str(saved), "--batches", "2", "--batch-size", "3", "--json"], capsys
    )
    result = json.loads(out)
    assert code == 0 and set(result) == {"task", "backbone", "metrics"}
    assert result["task"] == "no_harm" and result["backbone"] == "tensor"
    assert result["metrics"] == evaluate_checkpoint(load_checkpoint(saved), 0, 2, 3)["metrics"]
    code, out, _ = run_cli(
        ["eval", "--checkpoint", str(saved), "--batches", "1", "--batch-size", "2", "--json", "--sweep"], capsys
    )
    result = json.loads(out)
    assert code == 0 and set(result) == {"task", "backbone", "sweep"}
    assert set(result["sweep"][0]) == {"params", "metrics"}
    code, out, _ = run_cli(["eval", "--checkpoint", str(saved), "--batches", "1", "--batch-size", "2"], capsys)
    assert code == 0 and "accuracy" in out and "gate_drift" in out and "no_harm" in out


def test_cli_corrupt_checkpoint(saved: Path, capsys) -> None:
    (saved / "model.safetensors").write_bytes(b"\x80\x04garbage")
    code, out, err = run_cli(["eval", "--checkpoint", str(saved), "--json"], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("tensor-memory eval: error: ")
    assert "model.safetensors" in err and "pickle" in err and "Traceback" not in err
    code, _, err = run_cli(["eval", "--checkpoint", str(saved.parent / "missing")], capsys)
    assert code == 2 and "no such checkpoint directory" in err and err.count("\n") == 1
