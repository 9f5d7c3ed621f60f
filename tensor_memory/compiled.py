"""An optional ``torch.compile`` path for the recurrent scan (off unless switched on).

:func:`chunk_step` is the ConvLSTM update of one chunk written as plain, functional tensor
operations, which TorchInductor can fuse (the shifts of the depthwise convolutions and the
gate arithmetic) and differentiate on its own. :func:`compiled_scan` walks the chunks with the
compiled step. ``benchmarks/compile.py`` measures it against the eager scan of ``update.py``
(hand-written backward); ``docs/performance.md`` records where it helps. Switch it on with
:func:`use_compiled_scan`; the outputs are the eager scan's to float rounding, and nothing
depends on it for correctness. The first call at each new shape compiles (tens of seconds).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

_ENABLED = False


def use_compiled_scan(enabled: bool = True) -> None:
    """Route ``update.convlstm_scan`` (the dense update) through the compiled step, or back."""
    global _ENABLED
    _ENABLED = bool(enabled)


def compiled_scan_enabled() -> bool:
    return _ENABLED


def _shift_conv(x: torch.Tensor, rows: torch.Tensor, dim: int) -> torch.Tensor:
    """Zero-padded 3-tap correlation along ``dim`` of a channels-last x; rows (3, C)."""
    n = x.shape[dim]
    before = F.pad(x.narrow(dim, 0, n - 1).movedim(dim, -1), (1, 0)).movedim(-1, dim)  # x[z-1], 0 at z=0
    after = F.pad(x.narrow(dim, 1, n - 1).movedim(dim, -1), (0, 1)).movedim(-1, dim)  # x[z+1], 0 at the end
    return rows[1] * x + rows[0] * before + rows[2] * after


def chunk_step(fz, fy, fxc, h, c, rows_h, mix, bias):
    """One chunk: fz (B, D, C), fy (B, H, C), fxc (B, W, C); h, c (B, D, H, W, C); rows_h (3 axes, 3 taps, C)."""
    write = fz[:, :, None, None, :] * fy[:, None, :, None, :] * fxc[:, None, None, :, :]  # dw_V(V), (B, D, H, W, C)
    conv_h = h
    for axis, dim in enumerate((-4, -3, -2)):  # D, H, W
        conv_h = _shift_conv(conv_h, rows_h[axis], dim)
    i, f, o, g = (torch.cat([write, conv_h], dim=-1) @ mix.t() + bias).chunk(4, dim=-1)  # (B, D, H, W, C) each
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


@functools.cache
def _compiled_step():
    return torch.compile(chunk_step, dynamic=False, fullgraph=True)


def compiled_scan(factors, h, c, rows_h, mix, bias):
    """The scan of ``update.convlstm_scan`` with the compiled step: hs, cs (K, B, D, H, W, C)."""
    step = _compiled_step()
    hs, cs = [], []
    for fz, fy, fxc in zip(*factors):
        h, c = step(fz, fy, fxc, h, c, rows_h, mix, bias)
        hs.append(h)
        cs.append(c)
    if not hs:
        return h.new_empty(0, *h.shape), c.new_empty(0, *c.shape)
    return torch.stack(hs), torch.stack(cs)
