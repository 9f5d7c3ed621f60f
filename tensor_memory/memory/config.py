"""A memory layer's settings (:class:`MemoryConfig`) and its recurrent state (:class:`MemoryState`)."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch

from .. import limits as L
from ..config import ConfigBase, require_float, require_int

# Initialisations a config can choose. "random" is PyTorch's default Linear init. The others
# make a memory trainable where the signal has to find its way in: with "sum" a chunk's summary
# sees a token wherever it sits in the chunk (a random projection of the concatenation has to
# learn that per position), and with "centre" reads and writes overlap before any training.
INIT_CHOICES = {"summary_init": ("random", "sum"), "coord_init": ("random", "centre")}

# How a chunk's write reaches the volume. "dense" is the mechanism as written: the Gaussian
# touches every voxel and every voxel is updated. "windowed" cuts the Gaussian to a box of
# ±window_k·σ around μ (exactly zero outside). "local" also updates only the cells of that box
# plus a one-voxel margin (what the 3-tap convolutions reach); every other cell keeps its
# state exactly — the paper's suggested remedy for the cost of dense updates.
WRITE_MODES = ("dense", "windowed", "local")

# What the layer returns. "residual": y = x + σ(γ)·m, the token stream with the read added (LN_m and the
# gate inside, as DESIGN.md places them). "message": y = m, the projected read alone, with no γ: the paper's
# public TensorMemoryInterface, whose blocks add their own norm and gate (public_code.py imports it).
OUTPUTS = ("residual", "message")
# A last incomplete chunk. "pending": read now, written once its tokens are complete (a stream cut anywhere
# gives the outputs of one pass). "pad": zero-padded to a whole chunk and written at once, as the public
# code does; nothing is carried, so a stream cut inside a chunk differs from one pass.
PARTIAL_CHUNKS = ("pending", "pad")
# How the coordinate head's output becomes (x, y, z) in [-1, 1]. "tanh": tanh of three numbers (the mechanism as
# written). "soft_argmax": the head gives one logit per voxel along each axis and the coordinate is the expected
# voxel centre under their softmax (DSNT, arXiv 1801.07372): every voxel of every axis gets gradient, where tanh
# gives one direction that vanishes at a face. A remedy of issue 30, off by default.
COORDINATES = ("tanh", "soft_argmax")
# Where a chunk's content lands. "gaussian": the soft write of step 4. "nearest": all of it on the voxel nearest μ_write,
# a hard write through which no gradient reaches μ_write or σ — an ablation of issue 30 (the paper's public code has it).
WRITE_PROFILES = ("gaussian", "nearest")
UPDATE_TAPS = (3, 1)  # the update's depthwise convolutions: 3 taps per axis, or 1 (a 1×1×1 update: no neighbourhood)
# Two remedies of issue 30 on the read, off by default. read_jitter r > 0: a read's value is still the trilinear
# sample at μ_read, but its gradient with respect to μ_read is the mean of the gradients at the six points r voxel
# spacings either side of μ_read along each axis (Linearized Multi-Sampling, arXiv 1901.07124, simplified to a fixed
# stencil): a read feels writes a few voxels away, where trilinear interpolation feels only its 8 voxels.
# voxel_codes: every read samples h plus a learned volume of voxel identities (CoordConv; the Block-Recurrent
# Transformer's state IDs), so a read says where it read even from an empty memory; the codes start as the voxel's
# (x, y, z) mixed into the C channels by a fixed random matrix, so nearby voxels start with nearby codes.
# Where writes go, a remedy of issue 30 for moving objects. "free": each write's place comes from its own summary
# (the mechanism). "integrated": path integration, as GTM-SM does: a sequence's first write is placed as "free" does,
# every later one at the last write's place plus a step a head predicts from the chunk (summed before tanh, so the
# path stays in the grid); the last place travels in MemoryState.place, so a stream cut anywhere gives one pass.
WRITE_PATHS = ("free", "integrated")


@dataclasses.dataclass
class MemoryConfig(ConfigBase):
    token_dim: int = 64  # d, the width of the tokens that read and write
    channels: int = 16  # C, features per voxel
    grid: tuple[int, int, int] = (6, 6, 6)  # (D, H, W) voxels
    chunk_size: int = 1  # tokens per read/write step
    gate_init: float = -2.0  # γ at init: σ(-2) ≈ 0.12; use ≈ -9 to attach to a pretrained model
    sigma_init: float = 0.4  # initial write spread, normalised units (one voxel spacing at 6 voxels)
    sigma_min: float = 0.05  # floor under the learned spread, so a write never becomes a spike
    forget_bias: float = 4.0  # forget-gate bias at init: σ(4) = 0.98, so a write survives tens of chunks (1 forgot it in ~5)
    summary_init: str = "random"  # "sum": the write summary starts as the chunk's tokens summed (÷√chunk)
    summary_norm: bool = True  # layer-normalise s_k (no gain): without it the projection grows and tanh pins writes at a face
    coord_init: str = "random"  # "centre": every read and write starts at the grid's centre
    coordinates: str = "tanh"  # "tanh" | "soft_argmax", see COORDINATES
    write_mode: str = "dense"  # "dense" | "windowed" | "local", see WRITE_MODES
    window_k: float = 3.0  # half-width of the write box in σ ("windowed" and "local")
    # Ablations of the mechanism (issue 30's table in docs/results.md); the defaults are the mechanism.
    write_profile: str = "gaussian"  # "gaussian" | "nearest", see WRITE_PROFILES
    separate_heads: bool = False  # True: reads get a coordinate head of their own instead of sharing the writes'
    update_taps: int = 3  # 3 | 1, see UPDATE_TAPS
    # Remedies of issue 30 on the read (see above); the defaults are the mechanism.
    read_jitter: float = 0.0  # r in voxel spacings; 0: a read's gradient is the trilinear one
    voxel_codes: bool = False  # True: reads sample h + a learned (D, H, W, C) volume of voxel codes
    write_path: str = "free"  # "free" | "integrated", see WRITE_PATHS
    # Options for the paper's public code (public_code.py sets them all); the defaults are this mechanism.
    input_norm: bool = True  # LN_m on the incoming tokens; False: the caller normalises them
    output: str = "residual"  # "residual" | "message", see OUTPUTS
    partial_chunk: str = "pending"  # "pending" | "pad", see PARTIAL_CHUNKS
    depthwise_bias: bool = False  # a learned bias after each depthwise convolution, (3 axes, 2C)
    write_eps: float = 0.0  # added to 2σ² in the Gaussian write: exp(-‖p − μ‖² / (2σ² + write_eps))
    sigma_scale: float = 1.0  # σ = sigma_scale · (softplus(·) + sigma_min)

    def __post_init__(self) -> None:
        owner = "MemoryConfig"
        require_int(owner, "token_dim", self.token_dim, 1, L.MAX_DIM)
        require_int(owner, "channels", self.channels, 1, L.MAX_CHANNELS)
        require_int(owner, "chunk_size", self.chunk_size, 1, L.MAX_SEQUENCE)
        grid = tuple(self.grid) if isinstance(self.grid, (list, tuple)) else None
        if grid is None or len(grid) != 3:
            raise ValueError(f"{owner}.grid must be three integers (D, H, W), each >= 2, got {self.grid!r}")
        for axis, n in zip("DHW", grid):
            require_int(owner, f"grid[{axis}]", n, 2, L.MAX_GRID_SIDE)
        self.grid = grid  # type: ignore[assignment]
        require_int(owner, "grid (D·H·W voxels)", math.prod(grid), 8, L.MAX_GRID_CELLS)
        require_int(owner, "channels × grid (2·C·D·H·W state numbers)", self.state_numel, 1, L.MAX_STATE_NUMBERS)
        require_float(owner, "gate_init", self.gate_init)
        require_float(owner, "sigma_min", self.sigma_min, 0.0, low_open=True)
        require_float(owner, "sigma_scale", self.sigma_scale, 0.0, low_open=True)
        require_float(owner, "sigma_init", self.sigma_init, self.sigma_min * self.sigma_scale, low_open=True)
        require_float(owner, "write_eps", self.write_eps, 0.0)
        require_float(owner, "forget_bias", self.forget_bias)
        for name in ("summary_norm", "input_norm", "depthwise_bias", "separate_heads", "voxel_codes"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{owner}.{name} must be True or False, got {getattr(self, name)!r}")
        choices = {**INIT_CHOICES, "write_mode": WRITE_MODES, "output": OUTPUTS, "partial_chunk": PARTIAL_CHUNKS,
                   "coordinates": COORDINATES, "write_profile": WRITE_PROFILES, "write_path": WRITE_PATHS}
        for name, allowed in choices.items():
            value = getattr(self, name)
            if not isinstance(value, str) or value not in allowed:
                raise ValueError(f"{owner}.{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
        require_float(owner, "window_k", self.window_k, 0.0, low_open=True)
        require_float(owner, "read_jitter", self.read_jitter, 0.0, float(L.MAX_GRID_SIDE))
        if isinstance(self.update_taps, bool) or self.update_taps not in UPDATE_TAPS:
            raise ValueError(f"{owner}.update_taps must be 3 (the mechanism) or 1 (a 1×1×1 update), "
                             f"got {self.update_taps!r}")
        if self.write_profile == "nearest" and self.write_mode != "dense":
            raise ValueError(f"{owner}.write_profile='nearest' needs write_mode='dense': a ±kσ box could cut the one "
                             f"voxel a hard write lands on (got write_mode={self.write_mode!r})")
        if self.write_path == "integrated" and self.coordinates != "tanh":
            raise ValueError(f"{owner}.write_path='integrated' sums steps before tanh and needs coordinates='tanh' "
                             f"(got coordinates={self.coordinates!r})")

    @property
    def write_window(self) -> Optional[float]:
        """k of the ±kσ write box, or None for the dense write."""
        return None if self.write_mode == "dense" else float(self.window_k)

    @property
    def state_numel(self) -> int:
        """Numbers held per sequence by one layer's state (h and c)."""
        D, H, W = self.grid
        return 2 * self.channels * D * H * W


@dataclasses.dataclass
class MemoryState:
    """One memory layer's recurrent state.

    h, c: (B, C, D, H, W). pending: (B, P, d), the normalised tokens of a chunk that is not
    complete yet (P < chunk_size): it is read already but written once its last token arrives,
    so a stream cut anywhere gives the same outputs as one pass. place: (B, 3), the last write's
    coordinates before tanh, carried only by a layer with ``write_path="integrated"`` once it has
    written (None otherwise).
    """

    h: torch.Tensor
    c: torch.Tensor
    pending: torch.Tensor
    place: Optional[torch.Tensor] = None

    def detach(self) -> "MemoryState":
        """Cut the gradient history (truncated back-propagation through a stream)."""
        return MemoryState(self.h.detach(), self.c.detach(), self.pending.detach(),
                           None if self.place is None else self.place.detach())

    def numel(self) -> int:
        place = 0 if self.place is None else self.place.numel()
        return self.h.numel() + self.c.numel() + self.pending.numel() + place
