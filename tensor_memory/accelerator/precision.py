"""The number format a model computes in: ``fp32`` (everything float32), or mixed precision with ``bf16`` or
``fp16``, where ``torch.autocast`` runs the matrix products in the low-precision type and the weights, the
optimizer and the memory's recurrent state stay float32 (``memory/update.py`` says which parts of the scan are
which). ``fp16`` has a far narrower range, so training with it scales the loss (:func:`grad_scaler`); the CPU
has no fast float16, so ``fp16`` is for CUDA only."""

from __future__ import annotations

import argparse
import contextlib
from contextlib import AbstractContextManager

import torch

from .device import DeviceError

PRECISIONS = ("fp32", "bf16", "fp16")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}
PRECISION_HELP = (
    "number format: fp32 (default), bf16 or fp16 mixed precision (autocast: matrix products in the "
    "low-precision type, weights and the memory's state float32; fp16 on CUDA only, with loss scaling)"
)


def check_precision(precision: str, device: torch.device) -> str:
    """``precision`` if ``device`` can run it; a :class:`DeviceError` (a ValueError) saying what to use otherwise."""
    if precision not in PRECISIONS:
        raise DeviceError(f"--precision {precision}: not a precision; give one of {', '.join(PRECISIONS)}")
    if precision == "fp16" and device.type != "cuda":
        raise DeviceError(
            "--precision fp16: float16 mixed precision is for CUDA GPUs (the CPU has no fast float16 "
            "arithmetic); on the CPU use --precision bf16 or fp32"
        )
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise DeviceError(
            f"--precision bf16: {torch.cuda.get_device_name(device)} has no bfloat16 support; use "
            f"--precision fp16 or fp32"
        )
    return precision


def autocast(precision: str, device: torch.device) -> AbstractContextManager:
    """The context a forward pass runs in: nothing for fp32, ``torch.autocast`` in the chosen type otherwise."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=DTYPES[check_precision(precision, device)])


def grad_scaler(precision: str, device: torch.device) -> torch.amp.GradScaler | None:
    """The loss scaler fp16 training needs (small gradients underflow float16 without it); None otherwise."""
    return torch.amp.GradScaler(device.type) if precision == "fp16" else None


def add_precision_argument(parser: argparse.ArgumentParser, default: str | None = "fp32") -> None:
    """``--precision`` on a command's parser; ``default=None``: the run config's ``training.precision``."""
    extra = "; overrides training.precision" if default is None else ""
    parser.add_argument("--precision", choices=PRECISIONS, default=default, help=PRECISION_HELP + extra)
