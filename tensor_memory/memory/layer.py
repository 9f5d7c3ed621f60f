"""Tensor Memory: a fixed-size recurrent 3D voxel memory that tokens write to and read from.

Per memory layer the state is a pair of volumes ``h, c`` of shape (B, C, D, H, W), zeros
at the start of a sequence. The tokens are cut into chunks of ``chunk_size``; for chunk k:

1. Chunk summaries — read query ``q_k`` = the chunk's first token; write summary ``s_k`` =
   a learned projection of the chunk's concatenated tokens, layer-normalised (no gain) so
   that it sits on the same scale as the query, which is a normalised token.
2. Addressing — one shared ``coord_head`` + tanh: ``mu_read = tanh(coord_head(q_k))``,
   ``mu_write = tanh(coord_head(s_k))``, as (x, y, z) in [-1, 1] (grid_sample's order). (With
   ``coordinates="soft_argmax"`` the head gives a logit per voxel of each axis and μ is the expected centre; with
   ``write_path="integrated"`` a write after a sequence's first is the last one's place plus a predicted step.)
3. Read — trilinear interpolation of ``h`` *before* chunk k's write at ``mu_read``,
   projected to the token width and added to every token of the chunk through σ(γ).
4. Soft write — ``content_k`` spread as a Gaussian of width ``sigma_k`` around ``mu_write``.
5. Recurrent update — ConvLSTM gates from ``[V ; h]`` through factorised depthwise 3-tap
   convolutions and a pointwise mix; ``c ← f⊙c + i⊙g``, ``h ← o⊙tanh(c)``.

The options of :class:`MemoryConfig` for the paper's public code (no LN_m, the message as the output, a
padded last chunk written at once, depthwise biases, ``write_eps``, ``sigma_scale``) change single lines of
these steps; :meth:`TensorMemory.from_public_code` imports that code's weights (``public_code.py``).

Voxel centres sit at ``linspace(-1, 1, n)`` per axis (``align_corners=True``, see
``geometry.py``). Reads only ever see writes of earlier chunks, so the layer is causal at chunk
granularity. The class defines one method per step, in this order; ``forward`` calls them.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..config import require_int
from .config import MemoryConfig, MemoryState
from .geometry import (gaussian_profiles, jittered_sample, nearest_profiles, sample_channels_last, voxel_centres,
                       voxel_grid, write_box)
from .hookpoints import POINTS, HookPoint, any_active, nothing_hooked
from .local_update import local_scan, update_regions
from .public_code import from_public_code, read_public_code
from .update import bias_volume, convlstm_scan, depthwise3d, expand_write, gate_inputs, gate_values, write_factors

TO_CHANNELS_LAST = (0, 2, 3, 4, 1)  # (B, C, D, H, W) → (B, D, H, W, C), a view
TO_PUBLIC = (0, 4, 1, 2, 3)  # (B, D, H, W, C) → (B, C, D, H, W), a view


class Write(NamedTuple):
    """Step 4's result, chunk-major (the order the scan walks in): what each chunk writes and where."""

    content: torch.Tensor  # (n_write, B, C)
    profiles: list[torch.Tensor]  # the Gaussian along D, H, W: (n_write, B, n) each; V = content ⊗ gz ⊗ gy ⊗ gx
    xyz: torch.Tensor  # (n_write·B, 3) μ_write, flattened as the box of write_mode "local" takes it
    sigma: torch.Tensor  # (n_write·B,) likewise


