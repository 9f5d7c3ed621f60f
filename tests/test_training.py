"""The trainer: schedule, configuration, logs, exact resumption and data-parallel equivalence."""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tensor_memory.backbone import state_budget
from tensor_memory.training import TrainConfig, apply_overrides, load_run_config, loop, resolve, train
from tensor_memory.training.loop import learning_rate
from tensor_memory_cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]


def tiny_config(kind: str = "tensor", steps: int = 12, **training_fields) -> dict:
    model = {"kind": kind, "dim": 16, "layers": 1, "heads": 2}
    if kind == "tensor":
        model["memory"] = {"channels": 2, "grid": [2, 3, 2]}
    return {
        "task": {"name": "no_harm", "params": {"length": 8}},
        "model": model,
        "training": {
            "steps": steps,
            "batch_size": 4,
            "lr": 3e-3,
            "warmup_steps": 2,
            "eval_every": 4,
            "eval_batches": 1,
            "log_every": 1,
            **training_fields,
        },
    }


def kill_run_at(monkeypatch, config: dict, out: Path, call: int, resume: bool = False) -> None:
    """Train (or resume) until the ``call``-th loss computation, where the process 'dies' (KeyboardInterrupt)."""
    original, calls = loop.loss_on, []

    def dying_loss(model, task, batch, state=None):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return original(model, task, batch, state)

    monkeypatch.setattr(loop, "loss_on", dying_loss)
    with pytest.raises(KeyboardInterrupt):
        train(config, out, resume=resume, progress=False)
    monkeypatch.setattr(loop, "loss_on", original)


