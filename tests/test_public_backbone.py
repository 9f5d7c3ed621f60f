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


@torch.no_grad()
def literal_backbone(sd: dict, x: torch.Tensor, prefix: str = "backbone."):
    """The public TensorBackbone's forward, by hand: y and, per layer, (h, c) after it."""
    p = {k[len(prefix) :]: v for k, v in sd.items() if k.startswith(prefix)}
    interface = TensorMemory.from_public_code(p, prefix="memory.")  # out, (h, c) = interface(x, (h, c))
    B, N, d = x.shape
    state, states = interface.init_state(B), []
    for i in range(LAYERS):
        b = {k: p[f"token_blocks.{i}.{k}"] for k in BLOCK}
        q, k, v = F.linear(F.layer_norm(x, (d,), b["ln1.weight"], b["ln1.bias"]), b["attn.in_proj_weight"],
                           b["attn.in_proj_bias"]).chunk(3, dim=-1)  # fmt: skip
        q, k, v = (t.view(B, N, HEADS, d // HEADS).transpose(1, 2) for t in (q, k, v))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // HEADS)
        scores = scores.masked_fill(torch.ones(N, N).triu(1).bool(), float("-inf"))  # a token sees itself and before
        attended = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, N, d)
        x = x + F.linear(attended, b["attn.out_proj.weight"], b["attn.out_proj.bias"])
        hidden = F.gelu(
            F.linear(F.layer_norm(x, (d,), b["ln2.weight"], b["ln2.bias"]), b["mlp.0.weight"], b["mlp.0.bias"])
        )
        x = x + F.linear(hidden, b["mlp.3.weight"], b["mlp.3.bias"])
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
    assert GRID == tuple(from_public_backbone(backbone_state(), heads=3, prefix="backbone.").memories[0].config.grid)


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
