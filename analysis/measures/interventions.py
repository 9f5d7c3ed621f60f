"""Interventions: change the memory mid-sequence and measure what the predictions do.

The causal test of a memory: zero its state (all of it, or a box of voxels) just before a chosen
chunk reads it, force σ(γ) = 0 so reads no longer reach the tokens, move a chunk's write to
another place, or set its σ; then compare the model's predictions with the untouched run on the
same inputs. Every intervention is a hook (:func:`tensor_memory.hooks`) on the memory's hook
points: the model's parameters and state are never edited, so concurrent runs on one model are
independent. The sequence is cut at the chosen chunk (streaming equals one pass exactly) and the
hooks act on the second part, whose first chunk is the chosen one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from analysis.measures.occlusion import TASKS as OCCLUSION_TASKS
from analysis.traces.capture import sample_batch
from analysis.traces.chunk_scorer import per_chunk
from analysis.traces.segment_recorder import memory_chunk_size
from analysis.traces.trace import Trace
from tensor_memory import TensorMemory, hooks, memory_layers
from tensor_memory.backbone import BackboneState
from tensor_memory.memory.geometry import nearest_voxel
from tensor_memory.memory.hooking import reads_off
from tensor_memory.memory.hookpoints import Hook
from tensor_memory.storage.checkpoint import Checkpoint, load_checkpoint

# zero, zero_region and gate_off act from the chosen chunk on; move_write and set_sigma on its write alone.
KINDS = ("zero", "zero_region", "gate_off", "move_write", "set_sigma")
Region = tuple[tuple[int, int], tuple[int, int], tuple[int, int]]  # ((z0, z1), (y0, y1), (x0, x1)), ends excluded


def _chosen(model: torch.nn.Module, layer: str | None) -> dict[str, TensorMemory]:
    layers = memory_layers(model)
    if layer is None:
        return layers
    if layer not in layers:
        raise ValueError(f"no memory layer {layer!r}; the model has {', '.join(layers) or 'none'}")
    return {layer: layers[layer]}


def _check_region(region: Region, grid: tuple[int, int, int]) -> None:
    if len(region) != 3:
        raise ValueError(f"region must be ((z0, z1), (y0, y1), (x0, x1)), got {region!r}")
    for (lo, hi), n, axis in zip(region, grid, "zyx", strict=True):
        if not (0 <= lo < hi <= n):
            raise ValueError(f"region {axis} range ({lo}, {hi}) must satisfy 0 <= start < end <= {n}")


def _zeroed(region: Region | None) -> Hook:
    """A hook on h_in / c_in: the volume with every voxel (or those in ``region``) set to 0, as a new tensor."""

    def hook(volume: torch.Tensor) -> torch.Tensor:
        if region is None:
            return torch.zeros_like(volume)
        (z0, z1), (y0, y1), (x0, x1) = region
        out = volume.clone()
        out[:, :, z0:z1, y0:y1, x0:x1] = 0
        return out

    return hook


def _first_chunk_set(value: torch.Tensor) -> Hook:
    """A hook on mu_write / sigma that sets the first chunk of the call (the chosen one) to ``value``."""

    def hook(current: torch.Tensor) -> torch.Tensor:
        out = current.clone()
        out[:, 0] = value.to(current.dtype)
        return out

    return hook


def intervention_hooks(
    kind: str,
    layers: Sequence[str],
    region: Region | None = None,
    to: Sequence[float] | None = None,
    sigma: float | None = None,
) -> dict[str, Hook]:
    """The hooks ({point path: fn}) of one intervention on ``layers``, for the call that starts at the chosen chunk."""
    if kind in ("zero", "zero_region"):
        zero = _zeroed(region if kind == "zero_region" else None)
        return {f"{name}.{point}": zero for name in layers for point in ("h_in", "c_in")}
    if kind == "gate_off":
        return reads_off(layers)
    if kind == "move_write":
        return {f"{name}.mu_write": _first_chunk_set(torch.as_tensor(to, dtype=torch.float32)) for name in layers}
    return {f"{name}.sigma": _first_chunk_set(torch.tensor(float(sigma))) for name in layers}  # set_sigma


def _check_setting(kind: str, chosen: dict, region: Region | None, to, sigma) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown intervention {kind!r}; choose one of {', '.join(KINDS)}")
    if kind == "zero_region":
        if region is None:
            raise ValueError("intervention 'zero_region' needs region=((z0, z1), (y0, y1), (x0, x1))")
        for memory in chosen.values():
            _check_region(region, memory.config.grid)
    if kind == "move_write":
        point = np.asarray(to if to is not None else [np.nan], dtype=np.float64)
        if point.shape != (3,) or not np.all(np.abs(point) <= 1.0):
            raise ValueError(f"intervention 'move_write' needs to=(x, y, z), each in [-1, 1], got {to!r}")
    if kind == "set_sigma":
        if sigma is None or not np.isfinite(sigma) or not sigma > 0:
            raise ValueError(f"intervention 'set_sigma' needs sigma > 0 (normalised units), got {sigma!r}")


def run_intervened(
    model: torch.nn.Module,
    inputs: dict[str, torch.Tensor],
    kind: str,
    chunk: int,
    region: Region | None = None,
    layer: str | None = None,
    to: Sequence[float] | None = None,
    sigma: float | None = None,
) -> torch.Tensor:
    """Logits (B, N, classes) with the intervention applied at chunk ``chunk``.

    ``zero``: h and c of the chosen memory layers (all by default) are 0 when ``chunk`` reads them;
    ``zero_region``: the same inside ``region`` only; ``gate_off``: σ(γ) = 0 from ``chunk`` on;
    ``move_write``: ``chunk`` writes at ``to`` = (x, y, z) in [-1, 1]; ``set_sigma``: its write has spread ``sigma``.
    """
    chosen = _chosen(model, layer)
    if not chosen:
        raise ValueError("the model has no Tensor Memory layers to intervene on")
    _check_setting(kind, chosen, region, to, sigma)
    if not model.backbone.config.causal:
        raise ValueError(
            "interventions cut the sequence at the chosen chunk and carry the state into the rest; a "
            "bidirectional model (causal=False, e.g. masked patch reconstruction) reads each image "
            "whole and cannot be cut: choose a causal checkpoint"
        )
    chunk_size = memory_chunk_size(model)
    N = next(iter(inputs.values())).shape[1]
    num_chunks = -(-N // chunk_size)
    if not 0 <= chunk < num_chunks:
        raise ValueError(f"chunk must be in [0, {num_chunks - 1}], got {chunk}")
    if kind in ("move_write", "set_sigma") and (chunk + 1) * chunk_size > N:
        raise ValueError(
            f"chunk {chunk} is not complete, so it writes nothing; choose one in [0, {N // chunk_size - 1}]"
        )
    split = chunk * chunk_size
    with torch.no_grad():
        head: list[torch.Tensor] = []
        state: BackboneState | None = None
        if split:
            out, state = model({k: v[:, :split] for k, v in inputs.items()})
            head.append(out)
        with hooks(model, intervention_hooks(kind, list(chosen), region, to, sigma)):
            out, _ = model({k: v[:, split:] for k, v in inputs.items()}, state)
    return torch.cat(head + [out], dim=1)


@dataclasses.dataclass
class InterventionResult:
    kind: str
    chunk: int
    region: Region | None  # zero_region's box
    to: tuple[float, float, float] | None  # move_write's place (x, y, z)
    sigma: float | None  # set_sigma's spread
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
        """Accuracy untouched and intervened over the scored chunks from ``chunk`` on (and its change), and how many
        predictions changed."""
        after = np.arange(len(self.changed)) >= self.chunk
        scored = self.baseline["scored"] & after
        acc = lambda run: float((run["prediction"] == run["target"])[scored].mean()) if scored.any() else None  # noqa: E731
        baseline, intervened = acc(self.baseline), acc(self.intervened)
        out = {
            "kind": self.kind,
            "chunk": self.chunk,
            "region": self.region,
            "to": self.to,
            "sigma": self.sigma,
            "chunks_changed": int(self.changed[after].sum()),
            "chunks_after": int(after.sum()),
            "accuracy_baseline": baseline,
            "accuracy_intervened": intervened,
            "accuracy_change": None if baseline is None else intervened - baseline,
            "target_probability_drop": float(
                np.nanmean(self.target_probability("baseline")[after] - self.target_probability("intervened")[after])
            )
            if scored.any()
            else None,
        }
        return out


def intervene(
    checkpoint: str | Path | Checkpoint,
    kind: str = "zero",
    chunk: int = 0,
    seed: int = 0,
    index: int = 0,
    region: Region | None = None,
    layer: str | None = None,
    to: Sequence[float] | None = None,
    sigma: float | None = None,
    **task_params: Any,
) -> InterventionResult:
    """Run sample ``index`` of stream ``seed`` untouched and with the intervention; per-chunk results side by side."""
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
    model = ckpt.model.eval()
    chunk_size = memory_chunk_size(model)
    _, batch = sample_batch(ckpt, seed, [index], **task_params)
    K = batch.targets.shape[1] // chunk_size
    with torch.no_grad():
        base, _ = model(batch.inputs)
    changed = run_intervened(model, batch.inputs, kind, chunk, region, layer, to, sigma)
    rows = lambda logits: per_chunk(logits[0].cpu(), batch.targets[0], batch.mask[0], chunk_size, K)  # noqa: E731
    return InterventionResult(
        kind,
        chunk,
        region if kind == "zero_region" else None,
        tuple(float(v) for v in to) if kind == "move_write" else None,  # type: ignore[arg-type]
        float(sigma) if kind == "set_sigma" else None,  # type: ignore[arg-type]
        rows(base),
        rows(changed),
        {k: v[0].numpy() for k, v in batch.meta.items()},
    )


def intervention_defaults(trace: Trace, layer: str | None, chunk: int) -> dict[str, Any]:
    """Where an intervention on this sample starts out: ``chunk`` (the first hidden frame of an occlusion, else the
    given chunk), ``region`` ((z0, z1), (y0, y1), (x0, x1), ends included: the voxels within one of the write before
    that chunk) and ``write_voxel`` ((x, y, z): the voxel nearest that chunk's own write)."""
    lay = trace.layer(layer)
    hidden = (
        np.flatnonzero(np.asarray(trace.meta["occluded"][: trace.num_chunks], dtype=bool))
        if trace.info.get("task") in OCCLUSION_TASKS
        else []
    )
    start = int(hidden[0]) if len(hidden) else int(chunk)
    before = nearest_voxel(lay.mu_write[max(start - 1, 0)], lay.grid)
    region = tuple((max(v - 1, 0), min(v + 1, n - 1)) for v, n in zip(before, lay.grid, strict=True))
    z, y, x = nearest_voxel(lay.mu_write[min(start, len(lay.mu_write) - 1)], lay.grid)
    return {"chunk": start, "region": region, "write_voxel": (x, y, z)}


__all__ = ["intervene", "run_intervened", "intervention_hooks", "intervention_defaults", "InterventionResult", "KINDS"]
