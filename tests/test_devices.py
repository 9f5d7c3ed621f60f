"""Devices and precision on the CPU: every request is resolved or refused in one line, torchrun ranks map to their
own GPU (faked here: no CUDA on the test machine), and bf16 mixed precision really runs in bfloat16 where autocast
puts it while the metrics stay those of float32 within rounding. The CUDA runs themselves: tests/test_cuda.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from test_training import tiny_config

from tensor_memory import load_checkpoint
from tensor_memory.accelerator import (
    DeviceError,
    autocast,
    check_device_memory,
    check_precision,
    grad_scaler,
    rank_device,
    resolve_device,
)
from tensor_memory.tasks import make_task
from tensor_memory.training import evaluate, loop, resolve, train
from tensor_memory.training.distributed import init_distributed

ROOT = Path(__file__).resolve().parents[1]
OCCLUSION = ROOT / "checkpoints" / "occlusion-tensor"


@pytest.fixture
def two_gpus(monkeypatch):
    """A machine that says it has two CUDA GPUs (nothing is allocated on them in these tests)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def test_auto_is_the_cpu_here_and_every_cuda_request_is_refused_with_what_to_do():
    assert not torch.cuda.is_available()
    assert resolve_device("auto") == resolve_device(None) == resolve_device(" CPU ") == torch.device("cpu")
    for spec in ("cuda", "cuda:0", "cuda:3"):
        with pytest.raises(DeviceError, match=r"no CUDA GPU .* use --device cpu or auto"):
            resolve_device(spec)
    for spec in ("gpu", "mps", "cpu:1", "cuda:x", "cuda:-1", ""):
        with pytest.raises(DeviceError, match="not a device; give auto, cpu, cuda or cuda:N"):
            resolve_device(spec)


def test_with_two_gpus_auto_takes_one_and_an_index_past_the_last_is_refused(two_gpus):
    assert resolve_device("auto") == resolve_device("cuda") == torch.device("cuda", 0)
    assert resolve_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(DeviceError, match=r"has 2 CUDA GPUs \(cuda:0 to cuda:1\); pick one of those"):
        resolve_device("cuda:2")


def test_each_torchrun_rank_takes_the_gpu_of_its_local_rank_and_cpu_ranks_stay_on_the_cpu(two_gpus, monkeypatch):
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert rank_device("auto") == rank_device("cuda") == torch.device("cuda", 1)
    assert rank_device("cpu") == torch.device("cpu")
    monkeypatch.setenv("LOCAL_RANK", "2")  # more ranks on this node than GPUs: said, not a crash in NCCL
    with pytest.raises(DeviceError, match="has 2 CUDA GPUs"):
        rank_device("auto")
    monkeypatch.delenv("LOCAL_RANK")
    assert rank_device("auto") == torch.device("cuda", 0)


@pytest.mark.parametrize("device, backend", [("cpu", "gloo"), ("cuda:1", "nccl")])
def test_the_process_group_follows_the_device_not_whether_cuda_exists(two_gpus, monkeypatch, device, backend):
    """Before, NCCL was chosen whenever CUDA was present, even for ranks whose model stayed on the CPU."""
    chosen, bound = [], []
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(dist, "init_process_group", lambda name: chosen.append(name))
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: bound.append(d))
    ranks = init_distributed(torch.device(device))
    assert (ranks.rank, ranks.size) == (1, 2)
    assert chosen == [backend]
    assert bound == ([torch.device(device)] if backend == "nccl" else [])


def test_a_gpu_without_room_for_the_batch_is_refused_before_anything_is_allocated():
    gib = 2**30

    def free(device):
        return 3 * gib

    check_device_memory(2 * gib, torch.device("cuda", 0), "the training config", free)
    with pytest.raises(DeviceError, match=r"needs about 5.00 GiB on cuda:1, which has 3.00 GiB free; lower the batch"):
        check_device_memory(5 * gib, torch.device("cuda", 1), "the training config", free)
    check_device_memory(10**15, torch.device("cpu"), "x", free)  # the CPU: the budget check's business


def test_training_asks_the_gpu_for_room_before_building_the_model(tmp_path, two_gpus, monkeypatch):
    asked = []

    def full_gpu(device):
        asked.append(device)
        return 1024

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (full_gpu(device), 0))
    built = []
    monkeypatch.setattr(loop, "TaskModel", lambda *args: built.append(args))
    with pytest.raises(DeviceError, match="needs about .* GiB on cuda:1, which has 0.00 GiB free"):
        train(tiny_config(), tmp_path / "run", progress=False, device="cuda:1")
    assert asked == [torch.device("cuda", 1)] and not built and not (tmp_path / "run").exists()


def test_precision_checks_and_what_autocast_turns_on():
    cpu = torch.device("cpu")
    assert check_precision("bf16", cpu) == "bf16"
    with pytest.raises(DeviceError, match="fp16: float16 mixed precision is for CUDA GPUs .* use --precision bf16"):
        check_precision("fp16", cpu)
    with pytest.raises(DeviceError, match="not a precision"):
        check_precision("fp8", cpu)
    with autocast("fp32", cpu):
        assert not torch.is_autocast_enabled("cpu")
    with autocast("bf16", cpu):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
        assert torch.nn.Linear(4, 4)(torch.randn(2, 4)).dtype == torch.bfloat16
    assert grad_scaler("bf16", cpu) is None and grad_scaler("fp32", cpu) is None


