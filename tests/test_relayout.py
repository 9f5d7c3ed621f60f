"""The memory layer still computes what the layer of the flat package (ede4c79, before its forward was split into
one method per step) computed, loaded here from git history beside today's — outputs, states, every recorded value
and every gradient, for each write mode, a chunk of several tokens and a stream cut inside a chunk.

Two changes of arithmetic since are allowed, and no more: the trilinear read gathers the 8 voxels
around each point instead of weighting all of them (the same values; the gradient reaching the read
coordinates, and through them the input, its norm and ``coord_head``, summed in another order), and on the CPU the
scan runs as a compiled operator with its own exp/sigmoid/tanh (float32 rounding). With the pure-PyTorch
scan everything else is still bit for bit; with the operator, everything agrees to float32 rounding."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tensor_memory import MemoryConfig, TensorMemory, record
from tensor_memory.memory.hookpoints import RECORDED_POINTS

ROOT = Path(__file__).resolve().parents[1]
BEFORE = "ede4c79"  # the last commit with the flat tensor_memory/ package
FLAT_MODULES = ("memory", "limits", "config", "local_update", "hookpoints", "update", "recording")


@pytest.fixture(scope="module")
def before(tmp_path_factory):
    """The ``memory`` and ``recording`` modules of commit BEFORE, as package ``tm_before``."""
    folder = tmp_path_factory.mktemp("before")
    (folder / "tm_before").mkdir()
    (folder / "tm_before" / "__init__.py").write_text("")
    for name in FLAT_MODULES:
        shown = subprocess.run(
            ["git", "show", f"{BEFORE}:tensor_memory/{name}.py"], cwd=ROOT, capture_output=True, text=True
        )
        if shown.returncode:
            pytest.skip(f"this checkout has no commit {BEFORE} (a shallow clone?): {shown.stderr.strip()}")
        (folder / "tm_before" / f"{name}.py").write_text(shown.stdout)
    sys.path.insert(0, str(folder))
    try:
        yield importlib.import_module("tm_before.memory"), importlib.import_module("tm_before.recording")
    finally:
        sys.path.remove(str(folder))


# Reached through the read coordinates, so summed in another order since the gathered read: the coordinate head's, the
# input norm's before it (the queries are normed tokens), as is the input's. Which of them a CPU's kernels happen to
# round alike differs between machines: this one's norm.weight and norm.bias differ in the last bit, another's did not.
READ_COORDINATE_GRADIENTS = ("coord_head.weight", "coord_head.bias", "norm.weight", "norm.bias")


def rounded(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal to float32 rounding: within 1e-6 of the values' own scale (at least 1), as sums in another order are."""
    if a.shape != b.shape or a.numel() == 0:
        return a.shape == b.shape
    a, b = a.detach(), b.detach()
    return float((a - b).abs().max()) <= 1e-6 * max(1.0, float(a.abs().max()))


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("write_mode, chunk_size", [("dense", 1), ("windowed", 3), ("local", 2)])
def test_the_layer_computes_bit_for_bit_what_it_did_before_the_relayout(
    before, write_mode, chunk_size, fused, monkeypatch
):
    monkeypatch.setenv("TENSOR_MEMORY_FUSED_SCAN", "1" if fused else "0")
    old_memory, old_recording = before
    settings = dict(
        token_dim=16, channels=4, grid=(3, 4, 5), chunk_size=chunk_size, write_mode=write_mode, sigma_init=0.3
    )
    torch.manual_seed(0)
    new = TensorMemory(MemoryConfig.from_dict(settings))  # the old layer's flat names, read into their groups
    with torch.no_grad():  # move off the identity initialisation so every weight matters
        new.depthwise.add_(0.2 * torch.randn_like(new.depthwise))
        new.spread.weight.normal_(0, 0.1)
        new.coord_head.weight.mul_(3.0)
    old = old_memory.TensorMemory(old_memory.MemoryConfig(**settings))
    old.load_state_dict(new.state_dict())
    x = torch.randn(2, 11, 16, generator=torch.Generator().manual_seed(1))
    weights = torch.randn(2, 11, 16, generator=torch.Generator().manual_seed(2))
    runs = {}
    for name, layer, recorder in (("new", new, record), ("old", old, old_recording.record)):
        xi = x.clone().requires_grad_()
        with recorder(layer) as rec:
            first, state = layer(xi[:, :4])  # a stream cut inside a chunk: the rest arrives in a second call
            second, state = layer(xi[:, 4:], state)
        ((torch.cat([first, second], dim=1) * weights).sum() + state.h.sum() + state.c.sum()).backward()
        runs[name] = (
            torch.cat([first, second], dim=1),
            state,
            rec.layers[""],
            xi.grad,
            {key: p.grad.clone() for key, p in layer.named_parameters()},
        )
        layer.zero_grad(set_to_none=True)
    (y_new, s_new, r_new, g_new, p_new), (y_old, s_old, r_old, g_old, p_old) = runs["new"], runs["old"]
    same = rounded if fused else torch.equal
    assert same(y_new, y_old) and rounded(g_new, g_old)
    for field in ("h", "c", "pending"):
        assert same(getattr(s_new, field), getattr(s_old, field)), field
    for field in RECORDED_POINTS:
        assert same(getattr(r_new, field), getattr(r_old, field)), field
    assert p_new.keys() == p_old.keys()
    for k in p_new:
        assert (rounded if k in READ_COORDINATE_GRADIENTS or fused else same)(p_new[k], p_old[k]), k