def test_learning_rate_warms_up_then_decays_by_cosine():
    cfg = TrainConfig(steps=110, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert [learning_rate(s, cfg) for s in (0, 4, 9)] == pytest.approx([0.1, 0.5, 1.0])
    assert learning_rate(10, cfg) == pytest.approx(1.0)
    assert learning_rate(60, cfg) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert learning_rate(110, cfg) == pytest.approx(0.1)


def test_run_config_merges_backbone_section_and_overrides_are_type_checked(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text(
        '[task]\nname = "no_harm"\nparams = { length = 8 }\n[model]\ndim = 32\nheads = 4\n'
        "[backbone.local]\nwindow = 5\n[backbone.tensor]\nmemory = { channels = 4 }\n"
        '[backbone.tensor.training]\nfrozen = ["coord_head"]\n[training]\nsteps = 7\n'
    )
    local = load_run_config(path, "local")
    assert local["model"] == {"dim": 32, "heads": 4, "window": 5, "kind": "local"}
    assert local["training"] == {"steps": 7}  # a backbone's own training settings stay its own
    assert load_run_config(path, "tensor")["training"] == {"steps": 7, "frozen": ["coord_head"]}
    tensor = apply_overrides(
        load_run_config(path, "tensor"), ["training.lr=0.01", "training.steps=9", "model.memory.grid=[3, 3, 3]"]
    )
    task, backbone, cfg = resolve(tensor)
    assert cfg.steps == 9 and cfg.lr == 0.01 and isinstance(cfg.lr, float)
    assert backbone.memory.grid == (3, 3, 3) and backbone.memory.channels == 4
    assert backbone.memory.chunk_size == task.chunk_size and backbone.memory.token_dim == 32
    with pytest.raises(ValueError, match="expected a int"):
        apply_overrides(local, ["training.steps=many"])
    with pytest.raises(ValueError, match="expected a float"):
        apply_overrides(local, ["training.lr=true"])
    with pytest.raises(ValueError, match="section.field=value"):
        apply_overrides(local, ["steps=3"])
    path.write_text("[task]\nname = 'no_harm'\n[surprise]\n")
    with pytest.raises(ValueError, match="unknown section"):
        load_run_config(path, "base")


USER_DATA = {"action_recognition": {"path": "/data/UCF-101"}}  # configs whose data sit at a path of the user's


def shipped(path: Path, kind: str):
    """(task, backbone, training) of configs/<task>.toml for ``kind``, with a data path where the task needs one."""
    config = load_run_config(path, kind)
    config["task"]["params"].update(USER_DATA.get(path.stem, {}))
    return resolve(config)


def test_shipped_configs_load_for_every_backbone():
    for path in sorted((ROOT / "configs").glob("*.toml")):
        for kind in ("tensor", "base", "local"):
            task, backbone, _ = shipped(path, kind)
            assert task.name == path.stem and backbone.kind == kind
            if not backbone.causal:  # masked patches: whole images, nothing streams
                continue
            budget = state_budget(backbone)
            if kind == "base":
                assert budget["total_state_numbers"] is None  # a KV cache that grows
            else:
                assert budget["total_state_numbers"] > 0


def test_equal_state_budget_of_shipped_local_configs():
    for path in sorted((ROOT / "configs").glob("*.toml")):
        tensor, local = (shipped(path, kind)[1] for kind in ("tensor", "local"))
        if not tensor.causal:  # masked patches: a bidirectional model reads each image whole and carries no state
            continue
        tensor, local = (state_budget(b)["total_state_numbers"] for b in (tensor, local))
        assert abs(local - tensor) <= 0.1 * tensor, path.name


def test_training_writes_a_loadable_checkpoint_and_log(tmp_path):
    from tensor_memory import load_checkpoint

    metrics = train(tiny_config(steps=8), tmp_path, progress=False)
    assert "accuracy" in metrics
    log = [json.loads(line) for line in (tmp_path / "train_log.jsonl").read_text().splitlines()]
    steps = [entry["step"] for entry in log if "loss" in entry]
    assert steps == list(range(1, 9))
    assert any("val_accuracy" in entry for entry in log)
    assert not (tmp_path / loop.RESUME_FILE).exists()  # finished runs keep only the checkpoint
    ckpt = load_checkpoint(tmp_path)
    assert ckpt.config["training"]["steps"] == 8 and ckpt.config["model"]["kind"] == "tensor"


def test_loss_falls_on_the_counter_task(tmp_path):
    train(tiny_config(kind="base", steps=60, lr=1e-2), tmp_path, progress=False)
    losses = [
        json.loads(line)["loss"] for line in (tmp_path / "train_log.jsonl").read_text().splitlines() if "loss" in line
    ]
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5


def test_resume_after_a_kill_gives_exactly_the_uninterrupted_result(tmp_path, monkeypatch):
    config = tiny_config(steps=12)
    straight = tmp_path / "straight"
    train(config, straight, progress=False)

    killed = tmp_path / "killed"
    kill_run_at(monkeypatch, config, killed, call=10)  # dies during step 10, after the step-8 checkpoint
    assert (killed / loop.RESUME_FILE).exists() and not (killed / "model.safetensors").exists()
    train(config, killed, resume=True, progress=False)

    a, b = load_file(straight / "model.safetensors"), load_file(killed / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    log_a = [json.loads(x) for x in (straight / "train_log.jsonl").read_text().splitlines()]
    log_b = [json.loads(x) for x in (killed / "train_log.jsonl").read_text().splitlines()]
    strip = lambda log: [{k: v for k, v in e.items() if k != "tokens_per_s"} for e in log]  # noqa: E731
    assert strip(log_a) == strip(log_b)  # nothing lost, nothing repeated
    with pytest.raises(ValueError, match="nothing to resume"):
        train(config, killed, resume=True, progress=False)


def test_resume_refuses_a_different_configuration(tmp_path, monkeypatch):
    config = tiny_config(steps=8)
    kill_run_at(monkeypatch, config, tmp_path, call=6)
    config["training"]["lr"] = 1e-3
    with pytest.raises(ValueError, match="different configuration"):
        train(config, tmp_path, resume=True, progress=False)


def test_cli_train_help_and_bad_override(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli_main(["train", "--help"])
    help_text = capsys.readouterr().out
    for option in ("--task", "--backbone", "--config", "--steps", "--seed", "--out", "--resume", "--set"):
        assert option in help_text
    code = cli_main(
        [
            "train",
            "--task",
            "no_harm",
            "--backbone",
            "base",
            "--out",
            str(tmp_path),
            "--set",
            "training.steps=lots",
            "--no-progress",
        ]
    )
    assert code == 2
    assert "expected a int" in capsys.readouterr().err


@pytest.mark.skipif(
    shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None,
    reason="torchrun not installed beside this Python",
)
def test_two_process_ddp_equals_one_process(tmp_path):
    config = tiny_config(kind="tensor", steps=3, eval_every=100)
    config_path = tmp_path / "run.toml"
    model = config["model"]
    config_path.write_text(
        '[task]\nname = "no_harm"\nparams = { length = 8 }\n'
        f"[model]\ndim = {model['dim']}\nlayers = {model['layers']}\nheads = {model['heads']}\n"
        "[backbone.tensor]\nmemory = { channels = 2, grid = [2, 3, 2] }\n"
        "[training]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in config["training"].items())
    )
    args = ["train", "--task", "no_harm", "--backbone", "tensor", "--config", str(config_path), "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    torchrun = str(Path(sys.executable).parent / "torchrun")
    subprocess.run(
        [
            torchrun,
            "--nproc_per_node",
            "2",
            "--master_port",
            "29517",
            "-m",
            "tensor_memory_cli",
            *args,
            "--out",
            str(tmp_path / "ddp"),
        ],
        check=True,
        env=env,
        cwd=ROOT,
        timeout=180,
        capture_output=True,
    )
    subprocess.run(
        [sys.executable, "-m", "tensor_memory_cli", *args, "--out", str(tmp_path / "single")],
        check=True,
        env=env,
        cwd=ROOT,
        timeout=180,
        capture_output=True,
    )
    a, b = load_file(tmp_path / "ddp" / "model.safetensors"), load_file(tmp_path / "single" / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6, msg=key)
    # Training moved the weights, so this does not compare two copies of the initialisation.
    _, backbone, _ = resolve(load_run_config(config_path, "tensor"))
    from tensor_memory.tasks import TaskModel, make_task

    torch.manual_seed(0)
    initial = TaskModel(make_task("no_harm", {"length": 8}), backbone).state_dict()
    assert not torch.allclose(a["head.weight"], initial["head.weight"])


def test_frozen_parameters_keep_their_initial_values(tmp_path):
    from tensor_memory import load_checkpoint
    from tensor_memory.tasks import TaskModel

    config = tiny_config(steps=6, frozen=["coord_head"])
    train(config, tmp_path / "run", progress=False)
    trained = load_checkpoint(tmp_path / "run").model.backbone.blocks[0].memory
    task, backbone, cfg = resolve(config)
    torch.manual_seed(cfg.seed)  # the run's initial weights
    initial = TaskModel(task, backbone).backbone.blocks[0].memory
    assert torch.equal(trained.coord_head.weight, initial.coord_head.weight)
    assert torch.equal(trained.coord_head.bias, initial.coord_head.bias)
    assert not torch.equal(trained.content.weight, initial.content.weight)  # everything else trains
    with pytest.raises(ValueError, match="no parameter name contains 'coord_haed'"):
        train(tiny_config(steps=2, frozen=["coord_haed"]), tmp_path / "typo", progress=False)
