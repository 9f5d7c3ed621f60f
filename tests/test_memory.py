"""The memory layer: primitives against independent computations, the module against the literal
reference implementation, causality, streaming, fixed size, configuration and recording."""

import itertools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tensor_memory import MemoryConfig, MemoryState, TensorMemory, gaussian_write, record, trilinear_read
from tensor_memory.memory.reference import ReferenceMemory


def perturbed_memory(cfg: MemoryConfig, seed: int = 0) -> TensorMemory:
    """A memory whose update is not the identity at init, so every part of the maths is exercised."""
    torch.manual_seed(seed)
    memory = TensorMemory(cfg).double()
    with torch.no_grad():
        memory.depthwise.add_(0.3 * torch.randn_like(memory.depthwise))
        memory.mix.bias.add_(0.1 * torch.randn_like(memory.mix.bias))
        memory.spread.weight.normal_(0, 0.2)
        memory.gate.fill_(0.3)
    return memory


# -- primitives ----------------------------------------------------------------------------


def grid_sample_read(h, xyz):
    out = F.grid_sample(h, xyz.view(-1, 1, 1, 1, 3), mode="bilinear", padding_mode="border", align_corners=True)
    return out.view(h.shape[:2])


def test_trilinear_read_matches_grid_sample_at_random_boundary_and_centre_points():
    torch.manual_seed(0)
    h = torch.randn(7, 3, 4, 5, 6, dtype=torch.float64)
    xyz = torch.rand(7, 3, dtype=torch.float64) * 2 - 1
    xyz[0] = torch.tensor([-1.0, -1.0, -1.0])  # corner
    xyz[1] = torch.tensor([1.0, 1.0, 1.0])  # opposite corner
    xyz[2] = torch.tensor([1.0, -1.0, 0.2])  # on faces
    xyz[3] = torch.tensor([-0.6, 0.5, 1 / 3])  # exactly on voxel centres (W=6, H=5, D=4)
    torch.testing.assert_close(trilinear_read(h, xyz), grid_sample_read(h, xyz), rtol=0, atol=1e-12)


def test_trilinear_read_hand_computed_weights():
    # One channel, grid D=2, H=3, W=4 with h = 100·z + 10·y + x: trilinear interpolation of a
    # linear function is exact, so the read at voxel position (x=1.5, y=0.25, z=0.5) is known.
    z, y, x = torch.meshgrid(torch.arange(2.0), torch.arange(3.0), torch.arange(4.0), indexing="ij")
    h = (100 * z + 10 * y + x).double()[None, None]
    to_unit = lambda pos, n: 2 * pos / (n - 1) - 1  # noqa: E731  voxel index → [-1, 1]
    xyz = torch.tensor([[to_unit(1.5, 4), to_unit(0.25, 3), to_unit(0.5, 2)]], dtype=torch.float64)
    assert trilinear_read(h, xyz).item() == pytest.approx(100 * 0.5 + 10 * 0.25 + 1.5)
    # And a non-linear volume: only voxel (z=1, y=2, x=3) is 1; at x=2.5, y=1.5, z=0.75 its
    # trilinear weight is 0.5 · 0.5 · 0.75.
    spike = torch.zeros(1, 1, 2, 3, 4, dtype=torch.float64)
    spike[0, 0, 1, 2, 3] = 1.0
    xyz = torch.tensor([[to_unit(2.5, 4), to_unit(1.5, 3), to_unit(0.75, 2)]], dtype=torch.float64)
    assert trilinear_read(spike, xyz).item() == pytest.approx(0.5 * 0.5 * 0.75)


