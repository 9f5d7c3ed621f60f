"""Occlusion (object permanence): track a moving ball through frames where it is hidden.

Frames are ``size × size``; one ``ball × ball`` ball starts with its top-left anywhere and moves
with a constant integer velocity in ``{−1, 0, 1}² \\ {(0, 0)}``, wrapping at the edges (its
pixels wrap too). Visible frames have background 0 and ball pixels 1. For ``occlusion_length``
consecutive frames starting at ``s ∈ [2, frames − occlusion_length]`` (so at least two visible
frames come first, and the occlusion may run to the very end) an occluder hides the ball: those
frames are a uniform gray curtain, every pixel 0.5.

Each frame is cut into ``(size / patch)²`` patch tokens (row-major), one memory chunk per frame.
The target at *every* frame — occluded ones included — is the ball's top-left cell
``y · size + x``, scored on the last token of the frame's chunk. The model is told nothing
about occlusion or the frame index beyond what the pixels show.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

from .. import limits as L
from ..config import ConfigBase, require_int
from .base import Batch, Counts, FrameTask, embedding, generator, masked_accuracy
from .patches import clip_patches

# The eight velocities (dy, dx) ∈ {−1, 0, 1}² \ {(0, 0)}.
VELOCITIES = torch.tensor([(dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1) if (dy, dx) != (0, 0)])
CURTAIN = 0.5  # the value of every pixel of an occluded frame
HEADS = ("factorised", "joint")


def _require_range(owner: str, name: str, value, low: int, high: int) -> None:
    require_int(owner, name, value, low)
    if value > high:
        raise ValueError(f"{owner}.{name} must be an integer in [{low}, {high}], got {value!r}")


def check_clip(owner: str, cfg) -> None:
    """Validate the fields every occlusion clip has: frames, size, patch, occlusion_length, occlusion_start."""
    require_int(owner, "frames", cfg.frames, 2, L.MAX_TASK_ITEMS)
    require_int(owner, "size", cfg.size, 2, L.MAX_GRID_SIDE)
    _require_range(owner, "patch", cfg.patch, 1, cfg.size)
    if cfg.size % cfg.patch:
        raise ValueError(f"{owner}.patch must divide {owner}.size={cfg.size}, got {cfg.patch}")
    tokens = cfg.frames * (cfg.size // cfg.patch) ** 2
    if tokens > L.MAX_SEQUENCE:
        raise ValueError(
            f"{owner}: frames × (size / patch)² = {tokens:,} tokens, over the {L.MAX_SEQUENCE:,} "
            f"a sample may have (tensor_memory/limits.py); use fewer frames or larger patches"
        )
    _require_range(owner, "occlusion_length", cfg.occlusion_length, 0, cfg.frames - 2)
    start = cfg.occlusion_start
    high = cfg.frames - cfg.occlusion_length
    if isinstance(start, bool) or not isinstance(start, int) or not (start == -1 or 2 <= start <= high):
        raise ValueError(
            f"{owner}.occlusion_start must be -1 (random) or an integer in [2, {high}] "
            f"(= [2, frames - occlusion_length]), got {start!r}"
        )


@dataclasses.dataclass
class OcclusionConfig(ConfigBase):
    frames: int = 12  # T, frames per sequence
    size: int = 16  # frames are size × size pixels
    ball: int = 2  # the ball is ball × ball pixels
    patch: int = 4  # patch tokens are patch × patch pixels; must divide size
    occlusion_length: int = 4  # L, consecutive occluded frames (0: none)
    occlusion_start: int = -1  # first occluded frame: −1 = random per sample, else fixed, in [2, frames − L]
    head: str = (
        "factorised"  # "factorised": row and column scored apart (see PositionHead); "joint": one size²-way Linear
    )

    def __post_init__(self) -> None:
        owner = "OcclusionConfig"
        check_clip(owner, self)
        _require_range(owner, "ball", self.ball, 1, self.size - 1)
        if self.head not in HEADS:
            raise ValueError(f"{owner}.head must be one of {', '.join(map(repr, HEADS))}, got {self.head!r}")

    @property
    def tokens_per_frame(self) -> int:
        return (self.size // self.patch) ** 2


class PatchEncoder(nn.Module):
    """pixels (B, N, patch²·channels) → Linear, plus a learned embedding of the patch's place in its frame."""

    def __init__(self, patch: int, tokens_per_frame: int, dim: int, channels: int = 1) -> None:
        super().__init__()
        self.pixels = nn.Linear(patch * patch * channels, dim)
        self.place = embedding(tokens_per_frame, dim)

    def forward(self, pixels: torch.Tensor, patch_index: torch.Tensor) -> torch.Tensor:
        return self.pixels(pixels) + self.place(patch_index)


class PositionHead(nn.Module):
    """Features (…, dim) → logits over the size² cells, scored as a row plus a column.

    ``logit[y·size + x] = row(f)[y] + col(f)[x]``, so the softmax over cells is the product of a
    softmax over rows and one over columns, and the cross-entropy is CE(row) + CE(column). The
    targets and metrics stay those of one size²-way class; the head only learns the two
    coordinates apart, which a single size²-way Linear has to learn cell by cell (measured in
    docs/trainability.md).
    """

    def __init__(self, dim: int, size: int) -> None:
        super().__init__()
        self.row = nn.Linear(dim, size)
        self.col = nn.Linear(dim, size)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        scores = self.row(features)[..., :, None] + self.col(features)[..., None, :]  # (…, size, size) as (y, x)
        return scores.flatten(-2)  # (…, size²), cell y·size + x


