"""Tensor Memory: a fixed-size recurrent 3D voxel memory that tokens write to and read from.

Per memory layer the state is a pair of volumes ``h, c`` of shape (B, C, D, H, W), zeros at the start of a sequence.
The tokens are cut into chunks of ``chunk_size``; for chunk k:

1. Chunk summaries — read query ``q_k`` = the chunk's first token; write summary ``s_k`` = a learned projection of
   the chunk's concatenated tokens, layer-normalised (no gain) to sit on the query's scale.
2. Addressing — one shared ``coord_head`` + tanh: ``mu_read = tanh(coord_head(q_k))``,
   ``mu_write = tanh(coord_head(s_k))``, as (x, y, z) in [-1, 1] (grid_sample's order).
3. Read — trilinear interpolation of ``h`` *before* chunk k's write at ``mu_read``, projected to the token width and
   added to every token of the chunk through σ(γ).
4. Soft write — ``content_k`` spread as a Gaussian of width ``sigma_k`` around ``mu_write``.
5. Recurrent update — ConvLSTM gates from ``[V ; h]`` through factorised depthwise 3-tap convolutions and a
   pointwise mix; ``c ← f⊙c + i⊙g``, ``h ← o⊙tanh(c)``.

The class defines one method per step, in this order. Where a config asks for a variant, the step hands its part to
the component the config chose (``variants/``); with the defaults each component is the mechanism as written.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from ..config import require_int
from .config import MemoryConfig, MemoryState, check_call
from .hookpoints import GATE_POINTS, POINTS, HookPoint, any_active, nothing_hooked
from .public_code import from_public_code, read_public_code
from .update import recomputed_gates, write_factors
from .variants.addressing import Addressing, head_width
from .variants.interface import chunking, input_norm, output, read_gate
from .variants.reading import Sampler
from .variants.updating import Update
from .variants.writing import write_profile

TO_CHANNELS_LAST = (0, 2, 3, 4, 1)  # (B, C, D, H, W) → (B, D, H, W, C), a view
TO_PUBLIC = (0, 4, 1, 2, 3)  # (B, D, H, W, C) → (B, C, D, H, W), a view


class Write(NamedTuple):
    """Step 4's result, chunk-major (the order the scan walks in): what each chunk writes and where."""

    content: torch.Tensor  # (n_write, B, C)
    profiles: list[torch.Tensor]  # the Gaussian along D, H, W: (n_write, B, n) each; V = content ⊗ gz ⊗ gy ⊗ gx
    xyz: torch.Tensor  # (n_write·B, 3) μ_write, flattened
    sigma: torch.Tensor  # (n_write·B,) likewise