def test_trilinear_read_gradients_match_grid_sample():
    torch.manual_seed(1)
    h = torch.randn(5, 2, 4, 4, 4, dtype=torch.float64, requires_grad=True)
    xyz = (torch.rand(5, 3, dtype=torch.float64) * 1.8 - 0.9).requires_grad_()
    weights = torch.randn(5, 2, dtype=torch.float64)
    ours = torch.autograd.grad((trilinear_read(h, xyz) * weights).sum(), (h, xyz))
    theirs = torch.autograd.grad((grid_sample_read(h, xyz) * weights).sum(), (h, xyz))
    for a, b in zip(ours, theirs, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("sigma_shape", [(3,), (3, 1)])
def test_gaussian_write_is_the_formula_at_every_voxel(sigma_shape):
    torch.manual_seed(2)
    grid = (3, 4, 5)
    content = torch.randn(3, 2, dtype=torch.float64)
    xyz = torch.rand(3, 3, dtype=torch.float64) * 2 - 1
    sigma = (torch.rand(3, dtype=torch.float64) * 0.5 + 0.1).reshape(sigma_shape)
    volume = gaussian_write(content, xyz, sigma, grid).numpy()
    assert volume.shape == (3, 2, *grid)
    centres = [np.linspace(-1, 1, n) for n in grid]  # per axis D, H, W
    for b, z, y, x in itertools.product(range(3), *(range(n) for n in grid)):
        p = np.array([centres[2][x], centres[1][y], centres[0][z]])  # (x, y, z)
        d2 = ((p - xyz[b].numpy()) ** 2).sum()
        expected = content[b].numpy() * math.exp(-d2 / (2 * sigma.reshape(-1)[b].item() ** 2))
        np.testing.assert_allclose(volume[b, :, z, y, x], expected, rtol=1e-12, atol=1e-15)


def test_primitives_reject_wrong_shapes():
    with pytest.raises(ValueError, match="trilinear_read"):
        trilinear_read(torch.zeros(2, 3, 4, 4, 4), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="gaussian_write"):
        gaussian_write(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(3), (4, 4, 4))


# -- the module against the literal reference ---------------------------------------------


@pytest.mark.parametrize("chunk_size,length", [(1, 9), (3, 10), (4, 4), (2, 1)])
def test_module_matches_reference_values_and_gradients(chunk_size, length):
    cfg = MemoryConfig(token_dim=12, channels=5, grid=(3, 4, 5), chunk_size=chunk_size)
    memory = perturbed_memory(cfg)
    reference = ReferenceMemory(memory)
    x = torch.randn(2, length, 12, dtype=torch.float64, requires_grad=True)
    state = memory.init_state(2)
    y, new_state = memory(x, state)
    y_ref, (h_ref, c_ref) = reference(x, state.h, state.c)
    torch.testing.assert_close(y, y_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(new_state.h, h_ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(new_state.c, c_ref, rtol=0, atol=1e-12)
    if length < chunk_size:
        return  # nothing written: no gradient reaches the write path
    weights = torch.randn_like(y)
    loss = (y * weights).sum() + new_state.h.sum() + 0.5 * new_state.c.square().sum()
    loss_ref = (y_ref * weights).sum() + h_ref.sum() + 0.5 * c_ref.square().sum()
    grads = torch.autograd.grad(loss, [x, *memory.parameters()], allow_unused=True)
    grads_ref = torch.autograd.grad(loss_ref, [x, *reference.parameters()], allow_unused=True)
    ours = dict(zip(["x"] + [n for n, _ in memory.named_parameters()], grads, strict=True))
    theirs = dict(zip(["x"] + [n for n, _ in reference.named_parameters()], grads_ref, strict=True))
    torch.testing.assert_close(ours["x"], theirs["x"], rtol=0, atol=1e-10)
    for name in (
        "norm.weight",
        "summary.weight",
        "coord_head.weight",
        "out_proj.weight",
        "gate",
        "content.weight",
        "spread.weight",
        "mix.bias",
    ):
        torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=1e-10, msg=name)
    C = cfg.channels
    torch.testing.assert_close(ours["mix.weight"], theirs["mix.weight"].view(4 * C, 2 * C), rtol=0, atol=1e-10)
    for axis, conv in enumerate(("conv_d", "conv_h", "conv_w")):
        torch.testing.assert_close(ours["depthwise"][axis], theirs[f"{conv}.weight"].view(2 * C, 3), rtol=0, atol=1e-10)


def test_gradients_reach_coordinates_spread_content_and_gate():
    cfg = MemoryConfig(token_dim=8, channels=4, grid=(4, 4, 4))
    memory = perturbed_memory(cfg)
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    y, _ = memory(x)
    y.square().sum().backward()
    for name in (
        "coord_head.weight",
        "coord_head.bias",
        "spread.weight",
        "spread.bias",
        "content.weight",
        "gate",
        "summary.weight",
        "depthwise",
        "mix.weight",
    ):
        grad = dict(memory.named_parameters())[name].grad
        assert grad is not None and grad.abs().max() > 1e-8, name


# -- initialisation ------------------------------------------------------------------------


def test_gate_and_spread_initialisation():
    cfg = MemoryConfig(
        token_dim=8, channels=4, grid=(4, 4, 4), gate_init=-3.0, sigma_init=0.7, sigma_min=0.1, forget_bias=2.5
    )
    memory = TensorMemory(cfg)
    assert memory.gate_scale.item() == pytest.approx(1 / (1 + math.exp(3.0)))
    torch.manual_seed(0)
    with record(memory) as rec:
        memory(torch.randn(3, 5, 8) * 10)
    torch.testing.assert_close(rec.layers[""].sigma, torch.full((3, 5), 0.7))  # whatever the input
    assert torch.equal(memory.depthwise[:, :, 1], torch.ones(3, 8))  # convolutions start as identity
    assert torch.equal(memory.depthwise[:, :, 0], torch.zeros(3, 8))
    assert torch.equal(memory.mix.bias[4:8], torch.full((4,), 2.5))  # forget gates lean towards keeping
    assert MemoryConfig(token_dim=8).forget_bias == 4.0  # the default keeps ~98% a chunk (docs/trainability.md)


def test_suppressing_gate_barely_moves_the_tokens():
    torch.manual_seed(0)
    x = torch.randn(2, 12, 16)
    moved = {}
    for gate_init in (-2.0, -9.0):
        torch.manual_seed(1)  # same weights for both: only the gate differs
        memory = TensorMemory(MemoryConfig(token_dim=16, channels=4, grid=(4, 4, 4), gate_init=gate_init))
        y, _ = memory(x)
        moved[gate_init] = ((y - x).norm() / x.norm()).item()
    assert moved[-9.0] < 1e-3 < moved[-2.0]
    assert moved[-9.0] / moved[-2.0] == pytest.approx(
        torch.sigmoid(torch.tensor(-9.0)).item() / torch.sigmoid(torch.tensor(-2.0)).item(), rel=1e-3
    )


def test_first_chunk_reads_an_empty_memory():
    memory = perturbed_memory(MemoryConfig(token_dim=8, channels=4, grid=(3, 3, 3), chunk_size=2))
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    with record(memory) as rec:
        y, _ = memory(x)
    assert torch.equal(rec.layers[""].read[:, 0], torch.zeros(1, 4, dtype=torch.float64))
    # Nothing is written yet: the first chunk only gets out_proj's bias through the gate.
    torch.testing.assert_close(y[:, :2], x[:, :2] + memory.gate_scale * memory.out_proj.bias, rtol=0, atol=1e-15)
    assert rec.layers[""].read[:, 1:].abs().min() > 0


# -- causality, streaming, fixed size ------------------------------------------------------


@pytest.mark.parametrize("chunk_size", [1, 3])
def test_outputs_never_depend_on_later_inputs(chunk_size):
    memory = perturbed_memory(MemoryConfig(token_dim=8, channels=4, grid=(3, 4, 3), chunk_size=chunk_size))
    x = torch.randn(2, 11, 8, dtype=torch.float64)
    y, _ = memory(x)
    for t in range(11):
        changed = x.clone()
        changed[:, t + 1 :] += torch.randn_like(changed[:, t + 1 :])
        y_changed, _ = memory(changed)
        assert torch.equal(y_changed[:, : t + 1], y[:, : t + 1]), t
        if t + 1 + chunk_size < 11:  # and the change does reach later outputs: the test has teeth
            assert not torch.allclose(y_changed[:, t + 1 + chunk_size :], y[:, t + 1 + chunk_size :])


@pytest.mark.parametrize("chunk_size,cuts", [(1, [3, 1, 5]), (3, [2, 2, 1, 4]), (4, [1, 0, 6, 3, 1])])
def test_streaming_in_segments_equals_one_pass(chunk_size, cuts):
    memory = perturbed_memory(MemoryConfig(token_dim=8, channels=4, grid=(3, 3, 4), chunk_size=chunk_size))
    x = torch.randn(2, sum(cuts), 8, dtype=torch.float64)
    y_full, state_full = memory(x)
    outputs, state, start = [], None, 0
    for length in cuts:
        y, state = memory(x[:, start : start + length], state)
        outputs.append(y)
        start += length
    torch.testing.assert_close(torch.cat(outputs, 1), y_full, rtol=0, atol=1e-12)
    for a, b in zip((state.h, state.c, state.pending), (state_full.h, state_full.c, state_full.pending), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


def test_state_size_does_not_depend_on_sequence_length():
    memory = TensorMemory(MemoryConfig(token_dim=8, channels=4, grid=(3, 4, 5), chunk_size=3))
    sizes = set()
    for length in (1, 7, 50, 301):
        _, state = memory(torch.randn(2, length, 8))
        assert state.h.shape == state.c.shape == (2, 4, 3, 4, 5)
        assert state.pending.shape[1] < 3
        sizes.add(state.h.numel() + state.c.numel())
    assert sizes == {2 * 2 * 4 * 3 * 4 * 5}


def test_detached_state_carries_values_not_history():
    memory = perturbed_memory(MemoryConfig(token_dim=8, channels=4, grid=(3, 3, 3)))
    _, state = memory(torch.randn(1, 4, 8, dtype=torch.float64))
    detached = state.detach()
    assert state.h.requires_grad and not detached.h.requires_grad
    assert torch.equal(detached.h, state.h) and detached.numel() == state.numel()


# -- configuration and input checks --------------------------------------------------------


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("grid", (1, 4, 4), r"grid\[D\]"),
        ("grid", (4, 4), "grid"),
        ("chunk_size", 0, "chunk_size"),
        ("channels", 0, "channels"),
        ("token_dim", -1, "token_dim"),
        ("sigma_min", 0.0, "sigma_min"),
        ("sigma_init", 0.01, "sigma_init"),
        ("gate_init", float("nan"), "gate_init"),
        ("chunk_size", 1.5, "chunk_size"),
    ],
)
def test_bad_configuration_names_the_field_and_range(field, value, message):
    with pytest.raises(ValueError, match=message) as error:
        MemoryConfig(**{field: value})
    assert any(word in str(error.value) for word in (">=", "in (", "three integers", "finite number"))


def test_config_round_trip_and_unknown_fields():
    cfg = MemoryConfig(token_dim=32, channels=8, grid=(4, 5, 6), chunk_size=2, gate_init=-5.0)
    data = cfg.to_dict()
    assert data["grid"] == [4, 5, 6]
    assert MemoryConfig.from_dict(data) == cfg
    with pytest.raises(ValueError, match="unknown field"):
        MemoryConfig.from_dict({**data, "colour": "red"})


def test_bad_inputs_are_refused_clearly():
    memory = TensorMemory(MemoryConfig(token_dim=8, channels=4, grid=(3, 3, 3), chunk_size=2))
    with pytest.raises(ValueError, match="token_dim=8"):
        memory(torch.randn(2, 5, 7))
    with pytest.raises(ValueError, match="NaN"):
        memory(torch.tensor([[[float("nan")] * 8]]))
    with pytest.raises(ValueError, match="MemoryState h and c"):
        memory(torch.randn(3, 5, 8), memory.init_state(2))
    bad = memory.init_state(2)
    with pytest.raises(ValueError, match="pending"):
        memory(torch.randn(2, 5, 8), MemoryState(bad.h, bad.c, torch.zeros(2, 2, 8)))


def test_empty_segment_changes_nothing():
    memory = TensorMemory(MemoryConfig(token_dim=8, channels=4, grid=(3, 3, 3)))
    state = memory.init_state(2)
    y, new_state = memory(torch.zeros(2, 0, 8), state)
    assert y.shape == (2, 0, 8) and new_state is state


# -- recording -----------------------------------------------------------------------------


def test_recording_captures_every_chunk_consistently():
    cfg = MemoryConfig(token_dim=8, channels=4, grid=(3, 4, 5), chunk_size=2)
    memory = perturbed_memory(cfg)
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    y_plain, _ = memory(x)
    with record(memory) as rec:
        y, state = memory(x)
    assert torch.equal(y, y_plain)  # recording changes nothing
    r = rec.layers[""]
    assert r.num_chunks == 4 and r.mu_read.shape == (2, 4, 3)
    assert r.mu_write.shape == (2, 3, 3) and r.sigma.shape == (2, 3) and r.content.shape == (2, 3, 4)
    assert r.h.shape == r.c.shape == r.gate_i.shape == (2, 3, 4, 3, 4, 5)
    torch.testing.assert_close(r.h[:, -1], state.h)
    # The recorded gates are the ones that produced the recorded states.
    c_prev = torch.cat([torch.zeros_like(r.c[:, :1]), r.c[:, :-1]], 1)
    torch.testing.assert_close(r.c, r.gate_f * c_prev + r.gate_i * r.gate_g, rtol=0, atol=1e-12)
    torch.testing.assert_close(r.h, r.gate_o * torch.tanh(r.c), rtol=0, atol=1e-12)
    # The recorded read is h before the chunk's write, sampled at the recorded coordinate.
    torch.testing.assert_close(r.read[:, 2], trilinear_read(r.h[:, 1], r.mu_read[:, 2]), rtol=0, atol=1e-12)
    assert r.gate_scale.item() == pytest.approx(torch.sigmoid(torch.tensor(0.3)).item())
    assert not any(point.active for point in memory.hook_points.values())  # off again


def test_recording_across_stream_segments_concatenates_chunks_and_can_skip_gates():
    memory = perturbed_memory(MemoryConfig(token_dim=8, channels=4, grid=(3, 3, 3)))
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    with record(memory, gates=False) as rec:
        _, state = memory(x[:, :2])
        memory(x[:, 2:], state)
    with record(memory) as whole:
        memory(x)
    assert rec.layers[""].gate_i is None
    torch.testing.assert_close(rec.layers[""].h, whole.layers[""].h, rtol=0, atol=1e-12)


def test_record_refuses_a_model_without_memory():
    with pytest.raises(ValueError, match="no memory layers"):
        with record(torch.nn.Linear(2, 2)):
            pass


def test_sum_and_centre_initialisations():
    torch.manual_seed(0)
    cfg = MemoryConfig(token_dim=8, channels=4, grid=(4, 4, 4), chunk_size=4, summary_init="sum", coord_init="centre")
    mem = TensorMemory(cfg)
    x = torch.randn(3, 8, 8)
    with record(mem) as rec, torch.no_grad():
        mem(x)
    r = rec.layers[""]
    # Every read and write starts at the centre, whatever the input.
    assert torch.equal(r.mu_read, torch.zeros_like(r.mu_read)) and torch.equal(r.mu_write, torch.zeros_like(r.mu_write))
    # The summary is the chunk's normalised tokens summed over positions, divided by √chunk_size: a token
    # moved to another place in its chunk gives the same summary.
    tokens = mem.norm(x).view(3, 2, 4, 8)
    expected = tokens.sum(2) / 2.0
    assert torch.allclose(mem.summary(tokens.reshape(3, 2, 32)), expected, atol=1e-6)
    swapped = tokens[:, :, [3, 1, 2, 0]]
    assert torch.allclose(mem.summary(swapped.reshape(3, 2, 32)), expected, atol=1e-6)
    # The default keeps PyTorch's initialisation (the shipped checkpoints' training depends on it).
    torch.manual_seed(1)
    default = TensorMemory(MemoryConfig(token_dim=8, channels=4, chunk_size=4))
    torch.manual_seed(1)
    plain = torch.nn.Linear(32, 8)
    assert torch.equal(default.summary.weight, plain.weight)
    with pytest.raises(ValueError, match="coord_init must be one of"):
        MemoryConfig(coord_init="corner")


def test_summary_norm_keeps_writes_off_the_faces_however_large_the_projection_grows():
    """The regression behind docs/trainability.md: an unnormalised write summary grows in training until
    tanh(coord_head(s)) pins every write at a face. Normalised, μ_write ignores the projection's scale."""
    torch.manual_seed(0)
    x = torch.randn(4, 12, 16)
    mu = {}
    for norm in (True, False):
        torch.manual_seed(1)
        mem = TensorMemory(MemoryConfig(token_dim=16, channels=2, grid=(3, 3, 3), chunk_size=3, summary_norm=norm))
        for scale in (1.0, 30.0):
            with torch.no_grad():
                mem.summary.weight.mul_(scale)
                mem.summary.bias.mul_(scale)
            with torch.no_grad(), record(mem) as rec:
                mem(x)
            mu[norm, scale] = rec.layers[""].mu_write
    assert torch.allclose(mu[True, 30.0], mu[True, 1.0], atol=1e-5)
    assert (mu[True, 30.0].abs() > 0.98).float().mean() < 0.2
    assert (mu[False, 30.0].abs() > 0.98).float().mean() > 0.6  # the failure summary_norm prevents
    assert not torch.allclose(mu[False, 30.0], mu[False, 1.0], atol=1e-2)


def test_summary_norm_is_a_layer_norm_without_gain_of_the_projection():
    torch.manual_seed(0)
    cfg = MemoryConfig(token_dim=8, channels=2, grid=(2, 2, 2), chunk_size=2)
    mem = TensorMemory(cfg)
    x = torch.randn(1, 4, 8)
    with torch.no_grad(), record(mem) as rec:
        mem(x)
    u = F.layer_norm(x, (8,), mem.norm.weight, mem.norm.bias).reshape(1, 2, 16)
    s = mem.summary(u)
    s = (s - s.mean(-1, keepdim=True)) / torch.sqrt(s.var(-1, unbiased=False, keepdim=True) + 1e-5)
    assert torch.allclose(rec.layers[""].mu_write, torch.tanh(mem.coord_head(s)), atol=1e-6)
    assert torch.allclose(rec.layers[""].content, mem.content(s), atol=1e-6)
