"""The layer with its variants as components (``memory/variants/``) computes bit for bit what the layer of the last
commit before that change computed, loaded here from git history beside today's: outputs, states, every recorded
value and every gradient, for every variant and option, with the fused CPU scan and without; every shipped memory
checkpoint gives the same logits, recordings and gradients; and a layer built under one seed starts from the same
weights, so training runs reproduce."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from tensor_memory import MemoryConfig, TensorMemory, load_checkpoint, record
from tensor_memory.memory import fused_scan
from tensor_memory.memory.config import FLAT_NAMES
from tensor_memory.memory.hookpoints import GATE_POINTS, RECORDED_POINTS

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "5defe7d"  # the last commit before the variants left the layer
# Where the variants' weights sat in the layer before, and sit now.
RENAMED = {
    "read_head.": "addressing.read_head.",
    "step_head.": "addressing.path.step_head.",
    "codes": "sampler.codes",
    "depthwise_bias": "update.depthwise_bias",
}


@pytest.fixture(scope="module")
def before(tmp_path_factory):
    """The ``tensor_memory`` package of commit BEFORE, as package ``tm_variants_before``."""
    spec = importlib.util.spec_from_file_location("bench_common", ROOT / "benchmarks" / "common.py")
    common = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(common)
    fused_scan.kernels()  # today's package loads the compiled scan first; the old one then shares it
    try:
        common.package_at(BEFORE, tmp_path_factory.mktemp("before"), "tm_variants_before")
    except Exception as error:  # noqa: BLE001 - a shallow clone has no history to read
        pytest.skip(f"this checkout cannot read commit {BEFORE} from git history: {error}")
    return importlib.import_module("tm_variants_before")


def old_name(name: str) -> str:
    for old, new in RENAMED.items():
        if name.startswith(new):
            return old + name[len(new) :]
    return name


def flat(config: MemoryConfig) -> dict:
    """The config as the flat keyword arguments the old MemoryConfig took."""
    out = {key: value for key, value in config.to_dict().items() if not isinstance(value, dict)}
    for old, (group, field) in FLAT_NAMES.items():
        out[old] = getattr(getattr(config, group), field)
    return out


VARIANTS = {
    "dense": {},
    "windowed chunk 3": dict(chunk_size=3, write={"mode": "windowed"}),
    "local chunk 2": dict(chunk_size=2, write={"mode": "local"}),
    "soft-argmax": dict(addressing={"coordinates": "soft_argmax"}),
    "separate heads": dict(addressing={"separate_heads": True}),
    "path-integrated chunk 2": dict(chunk_size=2, addressing={"write_path": "integrated"}),
    "jittered reads": dict(read={"jitter": 0.5}),
    "voxel codes": dict(read={"voxel_codes": True}),
    "nearest writes": dict(write={"profile": "nearest"}),
    "one tap": dict(update={"taps": 1}),
    "public code chunk 3": dict(
        chunk_size=3,
        summary_norm=False,
        sigma_min=1e-4,
        public_code=dict(
            input_norm=False,
            output="message",
            partial_chunk="pad",
            depthwise_bias=True,
            write_eps=1e-3,
            sigma_scale=2.0,
        ),
    ),
    "inits": dict(summary_init="sum", coord_init="centre", chunk_size=2),
}


def run(layer, recorder, x, weights):
    """Two calls (a stream cut inside a chunk), their recordings, and the gradients of a weighted sum of both."""
    xi = x.clone().requires_grad_()
    with recorder(layer) as rec:
        first, state = layer(xi[:, :4])
        second, state = layer(xi[:, 4:], state)
    y = torch.cat([first, second], dim=1)
    ((y * weights).sum() + state.h.sum() + state.c.sum()).backward()
    grads = {old_name(name): p.grad for name, p in layer.named_parameters()}  # None where no gradient reaches
    return y, state, rec.layers[""], xi.grad, grads


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_every_variant_computes_bit_for_bit_what_it_did_before(before, variant, fused, monkeypatch):
    monkeypatch.setenv("TENSOR_MEMORY_FUSED_SCAN", "1" if fused else "0")
    config = MemoryConfig(token_dim=16, channels=4, grid=(3, 4, 5), sigma_init=0.3, **VARIANTS[variant])
    torch.manual_seed(0)
    new = TensorMemory(config)
    torch.manual_seed(0)
    old = before.TensorMemory(before.MemoryConfig(**flat(config)))
    initial = {old_name(name): value for name, value in new.state_dict().items()}
    assert initial.keys() == old.state_dict().keys()
    assert all(torch.equal(initial[name], value) for name, value in old.state_dict().items())  # same init, same seed
    with torch.no_grad():  # move off the identity initialisation so every weight matters
        new.depthwise.add_(0.2 * torch.randn_like(new.depthwise))
        new.spread.weight.normal_(0, 0.1)
        new.coord_head.weight.mul_(3.0)
        for parameter in new.parameters():
            parameter.add_(0.01 * torch.randn_like(parameter))
    old.load_state_dict({old_name(name): value for name, value in new.state_dict().items()})
    x = torch.randn(2, 11, 16, generator=torch.Generator().manual_seed(1))
    weights = torch.randn(2, 11, 16, generator=torch.Generator().manual_seed(2))
    y_new, s_new, r_new, g_new, p_new = run(new, record, x, weights)
    y_old, s_old, r_old, g_old, p_old = run(old, before.record, x, weights)
    assert torch.equal(y_new, y_old) and torch.equal(g_new, g_old)
    for field in ("h", "c", "pending", "place"):
        a, b = getattr(s_new, field), getattr(s_old, field)
        assert (a is None and b is None) or torch.equal(a, b), field
    for field in RECORDED_POINTS:
        assert torch.equal(getattr(r_new, field), getattr(r_old, field)), field
    assert p_new.keys() == p_old.keys()
    for name, grad in p_new.items():
        assert (grad is None and p_old[name] is None) or torch.equal(grad, p_old[name]), name


SHIPPED = sorted(
    folder
    for pattern in ("*-tensor*", "long_range/*-tensor*")
    for folder in (ROOT / "checkpoints").glob(pattern)
    if json.loads((folder / "config.json").read_text()).get("model", {}).get("kind") == "tensor"
)


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda f: str(f.relative_to(ROOT / "checkpoints")))
def test_every_shipped_memory_checkpoint_computes_bit_for_bit_what_it_did_before(before, folder):
    new, old = load_checkpoint(folder), before.load_checkpoint(folder)
    batch = new.task.draw("eval", 2, 0, 0)
    results = []
    for ckpt, recorder in ((new, record), (old, before.record)):
        with recorder(ckpt.model, gates=False) as rec:
            logits, _ = ckpt.model(batch.inputs)
        logits.float().pow(2).mean().backward()
        grads = {name: p.grad for name, p in ckpt.model.named_parameters() if p.grad is not None}
        results.append((logits, rec.layers, grads))
    (l_new, r_new, g_new), (l_old, r_old, g_old) = results
    assert torch.equal(l_new, l_old)
    assert r_new.keys() == r_old.keys()
    for path in r_new:
        for field in (point for point in RECORDED_POINTS if point not in GATE_POINTS):
            assert torch.equal(getattr(r_new[path], field), getattr(r_old[path], field)), (path, field)
    assert g_new.keys() == g_old.keys() and all(torch.equal(g_new[name], g_old[name]) for name in g_new)
