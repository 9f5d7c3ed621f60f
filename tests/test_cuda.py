"""The same work on a CUDA GPU as on the CPU: checkpoints, metrics, traces, training steps, mixed precision and
torchrun over NCCL. Each test skips, with the reason, on a machine without CUDA (the development machine and CI);
benchmarks/gpu.py runs the timed side of it on a lent GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_training import tiny_config

from tensor_memory import MemoryConfig, TensorMemory, load_checkpoint
from tensor_memory.training import evaluate, train

ROOT = Path(__file__).resolve().parents[1]
OCCLUSION = ROOT / "checkpoints" / "occlusion-tensor"
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False on this machine)"
)


def test_metrics_on_the_gpu_are_the_cpus():
    cpu, gpu = load_checkpoint(OCCLUSION, device="cpu"), load_checkpoint(OCCLUSION, device="cuda")
    assert next(gpu.model.parameters()).is_cuda
    a = evaluate(cpu.model, cpu.task, seed=1, batches=2, batch_size=32, progress=False)
    b = evaluate(gpu.model, gpu.task, seed=1, batches=2, batch_size=32, progress=False)
    for metric, value in a.items():
        assert b[metric] == pytest.approx(value, abs=0.005), metric


def test_a_trace_captured_on_the_gpu_is_the_cpus():
    from analysis import capture

    a, b = capture(OCCLUSION, seed=2, device="cpu"), capture(OCCLUSION, seed=2, device="cuda")
    assert a.num_chunks == b.num_chunks and a.layer_names == b.layer_names
    for name in a.layer_names:
        for field in ("mu_read", "mu_write", "sigma", "read"):
            torch.testing.assert_close(
                torch.as_tensor(getattr(b.layers[name], field)),
                torch.as_tensor(getattr(a.layers[name], field)),
                atol=1e-4,
                rtol=1e-4,
            )
        h_gpu, h_cpu = (torch.as_tensor(t.layers[name].h.astype("float32")) for t in (b, a))
        torch.testing.assert_close(h_gpu, h_cpu, atol=2e-3, rtol=0)  # float16 storage: a step of rounding


def test_the_layer_on_the_gpu_computes_what_it_does_on_the_cpu():
    torch.manual_seed(0)
    layer = TensorMemory(MemoryConfig(token_dim=32, channels=8, grid=(6, 5, 4), chunk_size=2))
    x = torch.randn(4, 24, 32)
    y_cpu, state_cpu = layer(x)
    y_cpu.square().sum().backward()
    grads = {n: p.grad.clone() for n, p in layer.named_parameters()}
    layer.zero_grad()
    layer.cuda()
    y_gpu, state_gpu = layer(x.cuda())
    y_gpu.square().sum().backward()
    torch.testing.assert_close(y_gpu.cpu(), y_cpu, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(state_gpu.h.cpu(), state_cpu.h, atol=1e-4, rtol=1e-4)
    for name, p in layer.named_parameters():
        torch.testing.assert_close(p.grad.cpu(), grads[name], atol=1e-3, rtol=1e-3, msg=name)


@pytest.mark.parametrize("precision", ["fp32", "bf16", "fp16"])
def test_training_on_the_gpu_in_each_precision(tmp_path, precision):
    metrics = train(tiny_config(steps=6, precision=precision), tmp_path / precision, progress=False, device="cuda")
    assert metrics["accuracy"] is not None
    weights = load_file(tmp_path / precision / "model.safetensors")
    assert all(torch.isfinite(w).all() for w in weights.values())


def test_fp32_training_on_the_gpu_follows_the_cpu_run(tmp_path):
    train(tiny_config(steps=4), tmp_path / "cpu", progress=False, device="cpu")
    train(tiny_config(steps=4), tmp_path / "gpu", progress=False, device="cuda")
    a, b = load_file(tmp_path / "cpu" / "model.safetensors"), load_file(tmp_path / "gpu" / "model.safetensors")
    for key in a:
        torch.testing.assert_close(b[key], a[key], atol=1e-4, rtol=1e-4, msg=key)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
@pytest.mark.skipif(
    shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None,
    reason="torchrun not installed beside this Python",
)
def test_torchrun_puts_each_rank_on_its_own_gpu_over_nccl(tmp_path):
    config = ROOT / "configs" / "occlusion.toml"
    args = [
        "train",
        "--task",
        "occlusion",
        "--backbone",
        "tensor",
        "--config",
        str(config),
        "--steps",
        "3",
        "--set",
        "training.batch_size=8",
        "--device",
        "cuda",
        "--no-progress",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    torchrun = str(Path(sys.executable).parent / "torchrun")
    done = subprocess.run(
        [
            torchrun,
            "--nproc_per_node",
            "2",
            "--master_port",
            "29519",
            "-m",
            "tensor_memory_cli",
            *args,
            "--out",
            str(tmp_path / "ddp"),
        ],
        env=env,
        cwd=ROOT,
        timeout=300,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "ddp" / "model.safetensors").exists()