class TensorMemory(nn.Module):
    """One memory layer: ``y, state = mem(x, state)`` with ``y = x + σ(γ)·m`` (LN_m inside).

    With ``output="message"`` the layer has no γ and returns ``m``; with ``input_norm=False`` no LN_m.
    """

    def __init__(self, config: MemoryConfig) -> None:
        super().__init__()
        self.config = config
        d, C, chunk = config.token_dim, config.channels, config.chunk_size
        self.norm = nn.LayerNorm(d) if config.input_norm else nn.Identity()  # LN_m
        self.summary = nn.Linear(chunk * d, d)  # step 1: chunk → write summary
        # step 2: shared by reads and writes; three numbers before tanh, or a logit per voxel of each axis
        coords = 3 if config.coordinates == "tanh" else sum(config.grid)
        self.coord_head = nn.Linear(d, coords)
        self.read_head = nn.Linear(d, coords) if config.separate_heads else None  # ablation: reads' own head
        self.step_head = nn.Linear(d, 3) if config.write_path == "integrated" else None  # a remedy: writes' steps
        self.out_proj = nn.Linear(C, d)  # step 3: read vector → token width
        self.codes = nn.Parameter(torch.zeros(*config.grid, C)) if config.voxel_codes else None  # step 3, a remedy
        residual = config.output == "residual"  # "message" returns m itself: no γ
        self.gate = nn.Parameter(torch.tensor(float(config.gate_init))) if residual else None  # step 3: γ
        self.content = nn.Linear(d, C)  # step 4: what to write
        self.spread = nn.Linear(d, 1)  # step 4: how widely (σ before softplus)
        self.depthwise = nn.Parameter(torch.zeros(3, 2 * C, 3))  # step 5: (axis D/H/W, [V;h] channel, tap)
        # step 5, optional: a bias after each depthwise convolution, (axis D/H/W, [V;h] channel)
        self.depthwise_bias = nn.Parameter(torch.zeros(3, 2 * C)) if config.depthwise_bias else None
        self.mix = nn.Linear(2 * C, 4 * C)  # step 5: pointwise [V;h] → i, f, o, g
        self.hook_points = nn.ModuleDict({name: HookPoint(name) for name in POINTS})  # hookpoints.py
        self.reset_memory_parameters()

    def reset_memory_parameters(self) -> None:
        """Initialisation the mechanism relies on (the rest keeps PyTorch's defaults)."""
        cfg, C = self.config, self.config.channels
        with torch.no_grad():
            if cfg.summary_init == "sum":  # s_k = Σ tokens / √chunk_size, the same for every position
                d, chunk = cfg.token_dim, cfg.chunk_size
                identities = torch.eye(d).repeat(1, chunk)  # (d, chunk·d) = [I … I]
                self.summary.weight.copy_(identities / math.sqrt(chunk))
                nn.init.zeros_(self.summary.bias)
            if self.step_head is not None:  # steps of a tenth of the default init: a path drifts, not jumps
                self.step_head.weight.mul_(0.1)
                nn.init.zeros_(self.step_head.bias)
            if self.codes is not None:  # (D, H, W, C): each voxel's (x, y, z) mixed into C channels, then learned
                self.codes.copy_(voxel_grid(cfg.grid) @ torch.randn(3, C))
            if cfg.coord_init == "centre":  # μ = tanh(0) = 0 for every input; the head learns to move them
                for head in (self.coord_head, self.read_head):
                    if head is not None:  # read_head: only with separate_heads
                        nn.init.zeros_(head.weight)
                        nn.init.zeros_(head.bias)
            # σ starts at sigma_init for every input; its weights learn from there.
            nn.init.zeros_(self.spread.weight)
            self.spread.bias.fill_(math.log(math.expm1(cfg.sigma_init / cfg.sigma_scale - cfg.sigma_min)))
            # Depthwise convolutions start as the identity: tap weights (0, 1, 0), biases 0.
            self.depthwise.zero_()
            self.depthwise[:, :, 1] = 1.0
            if self.depthwise_bias is not None:
                self.depthwise_bias.zero_()
            self.mix.bias[C:2 * C].fill_(cfg.forget_bias)
            if self.gate is not None:
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

    @classmethod
    def from_public_code(cls, state_dict, *, chunk_size=None, grid=None, sigma_scale: float = 1.0, prefix: str = ""):
        """The paper's public ``TensorMemoryInterface`` with the weights of ``state_dict``, built on this layer and
        called like it: ``out, (h, c) = m(x, (h0, c0))``. See ``public_code.from_public_code``."""
        return from_public_code(state_dict, layer=cls, chunk_size=chunk_size, grid=grid, sigma_scale=sigma_scale,
                                prefix=prefix)

    @classmethod
    def load_public_code(cls, path, **options):
        """:meth:`from_public_code` of a safetensors file (``save_file(interface.state_dict(), path)``), checked
        before it is read and never unpickled; ``options`` as for :meth:`from_public_code`."""
        return cls.from_public_code(read_public_code(path), **options)

    @property
    def gate_scale(self) -> torch.Tensor:
        """σ(γ): how strongly the read enters the token stream (1 with output "message": m is the output)."""
        return torch.sigmoid(self.gate) if self.gate is not None else self.mix.weight.new_ones(())

    def hook(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """Pass ``value`` through hook point ``name``: the value itself unless a hook replaces it."""
        return value if nothing_hooked() else self.hook_points[name](value)

    def forward(self, x: torch.Tensor, state: Optional[MemoryState] = None) -> tuple[torch.Tensor, MemoryState]:
        """x (B, N, d) from ``state`` (zeros when None) → y (B, N, d) and the state after the last chunk.

        The steps run as 1, 2, 4, 5, 3: each chunk reads the state before its own write, and the scan of
        step 5 makes the states of all chunks at once, so the reads come last.
        """
        self._check_input(x, state)
        if state is None:
            state = self.init_state(x.shape[0], x.device, x.dtype)
        if x.shape[1] == 0:  # an empty segment of a stream changes nothing
            return x, state
        tokens, queries, summaries = self._summaries(x, state.pending)  # 1
        mu_read, mu_write, place = self._address(queries, summaries, state.place)  # 2
        write = self._write(summaries, mu_write)  # 4
        h0, c0, hs, cells = self._update(write, state)  # 5
        y = self._read(x, h0, hs, mu_read, state.pending.shape[1])  # 3
        n_write = summaries.shape[1]
        h, c = (hs[-1], cells[-1]) if n_write else (h0, c0)
        return y, MemoryState(h=h.permute(TO_PUBLIC), c=c.permute(TO_PUBLIC),
                              pending=tokens[:, n_write * self.config.chunk_size:], place=place)

    def _summaries(self, x: torch.Tensor, pending: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """1. Chunk summaries: each chunk's read query (its first token) and each complete chunk's write summary.

        Tokens left over from an incomplete chunk of the previous call come first, so chunk boundaries
        never depend on how a stream was cut. Returns the normalised tokens (B, P+N, d), the queries
        (B, n_read, d) of every chunk with a token and the summaries (B, n_write, d) of the complete ones
        (with partial_chunk "pad", of every chunk: the last one's missing tokens are zeros).
        """
        chunk, d = self.config.chunk_size, self.config.token_dim
        tokens = torch.cat([pending, self.norm(x)], dim=1)  # (B, P+N, d)
        B, n_write = tokens.shape[0], tokens.shape[1] // chunk
        queries = tokens[:, ::chunk]  # (B, n_read, d) each chunk's first token
        whole = tokens[:, :n_write * chunk]
        if self.config.partial_chunk == "pad" and tokens.shape[1] % chunk:
            n_write += 1
            whole = F.pad(tokens, (0, 0, 0, n_write * chunk - tokens.shape[1]))  # (B, n_write·chunk, d) zeros after
        whole = whole.reshape(B, n_write, chunk * d)  # (B, n_write, chunk·d)
        summaries = self.summary(whole)  # (B, n_write, d)
        if self.config.summary_norm:  # the query is a normalised token; the tied coord_head sees both on one scale
            summaries = F.layer_norm(summaries, (d,))
        return tokens, queries, summaries

    def _address(self, queries: torch.Tensor, summaries: torch.Tensor, place: Optional[torch.Tensor]) -> tuple:
        """2. Addressing: one coordinate head for reads and writes (unless ``separate_heads``); tanh keeps the
        coordinates in the grid. Returns μ_read, μ_write and the place a later call's writes continue from."""
        read_head = self.coord_head if self.read_head is None else self.read_head
        mu_read = self.hook("mu_read", self._coordinates(read_head(queries)))  # (B, n_read, 3)
        raw = self.coord_head(summaries)  # (B, n_write, 3 or W+H+D)
        if self.step_head is not None and raw.shape[1]:  # path integration: each write = the last one + a step
            steps = self.step_head(summaries)  # (B, n_write, 3)
            first = raw[:, :1] if place is None else place[:, None] + steps[:, :1]  # (B, 1, 3); a first write is free
            raw = torch.cat([first, steps[:, 1:]], dim=1).cumsum(1)  # (B, n_write, 3)
            place = raw[:, -1]  # (B, 3), before tanh
        mu_write = self.hook("mu_write", self._coordinates(raw))  # (B, n_write, 3)
        return mu_read, mu_write, place

    def _coordinates(self, out: torch.Tensor) -> torch.Tensor:
        """A coordinate head's output (…, 3 or W+H+D) → (…, 3) as (x, y, z) in [-1, 1]: tanh, or the expected voxel
        centre under a softmax over each axis's voxels (``coordinates="soft_argmax"``: every voxel gets gradient)."""
        if self.config.coordinates == "tanh":
            return torch.tanh(out)
        D, H, W = self.config.grid
        logits = out.split((W, H, D), dim=-1)  # (…, W), (…, H), (…, D): x's voxels, y's, z's
        return torch.stack([axis.softmax(-1) @ voxel_centres(n, axis.dtype, axis.device)
                            for axis, n in zip(logits, (W, H, D))], dim=-1)  # (…, 3)

    def _read(self, x: torch.Tensor, h0: torch.Tensor, hs: torch.Tensor, mu_read: torch.Tensor,
              already_output: int) -> torch.Tensor:
        """3. Read: chunk k reads h before its own write and adds it to each of its tokens through σ(γ).

        That is the incoming state h0 for the first chunk and the state after chunk k−1 for the others.
        Every state in hs is sampled (a spare coordinate where no chunk follows the last write), so
        autograd never has to scatter a slice's gradient into a zero volume. ``already_output``: tokens of
        the first chunk that an earlier call output (a chunk a stream cut in two).
        """
        n_write, B, D, H, W, C = hs.shape
        n_read, N = mu_read.shape[1], x.shape[1]
        first = self._sample(h0, mu_read[:, 0])  # (B, C)
        later_xyz = F.pad(mu_read[:, 1:], (0, 0, 0, n_write + 1 - n_read))  # (B, n_write, 3)
        later = self._sample(hs.reshape(-1, D, H, W, C), later_xyz.transpose(0, 1).reshape(-1, 3))
        later = later.view(n_write, B, C).transpose(0, 1)[:, :n_read - 1]  # (B, n_read-1, C)
        read = self.hook("read", torch.cat([first[:, None], later], dim=1))  # (B, n_read, C)
        message = self.out_proj(read)  # (B, n_read, d)
        per_token = message.repeat_interleave(self.config.chunk_size, dim=1)  # (B, n_read·chunk, d)
        per_token = per_token[:, already_output:already_output + N]  # (B, N, d): drop tokens already output
        scaled = self.hook("gate_scale", self.gate_scale[None]) * per_token  # σ(γ) as (1,)
        return x + scaled if self.gate is not None else scaled  # output "message": m alone (scaled by 1)

    def _sample(self, volumes: torch.Tensor, xyz: torch.Tensor) -> torch.Tensor:
        """Trilinear reads of volumes (M, D, H, W, C) at xyz (M, 3) → (M, C), with issue 30's read remedies when on."""
        if self.codes is not None:  # voxel codes: a read also says where it is
            volumes = volumes + self.codes  # (M, D, H, W, C)
        if self.config.read_jitter == 0:
            return sample_channels_last(volumes, xyz)
        return jittered_sample(volumes, xyz, self.config.read_jitter, self.config.grid)

    def _write(self, summaries: torch.Tensor, mu_write: torch.Tensor) -> Write:
        """4. Soft write: each chunk's content, spread as a Gaussian of width σ around μ_write.

        The volume is never built: it is the product of the content and one profile per axis, which
        the update convolves apart. With write_mode "windowed" or "local" the profiles are cut to the
        ±kσ box.
        """
        cfg = self.config
        B, n_write, _ = summaries.shape
        content = self.hook("content", self.content(summaries))  # (B, n_write, C)
        sigma = (F.softplus(self.spread(summaries)).squeeze(-1) + cfg.sigma_min) * cfg.sigma_scale  # (B, n_write)
        sigma = self.hook("sigma", sigma)
        xyz, sigma = mu_write.transpose(0, 1).reshape(-1, 3), sigma.t().reshape(-1)  # chunk-major, (n_write·B, …)
        if cfg.write_profile == "nearest":  # ablation: a hard write, one voxel; nothing flows back to μ or σ
            profiles = nearest_profiles(xyz, cfg.grid)
        else:
            profiles = gaussian_profiles(xyz, sigma, cfg.grid, cfg.write_window, cfg.write_eps)
        profiles = [p.view(n_write, B, n) for p, n in zip(profiles, cfg.grid)]  # (n_write, B, n) each
        return Write(content.transpose(0, 1), profiles, xyz, sigma)

    def _update(self, write: Write, state: MemoryState) -> tuple[torch.Tensor, ...]:
        """5. Recurrent update of every chunk in one scan, channels-last inside (update.py).

        Returns the incoming h0, c0 (B, D, H, W, C) and the states after each chunk, hs and cells
        (n_write, B, D, H, W, C), which it also hands to the read-only hook points when something
        observes them. The write volume is separable, so its depthwise convolutions act on the three
        profiles, never on a full volume.
        """
        depthwise = self.depthwise  # (3 axes, 2C, 3 taps)
        if self.config.update_taps == 1:  # ablation, a 1×1×1 update: the side taps held at 0, no gradient to them
            depthwise = F.pad(depthwise[..., 1:2], (1, 1))
        taps_v, taps_h = depthwise.split(self.config.channels, dim=1)  # (3, C, 3) each
        factors = write_factors(write.content, write.profiles, taps_v)  # dw_V(V) = fz ⊗ fy ⊗ fxc
        offset = None if self.depthwise_bias is None else bias_volume(depthwise, self.depthwise_bias,
                                                                      self.config.grid)  # (D, H, W, 2C)
        # The incoming state passes its hook points first (an intervention may replace it).
        h0, c0 = (self.hook(name, v).contiguous(memory_format=torch.channels_last_3d).permute(TO_CHANNELS_LAST)
                  for name, v in (("h_in", state.h), ("c_in", state.c)))  # (B, D, H, W, C) views
        if self.config.write_mode == "local":  # update only the cells each write reaches; the rest keep their state
            n_write, B = write.content.shape[:2]
            box = write_box(write.xyz, write.sigma, self.config.grid, self.config.window_k)
            regions = update_regions([m.view(n_write, B, n) for m, n in zip(box, self.config.grid)])
            hs, cells = local_scan(factors, regions, h0, c0, taps_h, self.mix.weight, self.mix.bias, offset)
        else:
            hs, cells = convlstm_scan(factors, h0, c0, taps_h, self.mix.weight, self.mix.bias, offset)
        if any_active(self.hook_points):  # the read-only points: the volumes after each chunk, the gates
            self._observe_state(hs, cells, factors, h0, taps_h, offset)
        return h0, c0, hs, cells

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
            if state.place is not None and (self.step_head is None or tuple(state.place.shape) != (x.shape[0], 3)):
                raise ValueError(f"MemoryState.place must be None, or (B, 3) for a layer with write_path='integrated'; "
                                 f"got {tuple(state.place.shape)} for write_path={cfg.write_path!r}")

    def _observe_state(self, hs, cells, factors, h0, taps_h, offset) -> None:
        """Hand the read-only points their values, shaped (B, K, C, D, H, W)."""
        by_chunk = (1, 0, 5, 2, 3, 4)  # (K, B, D, H, W, C) → (B, K, C, D, H, W)
        self.hook("h", hs.permute(by_chunk))
        self.hook("c", cells.permute(by_chunk))
        # Gates are recomputed only when observed: they are large. With write_mode "local" they are
        # the values at every cell, but act only inside each chunk's update region.
        if self.hook_points["gate_i"].active:
            with torch.no_grad():
                h_prev = torch.cat([h0[None], hs[:-1]], dim=0)[:len(hs)]  # (K, B, D, H, W, C) state before each write
                x = gate_inputs(expand_write(*factors), depthwise3d(h_prev, taps_h), offset)  # [dw_V(V) ; dw_h(h) ; 1]
                weight = torch.cat([self.mix.weight, self.mix.bias[:, None]], dim=1)
                for name, value in zip(("gate_i", "gate_f", "gate_o", "gate_g"), gate_values(x, weight)):
                    self.hook(name, value.view(hs.shape).permute(by_chunk))


def memory_layers(model: nn.Module) -> dict[str, TensorMemory]:
    """Every :class:`TensorMemory` in ``model``, wherever it sits, by module path ("" for a bare layer)."""
    return {name: module for name, module in model.named_modules() if isinstance(module, TensorMemory)}


__all__ = ["TensorMemory", "memory_layers"]
