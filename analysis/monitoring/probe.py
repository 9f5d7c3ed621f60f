"""The fixed input a monitor measures on, and the look at the model that leaves its training as it was.

A probe is what the model's forward takes: a tensor (B, N, …), passed as ``model(probe)``, or a dict of tensors
(a Hugging Face model's ``input_ids``, ``attention_mask``, …) passed as ``model(**probe)``. It is kept on the CPU,
cut to its first :data:`PROBE_ROWS` samples. :func:`looking` is the context every look runs in: no gradients, each
module in eval mode (each one's own mode restored after), the random number generators forked (dropout and the
data order of the next steps come out as without the look) and any ``streaming`` block's carried states paused.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch import nn

from analysis.traces.model import call_model, on_device
from tensor_memory.memory.streaming import streams_paused

PROBE_ROWS = 8  # samples of a batch kept as the probe: enough for stable medians, cheap to run
Probe = torch.Tensor | dict[str, torch.Tensor]


def _first_rows(tensors: dict[str, torch.Tensor], rows: int) -> dict[str, torch.Tensor]:
    """The first ``rows`` samples of each tensor batched as ``input_ids`` (else the first batch tensor) is; other
    tensors as they are."""
    size = tensors.get("input_ids", next(v for v in tensors.values() if v.dim() >= 2)).shape[0]
    return {k: v[:rows] if v.dim() >= 1 and v.shape[0] == size else v for k, v in tensors.items()}


def as_probe(inputs: Any, rows: int = PROBE_ROWS) -> Probe:
    """``inputs`` (a tensor, or a dict whose tensors are kept and anything else dropped) cut to its first ``rows``
    samples along the batch dimension, detached and copied to the CPU; a ValueError for anything else."""
    if isinstance(inputs, torch.Tensor):
        if inputs.dim() < 2:
            raise ValueError(f"monitor: the probe must be a batch (B, N, …), got shape {tuple(inputs.shape)}")
        return inputs[:rows].detach().to("cpu", copy=True)
    if isinstance(inputs, dict):
        tensors = {k: v for k, v in inputs.items() if isinstance(k, str) and isinstance(v, torch.Tensor)}
        if not any(v.dim() >= 2 for v in tensors.values()):
            raise ValueError("monitor: the probe dict holds no batch tensor (B, N, …); pass e.g. {'input_ids': ids}")
        return {k: v.detach().to("cpu", copy=True) for k, v in _first_rows(tensors, rows).items()}
    raise ValueError(
        f"monitor: the probe must be a tensor or a dict of tensors as the model's forward takes, "
        f"got {type(inputs).__name__}"
    )


def first_sample(probe: Probe) -> Probe:
    """The probe's first sample, (1, N, …), as ``trace_model`` records one sequence."""
    return probe[:1] if isinstance(probe, torch.Tensor) else _first_rows(probe, 1)


def run_probe(model: nn.Module, probe: Probe, device: torch.device) -> Any:
    """The model's output on ``probe`` moved to ``device``."""
    return call_model(model, on_device(probe, device), None)[0]


class FirstBatch:
    """A forward pre-hook on the model that keeps the first input it sees as a probe, then removes itself."""

    def __init__(self, model: nn.Module) -> None:
        self.probe: Probe | None = None
        self.error: str | None = None  # why the first input could not be kept: said at the step, not in training
        self._handle = model.register_forward_pre_hook(self._seen, with_kwargs=True)

    def _seen(self, _module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        self.remove()
        try:
            self.probe = as_probe(args[0] if args and isinstance(args[0], torch.Tensor) else kwargs)
        except ValueError as error:
            self.error = str(error)

    def remove(self) -> None:
        self._handle.remove()


def cuda_devices(model: nn.Module) -> list[int]:
    """The CUDA devices ``model``'s weights are on (whose generators a look forks)."""
    return sorted({p.device.index or 0 for p in model.parameters() if p.device.type == "cuda"})


@contextlib.contextmanager
def looking(model: nn.Module) -> Iterator[None]:
    """The block sees ``model`` in eval mode, without gradients, with the RNGs forked and the streams paused."""
    modes = [(module, module.training) for module in model.modules()]
    with torch.random.fork_rng(devices=cuda_devices(model)), torch.no_grad(), streams_paused():
        model.eval()
        try:
            yield
        finally:
            for module, training in modes:
                module.training = training


__all__ = ["PROBE_ROWS", "Probe", "as_probe", "first_sample", "run_probe", "FirstBatch", "cuda_devices", "looking"]
