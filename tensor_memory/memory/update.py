"""Step 5 of the mechanism: the factorised ConvLSTM update, and its fast recurrent scan.

``[V ; h]`` (2C channels) passes through depthwise 3-tap convolutions along D, H and W, then a pointwise mix to 4C
gate pre-activations: ``i, f, o, g = mix([dw_V(V_k) ; dw_h(h_{k-1})]) + bias``, ``c_k = σ(f)⊙c_{k-1} + σ(i)⊙tanh(g)``,
``h_k = σ(o)⊙tanh(c_k)``. The write volume is separable (``V = content ⊗ gz ⊗ gy ⊗ gx``), so ``dw_V(V)`` is kept as
three factors and expanded one chunk at a time; :func:`convlstm_scan` runs the recurrence with a hand-written
backward (or, on the CPU in float32, ``fused_scan.py``'s compiled operator). Under autocast only the mix's matrix
products run in the autocast type; the state, the gates and the gradients' sums stay float32. Volumes here are
channels-last, ``(…, D, H, W, C)``; the maths is ``reference.py``'s (``tests/test_update.py``). Why each piece is
shaped as it is: ``docs/performance.md``.
"""

from __future__ import annotations

import torch

from .fused_scan import fused_scan, runs_on

AXES = (-4, -3, -2)  # D, H, W in a channels-last volume (…, D, H, W, C)
_sigmoid_backward = torch.ops.aten.sigmoid_backward.grad_input  # writes g·s·(1-s) into grad_input
_tanh_backward = torch.ops.aten.tanh_backward.grad_input  # writes g·(1-t²) into grad_input


def tap_rows(taps: torch.Tensor) -> torch.Tensor:
    """(…, C, 3) taps as stored (like Conv3d weights) → (…, 3, C) contiguous rows.

    Each tap then broadcasts over a channels-last volume as a contiguous (C,) vector, which
    PyTorch vectorises; a strided one is several times slower.
    """
    return taps.transpose(-1, -2).contiguous()


def conv_axis(x: torch.Tensor, rows: torch.Tensor, dim: int, out: torch.Tensor | None = None) -> torch.Tensor:
    """Zero-padded 3-tap correlation along ``dim`` of a channels-last x (…, C); rows (3, C) from :func:`tap_rows`.

    out[z] = rows[0]·x[z-1] + rows[1]·x[z] + rows[2]·x[z+1], what ``Conv3d(padding=1)`` computes.
    """
    n = x.shape[dim]
    out = torch.mul(x, rows[1], out=out)
    out.narrow(dim, 1, n - 1).addcmul_(x.narrow(dim, 0, n - 1), rows[0])  # rows[0]·x[z-1]
    out.narrow(dim, 0, n - 1).addcmul_(x.narrow(dim, 1, n - 1), rows[2])  # rows[2]·x[z+1]
    return out


