"""Moving digits: a real handwritten digit moving behind an occluder — its place *and* identity, every frame.

The occlusion task with a real object: instead of a ball, one of scikit-learn's bundled handwritten
digits (the 1,797 8×8 scans of the UCI optical-digits set, grey levels 0–16 scaled to [0, 1]) moves
across ``size × size`` frames with a constant integer velocity in ``{−1, 0, 1}² \\ {(0, 0)}``,
wrapping at the edges. For ``occlusion_length`` consecutive frames (starting after at least two
visible ones) a grey curtain hides it. The target at every frame, occluded ones included, is the
digit's top-left cell *and* its identity: class ``digit · size² + y · size + x``, scored on the
frame's last token, with a head that scores identity, row and column apart (their logits add, so
the softmax over classes is the product of three).

Digits are split by a hash of their index (one in five to test, one in ten to validation): test clips
show scans the model never saw. ``accuracy``, ``occluded_accuracy`` and ``visible_accuracy`` need both
place and identity right; ``*_position_accuracy`` and ``*_identity_accuracy`` score each alone.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib

import torch
from torch import nn

from ..config import ConfigBase
from .base import Batch, Counts, derive_seed, generator, masked_accuracy, split_of
from .occlusion import Occlusion, PositionHead, check_clip, trajectories

DIGIT = 8  # scikit-learn's digits are 8 × 8 pixels
IDENTITIES = 10
TEST_EVERY, VALID_EVERY = 5, 10  # by the hash of a digit's index: bucket % 5 == 0 → test, % 10 == 1 → valid


@dataclasses.dataclass
class MovingDigitsConfig(ConfigBase):
    frames: int = 12  # T, frames per clip
    size: int = 16  # frames are size × size pixels (at least the digit's 8)
    patch: int = 4  # patch tokens are patch × patch pixels; must divide size
    occlusion_length: int = 4  # L, consecutive occluded frames (0: none)
    occlusion_start: int = -1  # first occluded frame: −1 = random per clip, else fixed, in [2, frames − L]

    def __post_init__(self) -> None:
        owner = "MovingDigitsConfig"
        check_clip(owner, self)
        if self.size < DIGIT:
            raise ValueError(f"{owner}.size must be at least the digit's {DIGIT} pixels, got {self.size}")

    @property
    def tokens_per_frame(self) -> int:
        return (self.size // self.patch) ** 2


def _bucket(index: int) -> int:
    return int(hashlib.sha256(str(index).encode()).hexdigest(), 16)


@functools.lru_cache(maxsize=1)
def _digits() -> tuple[torch.Tensor, torch.Tensor]:
    """scikit-learn's bundled digits: images (1797, 8, 8) in [0, 1] and labels (1797,) (read from the package)."""
    from sklearn.datasets import load_digits

    data = load_digits()
    return torch.from_numpy(data.images / 16.0).float(), torch.from_numpy(data.target).long()


def digit_indices(split: str) -> torch.Tensor:
    """The indices of the digits in ``split`` (train, valid or test)."""
    rule = {"test": lambda b: b % TEST_EVERY == 0, "valid": lambda b: b % VALID_EVERY == 1}
    keep = rule.get(split, lambda b: b % TEST_EVERY != 0 and b % VALID_EVERY != 1)
    return torch.tensor([i for i in range(len(_digits()[1])) if keep(_bucket(i))])


def paste(digits: torch.Tensor, positions: torch.Tensor, size: int) -> torch.Tensor:
    """Frames (B, T, size, size): each digit (B, 8, 8) with its top-left at ``positions`` (B, T, 2) as (y, x),
    wrapping at the edges (a pixel at offset (dy, dx) from the top-left lands at ((y + dy) % size, (x + dx) % size))."""
    cells = torch.arange(size)
    dy = (cells - positions[..., 0:1]) % size  # (B, T, size) row offset inside the digit
    dx = (cells - positions[..., 1:2]) % size  # (B, T, size)
    inside = (dy[..., :, None] < DIGIT) & (dx[..., None, :] < DIGIT)  # (B, T, size, size)
    rows = dy.clamp(max=DIGIT - 1)[..., :, None].expand(*inside.shape)
    cols = dx.clamp(max=DIGIT - 1)[..., None, :].expand(*inside.shape)
    B, T = positions.shape[:2]
    image = digits[:, None].expand(B, T, DIGIT, DIGIT)
    values = image[torch.arange(B)[:, None, None, None], torch.arange(T)[None, :, None, None], rows, cols]
    return torch.where(inside, values, torch.zeros_like(values))


class DigitPositionHead(PositionHead):
    """Features (…, dim) → logits over identity × size² cells: ``digit(f)[d] + row(f)[y] + col(f)[x]``
    for class ``d · size² + y · size + x``, so the cross-entropy is CE(identity) + CE(row) + CE(column)."""

    def __init__(self, dim: int, size: int) -> None:
        super().__init__(dim, size)
        self.digit = nn.Linear(dim, IDENTITIES)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        cells = super().forward(features)  # (…, size²)
        return (self.digit(features)[..., :, None] + cells[..., None, :]).flatten(-2)  # (…, 10 · size²)


class MovingDigits(Occlusion):
    name = "moving_digits"
    Config = MovingDigitsConfig

    @property
    def num_classes(self) -> int:
        return IDENTITIES * self.config.size**2

    def _sample(self, split: str, batch_size: int, seed: int) -> Batch:
        cfg = self.config
        g = generator(seed)
        clip = trajectories(cfg, batch_size, g)
        pool = digit_indices(split)
        chosen = pool[torch.randint(len(pool), (batch_size,), generator=g)]  # (B,) digit indices
        images, labels = _digits()
        frames = paste(images[chosen], clip["positions"], cfg.size)  # (B, T, S, S)
        cells = clip["positions"][..., 0] * cfg.size + clip["positions"][..., 1]  # (B, T)
        batch = self.clip_batch(frames, clip, labels[chosen][:, None] * cfg.size**2 + cells)
        batch.meta.update(digit=labels[chosen], digit_index=chosen)
        return batch

    def sample(self, batch_size: int, seed: int) -> Batch:
        return self._sample("train", batch_size, seed)

    def draw(self, purpose: str, batch_size: int, seed: int, index: int) -> Batch:
        return self._sample(split_of(purpose), batch_size, derive_seed(purpose, seed, index))

    def head(self, dim: int) -> nn.Module:
        return DigitPositionHead(dim, self.config.size)

    def counts(self, logits: torch.Tensor, batch: Batch) -> Counts:
        occluded = batch.meta["occluded"].to(logits.device).repeat_interleave(self.config.tokens_per_frame, dim=1)
        cells = self.config.size**2
        predicted = logits.argmax(-1)
        same_digit = predicted // cells == batch.targets // cells
        same_cell = predicted % cells == batch.targets % cells
        out = {}
        for prefix, where in (
            ("", batch.mask),
            ("occluded_", batch.mask & occluded),
            ("visible_", batch.mask & ~occluded),
        ):
            out[f"{prefix}accuracy"] = masked_accuracy(logits, batch, where)
            out[f"{prefix}position_accuracy"] = (float((same_cell & where).sum()), float(where.sum()))
            out[f"{prefix}identity_accuracy"] = (float((same_digit & where).sum()), float(where.sum()))
        return out
