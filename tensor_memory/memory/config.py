"""A memory layer's settings (:class:`MemoryConfig`) and its recurrent state (:class:`MemoryState`).

:class:`MemoryConfig`'s own fields are the mechanism (DESIGN.md §2) and its initialisation. Everything that changes how
a step is computed is a variant, grouped by the step it changes: :class:`AddressingVariant` (step 2),
:class:`ReadVariant` (3), :class:`WriteVariant` (4), :class:`UpdateVariant` (5), and :class:`PublicCodeOptions`, what
the paper's public code does differently. Each group's defaults are the mechanism; ``variants/`` holds the components
they choose. What each variant did to training is measured in ``docs/trainability.md``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from .. import limits as L
from ..config import ConfigBase, require_float, require_int

# Initialisations a config can choose. "random" is PyTorch's default Linear init. "sum": a chunk's summary starts as
# its tokens summed, so it sees a token wherever it sits in the chunk; "centre": reads and writes start at the centre.
INIT_CHOICES = {"summary_init": ("random", "sum"), "coord_init": ("random", "centre")}


def _require_choice(owner: str, name: str, value: Any, allowed: tuple) -> None:
    if not isinstance(value, str) or value not in allowed:
        raise ValueError(f"{owner}.{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


def _require_bool(owner: str, name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{owner}.{name} must be True or False, got {value!r}")


@dataclasses.dataclass
class AddressingVariant(ConfigBase):
    """Step 2: how a chunk's coordinates are made (``variants/addressing.py``)."""

    # "tanh": tanh of three numbers. "soft_argmax": one logit per voxel of each axis, the coordinate the expected voxel
    # centre under their softmax (DSNT), so every voxel gets gradient where tanh's vanishes at a face.
    coordinates: str = "tanh"
    separate_heads: bool = False  # True: reads get a coordinate head of their own instead of sharing the writes'
    # "free": each write placed by its own summary. "integrated": path integration; a sequence's first write is free,
    # each later one the last write's place plus a step predicted from its chunk (summed before tanh).
    write_path: str = "free"

    def __post_init__(self) -> None:
        owner = "MemoryConfig.addressing"
        _require_choice(owner, "coordinates", self.coordinates, ("tanh", "soft_argmax"))
        _require_bool(owner, "separate_heads", self.separate_heads)
        _require_choice(owner, "write_path", self.write_path, ("free", "integrated"))
        if self.write_path == "integrated" and self.coordinates != "tanh":
            raise ValueError(
                f"{owner}.write_path='integrated' sums steps before tanh and needs coordinates='tanh' "
                f"(got coordinates={self.coordinates!r})"
            )


@dataclasses.dataclass
class ReadVariant(ConfigBase):
    """Step 3: how ``h`` is sampled at μ_read (``variants/reading.py``)."""

    # r > 0 (voxel spacings): the read's value is the trilinear sample at μ_read, its gradient to μ_read the mean of the
    # gradients at six points r spacings either side along each axis (linearised multi-sampling), so a read feels
    # writes a few voxels away.
    jitter: float = 0.0
    # True: reads sample h plus a learned volume of voxel codes (CoordConv), so a read of an empty memory still says
    # where it read; the codes start as each voxel's (x, y, z) mixed into the C channels.
    voxel_codes: bool = False

    def __post_init__(self) -> None:
        owner = "MemoryConfig.read"
        require_float(owner, "jitter", self.jitter, 0.0, float(L.MAX_GRID_SIDE))
        _require_bool(owner, "voxel_codes", self.voxel_codes)


@dataclasses.dataclass
class WriteVariant(ConfigBase):
    """Step 4: where a chunk's content lands (``variants/writing.py``), and so which cells step 5 updates."""

    profile: str = (
        "gaussian"  # "nearest": all of it on the voxel nearest μ_write, a hard write with no gradient to μ, σ
    )
    # "dense": the Gaussian touches every voxel, every voxel is updated. "windowed": the Gaussian cut to a box of
    # ±window_k·σ around μ. "local": windowed, and only the box plus a one-voxel margin is updated (the rest keeps its
    # state exactly), the paper's suggested remedy for the cost of dense updates.
    mode: str = "dense"
    window_k: float = 3.0  # half-width of the box in σ ("windowed" and "local")

    def __post_init__(self) -> None:
        owner = "MemoryConfig.write"
        _require_choice(owner, "profile", self.profile, ("gaussian", "nearest"))
        _require_choice(owner, "mode", self.mode, ("dense", "windowed", "local"))
        require_float(owner, "window_k", self.window_k, 0.0, low_open=True)
        if self.profile == "nearest" and self.mode != "dense":
            raise ValueError(
                f"{owner}.profile='nearest' needs mode='dense': a ±kσ box could cut the one voxel a hard "
                f"write lands on (got mode={self.mode!r})"
            )

    @property
    def window(self) -> float | None:
        """k of the ±kσ write box, or None for the dense write."""
        return None if self.mode == "dense" else float(self.window_k)


