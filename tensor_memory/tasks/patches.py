"""Cutting pictures into patch tokens and back: every vision task's one convention.

Patches come in raster order (row by row, left to right); a patch's pixels are row-major with the
channels last. A clip of frames is its frames' patches one frame after the other.
"""

from __future__ import annotations

import torch


def patchify(images: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, S, S, C) → (B, (S/patch)², patch²·C)."""
    B, S, _, C = images.shape
    n = S // patch
    x = images.reshape(B, n, patch, n, patch, C)  # (B, patch row, pixel row, patch column, pixel column, C)
    x = x.permute(0, 1, 3, 2, 4, 5)  # (B, n, n, p, p, C): which patch first, then its pixels
    return x.reshape(B, n * n, patch * patch * C)


def unpatchify(patches: torch.Tensor, patch: int, channels: int) -> torch.Tensor:
    """The inverse of :func:`patchify`: (B, N, patch²·C) → (B, S, S, C)."""
    B, N, _ = patches.shape
    n = int(round(N**0.5))
    x = patches.reshape(B, n, n, patch, patch, channels).permute(0, 1, 3, 2, 4, 5)  # (B, n, p, n, p, C)
    return x.reshape(B, n * patch, n * patch, channels)


def clip_patches(frames: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, T, S, S, C) → (B, T·(S/patch)², patch²·C): each frame's patches, frame after frame."""
    B, T, S, _, C = frames.shape
    per_frame = patchify(frames.reshape(B * T, S, S, C), patch)  # (B·T, n², p²·C)
    return per_frame.reshape(B, T * per_frame.shape[1], per_frame.shape[2])


__all__ = ["patchify", "unpatchify", "clip_patches"]
