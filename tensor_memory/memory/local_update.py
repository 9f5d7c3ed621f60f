"""The local update (``MemoryConfig.write.mode = "local"``): only the cells a write reaches change.

With the windowed write, chunk k's write volume ``V_k`` is exactly zero outside a box of ±kσ
around ``μ_write``. The depthwise 3-tap convolutions carry it one voxel further, so the *update
region* is that box dilated by one voxel. The local update computes the ConvLSTM step only on
a window around the region and leaves every other cell's ``h`` and ``c`` exactly as they were:
cells far from the write no longer decay through their forget gate. Inside the region the
values are the dense update's, because the window holds one more voxel on every side, which is
all the convolutions of ``h`` look at (at the grid's faces the zero padding is the dense
update's own).

The arithmetic of a chunk scales with its region, not the grid, once σ is small next to the
grid; the state itself is still copied whole once per chunk (``index_put`` out of place, which
autograd needs), so memory traffic keeps a term that grows with the grid. The batch shares one
window size per chunk (the largest region in the batch); each sample's window sits at its own
place, and the cells of the window outside that sample's region are kept, so the result does not
depend on the rest of the batch. Autograd differentiates it:
each chunk is a handful of operations on a small window.

Layout as in ``update.py``: channels-last volumes ``(…, D, H, W, C)``.
"""

from __future__ import annotations

import torch

from .update import depthwise3d, expand_write, gate_inputs, gate_values


def update_regions(box) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Where each write reaches, from its box (``geometry.write_box``).

    box: (K, B, D), (K, B, H), (K, B, W) booleans, the write box along each axis.
    Returns lo, hi (K, B, 3) in (z, y, x) order: the inclusive voxel bounds of the box dilated
    by one voxel, clipped to the grid; and present (K, B): False where the box holds no voxel
    centre at all (a write narrower than the voxel spacing, between centres), which updates nothing.
    """
    lows, highs, present = [], [], []
    for inside in box:  # (K, B, n) each
        n = inside.shape[-1]
        index = torch.arange(n, device=inside.device)
        first = torch.where(inside, index, n).amin(-1)  # (K, B)
        last = torch.where(inside, index, -1).amax(-1)
        lows.append((first - 1).clamp(0, n - 1))  # one voxel of margin for the 3-tap convolutions
        highs.append((last + 1).clamp(0, n - 1))
        present.append(inside.any(-1))
    return torch.stack(lows, -1), torch.stack(highs, -1), torch.stack(present, -1).all(-1)


def local_scan(
    factors,
    regions,
    h: torch.Tensor,
    c: torch.Tensor,
    taps_h: torch.Tensor,
    mix: torch.Tensor,
    bias: torch.Tensor,
    offset: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ConvLSTM scan of ``update.convlstm_scan``, updating only each chunk's region.

    factors: (fz (K, B, D, C), fy (K, B, H, C), fxc (K, B, W, C)) of the windowed write;
    regions: (lo, hi, present) from :func:`update_regions`; h, c (B, D, H, W, C) the state
    before the first chunk; taps_h, mix, bias, offset as for ``convlstm_scan`` (the offset volume is
    the whole grid's, so a window takes its own cells of it).
    Returns hs, cs (K, B, D, H, W, C), the state after every chunk.
    """
    lo, hi, present = regions
    K = factors[0].shape[0]
    B, *sizes, C = h.shape
    if K == 0:
        return h.new_empty(0, *h.shape), c.new_empty(0, *c.shape)
    weight = torch.cat([mix, bias[:, None]], dim=1)  # (4C, 2C+1) = [mix | bias]
    batch = torch.arange(B, device=h.device).view(B, 1, 1, 1)
    hs, cs = [], []
    for k in range(K):
        # One window size for the batch: the largest region plus a voxel on each side, within the grid.
        extent = (hi[k] - lo[k] + 1).clamp(min=1).amax(0).tolist()  # (3,) largest region per axis (≥ 1 if none)
        win = [min(n, e + 2) for n, e in zip(sizes, extent, strict=True)]
        last_start = torch.tensor([n - w for n, w in zip(sizes, win, strict=True)], device=h.device)
        start = torch.minimum((lo[k] - 1).clamp(min=0), last_start)  # (B, 3) each sample's window corner
        index = [start[:, a, None] + torch.arange(win[a], device=h.device) for a in range(3)]  # (B, w_a) each
        window = (batch, index[0].view(B, -1, 1, 1), index[1].view(B, 1, -1, 1), index[2].view(B, 1, 1, -1))  # voxels
        h_win, c_win = h[window], c[window]  # (B, wd, wh, ww, C)

        # The dense update's maths on the window: gates from [dw_V(V) ; dw_h(h) ; 1].
        fz, fy, fxc = (f[k].gather(1, i[:, :, None].expand(-1, -1, C)) for f, i in zip(factors, index, strict=True))
        off_win = None if offset is None else offset[window[1:]]  # (B, wd, wh, ww, 2C)
        x = gate_inputs(expand_write(fz, fy, fxc), depthwise3d(h_win, taps_h), off_win)  # (B·wd·wh·ww, 2C+1)
        i, f, o, g = gate_values(x, weight)
        c_new = (f * c_win.reshape(-1, C) + i * g).view(h_win.shape)
        h_new = (o * torch.tanh(c_new).reshape(-1, C)).view(h_win.shape)

        # Only the region changes; the rest of the window (and of the grid) keeps its state exactly.
        in_region = [(i >= lo[k][:, a, None]) & (i <= hi[k][:, a, None]) for a, i in enumerate(index)]  # (B, w_a)
        keep_new = (
            present[k].view(B, 1, 1, 1)
            & in_region[0].view(B, -1, 1, 1)
            & in_region[1].view(B, 1, -1, 1)
            & in_region[2].view(B, 1, 1, -1)
        )[..., None]  # (B, wd, wh, ww, 1)
        h = h.index_put(window, torch.where(keep_new, h_new, h_win))  # out of place: autograd keeps the old state
        c = c.index_put(window, torch.where(keep_new, c_new, c_win))
        hs.append(h)
        cs.append(c)
    return torch.stack(hs), torch.stack(cs)
