"""Importing the paper's public code (``TensorMemory.from_public_code``) and the MemoryConfig options it uses.

The public ``TensorMemoryInterface`` is re-stated here literally and independently of the layer: a loop over
chunks with ``F.grid_sample``, a Gaussian evaluated at every cell, grouped ``F.conv3d`` with biases and a
1×1×1 ``F.conv3d`` mix, from its public-layout state dict. The imported module must give the same ``out``,
``h`` and ``c``; the options must keep the dense scan, the local update and the reference in agreement.
"""

from __future__ import annotations

import pickle

import pytest
import torch
import torch.nn.functional as F

from tensor_memory import MemoryConfig, TensorMemory, hooks, record
from tensor_memory.memory import memory_layers
from tensor_memory.memory.public_code import PUBLIC_OPTIONS, public_grid_cache, public_shapes
from tensor_memory.memory.reference import ReferenceMemory

D_MODEL, CHANNELS, GRID = 12, 3, (4, 5, 6)


def public_state(chunk: int, d: int = D_MODEL, C: int = CHANNELS, grid=GRID, seed: int = 0) -> dict:
    """Random weights in the public layout (non-zero conv biases; writes at varied places and spreads)."""
    gen = torch.Generator().manual_seed(seed)
    sd = {key: 0.3 * torch.randn(shape, generator=gen) for key, shape in public_shapes(d, C, chunk, grid).items()}
    sd["coord_net.weight"] *= 4.0  # coordinates over the whole grid, some near the faces
    sd["writer.sigma_net.bias"] = torch.tensor([-2.5])  # σ ≈ 0.08, a few voxels: 1e-6 and the floor matter a bit
    for conv in ("conv_d", "conv_h", "conv_w"):
        centre = (torch.arange(3) == 1).float()  # the middle tap: near the identity, as trained ones start
        sd[f"gate_conv.{conv}.weight"] += 0.7 * centre.view(sd[f"gate_conv.{conv}.weight"].shape[2:])
    sd["grid_cache"] = public_grid_cache(grid)
    return sd


