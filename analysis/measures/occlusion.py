"""Occlusion diagnostics: what the model believes while the ball is hidden, and what the memory holds.

- :func:`belief` — frame by frame, the predicted position distribution against the truth.
- :func:`belief_survival` — accuracy at each frame of an occlusion, for several lengths L: how long
  the belief survives.
- :func:`memory_energy` — the energy of ``h`` per voxel over time.
- :func:`occlusion_memory` — where the write at the last visible frame went and whether the reads
  during the occlusion return to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence, Union

import numpy as np
import torch

from tensor_memory.checkpoint import Checkpoint, load_checkpoint
from tensor_memory.evaluation import task_with
from tensor_memory.tasks.base import derive_seed

from analysis.measures.grid import voxel_coordinates, voxel_spacing
from analysis.traces.trace import LayerTrace, Trace


def _require_occlusion(task_name: str) -> None:
    if task_name != "occlusion":
        raise ValueError(f"occlusion diagnostics need an occlusion checkpoint or trace, got task {task_name!r}")


def belief(trace: Trace) -> dict[str, np.ndarray]:
    """Per frame: ``probs`` (T, S, S), ``truth`` and ``predicted`` (T, 2) as (y, x), ``truth_probability``,
    ``correct`` and ``occluded`` (T,). One chunk is one frame."""
    _require_occlusion(trace.info["task"])
    size = int(trace.info["task_params"]["size"])
    T = trace.num_chunks
    probs = trace.chunks["probs"][:T].reshape(T, size, size)
    truth = trace.meta["positions"][:T].astype(np.int64)
    predicted = np.stack(np.divmod(trace.chunks["prediction"][:T], size), axis=-1)
    truth_probability = probs[np.arange(T), truth[:, 0], truth[:, 1]]
    return {"probs": probs, "truth": truth, "predicted": predicted, "truth_probability": truth_probability,
            "correct": (predicted == truth).all(-1), "occluded": trace.meta["occluded"][:T].astype(bool)}


def frame_predictions(model: torch.nn.Module, inputs: dict[str, torch.Tensor], frames: int) -> torch.Tensor:
    """(B, T) predicted class at the last token of every frame (where the task scores)."""
    with torch.no_grad():
        logits, _ = model(inputs)
    per_frame = logits.shape[1] // frames
    return logits[:, per_frame - 1::per_frame].argmax(-1)


def belief_survival(checkpoint: Union[str, Path, Checkpoint], lengths: Sequence[int] = (0, 2, 4, 6),
                    samples: int = 128, seed: int = 0) -> dict[str, Any]:
    """For each occlusion length L: accuracy at the j-th hidden frame (j = 1 … L) and overall.

    Returns ``{"lengths", "by_offset": {L: [acc_1 … acc_L]}, "occluded_accuracy": {L: acc},
    "visible_accuracy": {L: acc}, "samples"}`` over ``samples`` sequences per length.
    """
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
    _require_occlusion(ckpt.task.name)
    out: dict[str, Any] = {"lengths": list(lengths), "by_offset": {}, "occluded_accuracy": {},
                           "visible_accuracy": {}, "samples": samples}
    for L in lengths:
        task = task_with(ckpt, {"occlusion_length": int(L)})
        batch = task.sample(samples, derive_seed("survival", seed, int(L)))
        T, size = task.config.frames, task.config.size
        predicted = frame_predictions(ckpt.model.eval(), batch.inputs, T)  # (B, T)
        truth = batch.meta["positions"][..., 0] * size + batch.meta["positions"][..., 1]  # (B, T)
        correct = (predicted == truth).numpy()
        occluded = batch.meta["occluded"].numpy()
        start = batch.meta["occlusion_start"].numpy()
        offsets = np.arange(T)[None, :] - start[:, None] + 1  # 1 at the first hidden frame
        out["by_offset"][int(L)] = [float(correct[occluded & (offsets == j)].mean()) for j in range(1, L + 1)]
        out["occluded_accuracy"][int(L)] = float(correct[occluded].mean()) if occluded.any() else None
        out["visible_accuracy"][int(L)] = float(correct[~occluded].mean())
    return out


def memory_energy(layer: LayerTrace) -> np.ndarray:
    """(K, D, H, W): the squared norm of ``h`` over channels at every voxel after each chunk."""
    h = layer.h.astype(np.float32)
    return (h ** 2).sum(axis=1)


def occlusion_memory(trace: Trace, layer: Optional[str] = None) -> dict[str, Any]:
    """Where the last visible frame's write went, and whether the reads during the occlusion return to it.

    Returns ``{"last_visible", "write_voxel" (x, y, z), "sigma_voxels", "occluded_chunks",
    "read_distance_voxels", "read_within_2sigma", "energy_at_write"}`` (per occluded chunk: the
    read's distance from that write and the memory energy at the write's voxel).
    """
    _require_occlusion(trace.info["task"])
    lay = trace.layer(layer)
    occluded = trace.meta["occluded"][:trace.num_chunks].astype(bool)
    hidden = np.flatnonzero(occluded)
    if not len(hidden) or hidden[0] == 0:
        return {"last_visible": None, "occluded_chunks": hidden.tolist()}
    last = int(hidden[0] - 1)
    D, H, W = lay.grid
    spacing = voxel_spacing(lay.grid)
    write = voxel_coordinates(lay.mu_write[last].astype(np.float64), lay.grid)
    sigma_voxels = float(lay.sigma[last] / spacing.mean())
    reads = voxel_coordinates(lay.mu_read[hidden].astype(np.float64), lay.grid)
    distance = np.sqrt(((reads - write) ** 2).sum(-1))
    in_sigmas = np.sqrt((((reads - write) * spacing / lay.sigma[last]) ** 2).sum(-1))
    x, y, z = np.clip(np.rint(write).astype(int), 0, [W - 1, H - 1, D - 1])
    energy = memory_energy(lay)
    return {"last_visible": last, "write_voxel": write.tolist(), "sigma_voxels": sigma_voxels,
            "occluded_chunks": hidden.tolist(), "read_distance_voxels": distance.tolist(),
            "read_within_2sigma": (in_sigmas <= 2.0).tolist(),
            "energy_at_write": energy[hidden, z, y, x].tolist(), "energy_total": energy[hidden].sum((1, 2, 3)).tolist()}


__all__ = ["belief", "belief_survival", "memory_energy", "occlusion_memory", "frame_predictions"]
