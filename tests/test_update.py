"""The fast update kernels against plain PyTorch: grouped Conv3d and autograd through a plain loop."""

import pytest
import torch
import torch.nn.functional as F

from tensor_memory.memory import gaussian_write
from tensor_memory.memory.update import conv_axis, convlstm_scan, depthwise3d, expand_write, tap_rows, write_factors


def conv3d_depthwise(x_cf, taps):
    """Grouped Conv3d reference. x_cf (N, C, D, H, W) channels-first; taps (3, C, 3)."""
    C = x_cf.shape[1]
    x_cf = F.conv3d(x_cf, taps[0].view(C, 1, 3, 1, 1), padding=(1, 0, 0), groups=C)
    x_cf = F.conv3d(x_cf, taps[1].view(C, 1, 1, 3, 1), padding=(0, 1, 0), groups=C)
    return F.conv3d(x_cf, taps[2].view(C, 1, 1, 1, 3), padding=(0, 0, 1), groups=C)


def to_last(x):  # (N, C, D, H, W) → (N, D, H, W, C)
    return x.permute(0, 2, 3, 4, 1)


def test_depthwise3d_equals_grouped_conv3d():
    torch.manual_seed(0)
    x = torch.randn(3, 5, 4, 6, 7, dtype=torch.float64)
    taps = torch.randn(3, 5, 3, dtype=torch.float64)
    torch.testing.assert_close(depthwise3d(to_last(x), taps), to_last(conv3d_depthwise(x, taps)), rtol=0, atol=1e-12)


def test_conv_axis_zero_pads():
    x = torch.ones(1, 4, 1, 1, 1, dtype=torch.float64)  # (N, D, H, W, C)
    taps = torch.tensor([[1.0, 10.0, 100.0]], dtype=torch.float64)  # (C, 3)
    out = conv_axis(x, tap_rows(taps), -4).flatten().tolist()
    assert out == [110.0, 111.0, 111.0, 11.0]


def test_write_factors_equal_the_convolved_gaussian_volume():
    torch.manual_seed(1)
    grid = (4, 5, 3)
    content = torch.randn(6, 2, dtype=torch.float64)
    xyz = torch.rand(6, 3, dtype=torch.float64) * 2 - 1
    sigma = torch.rand(6, dtype=torch.float64) * 0.4 + 0.1
    taps = torch.randn(3, 2, 3, dtype=torch.float64)
    from tensor_memory.memory.geometry import gaussian_profiles

    factors = write_factors(content, gaussian_profiles(xyz, sigma, grid), taps)
    expected = to_last(conv3d_depthwise(gaussian_write(content, xyz, sigma, grid), taps))
    torch.testing.assert_close(expand_write(*factors), expected, rtol=0, atol=1e-12)


def plain_scan(factors, h, c, taps_h, mix, bias):
    """The recurrence with ordinary autograd, channels-first Conv3d, one chunk at a time."""
    C = h.shape[-1]
    hs, cs = [], []
    h_cf, c_cf = h.permute(0, 4, 1, 2, 3), c.permute(0, 4, 1, 2, 3)
    for k in range(factors[0].shape[0]):
        write = expand_write(*(f[k] for f in factors)).permute(0, 4, 1, 2, 3)  # (B, C, D, H, W)
        x = torch.cat([write, conv3d_depthwise(h_cf, taps_h)], 1)
        pre = F.conv3d(x, mix.view(4 * C, 2 * C, 1, 1, 1), bias)
        i, f, o, g = pre.chunk(4, 1)
        c_cf = torch.sigmoid(f) * c_cf + torch.sigmoid(i) * torch.tanh(g)
        h_cf = torch.sigmoid(o) * torch.tanh(c_cf)
        hs.append(to_last(h_cf))
        cs.append(to_last(c_cf))
    return torch.stack(hs), torch.stack(cs)


def scan_inputs(K=4, B=2, C=3, grid=(3, 4, 5), seed=0):
    torch.manual_seed(seed)
    D, H, W = grid
    dt = torch.float64
    factors = [torch.randn(K, B, n, C, dtype=dt) * 0.7 for n in (D, H, W)]
    h = torch.randn(B, D, H, W, C, dtype=dt) * 0.5
    c = torch.randn(B, D, H, W, C, dtype=dt) * 0.5
    taps = torch.randn(3, C, 3, dtype=dt) * 0.5
    mix = torch.randn(4 * C, 2 * C, dtype=dt) * 0.5
    bias = torch.randn(4 * C, dtype=dt) * 0.2
    return [t.requires_grad_() for t in (*factors, h, c, taps, mix, bias)]


def test_scan_values_and_gradients_match_plain_autograd():
    inputs = scan_inputs()
    factors, rest = inputs[:3], inputs[3:]
    hs, cs = convlstm_scan(factors, *rest)
    hs_ref, cs_ref = plain_scan(factors, *rest)
    torch.testing.assert_close(hs, hs_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(cs, cs_ref, rtol=0, atol=1e-12)
    w_h, w_c = torch.randn_like(hs), torch.randn_like(cs)
    ours = torch.autograd.grad((hs * w_h).sum() + (cs * w_c).sum(), inputs)
    theirs = torch.autograd.grad((hs_ref * w_h).sum() + (cs_ref * w_c).sum(), inputs)
    names = ["fz", "fy", "fxc", "h", "c", "taps", "mix", "bias"]
    for name, a, b in zip(names, ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10, msg=name)


def test_scan_gradcheck():
    inputs = scan_inputs(K=3, B=1, C=2, grid=(2, 3, 2), seed=3)
    assert torch.autograd.gradcheck(lambda *a: convlstm_scan(a[:3], *a[3:]), inputs)


def test_scan_with_only_hidden_outputs_used_and_without_grad():
    inputs = scan_inputs(seed=4)
    hs, _ = convlstm_scan(inputs[:3], *inputs[3:])
    (grad_h,) = torch.autograd.grad(hs[-1].sum(), inputs[3])
    hs_ref, _ = plain_scan(inputs[:3], *inputs[3:])
    (grad_h_ref,) = torch.autograd.grad(hs_ref[-1].sum(), inputs[3])
    torch.testing.assert_close(grad_h, grad_h_ref, rtol=0, atol=1e-10)
    with torch.no_grad():
        hs_ng, cs_ng = convlstm_scan(inputs[:3], *inputs[3:])
    torch.testing.assert_close(hs_ng, hs.detach(), rtol=0, atol=0)


@pytest.mark.parametrize("K", [0, 1])
def test_scan_handles_zero_and_one_chunk(K):
    inputs = scan_inputs(K=K, seed=5)
    hs, cs = convlstm_scan(inputs[:3], *inputs[3:])
    assert hs.shape[0] == K and cs.shape == hs.shape