class TensorMemory(nn.Module):
    """One memory layer: ``y, state = mem(x, state)`` with ``y = x + σ(γ)·m`` (LN_m inside)."""

    def __init__(self, config: MemoryConfig) -> None:
        super().__init__()
        self.config = config
        d, C, chunk = config.token_dim, config.channels, config.chunk_size
        self.norm = input_norm(config)  # LN_m
        self.chunks = chunking(config)  # 1: tokens → chunks to write
        self.summary = nn.Linear(chunk * d, d)  # 1: chunk → write summary
        self.summary_norm = nn.LayerNorm(d, elementwise_affine=False) if config.summary_norm else nn.Identity()
        self.coord_head = nn.Linear(d, head_width(config))  # 2: shared by reads and writes, before tanh
        self.addressing = Addressing(config)  # 2: the head's outputs → coordinates
        self.out_proj = nn.Linear(C, d)  # 3: read vector → token width
        self.sampler = Sampler(config)  # 3: h sampled at μ_read
        self.gate = read_gate(config)  # 3: γ
        self.output = output(config)  # 3: x + σ(γ)·m
        self.content = nn.Linear(d, C)  # 4: what to write
        self.spread = nn.Linear(d, 1)  # 4: how widely (σ before softplus)
        self.profile = write_profile(config)  # 4: the Gaussian along each axis
        self.depthwise = nn.Parameter(torch.zeros(3, 2 * C, 3))  # 5: (axis D/H/W, [V;h] channel, tap)
        self.update = Update(config)  # 5: the scan over chunks
        self.mix = nn.Linear(2 * C, 4 * C)  # 5: pointwise [V;h] → i, f, o, g
        self.hook_points = nn.ModuleDict({name: HookPoint(name) for name in POINTS})  # hookpoints.py
        self.reset_memory_parameters()

    def reset_memory_parameters(self) -> None:
        """Initialisation the mechanism relies on (the rest keeps PyTorch's defaults)."""
        cfg, C = self.config, self.config.channels
        with torch.no_grad():
            if cfg.summary_init == "sum":  # s_k = Σ tokens / √chunk_size, the same for every position
                identities = torch.eye(cfg.token_dim).repeat(1, cfg.chunk_size)  # (d, chunk·d) = [I … I]
                self.summary.weight.copy_(identities / math.sqrt(cfg.chunk_size))
                nn.init.zeros_(self.summary.bias)
            self.addressing.initialise(centre=cfg.coord_init == "centre")
            self.sampler.initialise()
            if cfg.coord_init == "centre":  # μ = tanh(0) = 0 for every input; the head learns to move them
                nn.init.zeros_(self.coord_head.weight)
                nn.init.zeros_(self.coord_head.bias)
            # σ starts at sigma_init for every input; its weights learn from there.
            nn.init.zeros_(self.spread.weight)
            sigma_scale = cfg.public_code.sigma_scale
            self.spread.bias.fill_(math.log(math.expm1(cfg.sigma_init / sigma_scale - cfg.sigma_min)))
            # Depthwise convolutions start as the identity: tap weights (0, 1, 0).
            self.depthwise.zero_()
            self.depthwise[:, :, 1] = 1.0
            self.update.initialise()
            self.mix.bias[C : 2 * C].fill_(cfg.forget_bias)
            if self.gate is not None:
                self.gate.fill_(cfg.gate_init)

    def init_state(self, batch_size: int, device=None, dtype=None) -> MemoryState:
        """Zero state for a new sequence: h, c (batch_size, C, D, H, W), nothing pending."""
        require_int("init_state", "batch_size", batch_size, 1)
        ref = self.mix.weight
        device, dtype = device or ref.device, dtype or ref.dtype
        shape = (batch_size, self.config.channels, *self.config.grid)

        def zeros() -> torch.Tensor:  # stored channels-last (the layout update.py computes in), shape (B, C, D, H, W)
            return torch.zeros(shape, device=device, dtype=dtype).contiguous(memory_format=torch.channels_last_3d)

        return MemoryState(
            h=zeros(), c=zeros(), pending=torch.zeros(batch_size, 0, self.config.token_dim, device=device, dtype=dtype)
        )

    @classmethod
    def from_public_code(cls, state_dict, *, chunk_size=None, grid=None, sigma_scale=1.0, prefix="", gate=None):
        """The paper's public ``TensorMemoryInterface`` with the weights of ``state_dict``, built on this layer and
        called like it: ``out, (h, c) = m(x, (h0, c0))``. See ``public_code.from_public_code``."""
        return from_public_code(
            state_dict, layer=cls, chunk_size=chunk_size, grid=grid, sigma_scale=sigma_scale, prefix=prefix, gate=gate
        )

    @classmethod
    def load_public_code(cls, path, **options):
        """:meth:`from_public_code` of a safetensors file (``save_file(interface.state_dict(), path)``), checked
        before it is read and never unpickled; ``options`` as for :meth:`from_public_code`."""
        return cls.from_public_code(read_public_code(path), **options)

    @property
    def gate_scale(self) -> torch.Tensor:
        """σ(γ): how strongly the read enters the token stream (1 where the output is the message itself)."""
        return self.output.scale(self.gate, self.mix.weight)

    def hook(self, name: str, value: torch.Tensor) -> torch.Tensor:
        """Pass ``value`` through hook point ``name``: the value itself unless a hook replaces it."""
        return value if nothing_hooked() else self.hook_points[name](value)

    def forward(self, x: torch.Tensor, state: MemoryState | None = None) -> tuple[torch.Tensor, MemoryState]:
        """x (B, N, d) from ``state`` (zeros when None) → y (B, N, d) and the state after the last chunk.

        The steps run as 1, 2, 4, 5, 3: each chunk reads the state before its own write, and the scan of
        step 5 makes the states of all chunks at once, so the reads come last.
        """
        check_call(self.config, x, state)
        if state is None:
            state = self.init_state(x.shape[0], x.device, x.dtype)
        if x.shape[1] == 0:  # an empty segment of a stream changes nothing
            return x, state
        tokens, queries, summaries = self._summaries(x, state.pending)  # 1
        mu_read, mu_write, place = self._address(queries, summaries, state.place)  # 2
        write = self._write(summaries, mu_write)  # 4
        h0, c0, hs, cs = self._update(write, state)  # 5
        y = self._read(x, h0, hs, mu_read, state.pending.shape[1])  # 3
        n_write = summaries.shape[1]
        h, c = (hs[-1], cs[-1]) if n_write else (h0, c0)
        return y, MemoryState(
            h=h.permute(TO_PUBLIC),
            c=c.permute(TO_PUBLIC),
            pending=tokens[:, n_write * self.config.chunk_size :],
            place=place,
        )

    def _summaries(self, x: torch.Tensor, pending: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """1. Chunk summaries: each chunk's read query (its first token) and each written chunk's summary.

        Tokens left over from an incomplete chunk of the previous call come first, so chunk boundaries never depend on
        how a stream was cut. Returns the normalised tokens (B, P+N, d), the queries (B, n_read, d) of every chunk
        with a token and the summaries (B, n_write, d) of the chunks written now.
        """
        tokens = torch.cat([pending, self.norm(x)], dim=1)  # (B, P+N, d)
        queries = tokens[:, :: self.config.chunk_size]  # (B, n_read, d) each chunk's first token
        summaries = self.summary(self.chunks(tokens))  # (B, n_write, chunk·d) → (B, n_write, d)
        return tokens, queries, self.summary_norm(summaries)  # on the queries' scale for the shared coord_head

    def _address(self, queries: torch.Tensor, summaries: torch.Tensor, place: torch.Tensor | None) -> tuple:
        """2. Addressing: one coordinate head for reads and writes; tanh keeps the coordinates in the grid.
        Returns μ_read, μ_write and the place a later call's writes continue from."""
        mu_read = self.hook("mu_read", self.addressing.reads(self.coord_head, queries))  # (B, n_read, 3)
        mu_write, place = self.addressing.writes(self.coord_head, summaries, place)
        return mu_read, self.hook("mu_write", mu_write), place  # μ_write (B, n_write, 3)

    def _read(
        self, x: torch.Tensor, h0: torch.Tensor, hs: torch.Tensor, mu_read: torch.Tensor, already_output: int
    ) -> torch.Tensor:
        """3. Read: chunk k reads h before its own write and adds it to each of its tokens through σ(γ).

        That is the incoming state h0 for the first chunk and the state after chunk k−1 for the others. Every state
        in hs is sampled (a spare coordinate where no chunk follows the last write), so autograd never scatters a
        slice's gradient into a zero volume. ``already_output``: tokens of the first chunk an earlier call output.
        """
        n_write, B, D, H, W, C = hs.shape
        n_read, N = mu_read.shape[1], x.shape[1]
        first = self.sampler(h0, mu_read[:, 0])  # (B, C)
        later_xyz = F.pad(mu_read[:, 1:], (0, 0, 0, n_write + 1 - n_read))  # (B, n_write, 3)
        later = self.sampler(hs.reshape(-1, D, H, W, C), later_xyz.transpose(0, 1).reshape(-1, 3))
        later = later.view(n_write, B, C).transpose(0, 1)[:, : n_read - 1]  # (B, n_read-1, C)
        read = self.hook("read", torch.cat([first[:, None], later], dim=1))  # (B, n_read, C)
        message = self.out_proj(read)  # (B, n_read, d)
        per_token = message.repeat_interleave(self.config.chunk_size, dim=1)  # (B, n_read·chunk, d)
        per_token = per_token[:, already_output : already_output + N]  # (B, N, d): drop tokens already output
        scaled = self.hook("gate_scale", self.gate_scale[None]) * per_token  # σ(γ) as (1,)
        return self.output(x, scaled)

    def _write(self, summaries: torch.Tensor, mu_write: torch.Tensor) -> Write:
        """4. Soft write: each chunk's content, spread as a Gaussian of width σ around μ_write.

        The volume is never built: it is the product of the content and one profile per axis, which the update
        convolves apart.
        """
        cfg = self.config
        B, n_write, _ = summaries.shape
        content = self.hook("content", self.content(summaries))  # (B, n_write, C)
        sigma = (F.softplus(self.spread(summaries)).squeeze(-1) + cfg.sigma_min) * cfg.public_code.sigma_scale
        sigma = self.hook("sigma", sigma)  # (B, n_write)
        xyz, sigma = mu_write.transpose(0, 1).reshape(-1, 3), sigma.t().reshape(-1)  # chunk-major, (n_write·B, …)
        profiles = [
            p.view(n_write, B, n) for p, n in zip(self.profile(xyz, sigma), cfg.grid, strict=True)
        ]  # (n_write, B, n)
        return Write(content.transpose(0, 1), profiles, xyz, sigma)

    def _update(self, write: Write, state: MemoryState) -> tuple[torch.Tensor, ...]:
        """5. Recurrent update of every chunk in one scan, channels-last inside (update.py).

        Returns the incoming h0, c0 (B, D, H, W, C) and the states after each chunk, hs and cs (n_write, B, D, H, W,
        C). The write volume is separable, so its depthwise convolutions act on the three profiles, never on a volume.
        """
        taps_v, taps_h, offset = self.update.convolutions(self.depthwise)  # (3, C, 3) each
        factors = write_factors(write.content, write.profiles, taps_v)  # dw_V(V) = fz ⊗ fy ⊗ fxc
        # The incoming state passes its hook points first (an intervention may replace it).
        h0, c0 = (
            self.hook(name, v).contiguous(memory_format=torch.channels_last_3d).permute(TO_CHANNELS_LAST)
            for name, v in (("h_in", state.h), ("c_in", state.c))
        )  # (B, D, H, W, C) views
        hs, cs = self.update(factors, write, h0, c0, taps_h, self.mix, offset)
        if any_active(self.hook_points):
            self._observe(hs, cs, lambda: recomputed_gates(factors, h0, hs, taps_h, offset, self.mix))
        return h0, c0, hs, cs

    def _observe(self, hs: torch.Tensor, cs: torch.Tensor, gates) -> None:
        """Hand the read-only hook points the states after each chunk and, only when observed (they are large), the
        gates ``gates()`` recomputes, each (B, K, C, D, H, W)."""
        by_chunk = (1, 0, 5, 2, 3, 4)  # (K, B, D, H, W, C) → (B, K, C, D, H, W)
        self.hook("h", hs.permute(by_chunk))
        self.hook("c", cs.permute(by_chunk))
        if self.hook_points["gate_i"].active:
            for name, value in zip(GATE_POINTS, gates(), strict=True):
                self.hook(name, value.permute(by_chunk))


def memory_layers(model: nn.Module) -> dict[str, TensorMemory]:
    """Every :class:`TensorMemory` in ``model``, wherever it sits, by module path ("" for a bare layer)."""
    return {name: module for name, module in model.named_modules() if isinstance(module, TensorMemory)}


__all__ = ["TensorMemory", "memory_layers"]
