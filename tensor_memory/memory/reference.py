"""A literal, slow implementation of the memory layer: the oracle for tests, the baseline for benchmarks.

Chunk by chunk, exactly as the mechanism is written down: ``grid_sample`` for the read, a Gaussian evaluated at every
voxel centre for the write, ``nn.Conv3d(groups=…)`` for the depthwise convolutions of ``[V ; h]`` and a 1×1×1
``Conv3d`` for the mix. It shares no code with ``layer.py`` beyond the parameter values it copies. Of the variants it
writes the windowed and local writes literally (the Gaussian masked with its box; the dense step, the old state kept
outside the box dilated by one voxel) and the public code's options (biases on the ``Conv3d`` layers, a zero-padded
last chunk written like the others); it refuses the others.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import AddressingVariant, ReadVariant, UpdateVariant
from .layer import TensorMemory


class ReferenceMemory(nn.Module):
    """Same maths as :class:`TensorMemory`, one chunk at a time, with plain PyTorch layers."""

    def __init__(self, memory: TensorMemory) -> None:
        super().__init__()
        cfg = self.config = memory.config
        as_written = {"addressing": AddressingVariant(), "read": ReadVariant(), "update": UpdateVariant()}
        refused = [name for name, default in as_written.items() if getattr(cfg, name) != default]
        refused += ["write.profile"] if cfg.write.profile != "gaussian" else []
        if refused:
            raise ValueError(
                f"ReferenceMemory writes the mechanism as the paper does; MemoryConfig.{refused[0]} asks "
                f"for a variant it does not have"
            )
        d, C, cs = cfg.token_dim, cfg.channels, cfg.chunk_size
        self.norm = nn.LayerNorm(d) if cfg.public_code.input_norm else nn.Identity()
        self.summary = nn.Linear(cs * d, d)
        self.coord_head = nn.Linear(d, 3)
        self.out_proj = nn.Linear(C, d)
        self.gate = nn.Parameter(torch.zeros(())) if memory.gate is not None else None
        self.content = nn.Linear(d, C)
        self.spread = nn.Linear(d, 1)
        bias = cfg.public_code.depthwise_bias
        self.conv_d = nn.Conv3d(2 * C, 2 * C, (3, 1, 1), padding=(1, 0, 0), groups=2 * C, bias=bias)
        self.conv_h = nn.Conv3d(2 * C, 2 * C, (1, 3, 1), padding=(0, 1, 0), groups=2 * C, bias=bias)
        self.conv_w = nn.Conv3d(2 * C, 2 * C, (1, 1, 3), padding=(0, 0, 1), groups=2 * C, bias=bias)
        self.mix = nn.Conv3d(2 * C, 4 * C, 1)
        self.to(memory.mix.weight.dtype)  # copy the values exactly, whatever their precision
        self._copy(memory)

    def _copy(self, memory: TensorMemory) -> None:
        C = self.config.channels
        with torch.no_grad():
            for name in ("norm", "summary", "coord_head", "out_proj", "content", "spread"):
                getattr(self, name).load_state_dict(getattr(memory, name).state_dict())
            if self.gate is not None:
                self.gate.copy_(memory.gate)
            for axis, (conv, shape) in enumerate(
                ((self.conv_d, (3, 1, 1)), (self.conv_h, (1, 3, 1)), (self.conv_w, (1, 1, 3)))
            ):
                conv.weight.copy_(memory.depthwise[axis].view(2 * C, 1, *shape))
                if conv.bias is not None:
                    conv.bias.copy_(memory.update.depthwise_bias[axis])
            self.mix.weight.copy_(memory.mix.weight.view(4 * C, 2 * C, 1, 1, 1))
            self.mix.bias.copy_(memory.mix.bias)

    def forward(self, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor):
        """One pass over x (B, N, d) from state (h, c). Returns y and the final (h, c).

        A trailing incomplete chunk is read but not written, as in :class:`TensorMemory`; with
        partial_chunk "pad" it is zero-padded to a whole chunk and written.
        """
        cfg = self.config
        B, N, d = x.shape
        cs, (D, H, W) = cfg.chunk_size, cfg.grid
        z, y, xx = torch.meshgrid(*(torch.linspace(-1, 1, n, dtype=x.dtype) for n in (D, H, W)), indexing="ij")
        centres = torch.stack([xx, y, z], dim=-1)  # (D, H, W, 3) as (x, y, z)
        u = self.norm(x)
        outputs = []
        for start in range(0, N, cs):
            chunk = u[:, start : start + cs]  # (B, ≤cs, d)
            # Read from the state before this chunk's write.
            mu_read = torch.tanh(self.coord_head(chunk[:, 0]))  # (B, 3)
            sample = F.grid_sample(
                h, mu_read.view(B, 1, 1, 1, 3), mode="bilinear", padding_mode="border", align_corners=True
            )  # (B, C, 1, 1, 1)
            message = self.out_proj(sample.view(B, -1))[:, None]  # (B, 1, d)
            gated = message if self.gate is None else x[:, start : start + cs] + torch.sigmoid(self.gate) * message
            outputs.append(gated.expand(B, chunk.shape[1], d))
            if chunk.shape[1] < cs and cfg.public_code.partial_chunk == "pending":  # incomplete: nothing to write yet
                break
            chunk = F.pad(chunk, (0, 0, 0, cs - chunk.shape[1]))  # (B, cs, d): zeros after a short last chunk
            h, c = self._step(chunk.reshape(B, cs * d), h, c, centres)
        return torch.cat(outputs, dim=1), (h, c)

    def _step(self, whole: torch.Tensor, h: torch.Tensor, c: torch.Tensor, centres: torch.Tensor):
        """One chunk's write and update, from its concatenated tokens (B, cs·d)."""
        cfg = self.config
        B, d = whole.shape[0], cfg.token_dim
        s = self.summary(whole)  # (B, d)
        if cfg.summary_norm:
            s = F.layer_norm(s, (d,))
        mu_write = torch.tanh(self.coord_head(s))  # (B, 3)
        sigma = (F.softplus(self.spread(s)) + cfg.sigma_min) * cfg.public_code.sigma_scale  # (B, 1)
        dist2 = ((centres[None] - mu_write[:, None, None, None, :]) ** 2).sum(-1)  # (B, D, H, W)
        weight = torch.exp(-dist2 / (2 * sigma.view(B, 1, 1, 1) ** 2 + cfg.public_code.write_eps))  # (B, D, H, W)
        if cfg.write.window is not None:  # windowed: zero outside the box |p − μ| ≤ kσ on every axis
            box = (
                (centres[None] - mu_write[:, None, None, None, :]).abs() <= cfg.write.window * sigma.view(B, 1, 1, 1, 1)
            ).all(-1)  # (B, D, H, W)
            weight = weight * box
        volume = self.content(s)[:, :, None, None, None] * weight[:, None]  # (B, C, D, H, W)
        stacked = torch.cat([volume, h], dim=1)  # (B, 2C, D, H, W)
        pre = self.mix(self.conv_w(self.conv_h(self.conv_d(stacked))))  # (B, 4C, D, H, W)
        i, f, o, g = pre.chunk(4, dim=1)
        c_new = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h_new = torch.sigmoid(o) * torch.tanh(c_new)
        if cfg.write.mode == "local":  # only the box dilated by one voxel changes
            region = F.max_pool3d(box[:, None].to(whole.dtype), 3, stride=1, padding=1) > 0  # (B, 1, D, H, W)
            c_new, h_new = torch.where(region, c_new, c), torch.where(region, h_new, h)
        return h_new, c_new