@dataclasses.dataclass
class UpdateVariant(ConfigBase):
    """Step 5: the ConvLSTM update's neighbourhood (``variants/updating.py``)."""

    taps: int = 3  # taps of each depthwise convolution: 3, or 1 (a 1×1×1 update: no neighbourhood)

    def __post_init__(self) -> None:
        if isinstance(self.taps, bool) or self.taps not in (3, 1):
            raise ValueError(
                f"MemoryConfig.update.taps must be 3 (the mechanism) or 1 (a 1×1×1 update), got {self.taps!r}"
            )


@dataclasses.dataclass
class PublicCodeOptions(ConfigBase):
    """What the paper's public ``TensorMemoryInterface`` does differently (``public_code.py`` sets them all)."""

    input_norm: bool = True  # LN_m on the incoming tokens; False: the caller normalises them
    # "residual": y = x + σ(γ)·m. "message": y = m, the projected read alone with no γ (its blocks gate it).
    # "gated": y = σ(γ)·m, for a caller that adds it to its own stream (a public backbone's gate imported as γ).
    output: str = "residual"
    # A last incomplete chunk. "pending": read now, written once complete (a stream cut anywhere gives one pass).
    # "pad": zero-padded and written at once; nothing is carried.
    partial_chunk: str = "pending"
    depthwise_bias: bool = False  # a learned bias after each depthwise convolution, (3 axes, 2C)
    write_eps: float = 0.0  # added to 2σ² in the Gaussian write: exp(-‖p − μ‖² / (2σ² + write_eps))
    sigma_scale: float = 1.0  # σ = sigma_scale · (softplus(·) + sigma_min)

    def __post_init__(self) -> None:
        owner = "MemoryConfig.public_code"
        _require_bool(owner, "input_norm", self.input_norm)
        _require_choice(owner, "output", self.output, ("residual", "message", "gated"))
        _require_choice(owner, "partial_chunk", self.partial_chunk, ("pending", "pad"))
        _require_bool(owner, "depthwise_bias", self.depthwise_bias)
        require_float(owner, "write_eps", self.write_eps, 0.0)
        require_float(owner, "sigma_scale", self.sigma_scale, 0.0, low_open=True)


VARIANT_GROUPS = {
    "addressing": AddressingVariant,
    "read": ReadVariant,
    "write": WriteVariant,
    "update": UpdateVariant,
    "public_code": PublicCodeOptions,
}
# Configs written before the variants were grouped (checkpoints, run configs, ``--set`` commands) name their settings
# flat; :meth:`MemoryConfig.from_dict` reads them into their groups.
FLAT_NAMES = {
    "coordinates": ("addressing", "coordinates"),
    "separate_heads": ("addressing", "separate_heads"),
    "write_path": ("addressing", "write_path"),
    "read_jitter": ("read", "jitter"),
    "voxel_codes": ("read", "voxel_codes"),
    "write_profile": ("write", "profile"),
    "write_mode": ("write", "mode"),
    "window_k": ("write", "window_k"),
    "update_taps": ("update", "taps"),
    **{
        name: ("public_code", name)
        for name in ("input_norm", "output", "partial_chunk", "depthwise_bias", "write_eps", "sigma_scale")
    },
}


