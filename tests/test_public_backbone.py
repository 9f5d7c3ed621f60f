"""Importing the paper's public toy backbone whole (``from_public_backbone``, ``tensor-memory import --backbone``).

The reference is a straightforward loop written here from the public ``TensorBackbone``'s forward: each block's
attention done by hand (heads split, a causal mask, softmax), its GELU MLP, then one ``from_public_code`` interface
called on ``mem_lns[i](x)`` with the (h, c) the layer before returned, and ``x + σ(gates[i])·m``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_public_code import D_MODEL, GRID, public_state

from analysis import trace_model
from analysis.measures.addressing import PUBLIC_REMEDIES, REMEDIES, VERDICTS, addressing_report
from analysis.traces.trace import load_trace
from tensor_memory import TensorMemory, record
from tensor_memory.backbone.public_code import from_public_backbone

LAYERS, HEADS, HIDDEN = 3, 4, 20
BLOCK = {
    "ln1.weight": (D_MODEL,),
    "ln1.bias": (D_MODEL,),
    "attn.in_proj_weight": (3 * D_MODEL, D_MODEL),
    "attn.in_proj_bias": (3 * D_MODEL,),
    "attn.out_proj.weight": (D_MODEL, D_MODEL),
    "attn.out_proj.bias": (D_MODEL,),
    "ln2.weight": (D_MODEL,),
    "ln2.bias": (D_MODEL,),
    "mlp.0.weight": (HIDDEN, D_MODEL),
    "mlp.0.bias": (HIDDEN,),
    "mlp.3.weight": (D_MODEL, HIDDEN),
    "mlp.3.bias": (D_MODEL,),
}


def backbone_state(prefix: str = "backbone.", seed: int = 0) -> dict[str, torch.Tensor]:
    """A toy model's state dict in the public layout: random blocks, norms and gates, the interface of
    ``public_state``, and the front end's entries outside the backbone."""
    gen = torch.Generator().manual_seed(seed)
    sd = {f"{prefix}memory.{k}": v for k, v in public_state(1, seed=seed).items()}
    for i in range(LAYERS):
        sd.update({f"{prefix}token_blocks.{i}.{k}": 0.4 * torch.randn(s, generator=gen) for k, s in BLOCK.items()})
        sd[f"{prefix}mem_lns.{i}.weight"] = 1 + 0.2 * torch.randn(D_MODEL, generator=gen)
        sd[f"{prefix}mem_lns.{i}.bias"] = 0.2 * torch.randn(D_MODEL, generator=gen)
        sd[f"{prefix}gates.{i}"] = torch.randn(1, generator=gen)
    sd[f"{prefix}ln.weight"], sd[f"{prefix}ln.bias"] = torch.ones(D_MODEL), torch.zeros(D_MODEL)
    sd["patch_embed.weight"], sd["head.weight"] = torch.zeros(D_MODEL, 1, 4, 4), torch.zeros(4, D_MODEL)  # not in it
    return sd


