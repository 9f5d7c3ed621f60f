"""A training run's resume file: weights, AdamW's moments and the step, saved atomically, checked on load.

``resume.safetensors`` holds ``model.<name>`` for every weight, ``optim.<index>.<exp_avg|exp_avg_sq|step>``
for every parameter the optimizer has state for, and in its metadata the step and the run's config.
It is validated as strictly as a checkpoint before anything is restored: a regular file within a
size cap with a well-formed safetensors header; the very keys, shapes and dtypes the run's model
and optimizer have; finite values; a step in [0, steps] that the optimizer's own step counts
agree with; the optimizer state present once a step was taken. A tampered or damaged file is
refused with one line naming it and the problem; nothing is half restored.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save as save_safetensors

from ..storage.files import FileFormatError, atomic_write_bytes
from ..storage.user_files import FLOAT_DTYPES, read_safetensors

MAX_RESUME_BYTES = 2 << 30  # weights and two moments of the largest model the budget allows at most
MOMENTS = ("exp_avg", "exp_avg_sq", "step")  # AdamW's state per parameter
REDO = "delete it to start afresh"
SCALER_KEY = "grad_scaler"  # fp16 runs: the loss scaler's state_dict, as JSON in the metadata


def save_resume(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    step: int,
    config: dict,
    scaler: torch.amp.GradScaler | None = None,
) -> None:
    """Weights, optimizer moments and the step in one safetensors file, written atomically; with fp16's loss
    ``scaler``, its scale and growth count too (a resumed run scales as the uninterrupted one would)."""
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    for index, state in optimizer.state_dict()["state"].items():
        for name, value in state.items():
            tensors[f"optim.{index}.{name}"] = torch.as_tensor(value).detach().cpu().contiguous()
    metadata = {"step": str(step), "config": json.dumps(config, sort_keys=True)}
    if scaler is not None:
        metadata[SCALER_KEY] = json.dumps(scaler.state_dict())
    atomic_write_bytes(path, save_safetensors(tensors, metadata=metadata))


def _expected(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """{key: (dtype name, shape)} of the weights, and of every moment the optimizer could hold."""
    names = {dtype: name for name, (dtype, _) in FLOAT_DTYPES.items()}
    weights = {f"model.{k}": (names.get(v.dtype, str(v.dtype)), tuple(v.shape)) for k, v in model.state_dict().items()}
    params = [p for group in optimizer.param_groups for p in group["params"]]
    moments = {}
    for index, p in enumerate(params):
        for name in MOMENTS:
            moments[f"optim.{index}.{name}"] = ("F32", () if name == "step" else tuple(p.shape))
    return weights, moments


def _fail(path: Path, problem: str) -> ValueError:
    return ValueError(f"{path}: cannot resume from this file: {problem}; {REDO}")


def load_resume(
    path: Path,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    config: dict,
    scaler: torch.amp.GradScaler | None = None,
) -> int:
    """Restore a run from ``save_resume``'s file (and fp16's loss ``scaler`` when it saved one); returns the number
    of steps already done."""
    try:
        stored = read_safetensors(path, MAX_RESUME_BYTES, "the resume file", REDO)
    except FileFormatError as error:
        raise ValueError(str(error)) from None
    header, metadata = stored.layout, stored.metadata
    try:
        step, saved_config = int(metadata["step"]), json.loads(metadata["config"])
    except (KeyError, ValueError, RecursionError):
        raise _fail(path, "its metadata lacks a valid step and config") from None
    if saved_config != config:
        raise ValueError(
            f"{path}: was written by a run with a different configuration; use another --out directory, or {REDO}"
        )
    steps = config["training"]["steps"]
    if not 0 <= step <= steps:
        raise _fail(path, f"it says {step} steps were done, outside [0, {steps}]")

    weights, moments = _expected(model, optimizer)
    missing = sorted(set(weights) - set(header))
    unexpected = sorted(set(header) - set(weights) - set(moments))
    if missing or unexpected:
        names = ", ".join((missing or unexpected)[:3])
        raise _fail(path, f"{'missing' if missing else 'unexpected'} tensor(s) {names}")
    for key, info in header.items():
        want = weights.get(key) or moments[key]
        if (info.dtype, tuple(info.shape)) != want:
            raise _fail(path, f"{key} is {info.dtype} {list(info.shape)}, expected {want[0]} {list(want[1])}")
    held = {key.split(".")[1] for key in header if key.startswith("optim.")}
    for index in held:
        if any(f"optim.{index}.{name}" not in header for name in MOMENTS):
            raise _fail(path, f"the optimizer state of parameter {index} is incomplete")
    if step > 0 and not held:
        raise _fail(path, f"it holds no optimizer state after {step} steps")

    tensors = stored.tensors()
    for key, value in tensors.items():
        if not bool(torch.isfinite(value).all()):
            raise _fail(path, f"{key} contains NaN or infinite values")
    counts = {int(tensors[f"optim.{index}.step"]) for index in held}
    if held and (max(counts) != step or min(counts) < 0):
        raise _fail(path, f"it says {step} steps were done, but its optimizer took {max(counts)}")

    scaler_state = _scaler_state(path, metadata) if scaler is not None and SCALER_KEY in metadata else None
    model.load_state_dict({k[len("model.") :]: v for k, v in tensors.items() if k.startswith("model.")})
    if scaler_state is not None:
        scaler.load_state_dict(scaler_state)
    state = optimizer.state_dict()
    state["state"] = {int(index): {name: tensors[f"optim.{index}.{name}"] for name in MOMENTS} for index in held}
    optimizer.load_state_dict(state)
    return step


def _scaler_state(path: Path, metadata: dict) -> dict:
    """The loss scaler's saved state: a positive finite scale and a whole growth count, or a refusal."""
    try:
        state = json.loads(metadata[SCALER_KEY])
        scale, tracker = float(state["scale"]), state["_growth_tracker"]
    except (ValueError, TypeError, KeyError, RecursionError):
        raise _fail(path, "its loss scaler state is not readable") from None
    if not (0 < scale < float("inf")) or not isinstance(tracker, int) or tracker < 0:
        raise _fail(path, f"its loss scaler state is out of range (scale {scale}, growth count {tracker})")
    return state


__all__ = ["save_resume", "load_resume", "MAX_RESUME_BYTES"]
