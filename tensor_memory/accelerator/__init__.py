"""Where and in what number format a model runs: the device (``auto``, ``cpu``, ``cuda``, ``cuda:N``) and the
precision (``fp32``, ``bf16``, ``fp16``) that every command and Python entry point takes."""

from .device import (
    DEVICE_HELP,
    DeviceError,
    add_device_argument,
    check_device_memory,
    distributed_backend,
    model_device,
    rank_device,
    resolve_device,
)
from .precision import PRECISION_HELP, PRECISIONS, add_precision_argument, autocast, check_precision, grad_scaler

__all__ = [
    "DEVICE_HELP",
    "DeviceError",
    "add_device_argument",
    "check_device_memory",
    "distributed_backend",
    "model_device",
    "rank_device",
    "resolve_device",
    "PRECISION_HELP",
    "PRECISIONS",
    "add_precision_argument",
    "autocast",
    "check_precision",
    "grad_scaler",
]
