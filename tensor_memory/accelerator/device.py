"""The device a command runs on: ``auto`` (CUDA when present, else the CPU), ``cpu``, ``cuda`` or ``cuda:N``.

Every request is checked before anything is allocated, and a device that cannot serve it is refused in one line
that says what to pass instead (:class:`DeviceError`, a ``ValueError``: the commands print it without a traceback).
"""

from __future__ import annotations

import argparse
import os
import re
from collections.abc import Callable

import torch
from torch import nn

DEVICE_HELP = (
    "where to run: auto (a CUDA GPU when there is one, else the CPU), cpu, cuda (the current GPU) or "
    "cuda:N (GPU number N); default auto"
)
_FORM = re.compile(r"^(auto|cpu|cuda)(?::(\d+))?$")


class DeviceError(ValueError):
    """A device that does not exist here or cannot hold the work; the message says what to pass instead."""


def _cuda_count() -> int:
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def resolve_device(spec: str | torch.device | None = "auto") -> torch.device:
    """``spec`` (``auto``, ``cpu``, ``cuda``, ``cuda:N``, a torch.device or None for auto) → a torch.device that
    exists on this machine; a :class:`DeviceError` naming the devices there are otherwise."""
    text = "auto" if spec is None else str(spec).strip().lower()
    form = _FORM.match(text)
    if form is None or (form.group(2) is not None and form.group(1) != "cuda"):
        raise DeviceError(f"--device {spec}: not a device; give auto, cpu, cuda or cuda:N (N a GPU number)")
    kind, index = form.group(1), form.group(2)
    count = _cuda_count()
    if kind == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if count else torch.device("cpu")
    if kind == "cpu":
        return torch.device("cpu")
    if not count:
        raise DeviceError(
            f"--device {spec}: this machine has no CUDA GPU that PyTorch can use (torch "
            f"{torch.__version__}, torch.cuda.is_available() is False); use --device cpu or auto"
        )
    number = torch.cuda.current_device() if index is None else int(index)
    if number >= count:
        raise DeviceError(
            f"--device {spec}: this machine has {count} CUDA GPU{'s' if count > 1 else ''} "
            f"(cuda:0 to cuda:{count - 1}); pick one of those"
        )
    return torch.device("cuda", number)


def rank_device(spec: str | torch.device | None, local_rank: int | None = None) -> torch.device:
    """The device of one data-parallel rank: ``spec`` resolved, and under torchrun (LOCAL_RANK set) a CUDA request
    becomes ``cuda:LOCAL_RANK``, one GPU per process; a CPU stays the CPU."""
    device = resolve_device(spec)
    if local_rank is None:
        local_rank = int(os.environ["LOCAL_RANK"]) if "LOCAL_RANK" in os.environ else None
    if device.type != "cuda" or local_rank is None:
        return device
    return resolve_device(f"cuda:{local_rank}")


def distributed_backend(device: torch.device) -> str:
    """The process group for ranks on ``device``: NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device.type == "cuda" else "gloo"


def model_device(model: nn.Module) -> torch.device:
    """Where ``model``'s weights are (the CPU for a model without any)."""
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")


def _free_bytes(device: torch.device) -> int:
    return torch.cuda.mem_get_info(device)[0]


def check_device_memory(
    need: int, device: torch.device, where: str, free_bytes: Callable[[torch.device], int] = _free_bytes
) -> None:
    """Refuse, before allocating, work estimated at ``need`` bytes (``backbone/budget.py``) on a GPU with less free
    memory than that; the CPU is held to the project's memory budget where the estimate is made."""
    if device.type != "cuda":
        return
    free = free_bytes(device)
    if need > free:
        raise DeviceError(
            f"{where}: needs about {need / 2**30:.2f} GiB on {device}, which has {free / 2**30:.2f} GiB "
            f"free; lower the batch size, pick another GPU (--device cuda:N) or run on the CPU "
            f"(--device cpu)"
        )


def add_device_argument(parser: argparse.ArgumentParser) -> None:
    """``--device`` on a command's parser (checked when the command runs, so the error names what there is)."""
    parser.add_argument("--device", default="auto", metavar="DEVICE", help=DEVICE_HELP)
