"""Step 5 of the mechanism: the factorised ConvLSTM update, and its fast recurrent scan.

The update maps ``[V ; h]`` (2C channels) through depthwise 3-tap convolutions along D, H
and W, then a pointwise mix to 4C gate pre-activations:

    i, f, o, g = mix([dw_V(V_k) ; dw_h(h_{k-1})]) + bias
    c_k = σ(f)⊙c_{k-1} + σ(i)⊙tanh(g),   h_k = σ(o)⊙tanh(c_k)

Two facts make it cheap:

* The write volume is separable, ``V = content ⊗ gz ⊗ gy ⊗ gx`` (one Gaussian profile per
  axis), and a depthwise convolution along one axis only touches that axis's profile. So
  ``dw_V(V)`` is kept as three small factors and expanded one chunk at a time.
* The recurrence runs in :func:`convlstm_scan`, an autograd function with a hand-written
  backward that recomputes each chunk's gates instead of storing them. On a CPU, PyTorch's
  autograd over ~20 small operations per chunk, the grouped ``Conv3d`` backward and touching
  freshly allocated memory dominate the plain implementation's cost; this keeps the working
  set to a few chunk-sized buffers that are reused (see ``docs/performance.md``).

Layout: inside this module volumes are *channels-last*, ``(…, D, H, W, C)``, so the mix is a
matrix product. ``memory.py`` presents them to users as ``(B, C, D, H, W)`` views. The maths
is the plain implementation's in ``tensor_memory/reference.py``; ``tests/test_update.py``
checks values and gradients against it.
"""

from __future__ import annotations

import torch

AXES = (-4, -3, -2)  # D, H, W in a channels-last volume (…, D, H, W, C)


def conv_axis(x: torch.Tensor, taps: torch.Tensor, dim: int) -> torch.Tensor:
    """Zero-padded 3-tap correlation along ``dim`` of a channels-last x (…, C); taps (C, 3).

    out[z] = taps[0]·x[z-1] + taps[1]·x[z] + taps[2]·x[z+1], what ``Conv3d(padding=1)`` computes.
    """
    n = x.shape[dim]
    out = x * taps[:, 1]
    out.narrow(dim, 1, n - 1).addcmul_(x.narrow(dim, 0, n - 1), taps[:, 0])  # taps[0]·x[z-1]
    out.narrow(dim, 0, n - 1).addcmul_(x.narrow(dim, 1, n - 1), taps[:, 2])  # taps[2]·x[z+1]
    return out


def depthwise3d(x: torch.Tensor, taps: torch.Tensor) -> torch.Tensor:
    """Depthwise 3-tap convolutions along D, then H, then W. x (…, D, H, W, C); taps (3, C, 3)."""
    for axis, dim in enumerate(AXES):
        x = conv_axis(x, taps[axis], dim)
    return x


def write_factors(content: torch.Tensor, profiles, taps: torch.Tensor):
    """The depthwise-convolved write volume as three factors, ``dw_V(V) = fz ⊗ fy ⊗ fxc``.

    content (…, C); profiles (gz (…, D), gy (…, H), gx (…, W)); taps (3, C, 3)
    → fz (…, D, C), fy (…, H, C), fxc (…, W, C), the content folded into the last one.
    """
    C = content.shape[-1]
    fz, fy, fx = (conv_axis(g[..., None].expand(*g.shape, C), taps[axis], -2)
                  for axis, g in enumerate(profiles))  # per-channel convolved profiles
    return fz, fy, fx * content[..., None, :]


def expand_write(fz: torch.Tensor, fy: torch.Tensor, fxc: torch.Tensor) -> torch.Tensor:
    """fz (…, D, C), fy (…, H, C), fxc (…, W, C) → the volume (…, D, H, W, C)."""
    return (fz[..., :, None, None, :] * fy[..., None, :, None, :]) * fxc[..., None, None, :, :]


