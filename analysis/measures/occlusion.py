"""Occlusion diagnostics: what the model believes while the object is hidden, and what the memory holds.

For the ``occlusion`` task (a ball) and ``moving_digits`` (a handwritten digit, whose class is
``digit · size² + y · size + x``: identity × cell). One chunk is one frame.

- :func:`belief` — frame by frame, the predicted position distribution against the truth (for moving
  digits marginalised over identity, with the identity distribution beside it); :func:`belief_of` the
  same for any run of a clip (an intervened one).
- :func:`position_marginal`, :func:`identity_marginal` — class probabilities (…, identities · size²)
  summed to the cells or to the identities.
- :func:`hit_rates` — the share of frames right, hidden and visible apart; :func:`frames_around` the
  frames of a clip shown around one.
- :func:`belief_survival` — accuracy at each frame of an occlusion, for several lengths L: how long
  the belief survives.
- :func:`memory_energy` — the energy of ``h`` per voxel over time.
- :func:`occlusion_memory` — where the write at the last visible frame went and whether the reads
  during the occlusion return to it.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from analysis.traces.trace import LayerTrace, Trace
from tensor_memory.memory.geometry import in_voxels, nearest_voxel, sigma_voxels_per_axis
from tensor_memory.memory.measures import median_sigma_voxels
from tensor_memory.storage.checkpoint import Checkpoint, load_checkpoint
from tensor_memory.training.evaluation import task_with

TASKS = ("occlusion", "moving_digits")  # frames hiding an object; a class is identity · size² + cell


def _require_occlusion(task_name: str) -> None:
    if task_name not in TASKS:
        raise ValueError(
            f"occlusion diagnostics need an occlusion or moving_digits checkpoint or trace, got task {task_name!r}"
        )


def _identities(classes: int, size: int) -> int:
    """How many identities ``classes`` = identities · size² holds (1 for the ball)."""
    identities, rest = divmod(int(classes), size * size)
    if rest or not identities:
        raise ValueError(f"class probabilities must cover identities × {size}² cells, got {classes} classes")
    return identities


def position_marginal(probs: np.ndarray, size: int) -> np.ndarray:
    """(…, size²): the probability of each cell ``y · size + x``, summed over identity."""
    probs = np.asarray(probs)
    joint = probs.reshape(*probs.shape[:-1], _identities(probs.shape[-1], size), size * size)
    return joint.sum(-2)


def identity_marginal(probs: np.ndarray, size: int) -> np.ndarray:
    """(…, identities): the probability of each identity, summed over the cells."""
    probs = np.asarray(probs)
    joint = probs.reshape(*probs.shape[:-1], _identities(probs.shape[-1], size), size * size)
    return joint.sum(-1)


def belief_of(
    probs: np.ndarray, prediction: np.ndarray, meta: dict[str, np.ndarray], size: int
) -> dict[str, np.ndarray]:
    """:func:`belief` of one run of a clip: class ``probs`` (T, classes) and ``prediction`` (T,) per frame, the
    clip's task metadata ``meta`` (positions, occluded and, for moving digits, digit) — e.g. an intervened run's."""
    T = len(probs)
    positions = position_marginal(probs, size).reshape(T, size, size)
    truth = np.asarray(meta["positions"])[:T].astype(np.int64)
    identity, cell = np.divmod(np.asarray(prediction)[:T], size * size)
    predicted = np.stack(np.divmod(cell, size), axis=-1)
    correct = (predicted == truth).all(-1)
    out = {
        "probs": positions,
        "truth": truth,
        "predicted": predicted,
        "truth_probability": positions[np.arange(T), truth[:, 0], truth[:, 1]],
        "correct": correct,
        "occluded": np.asarray(meta["occluded"])[:T].astype(bool),
    }
    if "digit" in meta:
        identity_probs = identity_marginal(probs, size)
        identity_truth = np.full(T, int(np.asarray(meta["digit"]).reshape(-1)[0]), dtype=np.int64)
        identity_correct = identity == identity_truth
        out.update(
            identity_probs=identity_probs,
            identity_truth=identity_truth,
            identity_predicted=identity.astype(np.int64),
            identity_truth_probability=identity_probs[np.arange(T), identity_truth],
            identity_correct=identity_correct,
            joint_correct=correct & identity_correct,
        )
    return out


def belief(trace: Trace) -> dict[str, np.ndarray]:
    """Per frame: ``probs`` (T, S, S), ``truth`` and ``predicted`` (T, 2) as (y, x), ``truth_probability``,
    ``correct`` and ``occluded`` (T,). One chunk is one frame.

    For moving digits ``probs`` is the position belief summed over identity, ``predicted`` the cell of
    the model's prediction and ``correct`` whether that cell is right; beside them ``identity_probs``
    (T, 10), ``identity_truth``, ``identity_predicted``, ``identity_truth_probability``,
    ``identity_correct`` and ``joint_correct`` (place and identity both right: what the task scores).
    """
    _require_occlusion(trace.info["task"])
    T = trace.num_chunks
    return belief_of(
        trace.chunks["probs"][:T], trace.chunks["prediction"][:T], trace.meta, int(trace.info["task_params"]["size"])
    )


def hit_rates(b: dict[str, np.ndarray]) -> dict[str, float | None]:
    """The share of frames right, hidden and visible apart, from a :func:`belief`: ``hidden`` and ``visible`` for
    what the task scores (the place; for moving digits place and digit both) and, for moving digits, each alone:
    ``place_hidden``, ``place_visible``, ``digit_hidden``, ``digit_visible``. None where there is no such frame."""
    hidden = np.asarray(b["occluded"], dtype=bool)
    scored = {"": b.get("joint_correct", b["correct"])}
    if "identity_correct" in b:
        scored.update(place_=b["correct"], digit_=b["identity_correct"])
    return {
        f"{what}{where}": float(np.asarray(right)[flags].mean()) if flags.any() else None
        for what, right in scored.items()
        for where, flags in (("hidden", hidden), ("visible", ~hidden))
    }


def frames_around(frame: int, width: int, count: int) -> list[int]:
    """``width`` consecutive frames of ``count`` around ``frame`` (it sits at ``width // 2``), kept inside the clip."""
    first = int(np.clip(frame - width // 2, 0, max(count - width, 0)))
    return list(range(first, min(first + width, count)))


def frame_predictions(model: torch.nn.Module, inputs: dict[str, torch.Tensor], frames: int) -> torch.Tensor:
    """(B, T) predicted class at the last token of every frame (where the task scores)."""
    with torch.no_grad():
        logits, _ = model(inputs)
    per_frame = logits.shape[1] // frames
    return logits[:, per_frame - 1 :: per_frame].argmax(-1).cpu()


def _survival(correct: np.ndarray, occluded: np.ndarray, offsets: np.ndarray, length: int) -> tuple:
    """(accuracy at hidden frames 1 … L, on hidden frames, on visible frames) of ``correct`` (B, T)."""
    by_offset = [float(correct[occluded & (offsets == j)].mean()) for j in range(1, length + 1)]
    hidden = float(correct[occluded].mean()) if occluded.any() else None
    return by_offset, hidden, float(correct[~occluded].mean())


def belief_survival(
    checkpoint: str | Path | Checkpoint, lengths: Sequence[int] = (0, 2, 4, 6), samples: int = 128, seed: int = 0
) -> dict[str, Any]:
    """For each occlusion length L: accuracy at the j-th hidden frame (j = 1 … L) and overall.

    Returns ``{"lengths", "by_offset": {L: [acc_1 … acc_L]}, "occluded_accuracy": {L: acc},
    "visible_accuracy": {L: acc}, "samples"}`` over ``samples`` sequences per length. A frame is right
    when its predicted class is the task's target: for moving digits place *and* identity, and then
    ``"position"`` and ``"identity"`` hold the same three measures for each alone.
    """
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
    _require_occlusion(ckpt.task.name)
    measures = ("by_offset", "occluded_accuracy", "visible_accuracy")
    parts = ("position", "identity") if ckpt.task.num_classes > ckpt.task.config.size**2 else ()
    out: dict[str, Any] = {
        "lengths": list(lengths),
        **{m: {} for m in measures},
        "samples": samples,
        **{part: {m: {} for m in measures} for part in parts},
    }
    for L in lengths:
        task = task_with(ckpt, {"occlusion_length": int(L)})
        batch = task.draw("survival", samples, seed, int(L))  # a synthetic task: sample(derive_seed("survival", …))
        T, cells = task.config.frames, task.config.size**2
        predicted = frame_predictions(ckpt.model.eval(), batch.inputs, T)  # (B, T)
        truth = batch.targets[:, task.chunk_size - 1 :: task.chunk_size]  # (B, T) the class each frame is scored on
        right = {
            "": predicted == truth,
            "position": predicted % cells == truth % cells,
            "identity": predicted // cells == truth // cells,
        }
        occluded = batch.meta["occluded"].numpy()
        start = batch.meta["occlusion_start"].numpy()
        offsets = np.arange(T)[None, :] - start[:, None] + 1  # 1 at the first hidden frame
        for part in ("", *parts):
            where = out[part] if part else out
            for name, value in zip(measures, _survival(right[part].numpy(), occluded, offsets, int(L)), strict=True):
                where[name][int(L)] = value
    return out


def memory_energy(layer: LayerTrace, span: tuple[int, int] | None = None) -> np.ndarray:
    """(K, D, H, W): the squared norm of ``h`` over channels at every voxel after each chunk (of ``span``, (first,
    last), when given: only those chunks are decoded)."""
    h = np.asarray(layer.h if span is None else layer.h[span[0] : span[1] + 1], dtype=np.float32)
    return (h**2).sum(axis=1)


def occlusion_memory(trace: Trace, layer: str | None = None) -> dict[str, Any]:
    """Where the last visible frame's write went, and whether the reads during the occlusion return to it.

    Returns ``{"last_visible", "write_voxel" (x, y, z), "sigma_voxels", "occluded_chunks",
    "read_distance_voxels", "read_within_2sigma", "energy_at_write", "energy_total"}`` (per occluded chunk:
    the read's distance from that write, whether it is within 2σ of it, and the memory energy at the
    write's voxel and in all), and over the occlusion ``reads_within_2sigma_count`` and
    ``median_read_distance_voxels``.
    """
    _require_occlusion(trace.info["task"])
    lay = trace.layer(layer)
    occluded = trace.meta["occluded"][: trace.num_chunks].astype(bool)
    hidden = np.flatnonzero(occluded)
    if not len(hidden) or hidden[0] == 0:
        return {"last_visible": None, "occluded_chunks": hidden.tolist()}
    last = int(hidden[0] - 1)
    write = in_voxels(lay.mu_write[last].astype(np.float64), lay.grid)
    reads = in_voxels(lay.mu_read[hidden].astype(np.float64), lay.grid)
    distance = np.sqrt(((reads - write) ** 2).sum(-1))
    in_sigmas = np.sqrt((((reads - write) / sigma_voxels_per_axis(lay.sigma[last], lay.grid)) ** 2).sum(-1))
    z, y, x = nearest_voxel(lay.mu_write[last], lay.grid)
    energy = memory_energy(lay)
    spread = median_sigma_voxels(torch.from_numpy(lay.sigma[last : last + 1].astype(np.float64)), lay.grid)
    near = in_sigmas <= 2.0
    return {
        "last_visible": last,
        "write_voxel": write.tolist(),
        "sigma_voxels": spread,
        "occluded_chunks": hidden.tolist(),
        "read_distance_voxels": distance.tolist(),
        "read_within_2sigma": near.tolist(),
        "reads_within_2sigma_count": int(near.sum()),
        "median_read_distance_voxels": float(np.median(distance)),
        "energy_at_write": energy[hidden, z, y, x].tolist(),
        "energy_total": energy[hidden].sum((1, 2, 3)).tolist(),
    }


__all__ = [
    "belief",
    "belief_of",
    "belief_survival",
    "memory_energy",
    "occlusion_memory",
    "frame_predictions",
    "position_marginal",
    "identity_marginal",
    "hit_rates",
    "frames_around",
    "TASKS",
]