def trajectories(cfg, batch_size: int, g: torch.Generator) -> dict[str, torch.Tensor]:
    """Random clips' motion: ``positions`` (B, T, 2) top-left (y, x) per frame, ``velocity`` (B, 2), the first
    occluded frame ``occlusion_start`` (B,) and ``occluded`` (B, T), drawn from ``g`` in that order."""
    B, T, S, L = batch_size, cfg.frames, cfg.size, cfg.occlusion_length
    start_pos = torch.randint(S, (B, 2), generator=g)  # (B, 2) top-left (y, x) at frame 0
    velocity = VELOCITIES[torch.randint(len(VELOCITIES), (B,), generator=g)]  # (B, 2)
    starts = torch.randint(2, T - L + 1, (B,), generator=g)  # drawn even when fixed: one stream
    if cfg.occlusion_start != -1:
        starts = torch.full((B,), cfg.occlusion_start, dtype=torch.long)
    t = torch.arange(T)
    positions = (start_pos[:, None, :] + t[None, :, None] * velocity[:, None, :]) % S  # (B, T, 2)
    occluded = (t[None, :] >= starts[:, None]) & (t[None, :] < starts[:, None] + L)  # (B, T)
    return {"occluded": occluded, "positions": positions, "velocity": velocity, "occlusion_start": starts}


def render(positions: torch.Tensor, size: int, ball: int) -> torch.Tensor:
    """Frames (…, size, size) float: 1 on the ball (top-left ``positions`` (…, 2) as (y, x), wrapping), else 0."""
    cells = torch.arange(size)
    inside_y = (cells - positions[..., 0:1]) % size < ball  # (…, size) rows the ball covers
    inside_x = (cells - positions[..., 1:2]) % size < ball  # (…, size) columns
    return (inside_y[..., :, None] & inside_x[..., None, :]).float()


def to_patches(frames: torch.Tensor, patch: int) -> torch.Tensor:
    """(B, T, S, S) grey frames → (B, T·(S/patch)², patch²): each frame's patches row-major, pixels row-major."""
    return clip_patches(frames[..., None], patch)


class Occlusion(FrameTask):
    name = "occlusion"
    Config = OcclusionConfig
    sweep_field = "occlusion_length"
    sweep_values = (0, 2, 4, 6)
    distance_unit = "frames"
    horizon = "frames"

    @property
    def num_classes(self) -> int:
        return self.config.size**2

    def sample(self, batch_size: int, seed: int) -> Batch:
        cfg = self.config
        g = generator(seed)
        clip = trajectories(cfg, batch_size, g)
        frames = render(clip["positions"], cfg.size, cfg.ball)  # (B, T, S, S)
        return self.clip_batch(frames, clip, clip["positions"][..., 0] * cfg.size + clip["positions"][..., 1])

    def clip_batch(self, frames: torch.Tensor, clip: dict[str, torch.Tensor], classes: torch.Tensor) -> Batch:
        """The batch of clips ``frames`` (B, T, S, S) with their trajectories, the curtain drawn over occluded
        frames, and ``classes`` (B, T) the target of each frame, scored on the frame's last token."""
        cfg = self.config
        B, T, P = frames.shape[0], cfg.frames, cfg.tokens_per_frame
        occluded = clip["occluded"]
        frames = torch.where(occluded[:, :, None, None], torch.full_like(frames, CURTAIN), frames)
        pixels = to_patches(frames, cfg.patch)  # (B, N, patch²)
        patch_index = torch.arange(P).repeat(T).expand(B, T * P)  # (B, N) place within the frame
        last = torch.arange(T) * P + P - 1  # the last token of each frame
        targets = torch.zeros(B, T * P, dtype=torch.long)
        targets[:, last] = classes
        mask = torch.zeros(B, T * P, dtype=torch.bool)
        mask[:, last] = True
        meta = {"frames": frames, **clip}
        return Batch({"pixels": pixels, "patch_index": patch_index.contiguous()}, targets, mask, meta)

    def encoder(self, dim: int) -> nn.Module:
        cfg = self.config
        return PatchEncoder(cfg.patch, cfg.tokens_per_frame, dim)

    def head(self, dim: int) -> nn.Module:
        if self.config.head == "joint":
            return nn.Linear(dim, self.num_classes)
        return PositionHead(dim, self.config.size)

    def distances(self, batch: Batch) -> torch.Tensor:
        """Frames since the ball was last seen: 0 on a visible frame, k on the k-th occluded one; −1 off the
        scored tokens."""
        T = self.config.frames
        t = torch.arange(T)
        since = (t[None, :] - batch.meta["occlusion_start"][:, None] + 1) * batch.meta["occluded"]  # (B, T)
        per_token = since.repeat_interleave(self.config.tokens_per_frame, dim=1)  # (B, N)
        return torch.where(batch.mask, per_token, -1)

    def counts(self, logits: torch.Tensor, batch: Batch) -> Counts:
        occluded = batch.meta["occluded"].to(batch.mask.device).repeat_interleave(self.config.tokens_per_frame, dim=1)
        return {
            "accuracy": masked_accuracy(logits, batch, batch.mask),
            "occluded_accuracy": masked_accuracy(logits, batch, batch.mask & occluded),
            "visible_accuracy": masked_accuracy(logits, batch, batch.mask & ~occluded),
        }