def depthwise3d(x: torch.Tensor, taps: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Depthwise 3-tap convolutions along D, then H, then W. x (…, D, H, W, C); taps (3 axes, C, 3);
    bias (3 axes, C), added after each axis's convolution, or None."""
    rows = tap_rows(taps)  # (3 axes, 3 taps, C)
    for axis, dim in enumerate(AXES):
        x = conv_axis(x, rows[axis], dim)
        if bias is not None:
            x = x + bias[axis]
    return x


def bias_volume(taps: torch.Tensor, bias: torch.Tensor, grid) -> torch.Tensor:
    """What depthwise convolutions with biases add to every input: their output for a zero volume, (D, H, W, C).

    The convolutions are affine, ``A(x) = L(x) + A(0)``, so the scan convolves without the biases and adds
    this one volume (the same for every sample and chunk). It is not a constant: the zero padding at the
    faces sees less of the earlier axes' biases. taps (3 axes, C, 3), bias (3 axes, C), grid (D, H, W).
    """
    return depthwise3d(taps.new_zeros(*grid, taps.shape[1]), taps, bias)


def write_factors(content: torch.Tensor, profiles, taps: torch.Tensor):
    """The depthwise-convolved write volume as three factors, ``dw_V(V) = fz ⊗ fy ⊗ fxc``.

    content (…, C); profiles (gz (…, D), gy (…, H), gx (…, W)); taps (3, C, 3)
    → fz (…, D, C), fy (…, H, C), fxc (…, W, C), the content folded into the last one.
    """
    C = content.shape[-1]
    rows = tap_rows(taps)  # (3 axes, 3 taps, C)
    fz, fy, fx = (
        conv_axis(g[..., None].expand(*g.shape, C), rows[axis], -2) for axis, g in enumerate(profiles)
    )  # per-channel convolved profiles
    return fz, fy, fx * content[..., None, :]


def expand_write(
    fz: torch.Tensor, fy: torch.Tensor, fxc: torch.Tensor, out: torch.Tensor | None = None
) -> torch.Tensor:
    """fz (…, D, C), fy (…, H, C), fxc (…, W, C) → the volume (…, D, H, W, C)."""
    zy = fz[..., :, None, :] * fy[..., None, :, :]  # (…, D, H, C)
    return torch.mul(zy[..., None, :], fxc[..., None, None, :, :], out=out)


def product(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """a @ b; with dtype (autocast's), the operands in that type and the result back in a's."""
    return a @ b if dtype is None else (a.to(dtype) @ b.to(dtype)).to(a.dtype)


def gate_values(x: torch.Tensor, weight: torch.Tensor, dtype: torch.dtype | None = None):
    """Gates from x = [dw_V(V) ; dw_h(h) ; 1] (M, 2C+1) and weight = [mix | bias] (4C, 2C+1).

    Returns the input, forget and output gates and the candidate g, (M, C) each, in x's type. The bias
    rides on x's column of ones, and one matrix product per gate keeps each gate contiguous. dtype: the
    products' type under autocast (:func:`product`), or None.
    """
    i, f, o, g = (product(x, w.t(), dtype) for w in weight.chunk(4))
    return i.sigmoid_(), f.sigmoid_(), o.sigmoid_(), g.tanh_()


def gate_inputs(write: torch.Tensor, conv_h: torch.Tensor, offset: torch.Tensor | None = None) -> torch.Tensor:
    """[dw_V(V) ; dw_h(h) ; 1] for :func:`gate_values`: (…, C) twice → (M, 2C+1).

    offset (…, 2C) or None: the depthwise biases' :func:`bias_volume`, added to both halves.
    """
    pair = torch.cat([write, conv_h], dim=-1)  # (…, 2C)
    if offset is not None:
        pair = pair + offset
    ones = write.new_ones(write.shape[:-1] + (1,))
    return torch.cat([pair, ones], dim=-1).view(-1, 2 * write.shape[-1] + 1)


def _conv_axis_backward(grad, x, flipped_rows, dim, grad_taps_acc):
    """Backward of :func:`conv_axis`: returns the input gradient; accumulates tap gradients.

    The adjoint of a correlation is the correlation with the taps reversed (``flipped_rows``).
    grad_taps_acc holds three running products (one per tap), summed once at the very end.
    """
    n = grad.shape[dim]
    grad_taps_acc[0].addcmul_(grad.narrow(dim, 1, n - 1), x.narrow(dim, 0, n - 1))
    grad_taps_acc[1].addcmul_(grad, x)
    grad_taps_acc[2].addcmul_(grad.narrow(dim, 0, n - 1), x.narrow(dim, 1, n - 1))
    return conv_axis(grad, flipped_rows, dim)


def _workspace(h: torch.Tensor) -> torch.Tensor:
    """(B·D·H·W, 2C+1) buffer for [dw_V(V) ; dw_h(h) ; 1]."""
    x = h.new_empty(h.numel() // h.shape[-1], 2 * h.shape[-1] + 1)
    x[:, -1] = 1.0
    return x


_PER_CHUNK = 8  # tensors each chunk keeps for the backward: two conv inputs, x, i, f, o, g, tanh(c)


def _scan(factors, h, c, taps_h, mix, bias, offset=None, saved: list | None = None, dtype=None):
    """The recurrence. factors as from :func:`write_factors` with a leading K; h, c (B, D, H, W, C);
    offset (D, H, W, 2C), the depthwise biases' :func:`bias_volume`, or None; dtype: the mix's type or None.

    With ``saved`` (a list), each chunk's intermediates are appended for the backward;
    without, one workspace serves every chunk.
    """
    K = factors[0].shape[0]
    vol = h.shape  # (B, D, H, W, C)
    M, C = h.numel() // vol[-1], vol[-1]
    hs = h.new_empty(K, *vol)  # (K, B, D, H, W, C)
    cs = torch.empty_like(hs)
    rows_h = tap_rows(taps_h)  # (3 axes, 3 taps, C)
    weight = torch.cat([mix, bias[:, None]], dim=1)  # (4C, 2C+1) = [mix | bias]
    x = _workspace(h)
    for k in range(K):
        if saved is not None and k > 0:
            x = _workspace(h)  # kept for the backward: a fresh one per chunk
        expand_write(*(f[k] for f in factors), out=x[:, :C].view(vol))  # dw_V(V_k)
        x_h = conv_axis(h, rows_h[0], AXES[0])
        x_w = conv_axis(x_h, rows_h[1], AXES[1])
        conv_axis(x_w, rows_h[2], AXES[2], out=x[:, C : 2 * C].view(vol))  # dw_h(h_{k-1})
        if offset is not None:  # the same for every sample: broadcast over B
            x[:, : 2 * C].view(vol[0], -1, 2 * C).add_(offset.reshape(-1, 2 * C))  # (B, D·H·W, 2C)
        i, f, o, g = gate_values(x, weight, dtype)
        c_k = cs[k].view(M, C)
        torch.mul(f, c.reshape(M, C), out=c_k)
        c_k.addcmul_(i, g)  # c = f⊙c + i⊙g
        tanh_c = torch.tanh(c_k)
        torch.mul(o, tanh_c, out=hs[k].view(M, C))  # h = o⊙tanh(c)
        if saved is not None:
            saved.extend((x_h, x_w, x, i, f, o, g, tanh_c))  # _PER_CHUNK tensors
        h, c = hs[k], cs[k]
    return hs, cs


class _ConvLSTMScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fz, fy, fxc, h0, c0, taps_h, mix, bias, offset, dtype):
        saved: list = []
        hs, cs = _scan((fz, fy, fxc), h0, c0, taps_h, mix, bias, offset, saved, dtype)
        ctx.has_offset, ctx.dtype, ctx.device = offset is not None, dtype, h0.device.type
        ctx.save_for_backward(fz, fy, fxc, h0, c0, taps_h, mix, hs, cs, *saved)
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None, not a zero-filled volume
        return hs, cs

    @staticmethod
    def backward(ctx, grad_hs, grad_cs):
        with torch.autocast(ctx.device, enabled=False):  # the products' type is ctx.dtype's, as in the forward
            return _scan_backward(ctx, grad_hs, grad_cs)


def _scan_backward(ctx, grad_hs, grad_cs):
    """:class:`_ConvLSTMScan`'s backward: the chunks in reverse, fused gate derivatives."""
    fz, fy, fxc, h0, c0, taps_h, mix, hs, cs, *saved = ctx.saved_tensors
    K, B, D, H, W, C = cs.shape
    M, vol = B * D * H * W, (B, D, H, W, C)
    grad_fz, grad_fy, grad_fxc = torch.empty_like(fz), torch.empty_like(fy), torch.empty_like(fxc)
    grad_weight = mix.new_zeros(4 * C, 2 * C + 1)  # for [mix | bias]
    grad_pre = c0.new_empty(M, 4 * C)  # reused by every chunk
    gp_i, gp_f, gp_o, gp_g = grad_pre.split(C, dim=1)
    flipped_h = tap_rows(taps_h).flip(1)  # the adjoint's taps, (3 axes, 3 taps, C)
    # Running tap-gradient products, one per (axis, tap), shaped like the slices they multiply.
    acc = [
        [c0.new_zeros([s - (1 if (d == 1 + a and t != 1) else 0) for d, s in enumerate(vol)]) for t in range(3)]
        for a in range(3)
    ]
    grad_offset = c0.new_zeros(D * H * W, 2 * C) if ctx.has_offset else None
    dh = c0.new_zeros(M, C)  # gradient reaching h_k from later chunks
    dc = c0.new_zeros(M, C)
    for k in reversed(range(K)):
        x_h, x_w, x, i, f, o, g, t = saved[k * _PER_CHUNK : (k + 1) * _PER_CHUNK]
        conv_inputs = (hs[k - 1] if k > 0 else h0, x_h, x_w)  # what the D, H, W convolutions read
        c_prev = (cs[k - 1] if k > 0 else c0).reshape(M, C)
        if grad_hs is not None:
            dh = dh + grad_hs[k].reshape(M, C)
        if grad_cs is not None:
            dc = dc + grad_cs[k].reshape(M, C)
        # aten's sigmoid_backward(g, s) = g·s·(1-s) and tanh_backward(g, t) = g·(1-t²), fused.
        _sigmoid_backward(dh * t, o, grad_input=gp_o)  # output gate
        dc = dc + torch.ops.aten.tanh_backward(dh * o, t)  # through h = o·tanh(c)
        _sigmoid_backward(dc * g, i, grad_input=gp_i)  # input gate
        _sigmoid_backward(dc * c_prev, f, grad_input=gp_f)  # forget gate
        _tanh_backward(dc * i, g, grad_input=gp_g)  # candidate
        dc = dc * f  # c_{k-1} reaches c_k through the forget gate
        # Through the mix: its weights and bias, then the two inputs.
        if ctx.dtype is None:
            grad_weight.addmm_(grad_pre.t(), x)
        else:  # autocast: the product in its type, accumulated in float32
            grad_weight += product(grad_pre.t(), x, ctx.dtype)
        grad_x = product(grad_pre, mix, ctx.dtype)  # (M, 2C)
        if grad_offset is not None:
            grad_offset += grad_x.view(B, -1, 2 * C).sum(0)  # (D·H·W, 2C), summed over the batch
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
            grad = _conv_axis_backward(grad, conv_inputs[axis], flipped_h[axis], AXES[axis], acc[axis])
        dh = grad.reshape(M, C)
    grad_taps = torch.stack(
        [torch.stack([a.reshape(-1, C).sum(0) for a in per_axis], dim=-1) for per_axis in acc]
    )  # (3, C, 3)
    grad_mix, grad_bias = grad_weight[:, :-1], grad_weight[:, -1]
    if grad_offset is not None:
        grad_offset = grad_offset.view(D, H, W, 2 * C)
    return (grad_fz, grad_fy, grad_fxc, dh.view(vol), dc.view(vol), grad_taps, grad_mix, grad_bias, grad_offset, None)


def convlstm_scan(
    factors,
    h: torch.Tensor,
    c: torch.Tensor,
    taps_h: torch.Tensor,
    mix: torch.Tensor,
    bias: torch.Tensor,
    offset: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the ConvLSTM update over K chunks, channels-last.

    factors: (fz (K, B, D, C), fy (K, B, H, C), fxc (K, B, W, C)), each chunk's convolved write
    volume as from :func:`write_factors`; h, c (B, D, H, W, C): the state before the first
    chunk; taps_h (3, C, 3): h's depthwise taps; mix (4C, 2C) and bias (4C,): the pointwise mix
    of ``[V ; h]``; offset (D, H, W, 2C): what depthwise biases add (:func:`bias_volume`), or None.
    Returns hs, cs (K, B, D, H, W, C), the state after every chunk.
    """
    h, c = h.contiguous(), c.contiguous()
    inputs = (*factors, h, c, taps_h, mix, bias)
    device = h.device.type
    dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None
    with torch.autocast(device, enabled=False):  # the scan casts the mix's operands itself (dtype)
        if factors[0].shape[0] > 0 and runs_on((*inputs, offset)):
            return fused_scan(factors, h, c, taps_h, mix, bias, offset, dtype)
        needs_grad = any(t.requires_grad for t in inputs) or (offset is not None and offset.requires_grad)
        if torch.is_grad_enabled() and needs_grad and factors[0].shape[0] > 0:
            return _ConvLSTMScan.apply(*inputs, offset, dtype)
        return _scan(factors, h, c, taps_h, mix, bias, offset, dtype=dtype)


def recomputed_gates(
    factors, h0: torch.Tensor, hs: torch.Tensor, taps_h: torch.Tensor, offset: torch.Tensor | None, mix: torch.nn.Linear
) -> tuple[torch.Tensor, ...]:
    """The gates i, f, o and the candidate g of every chunk, (K, B, D, H, W, C) each, computed again from the write's
    factors and the states the scan returned (h0 before the first chunk, hs after each), without gradient. With a
    local update they are the values at every cell, though they act only inside each chunk's update region."""
    with torch.no_grad():
        h_prev = torch.cat([h0[None], hs[:-1]], dim=0)[: len(hs)]  # (K, B, D, H, W, C) the state before each write
        x = gate_inputs(expand_write(*factors), depthwise3d(h_prev, taps_h), offset)  # [dw_V(V) ; dw_h(h) ; 1]
        weight = torch.cat([mix.weight, mix.bias[:, None]], dim=1)
        return tuple(value.view(hs.shape) for value in gate_values(x, weight))
