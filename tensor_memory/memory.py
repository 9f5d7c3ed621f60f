"""Tensor Memory: a fixed-size recurrent 3D voxel memory that tokens write to and read from.

Per memory layer the state is a pair of volumes ``h, c`` of shape (B, C, D, H, W), zeros
at the start of a sequence. The tokens are cut into chunks of ``chunk_size``; for chunk k:

1. Chunk summaries — read query ``q_k`` = the chunk's first token; write summary ``s_k`` =
   a learned projection of the chunk's concatenated tokens, layer-normalised (no gain) so
   that it sits on the same scale as the query, which is a normalised token.
2. Addressing — one shared ``coord_head`` + tanh: ``mu_read = tanh(coord_head(q_k))``,
   ``mu_write = tanh(coord_head(s_k))``, as (x, y, z) in [-1, 1] (grid_sample's order).
3. Read — trilinear interpolation of ``h`` *before* chunk k's write at ``mu_read``,
   projected to the token width and added to every token of the chunk through σ(γ).
4. Soft write — ``content_k`` spread as a Gaussian of width ``sigma_k`` around ``mu_write``.
5. Recurrent update — ConvLSTM gates from ``[V ; h]`` through factorised depthwise 3-tap
   convolutions and a pointwise mix; ``c ← f⊙c + i⊙g``, ``h ← o⊙tanh(c)``.

Voxel centres sit at ``linspace(-1, 1, n)`` per axis (``align_corners=True``). Reads only
ever see writes of earlier chunks, so the layer is causal at chunk granularity.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from . import limits as L
from .config import ConfigBase, require_float, require_int
from .local_update import local_scan, update_regions
from .hookpoints import POINTS, HookPoint, any_active, nothing_hooked
from .update import convlstm_scan, depthwise3d, expand_write, gate_inputs, gate_values, write_factors


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
    write_mode: str = "dense"  # "dense" | "windowed" | "local", see WRITE_MODES
    window_k: float = 3.0  # half-width of the write box in σ ("windowed" and "local")

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
        require_float(owner, "sigma_init", self.sigma_init, self.sigma_min, low_open=True)
        require_float(owner, "forget_bias", self.forget_bias)
        if not isinstance(self.summary_norm, bool):
            raise ValueError(f"{owner}.summary_norm must be True or False, got {self.summary_norm!r}")
        for name, value, allowed in (("summary_init", self.summary_init, INIT_CHOICES["summary_init"]),
                                     ("coord_init", self.coord_init, INIT_CHOICES["coord_init"])):
            if value not in allowed:
                raise ValueError(f"{owner}.{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
        if self.write_mode not in WRITE_MODES:
            raise ValueError(f"{owner}.write_mode must be one of {', '.join(map(repr, WRITE_MODES))}, "
                             f"got {self.write_mode!r}")
        require_float(owner, "window_k", self.window_k, 0.0, low_open=True)

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
    so a stream cut anywhere gives the same outputs as one pass.
    """

    h: torch.Tensor
    c: torch.Tensor
    pending: torch.Tensor

    def detach(self) -> "MemoryState":
        """Cut the gradient history (truncated back-propagation through a stream)."""
        return MemoryState(self.h.detach(), self.c.detach(), self.pending.detach())

    def numel(self) -> int:
        return self.h.numel() + self.c.numel() + self.pending.numel()


# ---------------------------------------------------------------------------------------
# The two addressing primitives. Both factorise over the three axes, which is what makes
# them cheap: a trilinear weight and a Gaussian are each a product of three 1D profiles.
# ---------------------------------------------------------------------------------------