@dataclasses.dataclass
class MemoryConfig(ConfigBase):
    # The mechanism.
    token_dim: int = 64  # d, the width of the tokens that read and write
    channels: int = 16  # C, features per voxel
    grid: tuple[int, int, int] = (6, 6, 6)  # (D, H, W) voxels
    chunk_size: int = 1  # tokens per read/write step
    gate_init: float = -2.0  # γ at init: σ(-2) ≈ 0.12; use ≈ -9 to attach to a pretrained model
    sigma_init: float = 0.4  # initial write spread, normalised units (one voxel spacing at 6 voxels)
    sigma_min: float = 0.05  # floor under the learned spread, so a write never becomes a spike
    forget_bias: float = 4.0  # forget-gate bias at init: σ(4) = 0.98, so a write survives tens of chunks
    summary_init: str = "random"  # "sum": the write summary starts as the chunk's tokens summed (÷√chunk)
    summary_norm: bool = True  # layer-normalise s_k (no gain): without it the projection grows and tanh pins writes
    coord_init: str = "random"  # "centre": every read and write starts at the grid's centre
    # The variants, by the step they change; the defaults are the mechanism.
    addressing: AddressingVariant = dataclasses.field(default_factory=AddressingVariant)
    read: ReadVariant = dataclasses.field(default_factory=ReadVariant)
    write: WriteVariant = dataclasses.field(default_factory=WriteVariant)
    update: UpdateVariant = dataclasses.field(default_factory=UpdateVariant)
    public_code: PublicCodeOptions = dataclasses.field(default_factory=PublicCodeOptions)

    def __post_init__(self) -> None:
        owner = "MemoryConfig"
        require_int(owner, "token_dim", self.token_dim, 1, L.MAX_DIM)
        require_int(owner, "channels", self.channels, 1, L.MAX_CHANNELS)
        require_int(owner, "chunk_size", self.chunk_size, 1, L.MAX_SEQUENCE)
        grid = tuple(self.grid) if isinstance(self.grid, (list, tuple)) else None
        if grid is None or len(grid) != 3:
            raise ValueError(f"{owner}.grid must be three integers (D, H, W), each >= 2, got {self.grid!r}")
        for axis, n in zip("DHW", grid, strict=True):
            require_int(owner, f"grid[{axis}]", n, 2, L.MAX_GRID_SIDE)
        self.grid = grid  # type: ignore[assignment]
        require_int(owner, "grid (D·H·W voxels)", math.prod(grid), 8, L.MAX_GRID_CELLS)
        require_int(owner, "channels × grid (2·C·D·H·W state numbers)", self.state_numel, 1, L.MAX_STATE_NUMBERS)
        for name, group in VARIANT_GROUPS.items():  # a group may come as a dict (from JSON, TOML or by hand)
            value = getattr(self, name)
            if isinstance(value, dict):
                setattr(self, name, group.from_dict(value))
            elif not isinstance(value, group):
                raise ValueError(f"{owner}.{name} must be a {group.__name__} or a dict, got {type(value).__name__}")
        require_float(owner, "gate_init", self.gate_init)
        require_float(owner, "sigma_min", self.sigma_min, 0.0, low_open=True)
        require_float(
            owner, "sigma_init", self.sigma_init, self.sigma_min * self.public_code.sigma_scale, low_open=True
        )
        require_float(owner, "forget_bias", self.forget_bias)
        _require_bool(owner, "summary_norm", self.summary_norm)
        for name, allowed in INIT_CHOICES.items():
            _require_choice(owner, name, getattr(self, name), allowed)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryConfig:
        """A config from its dict; settings named flat (:data:`FLAT_NAMES`, as configs before the groups name them)
        are read into their groups, and named both ways are refused."""
        if not isinstance(data, dict):
            raise ValueError(f"MemoryConfig.from_dict expects a dict, got {type(data).__name__}")
        data = dict(data)
        for flat in [name for name in data if name in FLAT_NAMES]:
            group, field = FLAT_NAMES[flat]
            nested = data.get(group, {})
            if not isinstance(nested, dict):
                raise ValueError(f"MemoryConfig.{group} must be a dict, got {type(nested).__name__}")
            if field in nested:
                raise ValueError(
                    f"MemoryConfig: {flat!r} and {group}.{field} name one setting; give it once, as {group}.{field}"
                )
            data[group] = {**nested, field: data.pop(flat)}
        return super().from_dict(data)

    @property
    def state_numel(self) -> int:
        """Numbers held per sequence by one layer's state (h and c)."""
        D, H, W = self.grid
        return 2 * self.channels * D * H * W


def check_call(config: MemoryConfig, x: torch.Tensor, state: MemoryState | None) -> None:
    """A layer's input x (B, N, token_dim), finite, and a state that fits it; a ValueError saying what to pass."""
    if x.dim() != 3 or x.shape[-1] != config.token_dim:
        raise ValueError(
            f"TensorMemory expects x of shape (B, N, token_dim={config.token_dim}), "
            f"got {tuple(x.shape)}; check MemoryConfig.token_dim"
        )
    if not torch.isfinite(x).all():
        raise ValueError("TensorMemory input contains NaN or infinite values")
    if state is None:
        return
    expected = (x.shape[0], config.channels, *config.grid)
    if tuple(state.h.shape) != expected or tuple(state.c.shape) != expected:
        raise ValueError(
            f"MemoryState h and c must be {expected}, got {tuple(state.h.shape)} and {tuple(state.c.shape)}"
        )
    pending = state.pending
    if (
        pending.dim() != 3
        or pending.shape[0] != x.shape[0]
        or pending.shape[1] >= config.chunk_size
        or pending.shape[2] != config.token_dim
    ):
        raise ValueError(f"MemoryState.pending must be (B, P < chunk_size, token_dim), got {tuple(pending.shape)}")
    integrated = config.addressing.write_path == "integrated"
    if state.place is not None and (not integrated or tuple(state.place.shape) != (x.shape[0], 3)):
        raise ValueError(
            f"MemoryState.place must be None, or (B, 3) for a layer with addressing.write_path="
            f"'integrated'; got {tuple(state.place.shape)} for write_path="
            f"{config.addressing.write_path!r}"
        )


@dataclasses.dataclass
class MemoryState:
    """One memory layer's recurrent state.

    h, c: (B, C, D, H, W). pending: (B, P, d), the normalised tokens of a chunk that is not complete yet (P <
    chunk_size): read already, written once its last token arrives, so a stream cut anywhere gives one pass's outputs.
    place: (B, 3), the last write's coordinates before tanh, carried only by a layer whose writes are path-integrated
    once it has written (None otherwise).
    """

    h: torch.Tensor
    c: torch.Tensor
    pending: torch.Tensor
    place: torch.Tensor | None = None

    def detach(self) -> MemoryState:
        """Cut the gradient history (truncated back-propagation through a stream)."""
        return MemoryState(
            self.h.detach(), self.c.detach(), self.pending.detach(), None if self.place is None else self.place.detach()
        )

    def numel(self) -> int:
        place = 0 if self.place is None else self.place.numel()
        return self.h.numel() + self.c.numel() + self.pending.numel() + place