def literal_public(sd: dict, x: torch.Tensor, h: torch.Tensor, c: torch.Tensor, chunk: int, sigma_scale=1.0):
    """The public interface's forward, step by step: out (B, N, d), (h, c)."""
    B, N, d = x.shape
    C = sd["out_proj.weight"].shape[1]
    padded = F.pad(x, (0, 0, 0, (-N) % chunk))  # zeros after the last token, to whole chunks
    groups = padded.view(B, -1, chunk, d)  # (B, K, chunk, d)
    summary = F.linear(groups.flatten(2), sd["write_proj.weight"], sd["write_proj.bias"])  # (B, K, d)
    read_xyz = torch.tanh(F.linear(groups[:, :, 0], sd["coord_net.weight"], sd["coord_net.bias"]))  # (B, K, 3)
    write_xyz = torch.tanh(F.linear(summary, sd["coord_net.weight"], sd["coord_net.bias"]))
    content = F.linear(summary, sd["writer.content_net.weight"], sd["writer.content_net.bias"])  # (B, K, C)
    sigma = (
        F.softplus(F.linear(summary, sd["writer.sigma_net.weight"], sd["writer.sigma_net.bias"])) + 1e-4
    ) * sigma_scale  # (B, K, 1)
    cells = sd["grid_cache"]  # (1, 3, D, H, W) as (x, y, z)
    reads = []
    for k in range(groups.shape[1]):
        reads.append(
            F.grid_sample(
                h, read_xyz[:, k].view(B, 1, 1, 1, 3), mode="bilinear", padding_mode="border", align_corners=True
            ).view(B, C)
        )
        dist2 = ((cells - write_xyz[:, k].view(B, 3, 1, 1, 1)) ** 2).sum(1, keepdim=True)  # (B, 1, D, H, W)
        mask = torch.exp(-dist2 / (2 * sigma[:, k].view(B, 1, 1, 1, 1) ** 2 + 1e-6))
        z = torch.cat([content[:, k].view(B, C, 1, 1, 1) * mask, h], dim=1)  # (B, 2C, D, H, W)
        for conv, padding in (("conv_d", (1, 0, 0)), ("conv_h", (0, 1, 0)), ("conv_w", (0, 0, 1))):
            z = F.conv3d(z, sd[f"gate_conv.{conv}.weight"], sd[f"gate_conv.{conv}.bias"], padding=padding, groups=2 * C)
        gates = F.conv3d(z, sd["gate_conv.pointwise.weight"], sd["gate_conv.pointwise.bias"])  # (B, 4C, D, H, W)
        i, f, o, g = gates.chunk(4, dim=1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(c)
    per_token = torch.stack(reads, dim=1).repeat_interleave(chunk, dim=1)[:, :N]  # (B, N, C)
    return F.linear(per_token, sd["out_proj.weight"], sd["out_proj.bias"]), (h, c), write_xyz


def random_state(B: int, seed: int = 3):
    gen = torch.Generator().manual_seed(seed)
    return tuple(0.5 * torch.randn(B, CHANNELS, *GRID, generator=gen) for _ in range(2))


@pytest.mark.parametrize("chunk,length", [(1, 7), (3, 9), (4, 10), (5, 3), (2, 1)])
def test_the_imported_interface_gives_the_public_codes_out_h_and_c(chunk, length):
    sd = public_state(chunk)
    m = TensorMemory.from_public_code(sd)
    x = torch.randn(2, length, D_MODEL, generator=torch.Generator().manual_seed(1))
    h0, c0 = random_state(2)
    out, (h, c) = m(x, (h0, c0))
    out_ref, (h_ref, c_ref), _ = literal_public(sd, x, h0, c0, chunk)
    for got, want in ((out, out_ref), (h, h_ref), (c, c_ref)):
        assert got.shape == want.shape
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    # No state: zeros, as the public init_state gives; and a second call carries the state like the public code.
    zeros = m.init_state(2)
    out0, state0 = m(x)
    torch.testing.assert_close(out0, literal_public(sd, x, *zeros, chunk)[0], atol=1e-5, rtol=1e-5)
    out1, (h1, c1) = m(x, state0)
    out1_ref, (h1_ref, c1_ref), _ = literal_public(sd, x, *literal_public(sd, x, *zeros, chunk)[1], chunk)
    torch.testing.assert_close(out1, out1_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(h1, h1_ref, atol=1e-5, rtol=1e-5)


def test_sigma_scale_and_the_gradients_match_the_public_code():
    sd = public_state(3, seed=4)
    m = TensorMemory.from_public_code(sd, sigma_scale=0.5, chunk_size=3)
    x = torch.randn(2, 8, D_MODEL, generator=torch.Generator().manual_seed(5))
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    h0, c0 = random_state(2)
    out, (h, c) = m(xa, (h0, c0))
    out_ref, (h_ref, c_ref), _ = literal_public(sd, xb, h0, c0, 3, sigma_scale=0.5)
    torch.testing.assert_close(out, out_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(c, c_ref, atol=1e-5, rtol=1e-5)
    w = torch.randn_like(out)
    ((out * w).sum() + h.sum()).backward()
    ((out_ref * w).sum() + h_ref.sum()).backward()
    torch.testing.assert_close(xa.grad, xb.grad, atol=1e-5, rtol=1e-4)


def test_hook_points_and_record_work_on_the_imported_module():
    sd = public_state(2)
    m = TensorMemory.from_public_code(sd)
    assert list(memory_layers(m)) == ["memory"]
    x = torch.randn(2, 7, D_MODEL, generator=torch.Generator().manual_seed(6))
    with record(m) as rec:
        out, _ = m(x)
    layer = rec["memory"]
    write_xyz = literal_public(sd, x, *m.init_state(2), 2)[2]
    assert layer.mu_write.shape == (2, 4, 3) and layer.mu_read.shape == (2, 4, 3)  # 7 tokens: 4 chunks, all written
    torch.testing.assert_close(layer.mu_write, write_xyz, atol=1e-6, rtol=1e-6)
    assert layer.h.shape == (2, 4, CHANNELS, *GRID) and layer.gate_i is not None
    assert float(layer.gate_scale) == 1.0  # the message is the output, whole
    with hooks(m, {"memory.mu_write": lambda v: torch.zeros_like(v)}):  # every write at the centre
        moved, _ = m(x)
    assert not torch.allclose(moved, out)


def test_a_whole_models_state_dict_imports_with_its_prefix():
    sd = {f"shared_tensor_memory.{k}": v for k, v in public_state(2).items()}
    sd["head.weight"] = torch.zeros(5, D_MODEL)
    with pytest.raises(ValueError, match="prefix='shared_tensor_memory.'"):
        TensorMemory.from_public_code(sd)
    m = TensorMemory.from_public_code(sd, prefix="shared_tensor_memory.")
    assert m.memory.config.grid == GRID and m.memory.config.chunk_size == 2


def _refused(sd, match, **kwargs):
    with pytest.raises(ValueError, match=match):
        TensorMemory.from_public_code(sd, **kwargs)


def test_missing_extra_and_misshaped_entries_are_refused_by_name():
    sd = public_state(2)
    _refused({k: v for k, v in sd.items() if k != "gate_conv.conv_h.bias"}, "'gate_conv.conv_h.bias'")
    _refused({k: v for k, v in sd.items() if k != "coord_net.weight"}, "'coord_net.weight'")
    _refused({**sd, "gate_conv.conv_d.scale": torch.ones(6)}, "'gate_conv.conv_d.scale'")
    _refused({**sd, "gate_conv.pointwise.bias": torch.zeros(11)}, r"'gate_conv.pointwise.bias' has shape \(11,\)")
    _refused({**sd, "out_proj.weight": torch.zeros(D_MODEL, 4)}, "'out_proj.weight'")
    _refused({**sd, "write_proj.weight": torch.zeros(D_MODEL, 17)}, "'write_proj.weight'")
    _refused({**sd, "out_proj.bias": torch.full((D_MODEL,), float("nan"))}, "'out_proj.bias'.*NaN")
    _refused({**sd, "coord_net.bias": [0.0, 0.0, 0.0]}, "'coord_net.bias'")
    _refused({**sd, "grid_cache": public_grid_cache(GRID) * 0.5}, "'grid_cache'|grid_cache")
    _refused(sd, "chunk_size=2", chunk_size=3)
    _refused(sd, r"grid=\(4, 5, 6\)", grid=(4, 5, 5))
    no_grid = {k: v for k, v in sd.items() if k != "grid_cache"}
    _refused(no_grid, r"pass grid=\(D, H, W\)")
    x = torch.randn(1, 5, D_MODEL)
    torch.testing.assert_close(
        TensorMemory.from_public_code(no_grid, grid=GRID)(x)[0], TensorMemory.from_public_code(sd)(x)[0]
    )


def test_a_safetensors_file_round_trips_and_a_pickle_is_refused(tmp_path):
    from safetensors.torch import save_file

    sd = public_state(3)
    path = tmp_path / "interface.safetensors"
    save_file(sd, str(path))
    m = TensorMemory.load_public_code(path, chunk_size=3)
    x = torch.randn(2, 8, D_MODEL, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(m(x)[0], literal_public(sd, x, *m.init_state(2), 3)[0], atol=1e-5, rtol=1e-5)
    torch.save(sd, tmp_path / "interface.pt")
    (tmp_path / "interface.pkl").write_bytes(pickle.dumps({"a": 1}))
    for name in ("interface.pt", "interface.pkl"):
        with pytest.raises(ValueError, match="pickle"):
            TensorMemory.load_public_code(tmp_path / name)


# -- the options, on TensorMemory itself: dense scan, local update and the literal reference agree --------

OPTION_SETS = [
    PUBLIC_OPTIONS,
    dict(depthwise_bias=True),
    dict(partial_chunk="pad", write_eps=1e-3),
    dict(output="message", input_norm=False, sigma_scale=1.7),
]


def _with_options(options: dict, write_mode: str, seed: int = 0) -> TensorMemory:
    cfg = MemoryConfig(
        token_dim=16,
        channels=4,
        grid=(5, 4, 6),
        chunk_size=3,
        write={"mode": write_mode, "window_k": 2.0},
        sigma_init=0.4,
        public_code=options,
    )
    torch.manual_seed(seed)
    memory = TensorMemory(cfg)
    with torch.no_grad():  # away from the initialisation, so every parameter matters
        memory.depthwise.add_(0.2 * torch.randn_like(memory.depthwise))
        if memory.update.depthwise_bias is not None:
            memory.update.depthwise_bias.normal_(0, 0.3)
        memory.spread.weight.normal_(0, 0.3)
        memory.coord_head.weight.mul_(3.0)
    return memory


@pytest.mark.parametrize("write_mode", ["dense", "local"])
@pytest.mark.parametrize("options", OPTION_SETS)
def test_the_options_keep_the_layer_and_the_reference_in_agreement(options, write_mode):
    memory = _with_options(options, write_mode)
    reference = ReferenceMemory(memory)
    x = torch.randn(2, 11, 16, generator=torch.Generator().manual_seed(1))  # 11 tokens: a short last chunk
    state = memory.init_state(2)
    with torch.no_grad():
        state.h.normal_()
        state.c.normal_()
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    y, new = memory(xa, state)
    y_ref, (h_ref, c_ref) = reference(xb, state.h, state.c)
    torch.testing.assert_close(y, y_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(new.h, h_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(new.c, c_ref, atol=1e-5, rtol=1e-5)
    weights = torch.randn_like(y)
    ((y * weights).sum() + new.h.sum() + new.c.sum()).backward()
    ((y_ref * weights).sum() + h_ref.sum() + c_ref.sum()).backward()
    torch.testing.assert_close(xa.grad, xb.grad, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(
        memory.mix.weight.grad, reference.mix.weight.grad.view_as(memory.mix.weight), atol=1e-4, rtol=1e-4
    )
    for axis, conv in enumerate((reference.conv_d, reference.conv_h, reference.conv_w)):
        torch.testing.assert_close(memory.depthwise.grad[axis], conv.weight.grad.view(8, 3), atol=1e-4, rtol=1e-4)
        if memory.update.depthwise_bias is not None:
            torch.testing.assert_close(memory.update.depthwise_bias.grad[axis], conv.bias.grad, atol=1e-4, rtol=1e-4)
    pad = memory.config.public_code.partial_chunk == "pad"
    assert new.pending.shape[1] == (0 if pad else 2)


def test_recorded_gates_include_the_depthwise_biases():
    memory = _with_options(dict(depthwise_bias=True), "dense")
    x = torch.randn(1, 6, 16, generator=torch.Generator().manual_seed(2))
    with record(memory) as rec:
        _, new = memory(x)
    h0 = torch.zeros(1, 4, 5, 4, 6)
    reference = ReferenceMemory(memory)
    _, (h_ref, c_ref) = reference(x, h0, h0.clone())
    torch.testing.assert_close(rec[""].h[:, -1], h_ref, atol=1e-5, rtol=1e-5)
    # c after the last chunk from the recorded gates: f⊙c_prev + i⊙g.
    layer = rec[""]
    c_last = layer.gate_f[:, -1] * layer.c[:, -2] + layer.gate_i[:, -1] * layer.gate_g[:, -1]
    torch.testing.assert_close(c_last, c_ref, atol=1e-5, rtol=1e-5)


def test_the_new_fields_round_trip_default_for_old_configs_and_are_checked():
    old = MemoryConfig().to_dict()
    old.pop("public_code")
    assert MemoryConfig.from_dict(old) == MemoryConfig()  # a checkpoint written before the options
    cfg = MemoryConfig(public_code={**PUBLIC_OPTIONS, "sigma_scale": 2.0})
    assert MemoryConfig.from_dict(cfg.to_dict()) == cfg
    assert MemoryConfig.from_dict({**old, **PUBLIC_OPTIONS, "sigma_scale": 2.0}) == cfg  # named flat, as before groups
    for field, value in (
        ("output", "sum"),
        ("partial_chunk", "drop"),
        ("depthwise_bias", 1),
        ("input_norm", "no"),
        ("write_eps", -1e-6),
        ("sigma_scale", 0.0),
        ("sigma_scale", float("inf")),
    ):
        with pytest.raises(ValueError, match=f"MemoryConfig.public_code.{field}"):
            MemoryConfig(public_code={field: value})
    # The defaults build the layer of before: no new parameters.
    assert set(TensorMemory(MemoryConfig()).state_dict()) == {
        "norm.weight",
        "norm.bias",
        "summary.weight",
        "summary.bias",
        "coord_head.weight",
        "coord_head.bias",
        "out_proj.weight",
        "out_proj.bias",
        "gate",
        "content.weight",
        "content.bias",
        "spread.weight",
        "spread.bias",
        "depthwise",
        "mix.weight",
        "mix.bias",
    }
