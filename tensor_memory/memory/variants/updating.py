"""Step 5's component: the ConvLSTM update's taps and biases, and which cells a chunk updates."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..config import MemoryConfig
from ..geometry import write_box
from ..local_update import local_scan, update_regions
from ..update import bias_volume, convlstm_scan


class Update(nn.Module):
    """The scan of every chunk's update (``update.py``) as the config asks for it.

    ``taps`` 1 holds the depthwise convolutions' side taps at 0 (a 1×1×1 update, no gradient to them);
    ``depthwise_bias`` (3 axes, 2C) is a learned bias after each depthwise convolution; with write mode "local" only
    the cells each write's ±kσ box reaches (plus one voxel) are updated, every other cell keeps its state exactly.
    """

    def __init__(self, config: MemoryConfig) -> None:
        super().__init__()
        self.channels, self.grid, self.taps = config.channels, config.grid, config.update.taps
        bias = torch.zeros(3, 2 * config.channels) if config.public_code.depthwise_bias else None
        self.depthwise_bias = None if bias is None else nn.Parameter(bias)
        self.window_k = config.write.window_k if config.write.mode == "local" else None

    def initialise(self) -> None:
        """Depthwise biases start at 0 (the convolutions at the identity)."""
        if self.depthwise_bias is not None:
            with torch.no_grad():
                self.depthwise_bias.zero_()

    def convolutions(self, depthwise: torch.Tensor):
        """The layer's depthwise taps (3 axes, 2C, 3) as the taps for V and for h, (3, C, 3) each, and what the biases
        add to ``[dw_V(V) ; dw_h(h)]``, (D, H, W, 2C), or None."""
        if self.taps == 1:  # the side taps held at 0: no neighbourhood, no gradient to them
            depthwise = F.pad(depthwise[..., 1:2], (1, 1))
        taps_v, taps_h = depthwise.split(self.channels, dim=1)  # (3, C, 3) each
        offset = None if self.depthwise_bias is None else bias_volume(depthwise, self.depthwise_bias, self.grid)
        return taps_v, taps_h, offset

    def forward(
        self,
        factors,
        write,
        h0: torch.Tensor,
        c0: torch.Tensor,
        taps_h: torch.Tensor,
        mix: nn.Linear,
        offset: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """States after every chunk, hs and cs (n_write, B, D, H, W, C), from h0, c0 (B, D, H, W, C), the write's
        convolved factors and the write itself (its place and σ bound a local update's region)."""
        if self.window_k is None:
            return convlstm_scan(factors, h0, c0, taps_h, mix.weight, mix.bias, offset)
        n_write, B = write.content.shape[:2]
        box = write_box(write.xyz, write.sigma, self.grid, self.window_k)
        regions = update_regions([inside.view(n_write, B, n) for inside, n in zip(box, self.grid, strict=True)])
        return local_scan(factors, regions, h0, c0, taps_h, mix.weight, mix.bias, offset)
