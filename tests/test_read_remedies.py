"""The read's variants, each off by default: reads whose gradient comes from jittered points
(MemoryConfig.read.jitter) and learned voxel codes read beside h (MemoryConfig.read.voxel_codes). Off, the layer is
the mechanism (held bit for bit to git history by tests/test_relayout.py); on, each is checked against an
independent computation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tensor_memory import MemoryConfig, TensorMemory, hooks
from tensor_memory.memory.geometry import jittered_sample, voxel_spacing
from tensor_memory.memory.reference import ReferenceMemory

GRID = (3, 4, 5)  # (D, H, W): every axis a different length, so a mixed-up axis shows
CHUNK = 2


def layer(**settings) -> TensorMemory:
    torch.manual_seed(0)
    return TensorMemory(MemoryConfig(token_dim=8, channels=2, grid=GRID, chunk_size=CHUNK, **settings))


def grid_sample(volume: torch.Tensor, xyz: torch.Tensor) -> torch.Tensor:
    """volume (D, H, W, C) at xyz (M, 3) → (M, C), by F.grid_sample (border, align_corners), the reference read."""
    out = F.grid_sample(
        volume.permute(3, 0, 1, 2)[None],
        xyz.view(1, -1, 1, 1, 3),
        mode="bilinear",
        padding_mode="border",
        align_corners=True,
    )  # (1, C, M, 1, 1)
    return out.view(volume.shape[-1], -1).t()


def stencil(jitter: float) -> torch.Tensor:
    """The six jittered offsets (6, 3): ± jitter voxel spacings along x, y, z."""
    steps = torch.diag(torch.tensor(voxel_spacing(GRID))) * jitter
    return torch.cat([steps, -steps]).float()


def test_both_read_remedies_are_off_by_default():
    config = MemoryConfig()
    assert config.read.jitter == 0.0 and config.read.voxel_codes is False
    plain = layer()
    assert plain.sampler.codes is None and not any("codes" in name for name in plain.state_dict())


def test_a_jittered_read_has_the_reads_value_and_the_mean_gradient_of_its_six_probes():
    torch.manual_seed(1)
    volume = torch.randn(1, *GRID, 2).double()  # (1, D, H, W, C)
    xyz = (torch.rand(1, 3).double() - 0.5).requires_grad_()
    weights = torch.randn(1, 2).double()
    h = volume.clone().requires_grad_()
    value = jittered_sample(h, xyz, 0.7, GRID)
    (value * weights).sum().backward()
    assert torch.equal(value.detach(), grid_sample(volume[0], xyz.detach()))  # the value: the read at μ
    probe_grads = []
    for offset in stencil(0.7).double():  # the gradient: each probe's, by grid_sample, averaged
        point = (xyz.detach() + offset).requires_grad_()
        (grid_sample(volume[0], point) * weights).sum().backward()
        probe_grads.append(point.grad)
    torch.testing.assert_close(xyz.grad, torch.stack(probe_grads).mean(0))
    at_mu = volume.clone().requires_grad_()  # the volume's gradient: the read at μ's alone
    (grid_sample(at_mu[0], xyz.detach()) * weights).sum().backward()
    torch.testing.assert_close(h.grad, at_mu.grad)


def test_jittered_reads_change_only_the_gradient_to_where_a_layer_reads():
    plain, jittered = layer(), layer(read={"jitter": 0.5})
    jittered.load_state_dict(plain.state_dict())
    torch.manual_seed(2)
    x = torch.randn(2, 4 * CHUNK, 8)
    weights = torch.randn(2, 4 * CHUNK, 8)
    mu = torch.rand(2, 4, 3) * 1.2 - 0.6  # (B, n_read, 3) inside the grid, so no probe is clamped

    def run(memory, shift):
        leaf = mu.clone().requires_grad_()
        with hooks(memory, {"mu_read": lambda _: leaf + shift}):
            y, state = memory(x)
        (y * weights).sum().backward()
        return y.detach(), leaf.grad

    y_plain, _ = run(plain, 0.0)
    y_jittered, grad = run(jittered, 0.0)
    assert torch.equal(y_plain, y_jittered)  # forward: bit for bit
    probes = [run(plain, offset)[1] for offset in stencil(0.5)]  # the loss is linear in y: each probe's gradient
    torch.testing.assert_close(grad, torch.stack(probes).mean(0))
    assert not torch.allclose(grad, run(plain, 0.0)[1])  # and it is not the trilinear gradient


def test_voxel_codes_start_as_the_voxels_coordinates_mixed_into_the_channels():
    codes = layer(read={"voxel_codes": True}).sampler.codes.detach()  # (D, H, W, C)
    assert codes.shape == (*GRID, 2)
    torch.testing.assert_close(codes + codes.flip(0, 1, 2), torch.zeros_like(codes))  # linear in the centre: odd
    assert codes.abs().max() > 0.1  # and not zero: nearby voxels differ


def test_voxel_codes_are_read_beside_h_and_give_a_read_of_an_empty_memory_a_place():
    plain, coded = layer(), layer(read={"voxel_codes": True})
    assert all(torch.equal(a, coded.state_dict()[k]) for k, a in plain.state_dict().items())  # the same weights
    torch.manual_seed(3)
    x = torch.randn(2, 3 * CHUNK, 8)
    reads = {}
    for name, memory in (("plain", plain), ("coded", coded)):
        with hooks(
            memory,
            {
                "read": lambda r, name=name: reads.setdefault(name, r),
                "mu_read": lambda m, name=name: reads.setdefault(name + " at", m),
            },
        ):
            memory(x)
    mu = reads["coded at"].detach()  # (B, n_read, 3)
    expected = reads["plain"] + grid_sample(coded.sampler.codes.detach(), mu.reshape(-1, 3)).view(2, 3, 2)
    torch.testing.assert_close(reads["coded"], expected)
    first = x[:, :CHUNK]  # one chunk: its read sees only the empty incoming state
    for memory, moves in ((plain, False), (coded, True)):
        memory.zero_grad()
        y, _ = memory(first)
        y.sum().backward()
        grad = memory.coord_head.weight.grad
        assert (grad is not None and bool(grad.abs().sum() > 0)) == moves


def test_read_remedies_are_checked_and_the_reference_refuses_them():
    with pytest.raises(ValueError, match="read.jitter"):
        MemoryConfig(read={"jitter": -1.0})
    with pytest.raises(ValueError, match="voxel_codes must be True or False"):
        MemoryConfig(read={"voxel_codes": "yes"})
    for settings in ({"jitter": 1.0}, {"voxel_codes": True}):
        with pytest.raises(ValueError, match="MemoryConfig.read asks for a variant it does not have"):
            ReferenceMemory(layer(read=settings))
