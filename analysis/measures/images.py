"""Masked patch reconstruction, seen: the image, its mask, the reconstruction, the error, and the memory on the image.

- :func:`reconstruct` runs one sample through any ``masked_patches`` checkpoint (every backbone) and
  returns the picture, which patches were hidden, the model's reconstruction and its error, with the
  sample's PSNR and SSIM computed exactly as ``tensor-memory eval`` does, and which patch each memory
  chunk ends on (:meth:`Reconstruction.chunk_patch`).
- :func:`memory_on_image` lays a memory layer's hidden state over the image after a chunk, where the
  memory's H × W grid is the image's patch grid (voxel (·, r, c) above patch (r, c)).
- :func:`write_places` puts each patch's write coordinate beside the patch's place in the image, and
  :func:`write_alignment` says, axis by axis, how much of the writes' layout the patches' layout explains.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import torch

from analysis.traces.capture import sample_batch
from analysis.traces.trace import Trace
from tensor_memory.memory.geometry import in_voxels
from tensor_memory.storage.checkpoint import Checkpoint, load_checkpoint
from tensor_memory.tasks.masked_patches import hidden_pixels, image_metrics

TASK = "masked_patches"


def _require_images(task_name: str) -> None:
    if task_name != TASK:
        raise ValueError(f"the image views need a {TASK} checkpoint or trace, got task {task_name!r}")


@dataclasses.dataclass(frozen=True)
class Reconstruction:
    """One image through one model. Pictures are (S, S, C) in [0, 1]; maps are (S, S)."""

    image: np.ndarray  # the truth
    hidden: np.ndarray  # (S, S) bool: pixels of the hidden patches
    masked: np.ndarray  # (N,) bool: which patches were hidden, raster order
    predicted: np.ndarray  # the model's prediction for every patch (visible ones included), clipped to [0, 1]
    composite: np.ndarray  # visible pixels as given, hidden ones as predicted: what the model hands back
    error: np.ndarray  # (S, S): |composite − truth| averaged over channels (0 on visible pixels)
    psnr: float  # dB over the hidden pixels (tensor-memory eval's psnr for this one image)
    ssim: float
    psnr_mean_fill: float  # the same for filling the hidden pixels with the visible mean
    ssim_mean_fill: float
    mask_rate: float
    patch: int

    @property
    def patch_grid(self) -> int:
        """Patches per side: the image is patch_grid × patch_grid patches."""
        return self.image.shape[0] // self.patch

    @property
    def psnr_gain(self) -> float:
        """dB of PSNR above filling the hidden pixels with the visible mean."""
        return self.psnr - self.psnr_mean_fill

    @property
    def ssim_gain(self) -> float:
        """SSIM above filling the hidden pixels with the visible mean."""
        return self.ssim - self.ssim_mean_fill

    def chunk_patch(self, chunk: int, chunk_size: int) -> tuple[int, int, int]:
        """(patch, row, column) of the last patch memory chunk ``chunk`` of ``chunk_size`` patches takes in, raster
        order (a chunk past the image: its last patch)."""
        patch = min(int(chunk) * chunk_size + chunk_size - 1, self.masked.size - 1)
        return (patch, *divmod(patch, self.patch_grid))


def reconstruct(
    checkpoint: str | Path | Checkpoint, seed: int = 0, index: int = 0, **task_params: Any
) -> Reconstruction:
    """Sample ``index`` of stream ``seed`` (the trace stream: test images) through a masked_patches checkpoint."""
    ckpt = checkpoint if isinstance(checkpoint, Checkpoint) else load_checkpoint(checkpoint)
    _require_images(ckpt.task.name)
    task, batch = sample_batch(ckpt, seed, [index], **task_params)
    with torch.no_grad():
        outputs, _ = ckpt.model.eval()(batch.inputs)
    if not torch.isfinite(outputs).all():
        raise ValueError("the model produced NaN or infinite outputs on this image; the checkpoint is broken")
    cfg = task.config
    image = batch.meta["image"][0].numpy()
    masked = batch.mask[0].numpy()
    hidden = hidden_pixels(masked, cfg.image_size, cfg.patch)
    predicted = np.clip(task.to_pixels(outputs, batch.meta)[0].numpy(), 0.0, 1.0)
    composite = np.where(hidden[..., None], predicted, image)
    return Reconstruction(
        image=image,
        hidden=hidden,
        masked=masked,
        predicted=predicted,
        composite=composite,
        error=np.abs(composite - image).mean(axis=-1),
        mask_rate=float(batch.meta["mask_rate"][0]),
        patch=cfg.patch,
        **image_metrics(image, predicted, hidden),
    )


def chunk_errors(trace: Trace) -> np.ndarray:
    """(K,) the root-mean-square pixel error of each chunk's prediction, NaN where the chunk is not scored.

    The trace keeps the model's outputs in each image's visible standard units; the image's visible spread
    (``meta["visible_spread"]``, (C,)) turns the error back into pixels. With several patches per chunk it is
    the error of the chunk's last hidden patch (the one the trace keeps).
    """
    _require_images(trace.info["task"])
    channels = int(trace.info["task_params"]["channels"])
    K = trace.num_chunks
    difference = (trace.chunks["prediction"][:K] - trace.chunks["target"][:K]).reshape(K, -1, channels)
    pixels = difference * np.asarray(trace.meta["visible_spread"], dtype=np.float64)  # (K, p², C) in pixel units
    rmse = np.sqrt(np.square(pixels).mean(axis=(1, 2)))
    return np.where(np.asarray(trace.chunks["scored"][:K], dtype=bool), rmse, np.nan)


def _patch_grid(trace: Trace) -> int:
    params = trace.info["task_params"]
    return int(params["image_size"]) // int(params["patch"])


def grid_aligned(trace: Trace, layer: str | None = None) -> bool:
    """Whether the memory's H × W grid is the image's patch grid, so that voxel (·, r, c) sits over patch (r, c)."""
    _require_images(trace.info["task"])
    n = _patch_grid(trace)
    _, H, W = trace.layer(layer).grid
    return (H, W) == (n, n)


def memory_on_image(trace: Trace, chunk: int, layer: str | None = None, field: str = "h") -> np.ndarray:
    """(n, n): ‖h‖ over channels after ``chunk``, averaged over the depth D, on the image's n × n patch grid.

    Needs :func:`grid_aligned`; raises ValueError otherwise (the grid and the image do not line up).
    """
    if not grid_aligned(trace, layer):
        n = _patch_grid(trace)
        raise ValueError(
            f"the memory's grid {trace.layer(layer).grid} is not laid over the {n} × {n} patch grid "
            f"(its H × W must be {n} × {n}): there is no voxel above each patch"
        )
    if not 0 <= chunk < trace.num_chunks:
        raise ValueError(f"chunk must be in 0..{trace.num_chunks - 1}, got {chunk}")
    volume = getattr(trace.layer(layer), field)[chunk].astype(np.float32)  # (C, D, H, W)
    return np.sqrt(np.square(volume).sum(axis=0)).mean(axis=0)  # (H, W) = (n, n)


def patch_places(trace: Trace) -> np.ndarray:
    """(K, 2) each chunk's patch centre in the memory's (x, y) units: column and row spread over [-1, 1].

    The place a write would take if the memory laid the image out on its H × W plane as it is.
    """
    _require_images(trace.info["task"])
    chunk_size = int(trace.info.get("chunk_size", 1))
    n = _patch_grid(trace)
    first = np.arange(trace.num_chunks) * chunk_size  # the chunk's first patch
    centre = first + (chunk_size - 1) / 2.0  # a chunk of several patches: the middle one's index
    row, col = np.divmod(centre, n)
    scale = lambda i: 2.0 * i / (n - 1) - 1.0  # noqa: E731
    return np.stack([scale(col), scale(row)], axis=-1)


def write_places(trace: Trace, layer: str | None = None) -> dict[str, np.ndarray]:
    """Per chunk: ``patch`` (K, 2) the patch's place as (x, y), ``write`` (K, 2) μ_write's (x, y), both in voxel
    units of the memory's W and H axes, and ``hidden`` (K,) whether the chunk's patch was hidden."""
    lay = trace.layer(layer)
    K = trace.num_chunks
    patch = patch_places(trace)
    patch_voxels = in_voxels(np.concatenate([patch, np.zeros((K, 1))], axis=-1), lay.grid)[:, :2]
    write_voxels = in_voxels(lay.mu_write[:K].astype(np.float64), lay.grid)[:, :2]
    chunk_size = int(trace.info.get("chunk_size", 1))
    hidden = np.asarray(trace.meta["masked"], dtype=bool)[: K * chunk_size].reshape(K, chunk_size).any(axis=1)
    return {"patch": patch_voxels, "write": write_voxels, "hidden": hidden}


def write_alignment(places: dict[str, np.ndarray]) -> dict[str, float]:
    """How much of each axis of the writes' layout an affine map of the patches' places explains.

    ``r2_x`` / ``r2_y``: 1 − residual / total variance of the writes' x (W) / y (H) after the best affine
    fit from the patch's (x, y) (0: the axis ignores where the patch is; 1: it lays the image out along that
    axis, perhaps turned or scaled). Each axis apart, so that a memory that keeps the columns but folds the
    rows together is not mistaken for one that keeps both. ``spread_voxels``: the writes' root-mean-square
    distance from their mean.
    """
    patch, write = places["patch"], places["write"]
    design = np.concatenate([patch, np.ones((len(patch), 1))], axis=1)  # (K, 3): affine in (x, y)
    fit, *_ = np.linalg.lstsq(design, write, rcond=None)
    residual = np.square(write - design @ fit).sum(axis=0)  # (2,) per axis
    total = np.square(write - write.mean(axis=0)).sum(axis=0)
    r2 = [1.0 - r / t if t > 1e-12 else 0.0 for r, t in zip(residual, total, strict=True)]
    return {
        "r2_x": float(r2[0]),
        "r2_y": float(r2[1]),
        "spread_voxels": float(np.sqrt(total.sum() / max(len(write), 1))),
    }


__all__ = [
    "Reconstruction",
    "reconstruct",
    "chunk_errors",
    "grid_aligned",
    "memory_on_image",
    "patch_places",
    "write_places",
    "write_alignment",
]
