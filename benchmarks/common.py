"""What every benchmark script shares: alternating timings, a machine line, plain tables."""

from __future__ import annotations

import argparse
import datetime
import importlib
import io
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch


def layer_arguments(description: str, repeats: int) -> argparse.ArgumentParser:
    """A parser with one memory layer's size (d=64, C=16, 6³, B=32, N=24 by default), threads and repeats."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--batch", type=int, default=32, help="B (default 32)")
    p.add_argument("--tokens", type=int, default=24, help="N (default 24)")
    p.add_argument("--dim", type=int, default=64, help="d (default 64)")
    p.add_argument("--channels", type=int, default=16, help="C (default 16)")
    p.add_argument("--grid", type=int, default=6, help="voxels per axis (default 6)")
    p.add_argument("--chunk-size", type=int, default=1, help="tokens per chunk (default 1)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--repeats", type=int, default=repeats, help=f"timed runs of each (default {repeats})")
    return p


def machine(threads: int) -> str:
    """One line naming what the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    return (
        f"{datetime.date.today().isoformat()}, {os.cpu_count()} CPUs ({cpu}), {threads} torch threads, "
        f"torch {torch.__version__}, Python {platform.python_version()}"
    )


ROOT = Path(__file__).resolve().parents[1]


def package_at(commit: str, folder: Path, package: str) -> ModuleType:
    """The memory layer as it was at ``commit``: the whole ``tensor_memory`` package of that commit, taken from git
    history into ``folder`` as package ``package`` (put on ``sys.path``, beside today's), and its ``memory`` imported
    (a module in the flat package of early commits, a subpackage since: both hold TensorMemory and MemoryConfig)."""
    archive = subprocess.run(
        ["git", "archive", commit, "tensor_memory"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        tar.extractall(folder, filter="data")
    (folder / "tensor_memory").rename(folder / package)
    sys.path.insert(0, str(folder))
    return importlib.import_module(f"{package}.memory")


def alternate(runs: dict[str, Callable[[], object]], repeats: int, warmup: int = 1) -> dict[str, list[float]]:
    """Seconds per call of each run, timed in turn so drifts in the machine's speed hit all alike."""
    for run in runs.values():
        for _ in range(warmup):
            run()
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return times


def fwd_bwd(module: torch.nn.Module, run: Callable[[], torch.Tensor], weights) -> Callable[[], None]:
    """A training step to time: zero the gradients, run, back-propagate the weighted sum of the output."""

    def call() -> None:
        module.zero_grad(set_to_none=True)
        (run() * weights).sum().backward()

    return call


def median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1e3


def table(headers: list[str], rows: list[list[object]]) -> str:
    """A Markdown table (pastes into docs/performance.md); floats with one decimal unless formatted."""

    def cell(v: object) -> str:
        return f"{v:.1f}" if isinstance(v, float) else str(v)

    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)