def voxel_centres(n: int, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """Voxel centres of one axis in normalised units: ``linspace(-1, 1, n)``."""
    return torch.linspace(-1.0, 1.0, n, dtype=dtype, device=device)


def _linear_weights(u: torch.Tensor, n: int) -> torch.Tensor:
    """(M,) coordinates in [-1, 1] → (M, n) linear-interpolation weights over one axis.

    Border padding: coordinates are clamped to the grid. The lower neighbour is chosen with
    floor, as ``grid_sample`` does, so values and gradients match it.
    """
    pos = (u.clamp(-1.0, 1.0) + 1.0) * (n - 1) / 2.0  # (M,) in voxel units, 0 … n-1
    left = pos.detach().floor().clamp(max=n - 2)  # (M,) lower neighbour index
    frac = (pos - left)[:, None]  # (M, 1) distance from it, carries the gradient
    index = torch.arange(n, device=u.device, dtype=u.dtype)  # (n,)
    is_left = (index == left[:, None]).to(u.dtype)  # (M, n)
    is_right = (index == left[:, None] + 1).to(u.dtype)  # (M, n)
    return (1.0 - frac) * is_left + frac * is_right


def _sample(h: torch.Tensor, xyz: torch.Tensor) -> torch.Tensor:
    """Trilinear read from a channels-last volume: h (M, D, H, W, C), xyz (M, 3) → (M, C)."""
    M, D, H, W, C = h.shape
    wx = _linear_weights(xyz[:, 0], W)  # (M, W)
    wy = _linear_weights(xyz[:, 1], H)  # (M, H)
    wz = _linear_weights(xyz[:, 2], D)  # (M, D)
    weights = (wz[:, :, None, None] * wy[:, None, :, None] * wx[:, None, None, :]).view(M, 1, D * H * W)
    return torch.bmm(weights, h.reshape(M, D * H * W, C)).view(M, C)  # weighted sum over voxels


def trilinear_read(h: torch.Tensor, xyz: torch.Tensor) -> torch.Tensor:
    """Sample h at continuous coordinates: h (B, C, D, H, W), xyz (B, 3) as (x, y, z) → (B, C).

    Same values and gradients as ``F.grid_sample(h, xyz, mode="bilinear",
    padding_mode="border", align_corners=True)``. The trilinear weight of a voxel is a product
    of three 1D weights, so no 8-corner gather is needed.
    """
    if h.dim() != 5 or xyz.shape != (h.shape[0], 3):
        raise ValueError(f"trilinear_read expects h (B, C, D, H, W) and xyz (B, 3), "
                         f"got {tuple(h.shape)} and {tuple(xyz.shape)}")
    return _sample(h.permute(0, 2, 3, 4, 1), xyz)  # (B, D, H, W, C) view


def _axis_offsets(xyz: torch.Tensor, grid: tuple[int, int, int]):
    """Voxel centre minus μ along each axis: (D, H, W order) (M, D), (M, H), (M, W) from xyz (M, 3) as (x, y, z)."""
    return tuple(voxel_centres(n, xyz.dtype, xyz.device)[None, :] - xyz[:, axis, None]
                 for axis, n in zip((2, 1, 0), grid))


def _in_box(offsets, sigma: torch.Tensor, window: float):
    """Per axis, whether |p − μ| ≤ window·σ, from the offsets of :func:`_axis_offsets`."""
    limit = window * sigma.reshape(-1, 1)  # (M, 1)
    return tuple(offset.abs() <= limit for offset in offsets)


def write_box(xyz: torch.Tensor, sigma: torch.Tensor, grid: tuple[int, int, int], window: float):
    """The windowed write's box per axis: (M, D), (M, H), (M, W) booleans, |p − μ| ≤ window·σ."""
    return _in_box(_axis_offsets(xyz, grid), sigma, window)


def gaussian_profiles(xyz: torch.Tensor, sigma: torch.Tensor, grid: tuple[int, int, int],
                      window: Optional[float] = None):
    """The Gaussian around xyz (M, 3) of width sigma (M,) along each axis: (gz (M, D), gy (M, H), gx (M, W)).

    With ``window`` = k, each profile is cut to the :func:`write_box` (exactly zero outside), so
    their product is the Gaussian inside the box of ±kσ around μ and zero everywhere else.
    """
    two_var = 2.0 * sigma.reshape(-1, 1) ** 2  # (M, 1)
    offsets = _axis_offsets(xyz, grid)
    profiles = [torch.exp(-offset ** 2 / two_var) for offset in offsets]
    if window is not None:  # the box, a hard 0/1 cut
        profiles = [g * inside.to(g.dtype) for g, inside in zip(profiles, _in_box(offsets, sigma, window))]
    return tuple(profiles)


def gaussian_write(content: torch.Tensor, xyz: torch.Tensor, sigma: torch.Tensor,
                   grid: tuple[int, int, int], window: Optional[float] = None) -> torch.Tensor:
    """Write volume V[b, :, z, y, x] = content[b] · exp(-‖p_zyx − xyz[b]‖² / (2 sigma[b]²)).

    content (B, C), xyz (B, 3) as (x, y, z), sigma (B,) or (B, 1), grid (D, H, W)
    → (B, C, D, H, W). No hard voxel assignment: every voxel gets some of the content.
    exp(-‖p − μ‖²/2σ²) is the product of one Gaussian per axis, which is how it is computed.
    With ``window`` = k the volume is zero outside the box of ±kσ around xyz (the windowed write).
    """
    B = content.shape[0]
    if content.dim() != 2 or xyz.shape != (B, 3) or sigma.numel() != B:
        raise ValueError(f"gaussian_write expects content (B, C), xyz (B, 3), sigma (B,), got "
                         f"{tuple(content.shape)}, {tuple(xyz.shape)}, {tuple(sigma.shape)}")
    gz, gy, gx = gaussian_profiles(xyz, sigma, grid, window)
    return (content[:, :, None, None, None] * gz[:, None, :, None, None]
            * gy[:, None, None, :, None] * gx[:, None, None, None, :])


# ---------------------------------------------------------------------------------------
# The memory layer.
# ---------------------------------------------------------------------------------------

class TensorMemory(nn.Module):
    """One memory layer: ``y, state = mem(x, state)`` with ``y = x + σ(γ)·m`` (LN_m inside)."""

    def __init__(self, config: MemoryConfig) -> None:
        super().__init__()
        self.config = config
        d, C, cs = config.token_dim, config.channels, config.chunk_size
        self.norm = nn.LayerNorm(d)  # LN_m
        self.summary = nn.Linear(cs * d, d)  # step 1: chunk → write summary
        self.coord_head = nn.Linear(d, 3)  # step 2: shared by reads and writes (before tanh)
        self.out_proj = nn.Linear(C, d)  # step 3: read vector → token width
        self.gate = nn.Parameter(torch.tensor(float(config.gate_init)))  # step 3: γ
        self.content = nn.Linear(d, C)  # step 4: what to write
        self.spread = nn.Linear(d, 1)  # step 4: how widely (σ before softplus)
        self.depthwise = nn.Parameter(torch.zeros(3, 2 * C, 3))  # step 5: (axis D/H/W, [V;h] channel, tap)
        self.mix = nn.Linear(2 * C, 4 * C)  # step 5: pointwise [V;h] → i, f, o, g
        self.hook_points = nn.ModuleDict({name: HookPoint(name) for name in POINTS})  # hookpoints.py
        self.reset_memory_parameters()

    def reset_memory_parameters(self) -> None:
        """Initialisation the mechanism relies on (the rest keeps PyTorch's defaults)."""
        cfg, C = self.config, self.config.channels
        with torch.no_grad():
            if cfg.summary_init == "sum":  # s_k = Σ tokens / √chunk_size, the same for every position
                d, cs = cfg.token_dim, cfg.chunk_size
                self.summary.weight.copy_(torch.eye(d).repeat(1, cs) / math.sqrt(cs))  # (d, cs·d) = [I … I] / √cs
                nn.init.zeros_(self.summary.bias)
            if cfg.coord_init == "centre":  # μ = tanh(0) = 0 for every input; the head learns to move them
                nn.init.zeros_(self.coord_head.weight)
                nn.init.zeros_(self.coord_head.bias)
            # σ starts at sigma_init for every input; its weights learn from there.
            nn.init.zeros_(self.spread.weight)
            self.spread.bias.fill_(math.log(math.expm1(cfg.sigma_init - cfg.sigma_min)))
            # Depthwise convolutions start as the identity: tap weights (0, 1, 0).
            self.depthwise.zero_()
            self.depthwise[:, :, 1] = 1.0
            self.mix.bias[C:2 * C].fill_(cfg.forget_bias)
            self.gate.fill_(cfg.gate_init)

    def init_state(self, batch_size: int, device=None, dtype=None) -> MemoryState:
        """Zero state for a new sequence: h, c (batch_size, C, D, H, W), nothing pending."""
        require_int("init_state", "batch_size", batch_size, 1)
        ref = self.mix.weight
        device, dtype = device or ref.device, dtype or ref.dtype
        shape = (batch_size, self.config.channels, *self.config.grid)
        # Stored channels-last (the layout update.py computes in); the shape is still (B, C, D, H, W).
        def zeros() -> torch.Tensor:
            return torch.zeros(shape, device=device, dtype=dtype).contiguous(memory_format=torch.channels_last_3d)

        return MemoryState(h=zeros(), c=zeros(),
                           pending=torch.zeros(batch_size, 0, self.config.token_dim, device=device, dtype=dtype))

    @property
    def gate_scale(self) -> torch.Tensor:
        """σ(γ): how strongly the read enters the token stream."""
        return torch.sigmoid(self.gate)

    def hook(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """Pass ``value`` through hook point ``name``: the value itself unless a hook replaces it."""
        return value if nothing_hooked() else self.hook_points[name](value)

    def forward(self, x: torch.Tensor, state: Optional[MemoryState] = None) -> tuple[torch.Tensor, MemoryState]:
        self._check_input(x, state)
        cfg = self.config
        B, N, d = x.shape
        C, cs, (D, H, W) = cfg.channels, cfg.chunk_size, cfg.grid
        if state is None:
            state = self.init_state(B, x.device, x.dtype)
        if N == 0:  # an empty segment of a stream changes nothing
            return x, state

        # 1. Chunk summaries. Tokens left over from an incomplete chunk of the previous call
        #    come first, so chunk boundaries never depend on how a stream was cut.
        P = state.pending.shape[1]
        tokens = torch.cat([state.pending, self.norm(x)], dim=1)  # (B, P+N, d)
        n_read = math.ceil((P + N) / cs)  # chunks with at least one token: all are read
        n_write = (P + N) // cs  # complete chunks: these are written
        queries = tokens[:, ::cs]  # (B, n_read, d) each chunk's first token
        whole = tokens[:, :n_write * cs].reshape(B, n_write, cs * d)  # (B, n_write, cs·d)
        summaries = self.summary(whole)  # (B, n_write, d)
        if cfg.summary_norm:  # the query is a normalised token; the tied coord_head sees both on one scale
            summaries = F.layer_norm(summaries, (d,))

        # 2. Addressing: one coordinate head for both, tanh keeps coordinates in the grid.
        mu_read = self.hook("mu_read", torch.tanh(self.coord_head(queries)))  # (B, n_read, 3)
        mu_write = self.hook("mu_write", torch.tanh(self.coord_head(summaries)))  # (B, n_write, 3)

        # 4. Soft write (step 3, the read, comes last: it needs the state before each write,
        #    which the scan in step 5 produces for all chunks at once). From here on the
        #    write path is chunk-major, (n_write, B, …), the order the scan walks in.
        content = self.hook("content", self.content(summaries))  # (B, n_write, C)
        sigma = self.hook("sigma", F.softplus(self.spread(summaries)).squeeze(-1) + cfg.sigma_min)  # (B, n_write)
        xyz_k, sigma_k = mu_write.transpose(0, 1).reshape(-1, 3), sigma.t().reshape(-1)  # chunk-major, (n_write·B, …)
        profiles = gaussian_profiles(xyz_k, sigma_k, cfg.grid, cfg.write_window)  # cut to the ±kσ box unless "dense"
        profiles = [p.view(n_write, B, n) for p, n in zip(profiles, (D, H, W))]  # V = content ⊗ gz ⊗ gy ⊗ gx; (n_write, B, n) each

        # 5. Recurrent update, channels-last inside (update.py). The write volume is separable,
        #    so its depthwise convolutions act on the three profiles, never on a full volume.
        taps_v, taps_h = self.depthwise.split(C, dim=1)  # (3, C, 3) each
        factors = write_factors(content.transpose(0, 1), profiles, taps_v)  # dw_V(V) = fz ⊗ fy ⊗ fxc
        # The incoming state passes its hook points first (an intervention may replace it).
        h_in, c_in = (self.hook(name, v).contiguous(memory_format=torch.channels_last_3d)  # a no-op unless replaced
                      for name, v in (("h_in", state.h), ("c_in", state.c)))
        h0 = h_in.permute(0, 2, 3, 4, 1)  # (B, D, H, W, C) channels-last view
        c0 = c_in.permute(0, 2, 3, 4, 1)
        if cfg.write_mode == "local":  # update only the cells each write reaches; the rest keep their state
            box = [m.view(n_write, B, n) for m, n in zip(write_box(xyz_k, sigma_k, cfg.grid, cfg.window_k), (D, H, W))]
            hs, cs_ = local_scan(factors, update_regions(box), h0, c0, taps_h, self.mix.weight, self.mix.bias)
        else:
            hs, cs_ = convlstm_scan(factors, h0, c0, taps_h, self.mix.weight, self.mix.bias)  # (n_write, B, D, H, W, C)

        # 3. Read: chunk k reads h before its own write — the incoming state for the first
        #    chunk, the state after chunk k-1 for the others — and adds it to its tokens.
        #    Every state in hs is sampled (a spare coordinate where no chunk follows the last
        #    write), so autograd never has to scatter a slice's gradient into a zero volume.
        first = _sample(h0, mu_read[:, 0])  # (B, C)
        later_xyz = F.pad(mu_read[:, 1:], (0, 0, 0, n_write + 1 - n_read))  # (B, n_write, 3)
        later = _sample(hs.reshape(-1, D, H, W, C), later_xyz.transpose(0, 1).reshape(-1, 3))  # (n_write·B, C)
        later = later.view(n_write, B, C).transpose(0, 1)[:, :n_read - 1]  # (B, n_read-1, C)
        read = self.hook("read", torch.cat([first[:, None], later], dim=1))  # (B, n_read, C)
        message = self.out_proj(read)  # (B, n_read, d)
        per_token = message.repeat_interleave(cs, dim=1)[:, P:P + N]  # (B, N, d) drop tokens already output
        y = x + self.hook("gate_scale", self.gate_scale[None]) * per_token  # σ(γ) as (1,)

        to_public = (0, 4, 1, 2, 3)  # (B, D, H, W, C) → (B, C, D, H, W), a view
        new_state = MemoryState(h=hs[-1].permute(to_public) if n_write else h_in,
                                c=cs_[-1].permute(to_public) if n_write else c_in,
                                pending=tokens[:, n_write * cs:])
        if any_active(self.hook_points):  # the read-only points: the volumes after each chunk, the gates
            self._observe_state(hs, cs_, factors, h0, taps_h)
        return y, new_state

    # -- checks and the read-only hook points (no effect on the computation) -----------------

    def _check_input(self, x: torch.Tensor, state: Optional[MemoryState]) -> None:
        cfg = self.config
        if x.dim() != 3 or x.shape[-1] != cfg.token_dim:
            raise ValueError(f"TensorMemory expects x of shape (B, N, token_dim={cfg.token_dim}), "
                             f"got {tuple(x.shape)}; check MemoryConfig.token_dim")
        if not torch.isfinite(x).all():
            raise ValueError("TensorMemory input contains NaN or infinite values")
        if state is not None:
            expected = (x.shape[0], cfg.channels, *cfg.grid)
            if tuple(state.h.shape) != expected or tuple(state.c.shape) != expected:
                raise ValueError(f"MemoryState h and c must be {expected}, got {tuple(state.h.shape)} "
                                 f"and {tuple(state.c.shape)}")
            if state.pending.dim() != 3 or state.pending.shape[0] != x.shape[0] \
                    or state.pending.shape[1] >= cfg.chunk_size or state.pending.shape[2] != cfg.token_dim:
                raise ValueError(f"MemoryState.pending must be (B, P < chunk_size, token_dim), "
                                 f"got {tuple(state.pending.shape)}")

    def _observe_state(self, hs, cs, factors, h0, taps_h):
        """Hand the read-only points their values, shaped (B, K, C, D, H, W)."""
        by_chunk = (1, 0, 5, 2, 3, 4)  # (K, B, D, H, W, C) → (B, K, C, D, H, W)
        self.hook("h", hs.permute(by_chunk))
        self.hook("c", cs.permute(by_chunk))
        # Gates are recomputed only when observed: they are large. With write_mode "local" they are
        # the values at every cell, but act only inside each chunk's update region.
        if self.hook_points["gate_i"].active:
            with torch.no_grad():
                h_prev = torch.cat([h0[None], hs[:-1]], dim=0)  # (K, B, D, H, W, C) state before each write
                x = gate_inputs(expand_write(*factors), depthwise3d(h_prev, taps_h))  # [dw_V(V) ; dw_h(h) ; 1]
                weight = torch.cat([self.mix.weight, self.mix.bias[:, None]], dim=1)
                for name, value in zip(("gate_i", "gate_f", "gate_o", "gate_g"), gate_values(x, weight)):
                    self.hook(name, value.view(hs.shape).permute(by_chunk))
