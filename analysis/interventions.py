"""Interventions: change the memory mid-sequence and measure what the predictions do.

The causal test of a memory: zero its state (all of it, or a box of voxels) just before a chosen
chunk reads it, or force σ(γ) = 0 so reads no longer reach the tokens, and compare the model's
predictions with the untouched run on the same inputs. The model itself is never changed: the
state is edited between two segments of a stream (streaming equals one pass exactly), and σ(γ)
is restored when the run ends.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any, Iterator, Optional, Sequence, Union

import numpy as np
import torch

from tensor_memory.backbone import BackboneState
from tensor_memory.checkpoint import Checkpoint, load_checkpoint
from tensor_memory.memory import MemoryState, TensorMemory

from .capture import memory_chunk_size, per_chunk, sample_batch

KINDS = ("zero", "zero_region", "gate_off")
Region = tuple[tuple[int, int], tuple[int, int], tuple[int, int]]  # ((z0, z1), (y0, y1), (x0, x1)), ends excluded


def memory_layers(model: torch.nn.Module) -> dict[str, tuple[int, TensorMemory]]:
    """{module path: (block index, memory)} for every Tensor Memory layer of a task model."""
    return {f"backbone.blocks.{i}.memory": (i, block.memory) for i, block in enumerate(model.backbone.blocks)
            if isinstance(block.memory, TensorMemory)}


def _chosen(model: torch.nn.Module, layer: Optional[str]) -> dict[str, tuple[int, TensorMemory]]:
    layers = memory_layers(model)
    if layer is None:
        return layers
    if layer not in layers:
        raise ValueError(f"no memory layer {layer!r}; the model has {', '.join(layers) or 'none'}")
    return {layer: layers[layer]}


@contextlib.contextmanager
def gates_closed(memories: Sequence[TensorMemory]) -> Iterator[None]:
    """σ(γ) = 0 exactly (γ = −∞) for ``memories`` inside the block; the old γ is restored after."""
    saved = [m.gate.detach().clone() for m in memories]
    try:
        with torch.no_grad():
            for m in memories:
                m.gate.fill_(-float("inf"))
        yield
    finally:
        with torch.no_grad():
            for m, value in zip(memories, saved):
                m.gate.copy_(value)


def _check_region(region: Region, grid: tuple[int, int, int]) -> None:
    if len(region) != 3:
        raise ValueError(f"region must be ((z0, z1), (y0, y1), (x0, x1)), got {region!r}")
    for (lo, hi), n, axis in zip(region, grid, "zyx"):
        if not (0 <= lo < hi <= n):
            raise ValueError(f"region {axis} range ({lo}, {hi}) must satisfy 0 <= start < end <= {n}")


def _zeroed(memory: MemoryState, region: Optional[Region]) -> MemoryState:
    h, c = memory.h.clone(), memory.c.clone()
    if region is None:
        h.zero_(), c.zero_()
    else:
        (z0, z1), (y0, y1), (x0, x1) = region
        h[:, :, z0:z1, y0:y1, x0:x1] = 0
        c[:, :, z0:z1, y0:y1, x0:x1] = 0
    return MemoryState(h, c, memory.pending)


def run_intervened(model: torch.nn.Module, inputs: dict[str, torch.Tensor], kind: str, chunk: int,
                   region: Optional[Region] = None, layer: Optional[str] = None) -> torch.Tensor:
    """Logits (B, N, classes) with the intervention applied from chunk ``chunk`` on.

    ``zero``: h and c of the chosen memory layers (all by default) set to 0 just before ``chunk`` reads;
    ``zero_region``: the same inside ``region`` only; ``gate_off``: σ(γ) = 0 from ``chunk`` on.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown intervention {kind!r}; choose one of {', '.join(KINDS)}")
    chosen = _chosen(model, layer)
    if not chosen:
        raise ValueError("the model has no Tensor Memory layers to intervene on")
    if kind == "zero_region":
        if region is None:
            raise ValueError("intervention 'zero_region' needs region=((z0, z1), (y0, y1), (x0, x1))")
        for _, memory in chosen.values():
            _check_region(region, memory.config.grid)
    chunk_size = memory_chunk_size(model)
    N = next(iter(inputs.values())).shape[1]
    num_chunks = -(-N // chunk_size)
    if not 0 <= chunk < num_chunks:
        raise ValueError(f"chunk must be in [0, {num_chunks - 1}], got {chunk}")
    split = chunk * chunk_size
    with torch.no_grad():
        head: list[torch.Tensor] = []
        state: Optional[BackboneState] = None
        if split:
            out, state = model({k: v[:, :split] for k, v in inputs.items()})
            head.append(out)
        rest = {k: v[:, split:] for k, v in inputs.items()}
        if kind == "gate_off":
            with gates_closed([m for _, m in chosen.values()]):
                out, _ = model(rest, state)
        else:
            if state is None:  # before chunk 0 the memory is already zero: make the zero state explicit
                B = next(iter(inputs.values())).shape[0]
                state = model.backbone.init_state(B)
            for index, _ in chosen.values():
                layer_state = state.layers[index]
                layer_state.memory = _zeroed(layer_state.memory, region if kind == "zero_region" else None)
            out, _ = model(rest, state)
    return torch.cat(head + [out], dim=1)


@dataclasses.dataclass
class InterventionResult:
    kind: str
    chunk: int
    region: Optional[Region]
    baseline: dict[str, np.ndarray]  # per chunk: prediction, target, scored, probs (the untouched run)
    intervened: dict[str, np.ndarray]  # the same with the intervention
    meta: dict[str, np.ndarray]  # the sample's task metadata

    @property
    def changed(self) -> np.ndarray:
        """(K,) bool: chunks whose prediction the intervention changed."""
        return self.baseline["prediction"] != self.intervened["prediction"]

    def target_probability(self, which: str) -> np.ndarray:
        """(K,) the probability the run gives the true class (NaN where not scored)."""
        run = getattr(self, which)
        p = np.take_along_axis(run["probs"], np.maximum(run["target"], 0)[:, None], 1)[:, 0]
        return np.where(run["scored"], p, np.nan)

    def summary(self) -> dict[str, Any]:
        """Accuracy before and after over the scored chunks from ``chunk`` on, and how many predictions changed."""
        after = np.arange(len(self.changed)) >= self.chunk
        scored = self.baseline["scored"] & after
        acc = lambda run: float((run["prediction"] == run["target"])[scored].mean()) if scored.any() else None  # noqa: E731
        out = {"kind": self.kind, "chunk": self.chunk, "region": self.region,
               "chunks_changed": int(self.changed[after].sum()), "chunks_after": int(after.sum()),
               "accuracy_baseline": acc(self.baseline), "accuracy_intervened": acc(self.intervened),
               "target_probability_drop": float(np.nanmean(self.target_probability("baseline")[after]
                                                           - self.target_probability("intervened")[after]))
               if scored.any() else None}
        return out


def intervene(checkpoint: Union[str, Path, Checkpoint], kind: str = "zero", chunk: int = 0, seed: int = 0,
              index: int = 0, region: Optional[Region] = None, layer: Optional[str] = None,
              **task_params: Any) -> InterventionResult:
    """Run sample ``index`` of stream ``seed`` untouched and with the intervention; per-chunk results side by side."""
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
    model = ckpt.model.eval()
    chunk_size = memory_chunk_size(model)
    _, batch = sample_batch(ckpt, seed, [index], **task_params)
    K = batch.targets.shape[1] // chunk_size
    with torch.no_grad():
        base, _ = model(batch.inputs)
    changed = run_intervened(model, batch.inputs, kind, chunk, region, layer)
    rows = lambda logits: per_chunk(logits[0], batch.targets[0], batch.mask[0], chunk_size, K)  # noqa: E731
    return InterventionResult(kind, chunk, region if kind == "zero_region" else None, rows(base), rows(changed),
                              {k: v[0].numpy() for k, v in batch.meta.items()})


__all__ = ["intervene", "run_intervened", "InterventionResult", "gates_closed", "memory_layers", "KINDS"]
