"""The windowed write and the local update (MemoryConfig.write.mode): correctness only.

Speed lives in benchmarks/large_grid.py. Here: the windowed write equals the dense one inside its
box and is exactly zero outside; the local update equals the dense step inside the region it
updates and leaves every other cell exactly as it was; the whole layer agrees with the literal
reference in values and gradients; and the default (dense) is untouched by the options.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tensor_memory import MemoryConfig, TensorMemory, gaussian_write
from tensor_memory.memory.geometry import gaussian_profiles, voxel_centres, write_box
from tensor_memory.memory.local_update import local_scan, update_regions
from tensor_memory.memory.reference import ReferenceMemory
from tensor_memory.memory.update import convlstm_scan, write_factors


def test_windowed_write_equals_dense_inside_the_box_and_is_zero_outside():
    torch.manual_seed(0)
    grid, k = (9, 7, 11), 2.0
    content, xyz, sigma = torch.randn(5, 3), torch.rand(5, 3) * 2 - 1, torch.rand(5) * 0.3 + 0.05
    dense = gaussian_write(content, xyz, sigma, grid)
    windowed = gaussian_write(content, xyz, sigma, grid, window=k)
    # The box, computed independently: every axis within k·σ of the centre.
    axes = [voxel_centres(n) for n in grid]  # z, y, x
    z, y, x = torch.meshgrid(*axes, indexing="ij")
    offsets = torch.stack([x, y, z], -1)[None] - xyz[:, None, None, None, :]  # (B, D, H, W, 3)
    box = (offsets.abs() <= k * sigma.view(-1, 1, 1, 1, 1)).all(-1)[:, None].expand_as(dense)
    assert box.any() and (~box).any()  # both parts are exercised
    assert torch.equal(windowed[box], dense[box])
    assert torch.equal(windowed[~box], torch.zeros_like(windowed[~box]))
    # The error against the dense write is the Gaussian's tail: at most exp(-k²/2) of the peak.
    assert (windowed - dense).abs().max() <= torch.exp(torch.tensor(-k * k / 2)) * content.abs().max()


def _trained_looking(cfg: MemoryConfig, seed: int = 0) -> TensorMemory:
    """A layer whose writes land at different places with different, small spreads."""
    torch.manual_seed(seed)
    memory = TensorMemory(cfg)
    with torch.no_grad():
        memory.depthwise.add_(0.2 * torch.randn_like(memory.depthwise))
        memory.spread.weight.normal_(0, 0.5)
        memory.coord_head.weight.mul_(3.0)
    return memory


@pytest.mark.parametrize("mode", ["windowed", "local"])
@pytest.mark.parametrize("grid,chunk_size,length", [((6, 6, 6), 1, 9), ((8, 5, 7), 2, 11)])
def test_layer_matches_the_literal_reference_in_values_and_gradients(mode, grid, chunk_size, length):
    cfg = MemoryConfig(
        token_dim=16,
        channels=4,
        grid=grid,
        chunk_size=chunk_size,
        write={"mode": mode, "window_k": 1.5},
        sigma_init=0.2,
        sigma_min=0.02,
    )
    memory = _trained_looking(cfg)
    reference = ReferenceMemory(memory)
    x = torch.randn(3, length, 16)
    state = memory.init_state(3)
    with torch.no_grad():  # a non-zero incoming state, so kept cells have something to keep
        state.h.normal_()
        state.c.normal_()
    xf, xr = x.clone().requires_grad_(), x.clone().requires_grad_()
    y, new = memory(xf, state)
    y_ref, (h_ref, c_ref) = reference(xr, state.h, state.c)
    weights = torch.randn_like(y)
    ((y * weights).sum() + new.h.sum() + new.c.sum()).backward()
    ((y_ref * weights).sum() + h_ref.sum() + c_ref.sum()).backward()
    torch.testing.assert_close(y, y_ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(new.h, h_ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(new.c, c_ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(xf.grad, xr.grad, atol=1e-5, rtol=1e-4)
    for name in ("summary", "coord_head", "content", "spread", "out_proj"):
        torch.testing.assert_close(
            getattr(memory, name).weight.grad, getattr(reference, name).weight.grad, atol=1e-4, rtol=1e-4
        )
    torch.testing.assert_close(
        memory.mix.weight.grad, reference.mix.weight.grad.view_as(memory.mix.weight), atol=1e-4, rtol=1e-4
    )


def _one_chunk_write(grid=(10, 9, 8), B=4, seed=1):
    """Where one chunk's four writes go: xyz (B, 3), sigma (B,), grid."""
    torch.manual_seed(seed)
    xyz = torch.rand(B, 3) * 2 - 1
    sigma = torch.tensor([0.05, 0.12, 0.2, 0.01])[:B]  # the last is narrower than a voxel: maybe no centre
    xyz[-1] = torch.tensor([0.03, -0.04, 0.05])  # between centres of every axis
    return xyz, sigma, grid