def test_evaluate_on_a_named_device_equals_where_the_model_is_and_bf16_stays_within_rounding():
    ckpt = load_checkpoint(OCCLUSION, device="auto")
    same = evaluate(ckpt.model, ckpt.task, seed=3, batches=2, batch_size=32, progress=False)
    named = evaluate(ckpt.model, ckpt.task, seed=3, batches=2, batch_size=32, progress=False, device="cpu")
    low = evaluate(ckpt.model, ckpt.task, seed=3, batches=2, batch_size=32, progress=False, precision="bf16")
    assert named == same
    assert low["accuracy"] == pytest.approx(same["accuracy"], abs=0.01)
    assert low["occluded_accuracy"] == pytest.approx(same["occluded_accuracy"], abs=0.03)
    with pytest.raises(DeviceError, match="no CUDA GPU"):
        evaluate(ckpt.model, ckpt.task, batches=1, batch_size=2, device="cuda")


def test_bf16_training_runs_the_products_in_bfloat16_and_records_its_precision(tmp_path):
    config = tiny_config(steps=4, precision="bf16")
    task, backbone, cfg = resolve(config)
    run = loop._set_up(config, tmp_path / "run", False, False, "cpu")
    seen = []
    run.model.head.register_forward_hook(lambda module, inputs, out: seen.append(out.dtype))
    batch = run.samples.draw("train", 4, 0, 0)
    loss = loop._backward(run, run.model, batch, step=0)
    assert seen == [torch.bfloat16] and loss.dtype == torch.float32 and torch.isfinite(loss)
    assert all(p.grad.dtype == torch.float32 for p in run.model.parameters() if p.grad is not None)

    train(config, tmp_path / "bf16", progress=False, device="cpu")
    train(tiny_config(steps=4), tmp_path / "fp32", progress=False, device="cpu")
    recorded = json.loads((tmp_path / "bf16" / "config.json").read_text())["training"]
    assert recorded["precision"] == "bf16"
    a, b = (load_checkpoint(tmp_path / name).model.head.weight for name in ("bf16", "fp32"))
    assert not torch.equal(a, b)  # bf16 rounding changed the run ...
    torch.testing.assert_close(a, b, atol=0.02, rtol=0)  # ... and only by rounding


def test_a_precision_the_config_does_not_know_is_refused():
    with pytest.raises(ValueError, match="TrainConfig.precision must be one of fp32, bf16, fp16"):
        resolve(tiny_config(precision="half"))


@pytest.mark.parametrize(
    "command",
    [
        ["train", "--task", "no_harm", "--backbone", "tensor", "--steps", "2", "--device", "cuda"],
        ["train", "--task", "no_harm", "--backbone", "tensor", "--steps", "2", "--precision", "fp16"],
        ["eval", "--checkpoint", str(OCCLUSION), "--device", "cuda:1"],
        ["eval", "--checkpoint", str(OCCLUSION), "--precision", "fp16"],
        ["trace", "--checkpoint", str(OCCLUSION), "--device", "cuda"],
        ["audit", "--checkpoint", str(OCCLUSION), "--device", "gpu"],
        ["app", "--device", "cuda"],
    ],
)
def test_every_command_refuses_a_device_it_cannot_have_in_one_line_and_writes_nothing(tmp_path, command):
    out = tmp_path / "out"
    extra = ["--out", str(out)] if command[0] in ("train", "trace") else []
    done = subprocess.run(
        [sys.executable, "-m", "tensor_memory_cli", *command, *extra],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and ("--device" in lines[0] or "--precision" in lines[0]), done.stderr
    assert "Traceback" not in done.stderr and not out.exists()


def test_a_batch_moves_to_a_device_whole_but_its_viewer_meta():
    batch = make_task("occlusion", {}).draw("eval", 2, 0, 0)
    moved = batch.to(torch.device("cpu"))
    for name in batch.inputs:
        assert torch.equal(moved.inputs[name], batch.inputs[name])
    assert torch.equal(moved.targets, batch.targets) and torch.equal(moved.mask, batch.mask)
    assert moved.meta is batch.meta


def test_the_gpu_benchmark_runs_every_part_at_toy_sizes_on_the_cpu(tmp_path):
    """benchmarks/gpu.py is run once on a lent GPU: here it is checked to run through and write its table."""
    out = tmp_path / "gpu.md"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "gpu.py"), "--device", "cpu", "--quick", "--out", str(out)],
        check=True,
        capture_output=True,
        timeout=300,
        cwd=ROOT,
    )
    text = out.read_text()
    for title in (
        "Memory layer forward+backward",
        "Training step at the shipped language config",
        "bf16 autocast",
        "Streamed through the shipped language model",
        "evaluated on both",
    ):
        assert title in text
    assert "| toy 4³ |" in text and "| bf16 |" in text and "| 8,192 |" in text


def test_an_fp16_runs_loss_scale_is_resumed_as_it_stood_and_a_tampered_one_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    from tensor_memory.training.resume import load_resume, save_resume

    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0, growth_interval=7)
    scaler.scale(torch.ones(()))  # a step's scaling, then an update that sets the scale as an overflow would
    scaler.update(512.0)
    path = tmp_path / "resume.safetensors"
    save_resume(path, model, optimizer, 0, {"training": {"steps": 5}}, scaler)
    fresh = torch.amp.GradScaler("cpu", growth_interval=7)
    load_resume(path, model, optimizer, {"training": {"steps": 5}}, fresh)
    assert fresh.state_dict() == scaler.state_dict() and fresh.get_scale() == 512.0

    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:
        metadata = f.metadata()
    metadata["grad_scaler"] = json.dumps({**scaler.state_dict(), "scale": -1.0})
    save_file(load_file(path), path, metadata=metadata)
    with pytest.raises(ValueError, match=r"loss scaler state is out of range \(scale -1.0"):
        load_resume(path, model, optimizer, {"training": {"steps": 5}}, torch.amp.GradScaler("cpu"))