def gate_values(write: torch.Tensor, conv_h: torch.Tensor, mix: torch.Tensor, bias: torch.Tensor):
    """Gates from dw_V(V) and dw_h(h), both (M, C): input, forget, output gates and candidate g, (M, C) each.

    One matrix product per gate keeps every gate a contiguous block.
    """
    C = write.shape[-1]
    x = torch.cat([write, conv_h], dim=1)  # (M, 2C) = [dw_V(V) ; dw_h(h)]
    i, f, o, g = (torch.addmm(b, x, w.t()) for w, b in zip(mix.split(C), bias.split(C)))
    return i.sigmoid_(), f.sigmoid_(), o.sigmoid_(), g.tanh_()


def _conv_axis_backward(grad, x, taps, dim, grad_taps_acc):
    """Backward of :func:`conv_axis`: returns the input gradient; accumulates tap gradients.

    grad_taps_acc holds three running products (one per tap), summed once at the very end.
    """
    n = grad.shape[dim]
    grad_taps_acc[0].addcmul_(grad.narrow(dim, 1, n - 1), x.narrow(dim, 0, n - 1))
    grad_taps_acc[1].addcmul_(grad, x)
    grad_taps_acc[2].addcmul_(grad.narrow(dim, 0, n - 1), x.narrow(dim, 1, n - 1))
    return conv_axis(grad, taps.flip(-1), dim)  # the adjoint of a correlation is the flipped one


def _chunk(factors, k, h, taps_h, mix, bias):
    """Chunk k's update inputs from the state h before it: (write, conv inputs, conv_h, gates)."""
    M, C = h.numel() // h.shape[-1], h.shape[-1]
    write = expand_write(*(f[k] for f in factors)).view(M, C)  # (B·D·H·W, C)
    x_h = conv_axis(h, taps_h[0], AXES[0])
    x_w = conv_axis(x_h, taps_h[1], AXES[1])
    conv_h = conv_axis(x_w, taps_h[2], AXES[2]).view(M, C)  # (B·D·H·W, C)
    return write, (h, x_h, x_w), conv_h, gate_values(write, conv_h, mix, bias)


def _scan(factors, h, c, taps_h, mix, bias):
    """The recurrence. factors as from :func:`write_factors` with a leading K; h, c (B, D, H, W, C)."""
    K = factors[0].shape[0]
    hs = h.new_empty(K, *h.shape)  # (K, B, D, H, W, C)
    cs = torch.empty_like(hs)
    for k in range(K):
        _, _, _, (i, f, o, g) = _chunk(factors, k, h, taps_h, mix, bias)
        c_k = cs[k].view_as(i)
        torch.mul(f, c.reshape(i.shape), out=c_k)
        c_k.addcmul_(i, g)  # c = f⊙c + i⊙g
        torch.mul(o, torch.tanh(c_k), out=hs[k].view_as(i))  # h = o⊙tanh(c)
        h, c = hs[k], cs[k]
    return hs, cs