def _one_chunk(C=3, B=4, k=2.0):
    """One chunk's windowed write factors, its box and a random state, channels-last."""
    xyz, sigma, grid = _one_chunk_write(B=B)
    profiles = [p[None] for p in gaussian_profiles(xyz, sigma, grid, window=k)]  # (1, B, n) each
    box = [m[None] for m in write_box(xyz, sigma, grid, k)]  # (1, B, n) each
    taps = torch.randn(3, 2 * C, 3) * 0.3
    taps[:, :, 1] += 1.0
    taps_v, taps_h = taps.split(C, dim=1)
    factors = write_factors(torch.randn(1, B, C), profiles, taps_v)
    h, c = torch.randn(B, *grid, C), torch.randn(B, *grid, C)
    mix, bias = torch.randn(4 * C, 2 * C) * 0.3, torch.randn(4 * C) * 0.3
    return factors, box, h, c, taps_h, mix, bias


def test_local_update_equals_dense_inside_its_region_and_keeps_every_other_cell_exactly():
    factors, box_axes, h, c, taps_h, mix, bias = _one_chunk()
    lo, hi, present = update_regions(box_axes)
    hs_dense, cs_dense = convlstm_scan(factors, h, c, taps_h, mix, bias)
    hs_local, cs_local = local_scan(factors, (lo, hi, present), h, c, taps_h, mix, bias)
    # The region, computed independently: the cells where the windowed write is non-zero, dilated.
    write = gaussian_write(torch.ones(4, 1), *_one_chunk_write(), window=2.0)[:, 0]  # (B, D, H, W)
    box = (write != 0).float()  # the write box
    region = F.max_pool3d(box[:, None], 3, stride=1, padding=1)[:, 0] > 0  # dilated by one voxel
    assert region.any() and (~region).any()
    assert not present[0, -1] and not region[-1].any()  # the sub-voxel write touches no centre: nothing changes
    for local, dense, old in ((hs_local[0], hs_dense[0], h), (cs_local[0], cs_dense[0], c)):
        torch.testing.assert_close(local[region], dense[region], atol=1e-6, rtol=1e-6)
        assert torch.equal(local[~region], old[~region])  # bit for bit
    # Regions reported as voxel bounds agree with the independent region.
    for b in range(3):
        zs, ys, xs = region[b].nonzero().unbind(-1)
        assert [lo[0, b].tolist(), hi[0, b].tolist()] == [
            [zs.min(), ys.min(), xs.min()],
            [zs.max(), ys.max(), xs.max()],
        ]


def test_a_batch_whose_writes_reach_no_voxel_centre_keeps_its_state_exactly():
    factors, box, h, c, taps_h, mix, bias = _one_chunk()
    last = slice(-1, None)  # the sub-voxel write alone
    factors, box = [f[:, last] for f in factors], [m[:, last] for m in box]
    hs, cs = local_scan(factors, update_regions(box), h[last], c[last], taps_h, mix, bias)
    assert torch.equal(hs[0], h[last]) and torch.equal(cs[0], c[last])