def attend(x: torch.Tensor, b: dict, norm: str, causal: bool) -> torch.Tensor:
    """x + attention over LN(x) by hand: heads split, scaled dot products, a causal mask or none."""
    B, N, d = x.shape
    normed = F.layer_norm(x, (d,), b[f"{norm}.weight"], b[f"{norm}.bias"])
    q, k, v = F.linear(normed, b["attn.in_proj_weight"], b["attn.in_proj_bias"]).chunk(3, dim=-1)
    q, k, v = (t.view(B, N, HEADS, d // HEADS).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-1, -2) / math.sqrt(d // HEADS)
    if causal:
        scores = scores.masked_fill(torch.ones(N, N).triu(1).bool(), float("-inf"))  # a token sees itself and before
    attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, N, d)
    return x + F.linear(attended, b["attn.out_proj.weight"], b["attn.out_proj.bias"])


def feed_forward(x: torch.Tensor, b: dict, norm: str) -> torch.Tensor:
    normed = F.layer_norm(x, (x.shape[-1],), b[f"{norm}.weight"], b[f"{norm}.bias"])
    return x + F.linear(
        F.gelu(F.linear(normed, b["mlp.0.weight"], b["mlp.0.bias"])), b["mlp.3.weight"], b["mlp.3.bias"]
    )


@torch.no_grad()
def literal_backbone(sd: dict, x: torch.Tensor, prefix: str = "backbone."):
    """The public TensorBackbone's forward, by hand: y and, per layer, (h, c) after it."""
    p = {k[len(prefix) :]: v for k, v in sd.items() if k.startswith(prefix)}
    interface = TensorMemory.from_public_code(p, prefix="memory.")  # out, (h, c) = interface(x, (h, c))
    d = x.shape[-1]
    state, states = interface.init_state(x.shape[0]), []
    for i in range(LAYERS):
        b = {k: p[f"token_blocks.{i}.{k}"] for k in BLOCK}
        x = feed_forward(attend(x, b, "ln1", causal=True), b, "ln2")
        m, state = interface(F.layer_norm(x, (d,), p[f"mem_lns.{i}.weight"], p[f"mem_lns.{i}.bias"]), state)
        x = x + torch.sigmoid(p[f"gates.{i}"]) * m
        states.append(state)
    return F.layer_norm(x, (d,), p["ln.weight"], p["ln.bias"]), states


def tokens(N: int = 9, seed: int = 4) -> torch.Tensor:
    return torch.randn(1, N, D_MODEL, generator=torch.Generator().manual_seed(seed))


def test_the_imported_backbone_gives_the_public_forward_with_the_state_threaded_through_the_layers():
    sd, x = backbone_state(), tokens()
    model = from_public_backbone(sd, heads=HEADS, prefix="backbone.")
    want, states = literal_backbone(sd, x)
    with torch.no_grad():
        torch.testing.assert_close(model(x), want, atol=2e-5, rtol=1e-4)
    trace = trace_model(model, x, progress=False)
    assert trace.layer_names == [f"memories.{i}" for i in range(LAYERS)]  # every layer recorded
    for i, (h, _) in enumerate(states):
        np.testing.assert_allclose(trace.layer(f"memories.{i}").h[-1].astype(np.float32), h[0].numpy(), atol=3e-3)
    # Layer ℓ's first read samples the state layer ℓ−1 left (the first layer's, zeros).
    assert np.abs(trace.layer("memories.0").read[0]).max() == 0
    for i in range(1, LAYERS):
        layer = trace.layer(f"memories.{i}")
        xyz = torch.from_numpy(layer.mu_read[0]).view(1, 1, 1, 1, 3)
        before = F.grid_sample(states[i - 1][0], xyz, align_corners=True, padding_mode="border").flatten()
        np.testing.assert_allclose(layer.read[0], before.numpy(), atol=1e-5)
        assert np.abs(layer.read[0]).max() > 1e-3  # not zeros: a fresh state would read nothing


def test_each_layers_gate_is_the_models_own_and_diagnose_reports_it():
    sd = backbone_state()
    trace = trace_model(from_public_backbone(sd, heads=HEADS, prefix="backbone."), tokens(), progress=False)
    for i in range(LAYERS):
        assert trace.layer(f"memories.{i}").gate_scale == pytest.approx(float(torch.sigmoid(sd[f"backbone.gates.{i}"])))
    assert addressing_report(trace)["measures"]["gate_scale"] == pytest.approx(
        float(torch.sigmoid(sd["backbone.gates.2"]))
    )
    fresh = {**sd, **{f"backbone.gates.{i}": torch.zeros(1) for i in range(LAYERS)}}  # as TensorBackbone starts
    trace = trace_model(from_public_backbone(fresh, heads=HEADS, prefix="backbone."), tokens(), progress=False)
    assert addressing_report(trace)["measures"]["gate_scale"] == pytest.approx(0.5)
    closed = {**sd, "backbone.gates.2": torch.tensor([-12.0])}  # a perturbed gate: the read multiplied away
    trace = trace_model(from_public_backbone(closed, heads=HEADS, prefix="backbone."), tokens(), progress=False)
    report = addressing_report(trace)
    assert report["measures"]["gate_scale"] == pytest.approx(float(torch.sigmoid(torch.tensor(-12.0))), rel=1e-4)
    assert report["verdict"] == "dead memory"


def test_remedies_name_the_public_codes_settings_for_its_models_and_ours_otherwise():
    closed = {**backbone_state(), "backbone.gates.2": torch.tensor([-12.0])}
    trace = trace_model(from_public_backbone(closed, heads=HEADS, prefix="backbone."), tokens(), progress=False)
    assert addressing_report(trace)["remedies"]["dead memory"] == PUBLIC_REMEDIES["dead memory"]
    assert "gate_conv.pointwise.bias" in PUBLIC_REMEDIES["dead memory"]
    trace.info["model"] = "Backbone"  # the same numbers from a model of this project's
    assert addressing_report(trace)["remedies"]["dead memory"] == REMEDIES["dead memory"]
    assert set(PUBLIC_REMEDIES) == set(VERDICTS) - {"healthy"}
    for failure, remedy in PUBLIC_REMEDIES.items():
        assert "\n" not in remedy and len(remedy) <= 180, failure
        assert "MemoryConfig" not in remedy and "training." not in remedy, failure  # nothing a public user lacks
        assert any(n in remedy for n in ("TensorMemoryInterface", "--lr", "FactorizedConv3d", "coord_net")), failure


def test_the_import_command_traces_the_whole_backbone(tmp_path, capsys):
    from safetensors.torch import save_file

    from tensor_memory_cli import main

    sd, x = backbone_state(), tokens()
    save_file(sd, str(tmp_path / "model.safetensors"))
    save_file({"x": x[0]}, str(tmp_path / "tokens.safetensors"))
    files = ["--weights", str(tmp_path / "model.safetensors"), "--inputs", str(tmp_path / "tokens.safetensors")]
    out = str(tmp_path / "x.trace.safetensors")
    assert main(["import", "--backbone", "--prefix", "backbone.", *files, "--out", out, "--no-progress"]) == 0
    assert "3 layer(s)" in capsys.readouterr().out
    trace = load_trace(out)
    assert trace.layer_names == ["memories.0", "memories.1", "memories.2"]
    assert trace.layer("memories.1").gate_scale == pytest.approx(float(torch.sigmoid(sd["backbone.gates.1"])))
    assert main(["import", "--backbone", *files, "--out", str(tmp_path / "y.safetensors")]) == 2
    err = capsys.readouterr().err.strip()
    assert "'gates.0'" in err and "backbone." in err and "\n" not in err  # one line: where the backbone sits
    args = ["import", "--backbone", "--prefix", "backbone.", *files, "--out", str(tmp_path / "z.safetensors")]
    assert main([*args, "--segment", "2"]) == 2
    assert "--segment" in capsys.readouterr().err


@pytest.mark.parametrize(
    "change,said",
    [
        (lambda sd: sd.pop("backbone.token_blocks.1.ln2.bias"), "'backbone.token_blocks.1.ln2.bias' is missing"),
        (lambda sd: sd.update({"backbone.mem_lns.0.weight": torch.ones(5)}), "'backbone.mem_lns.0.weight' is of shape"),
        (lambda sd: sd.update({"backbone.extra.weight": torch.ones(2)}), "unexpected entries 'backbone.extra.weight'"),
        (lambda sd: sd.update({"backbone.gates.7": torch.ones(1)}), "'backbone.gates.7'"),
        (lambda sd: sd.update({"backbone.gates.1": torch.ones(2)}), "gate must be the block's gate parameter"),
        (lambda sd: sd.update({"backbone.gates.1": torch.tensor([float("nan")])}), "gate is NaN"),
        (lambda sd: sd.pop("backbone.memory.coord_net.bias"), "'backbone.memory.coord_net.bias'"),
        (lambda sd: sd.update({"backbone.ln.bias": torch.tensor([float("inf")] * D_MODEL)}), "finite"),
    ],
)
def test_wrong_or_missing_entries_are_refused_in_one_line_naming_the_key(change, said):
    sd = backbone_state()
    change(sd)
    with pytest.raises(ValueError, match=None) as error:
        from_public_backbone(sd, heads=HEADS, prefix="backbone.")
    assert said in str(error.value) and "\n" not in str(error.value)


def test_heads_must_divide_the_width():
    with pytest.raises(ValueError, match="heads=5 does not divide the width 12"):
        from_public_backbone(backbone_state(), heads=5, prefix="backbone.")
    assert GRID == tuple(from_public_backbone(backbone_state(), heads=3, prefix="backbone.").memories["0"].config.grid)


def test_an_interface_imported_with_its_blocks_gate_returns_the_gated_read_and_records_the_gate():
    sd, x = public_state(2), tokens(7)
    plain, gated = TensorMemory.from_public_code(sd), TensorMemory.from_public_code(sd, gate=torch.tensor([0.7]))
    state = plain.init_state(1)
    with torch.no_grad(), record(gated) as rec:
        (m, (h, c)), (g, (h2, c2)) = plain(x, state), gated(x, state)
    torch.testing.assert_close(g, torch.sigmoid(torch.tensor(0.7)) * m)
    assert torch.equal(h, h2) and torch.equal(c, c2)  # the gate is outside the memory's state
    assert float(rec.layers["memory"].gate_scale) == pytest.approx(float(torch.sigmoid(torch.tensor(0.7))))
    assert gated.memory.config.public_code.output == "gated" and plain.memory.config.public_code.output == "message"
    trace = trace_model(plain, x, progress=False)  # an interface imported alone: its trace names PublicCodeMemory
    remedies = addressing_report(trace)["remedies"]
    assert trace.info["model"] == "PublicCodeMemory" and remedies  # older imports' traces read the same way
    assert all(remedies[failure] == PUBLIC_REMEDIES[failure] for failure in remedies)


VIT_MEMORY_BLOCKS = (0, 2)  # memory_every_n_layers = 2: blocks 0 and 2 call the interface, block 1 does not


def vit_state(prefix: str = "", interface: str = "shared_tensor_memory.", seed: int = 1) -> dict[str, torch.Tensor]:
    """A ViTBlockWithMemory stack's state dict (TensorMemoryViT's at prefix "" with shared_tensor_memory, a
    PatchReconModel's encoder at "encoder." with shared_memory), its patch embedding and head beside it."""
    toy = backbone_state("", seed)
    rename = {"ln1": "norm1", "ln2": "norm2"}
    sd = {f"{prefix}{interface}{k[len('memory.') :]}": v for k, v in toy.items() if k.startswith("memory.")}
    for i in range(LAYERS):
        for key in BLOCK:
            part, rest = key.split(".", 1)
            sd[f"{prefix}blocks.{i}.{rename.get(part, part)}.{rest}"] = toy[f"token_blocks.{i}.{key}"]
        if i in VIT_MEMORY_BLOCKS:
            sd[f"{prefix}blocks.{i}.ln_memory.weight"] = toy[f"mem_lns.{i}.weight"]
            sd[f"{prefix}blocks.{i}.ln_memory.bias"] = toy[f"mem_lns.{i}.bias"]
            sd[f"{prefix}blocks.{i}.memory_gate"] = toy[f"gates.{i}"] - 2.0  # TensorMemoryViT starts it at −2
    sd[f"{prefix}norm.weight"], sd[f"{prefix}norm.bias"] = toy["ln.weight"], 0.1 * toy["ln.weight"]
    sd[f"{prefix}cls_token"], sd[f"{prefix}pos_embed"] = torch.zeros(1, 1, D_MODEL), torch.zeros(1, 17, D_MODEL)
    sd["head.weight"] = torch.zeros(10, D_MODEL)
    return sd


@torch.no_grad()
def literal_vit(sd: dict, x: torch.Tensor, prefix: str = "", interface: str = "shared_tensor_memory."):
    """TensorMemoryViT's blocks by hand: attention (no mask), the memory in memory blocks, the MLP; the last norm."""
    p = {k[len(prefix) :]: v for k, v in sd.items() if k.startswith(prefix)}
    memory = TensorMemory.from_public_code(p, prefix=interface)
    d = x.shape[-1]
    state, states = memory.init_state(x.shape[0]), {}
    for i in range(LAYERS):
        b = {k: v for k, v in ((k[len(f"blocks.{i}.") :], v) for k, v in p.items() if k.startswith(f"blocks.{i}."))}
        x = attend(x, b, "norm1", causal=False)
        if i in VIT_MEMORY_BLOCKS:
            m, state = memory(F.layer_norm(x, (d,), b["ln_memory.weight"], b["ln_memory.bias"]), state)
            x, states[i] = x + torch.sigmoid(b["memory_gate"]) * m, state
        x = feed_forward(x, b, "norm2")
    return F.layer_norm(x, (d,), p["norm.weight"], p["norm.bias"]), states


@pytest.mark.parametrize("prefix,interface", [("", "shared_tensor_memory."), ("encoder.", "shared_memory.")])
def test_a_vit_stack_imports_with_its_memory_between_attention_and_mlp_in_its_memory_blocks(prefix, interface):
    sd, x = vit_state(prefix, interface), tokens(11)
    model = from_public_backbone(sd, heads=HEADS, prefix=prefix)
    want, states = literal_vit(sd, x, prefix, interface)
    with torch.no_grad():
        torch.testing.assert_close(model(x), want, atol=2e-5, rtol=1e-4)
    trace = trace_model(model, x, progress=False)
    assert trace.layer_names == ["memories.0", "memories.2"]  # block 1 has no memory
    second = trace.layer("memories.2")
    xyz = torch.from_numpy(second.mu_read[0]).view(1, 1, 1, 1, 3)
    before = F.grid_sample(states[0][0], xyz, align_corners=True, padding_mode="border").flatten()
    np.testing.assert_allclose(second.read[0], before.numpy(), atol=1e-5)  # block 2 starts where block 0 left
    gate = float(torch.sigmoid(sd[f"{prefix}blocks.2.memory_gate"]))
    assert second.gate_scale == pytest.approx(gate) and addressing_report(trace)["measures"]["gate_scale"] == (
        pytest.approx(gate)
    )


def test_a_vit_stacks_wrong_entries_are_named_as_it_names_them():
    sd = vit_state()
    del sd["blocks.1.norm2.bias"]
    with pytest.raises(ValueError, match=r"'blocks\.1\.norm2\.bias' is missing"):
        from_public_backbone(sd, heads=HEADS)
    sd = {**vit_state(), "blocks.1.memory_gate": torch.zeros(1)}  # a gate without its norm
    with pytest.raises(ValueError, match=r"'blocks\.1\.ln_memory\.weight' is missing"):
        from_public_backbone(sd, heads=HEADS)
    sd = {**vit_state(), "blocks.0.extra": torch.zeros(1)}
    with pytest.raises(ValueError, match=r"unexpected entries 'blocks\.0\.extra'.*ViTBlockWithMemory"):
        from_public_backbone(sd, heads=HEADS)
    with pytest.raises(ValueError, match=r"neither 'gates\.0' nor 'blocks\.0\.memory_gate'.*prefix 'encoder\.'"):
        from_public_backbone(vit_state("encoder.", "shared_memory."), heads=HEADS)


def test_the_import_command_takes_a_vit_stack_and_no_causal_changes_the_toy_backbones_trace(tmp_path):
    from safetensors.torch import save_file

    from tensor_memory_cli import main

    save_file(vit_state("encoder.", "shared_memory."), str(tmp_path / "recon.safetensors"))
    save_file(backbone_state(), str(tmp_path / "toy.safetensors"))
    save_file({"x": tokens(11)[0]}, str(tmp_path / "tokens.safetensors"))
    x = ["--inputs", str(tmp_path / "tokens.safetensors"), "--no-progress", "--backbone"]
    recon = ["--weights", str(tmp_path / "recon.safetensors"), "--prefix", "encoder.", *x]
    assert main(["import", *recon, "--out", str(tmp_path / "recon.trace.safetensors")]) == 0
    assert load_trace(tmp_path / "recon.trace.safetensors").layer_names == ["memories.0", "memories.2"]
    toy = ["import", "--weights", str(tmp_path / "toy.safetensors"), "--prefix", "backbone.", *x]
    assert main([*toy, "--out", str(tmp_path / "causal.safetensors")]) == 0
    assert main([*toy, "--no-causal", "--out", str(tmp_path / "open.safetensors")]) == 0
    causal, open_ = (load_trace(tmp_path / f"{n}.safetensors").layer("memories.0") for n in ("causal", "open"))
    assert not np.allclose(causal.mu_write[0], open_.mu_write[0])  # the first token sees the rest without the mask