class _ConvLSTMScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fz, fy, fxc, h0, c0, taps_h, mix, bias):
        hs, cs = _scan((fz, fy, fxc), h0, c0, taps_h, mix, bias)
        ctx.save_for_backward(fz, fy, fxc, h0, c0, taps_h, mix, bias, hs, cs)
        return hs, cs

    @staticmethod
    def backward(ctx, grad_hs, grad_cs):
        fz, fy, fxc, h0, c0, taps_h, mix, bias, hs, cs = ctx.saved_tensors
        factors = (fz, fy, fxc)
        K, B, D, H, W, C = hs.shape
        M = B * D * H * W
        grad_fz, grad_fy, grad_fxc = torch.empty_like(fz), torch.empty_like(fy), torch.empty_like(fxc)
        grad_mix, grad_bias = torch.zeros_like(mix), torch.zeros_like(bias)
        grad_pre = h0.new_empty(M, 4 * C)  # reused every chunk
        # Running tap-gradient products, one per (axis, tap), shaped like the slices they multiply.
        vol = (B, D, H, W, C)
        acc = [[h0.new_zeros([s - (1 if (d == 1 + a and t != 1) else 0) for d, s in enumerate(vol)])
                for t in range(3)] for a in range(3)]
        dh = h0.new_zeros(M, C)  # gradient reaching h_k from later chunks
        dc = h0.new_zeros(M, C)
        for k in reversed(range(K)):
            h_prev = hs[k - 1] if k > 0 else h0.contiguous()
            c_prev = (cs[k - 1] if k > 0 else c0).reshape(M, C)
            write, conv_inputs, conv_h, (i, f, o, g) = _chunk(factors, k, h_prev, taps_h, mix, bias)
            if grad_hs is not None:
                dh = dh + grad_hs[k].reshape(M, C)
            if grad_cs is not None:
                dc = dc + grad_cs[k].reshape(M, C)
            t = torch.tanh(cs[k].view(M, C))
            gp_i, gp_f, gp_o, gp_g = grad_pre.split(C, dim=1)
            torch.mul(dh * t, o * (1 - o), out=gp_o)  # output gate
            dc = dc + dh * o * (1 - t * t)  # through h = o·tanh(c)
            torch.mul(dc * g, i * (1 - i), out=gp_i)  # input gate
            torch.mul(dc * c_prev, f * (1 - f), out=gp_f)  # forget gate
            torch.mul(dc * i, 1 - g * g, out=gp_g)  # candidate
            dc = dc * f  # c_{k-1} reaches c_k through the forget gate
            # Through the mix: parameters, then the two inputs.
            grad_mix.addmm_(grad_pre.t(), torch.cat([write, conv_h], dim=1))
            grad_bias += grad_pre.sum(0)
            grad_x = grad_pre @ mix  # (M, 2C)
            # Into the write factors: write = (fz ⊗ fy) ⊗ fxc.
            grad_write = grad_x[:, :C].reshape(vol)  # (B, D, H, W, C)
            zy = fz[k][:, :, None, :] * fy[k][:, None, :, :]  # (B, D, H, C)
            grad_fxc[k] = (grad_write * zy[:, :, :, None, :]).sum((1, 2))
            grad_zy = (grad_write * fxc[k][:, None, None, :, :]).sum(3)  # (B, D, H, C)
            grad_fz[k] = (grad_zy * fy[k][:, None, :, :]).sum(2)
            grad_fy[k] = (grad_zy * fz[k][:, :, None, :]).sum(1)
            # Into h through the depthwise convolutions, W then H then D.
            grad = grad_x[:, C:].reshape(vol)
            for axis in (2, 1, 0):
                grad = _conv_axis_backward(grad, conv_inputs[axis], taps_h[axis], AXES[axis], acc[axis])
            dh = grad.reshape(M, C)
        grad_taps = torch.stack([torch.stack([a.reshape(-1, C).sum(0) for a in per_axis], dim=-1)
                                 for per_axis in acc])  # (3, C, 3)
        return grad_fz, grad_fy, grad_fxc, dh.view(vol), dc.view(vol), grad_taps, grad_mix, grad_bias


def convlstm_scan(factors, h: torch.Tensor, c: torch.Tensor, taps_h: torch.Tensor, mix: torch.Tensor,
                  bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the ConvLSTM update over K chunks, channels-last.

    factors: (fz (K, B, D, C), fy (K, B, H, C), fxc (K, B, W, C)), each chunk's convolved write
    volume as from :func:`write_factors`; h, c (B, D, H, W, C): the state before the first
    chunk; taps_h (3, C, 3): h's depthwise taps; mix (4C, 2C) and bias (4C,): the pointwise mix
    of ``[V ; h]``. Returns hs, cs (K, B, D, H, W, C), the state after every chunk.
    """
    h, c = h.contiguous(), c.contiguous()
    inputs = (*factors, h, c, taps_h, mix, bias)
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs) and factors[0].shape[0] > 0:
        return _ConvLSTMScan.apply(*inputs)
    return _scan(factors, h, c, taps_h, mix, bias)