def test_local_update_with_a_box_covering_the_grid_is_the_dense_update():
    cfg = dict(token_dim=16, channels=4, grid=(4, 4, 4), chunk_size=1, sigma_init=0.7, sigma_min=0.35)
    dense = _trained_looking(MemoryConfig(**cfg, write={"mode": "windowed", "window_k": 100.0}))
    local = TensorMemory(MemoryConfig(**cfg, write={"mode": "local", "window_k": 100.0}))
    local.load_state_dict(dense.state_dict())
    x = torch.randn(2, 7, 16)
    y_dense, s_dense = dense(x)
    y_local, s_local = local(x)
    torch.testing.assert_close(y_local, y_dense, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(s_local.h, s_dense.h, atol=1e-6, rtol=1e-6)


def test_the_region_is_the_box_even_where_the_gaussian_underflows_to_zero():
    # k = 20 with σ of a fraction of a voxel: exp(-r²/2σ²) is exactly 0.0 in float32 well inside the box,
    # yet those cells are in the box and must be updated, as the literal reference does.
    cfg = MemoryConfig(
        token_dim=16,
        channels=4,
        grid=(8, 8, 8),
        chunk_size=1,
        write={"mode": "local", "window_k": 20.0},
        sigma_init=0.04,
        sigma_min=0.02,
    )
    memory = _trained_looking(cfg, seed=7)
    x = torch.randn(2, 5, 16)
    y, state = memory(x)
    y_ref, (h_ref, c_ref) = ReferenceMemory(memory)(x, *(lambda s: (s.h, s.c))(memory.init_state(2)))
    torch.testing.assert_close(state.h, h_ref, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(y, y_ref, atol=1e-6, rtol=1e-5)


def test_options_leave_the_default_dense_layer_untouched():
    torch.manual_seed(3)
    base = MemoryConfig(token_dim=16, channels=4, grid=(5, 5, 5))
    assert base.write.mode == "dense" and base.write.window is None
    dense = TensorMemory(base)
    wide = TensorMemory(MemoryConfig.from_dict({**base.to_dict(), "write": {"mode": "windowed", "window_k": 1e6}}))
    wide.load_state_dict(dense.state_dict())
    x = torch.randn(2, 6, 16)
    # A box wider than the grid cuts nothing: the windowed layer gives the dense layer's numbers exactly.
    assert torch.equal(dense(x)[0], wide(x)[0])
    narrow = TensorMemory(MemoryConfig.from_dict({**base.to_dict(), "write": {"mode": "windowed", "window_k": 0.5}}))
    narrow.load_state_dict(dense.state_dict())
    assert not torch.allclose(dense(x)[0], narrow(x)[0])  # the option does change outputs when on


@pytest.mark.parametrize("mode", ["windowed", "local"])
def test_streaming_in_segments_equals_one_pass(mode):
    cfg = MemoryConfig(
        token_dim=16,
        channels=4,
        grid=(6, 6, 6),
        chunk_size=3,
        write={"mode": mode, "window_k": 2.0},
        sigma_init=0.2,
        sigma_min=0.02,
    )
    memory = _trained_looking(cfg, seed=5)
    x = torch.randn(2, 14, 16)
    y_whole, s_whole = memory(x)
    state, parts = None, []
    for a, b in ((0, 4), (4, 5), (5, 11), (11, 14)):
        y, state = memory(x[:, a:b], state)
        parts.append(y)
    torch.testing.assert_close(torch.cat(parts, 1), y_whole, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(state.h, s_whole.h, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("mode", "sparse", "write.mode must be one of 'dense', 'windowed', 'local'"),
        ("window_k", 0.0, "write.window_k must be a finite number in \\(0.0"),
        ("window_k", float("nan"), "write.window_k must be a finite number"),
    ],
)
def test_bad_write_options_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        MemoryConfig(write={field: value})


def test_write_options_round_trip_and_old_configs_load_dense():
    cfg = MemoryConfig(write={"mode": "local", "window_k": 2.5})
    assert MemoryConfig.from_dict(cfg.to_dict()) == cfg
    old = cfg.to_dict()
    del old["write"]  # a checkpoint written before the options existed
    assert MemoryConfig.from_dict(old).write.mode == "dense"
    flat = {**old, "write_mode": "local", "window_k": 2.5}  # a checkpoint written before the variants were grouped
    assert MemoryConfig.from_dict(flat) == cfg
    with pytest.raises(ValueError, match="'write_mode' and write.mode name one setting"):
        MemoryConfig.from_dict({**flat, "write": {"mode": "dense"}})
