"""Does the memory's space mean something? Linear read-outs of the world from its addressing and state.

* Occlusion — :func:`write_position_fit`: a linear map from a chunk's write coordinates μ_write to
  the ball's position in that frame, fitted on the visible frames of samples of one seed and
  scored (R²) on the samples of other seeds, on visible and on hidden frames apart. R² near 1: the
  writes go where the ball is.
* Map building — :func:`map_probe`: a linear probe from a cell's memory to its occupancy. A cell's
  memory is what the model itself reads for that cell: every sample is run with one query per cell
  (raster order) after its observations, and the layer's read vector at each query is the feature.
  The probe is fitted on the observed cells of one seed's samples and scored on other seeds';
  :func:`decoded_map` applies it to one sample, beside the true map.

Fitting and scoring samples never overlap (different seeds of the trace stream). Their figures
are in ``analysis/figures/world.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from analysis.traces.capture import capture_many, run_recorded, sample_batch
from analysis.traces.segment_recorder import memory_chunk_size
from tensor_memory.storage.checkpoint import Checkpoint

RIDGE = 1e-3  # a small ridge on the least-squares fits: features that never vary do not blow up
SAMPLES, FIT_SEED, EVAL_SEEDS = 64, 0, (1, 2, 3)  # a read-out is fitted on one seed's samples, scored on three others'
READOUT_SAMPLES = SAMPLES * (1 + len(EVAL_SEEDS))  # the samples a read-out runs through the model


def _require(ckpt: Checkpoint, task: str) -> None:
    if ckpt.task.name != task:
        raise ValueError(f"this read-out is for {task} checkpoints; {ckpt.path} is a {ckpt.task.name} checkpoint")


def fit_linear(features: np.ndarray, targets: np.ndarray, ridge: float = RIDGE) -> np.ndarray:
    """Least squares with a bias column and a small ridge: (n, f), (n, t) → weights (f + 1, t)."""
    x = np.concatenate([features, np.ones((len(features), 1))], axis=1)
    penalty = ridge * np.eye(x.shape[1])
    penalty[-1, -1] = 0.0  # the bias is not shrunk
    return np.linalg.solve(x.T @ x + penalty, x.T @ targets)


def apply_linear(weights: np.ndarray, features: np.ndarray) -> np.ndarray:
    return features @ weights[:-1] + weights[-1]


def r_squared(truth: np.ndarray, predicted: np.ndarray) -> float:
    """1 − SS_res / SS_tot over every column together (0 for predicting the mean; can be negative)."""
    total = ((truth - truth.mean(0)) ** 2).sum()
    return float(1.0 - ((truth - predicted) ** 2).sum() / total) if total > 0 else float("nan")


def place_fit(mu: np.ndarray, places: np.ndarray, where: np.ndarray | None = None) -> float:
    """Whether writes land where the task's true places are: R² of a linear map from μ (S, K, 3) to the places
    (S, K, p), fitted on the first half of the samples and scored on the other half (0: no better than the mean).
    ``where`` (S, K) bool keeps only those writes (a moving object's visible frames)."""
    half = len(mu) // 2
    if half == 0 or len(mu) - half == 0:
        raise ValueError(f"place_fit needs at least two samples (one to fit, one to score), got {len(mu)}")
    keep = np.ones(mu.shape[:2], dtype=bool) if where is None else np.asarray(where, dtype=bool)
    weights = fit_linear(mu[:half][keep[:half]], places[:half][keep[:half]])
    return r_squared(places[half:][keep[half:]], apply_linear(weights, mu[half:][keep[half:]]))


# ---------------------------------------------------------------------------------------
# Occlusion: do the writes follow the ball?
# ---------------------------------------------------------------------------------------


def _writes_and_positions(ckpt: Checkpoint, seed: int, samples: int, layer: str | None):
    """μ_write (S, K, 3), ball positions (S, K, 2) as (y, x), occluded (S, K) for one seed's samples."""
    traces = capture_many(ckpt, seed, range(samples), gates=False, cell_state=False, progress=False)
    name = layer or traces[0].layer_names[-1]
    mu = np.stack([t.layer(name).mu_write for t in traces]).astype(np.float64)
    K = mu.shape[1]
    positions = np.stack([t.meta["positions"][:K] for t in traces]).astype(np.float64)
    occluded = np.stack([t.meta["occluded"][:K] for t in traces]).astype(bool)
    return name, mu, positions, occluded


def write_position_fit(
    ckpt: Checkpoint,
    layer: str | None = None,
    samples: int = SAMPLES,
    fit_seed: int = FIT_SEED,
    eval_seeds: Sequence[int] = EVAL_SEEDS,
) -> dict[str, Any]:
    """How well a linear map of μ_write predicts the ball's (y, x): R² on samples not used to fit it.

    Returns ``{"layer", "weights" (4, 2), "r2_visible", "r2_hidden", "fit_frames", "eval_frames"}``.
    """
    _require(ckpt, "occlusion")
    if fit_seed in eval_seeds:
        raise ValueError(
            f"fit_seed {fit_seed} is among eval_seeds {list(eval_seeds)}: fit and score on different samples"
        )
    name, mu, positions, occluded = _writes_and_positions(ckpt, fit_seed, samples, layer)
    weights = fit_linear(mu[~occluded], positions[~occluded])
    parts = [_writes_and_positions(ckpt, seed, samples, name)[1:] for seed in eval_seeds]
    mu_e, pos_e, occ_e = (np.concatenate(p) for p in zip(*parts, strict=True))
    scores = {}
    for label, where in (("visible", ~occ_e), ("hidden", occ_e)):
        scores[f"r2_{label}"] = r_squared(pos_e[where], apply_linear(weights, mu_e[where])) if where.any() else None
    return {
        "layer": name,
        "weights": weights,
        **scores,
        "fit_frames": int((~occluded).sum()),
        "eval_frames": int(occ_e.size),
        "fit_seed": fit_seed,
        "eval_seeds": list(eval_seeds),
    }


# ---------------------------------------------------------------------------------------
# Map building: the map decoded from the memory
# ---------------------------------------------------------------------------------------


def _cell_reads(ckpt: Checkpoint, seed: int, indices: Sequence[int], layer: str | None, **task_params: Any):
    """Per sample: the layer's read vector at one query per cell, (S, cells, C), the map and what was observed.

    Samples are the task's, with their queries replaced by every cell in raster order.
    """
    size = ckpt.task.config.map_size
    task, batch = sample_batch(ckpt, seed, list(indices), **{**task_params, "queries": size * size})
    T = task.config.observations
    inputs = dict(batch.inputs)
    cells = torch.arange(size * size)
    inputs["row"], inputs["col"] = inputs["row"].clone(), inputs["col"].clone()
    inputs["row"][:, T:], inputs["col"][:, T:] = cells // size, cells % size  # (S, cells) raster order
    _, layers = run_recorded(
        ckpt.model.eval(), inputs, memory_chunk_size(ckpt.model), gates=False, cell_state=False, progress=False
    )
    name = layer or sorted(layers)[-1]
    if name not in layers:
        raise ValueError(f"no memory layer {name!r}; this checkpoint has {sorted(layers)}")
    reads = layers[name]["read"][:, T:].astype(np.float64)  # (S, cells, C): chunk = one token here
    truth = batch.meta["map"].reshape(len(indices), -1).numpy()
    observed = batch.meta["observed"].reshape(len(indices), -1).numpy()
    return name, reads, truth, observed


def map_probe(
    ckpt: Checkpoint,
    layer: str | None = None,
    samples: int = SAMPLES,
    fit_seed: int = FIT_SEED,
    eval_seeds: Sequence[int] = EVAL_SEEDS,
) -> dict[str, Any]:
    """A linear probe from a cell's memory read to its occupancy, scored on unseen samples.

    Returns ``{"layer", "weights" (C + 1, 1), "accuracy_observed", "accuracy_all", "cells_observed"}``:
    accuracy on the cells some observation revealed, and on every cell (unrevealed ones are guesses).
    """
    _require(ckpt, "map_building")
    if fit_seed in eval_seeds:
        raise ValueError(
            f"fit_seed {fit_seed} is among eval_seeds {list(eval_seeds)}: fit and score on different samples"
        )
    name, reads, truth, observed = _cell_reads(ckpt, fit_seed, range(samples), layer)
    weights = fit_linear(reads[observed], truth[observed][:, None].astype(np.float64))
    parts = [_cell_reads(ckpt, seed, range(samples), name)[1:] for seed in eval_seeds]
    reads_e, truth_e, observed_e = (np.concatenate(p) for p in zip(*parts, strict=True))
    hit = (apply_linear(weights, reads_e)[..., 0] > 0.5) == truth_e.astype(bool)
    return {
        "layer": name,
        "weights": weights,
        "accuracy_observed": float(hit[observed_e].mean()),
        "accuracy_all": float(hit.mean()),
        "cells_observed": float(observed_e.mean()),
        "fit_seed": fit_seed,
        "eval_seeds": list(eval_seeds),
    }


def decoded_map(
    ckpt: Checkpoint, probe: dict[str, Any], seed: int = 0, index: int = 0, **task_params: Any
) -> dict[str, np.ndarray]:
    """One sample's true map, observed cells and the probe's occupancy estimate, each (size, size).

    The sample is sample ``index`` of stream ``seed`` (the one a trace of it shows: only its queries differ).
    """
    size = ckpt.task.config.map_size
    _, reads, truth, observed = _cell_reads(ckpt, seed, [index], probe["layer"], **task_params)
    estimate = np.clip(apply_linear(probe["weights"], reads[0])[:, 0], 0.0, 1.0)
    return {
        "map": truth[0].reshape(size, size),
        "observed": observed[0].reshape(size, size),
        "decoded": estimate.reshape(size, size),
    }


READOUTS = {"occlusion": write_position_fit, "map_building": map_probe}  # the tasks a linear read-out can check


def world_readout(ckpt: Checkpoint, layer: str | None = None) -> dict[str, Any] | None:
    """The checkpoint's task's linear read-out (:data:`READOUTS`), fitted on seed 0 and scored on seeds 1–3; None
    for a task without one."""
    fit = READOUTS.get(ckpt.task.name)
    return None if fit is None else fit(ckpt, layer)


__all__ = [
    "fit_linear",
    "apply_linear",
    "r_squared",
    "write_position_fit",
    "map_probe",
    "decoded_map",
    "world_readout",
    "READOUTS",
    "READOUT_SAMPLES",
]
