"""The fused CPU scan (memory/fused_scan.py) against the pure-PyTorch scan it replaces, the fallback to that
scan, and the scan under autocast (the mix's products in bf16, the state and gate maths in float32)."""

import importlib.util
import subprocess
import warnings
from pathlib import Path

import pytest
import torch

from tensor_memory import MemoryConfig, TensorMemory
from tensor_memory.memory import build_scan, fused_scan, update
from tensor_memory.memory.update import convlstm_scan, depthwise3d, expand_write

ROOT = Path(__file__).resolve().parents[1]
BEFORE_AUTOCAST = "5bdf7fd"  # the last commit whose update.py knew nothing of autocast or the fused scan

needs_fused = pytest.mark.skipif(fused_scan.kernels() is None, reason="the fused scan could not be built here")


def scan_inputs(K=4, B=3, C=5, grid=(3, 4, 5), offset=False, seed=0):
    """Float32 scan inputs of the sizes given, nonzero h0 and c0, and an offset volume when asked."""
    g = torch.Generator().manual_seed(seed)

    def draw(*shape, scale=0.5):
        return (torch.randn(*shape, generator=g) * scale).requires_grad_()

    D, H, W = grid
    return [draw(K, B, n, C, scale=0.7) for n in grid] + [
        draw(B, D, H, W, C),
        draw(B, D, H, W, C),
        draw(3, C, 3),
        draw(4 * C, 2 * C),
        draw(4 * C, scale=0.2),
        draw(D, H, W, 2 * C, scale=0.3) if offset else None,
    ]


def run_scan(inputs, switch, monkeypatch, outputs=("hs", "cs"), seed=1):
    """hs, cs and the gradients of every input of a weighted sum of ``outputs``, with the fused scan on ("1") or off."""
    monkeypatch.setenv(fused_scan.SWITCH, switch)
    hs, cs = convlstm_scan(inputs[:3], *inputs[3:8], offset=inputs[8])
    g = torch.Generator().manual_seed(seed)
    loss = sum(
        (out * torch.randn(out.shape, generator=g)).sum() for name, out in (("hs", hs), ("cs", cs)) if name in outputs
    )
    grads = torch.autograd.grad(loss, [t for t in inputs if t is not None])
    return [hs.detach(), cs.detach(), *grads]


def assert_agree(ours, theirs, names):
    """Each within 1e-5 of its own scale (at least 1), as benchmarks/memory_step.py holds the layer."""
    for name, a, b in zip(names[: len(ours)], ours, theirs, strict=True):  # names of the inputs that took part
        difference = (a - b).abs().max().item()
        assert difference < 1e-5 * max(1.0, b.abs().max().item()), f"{name} differs by {difference:.2e}"


NAMES = ["hs", "cs", "fz", "fy", "fxc", "h0", "c0", "taps", "mix", "bias", "offset"]


@needs_fused
@pytest.mark.parametrize(
    "K, B, C, grid, offset, outputs",
    [
        (4, 3, 5, (3, 4, 5), False, ("hs", "cs")),
        (1, 2, 16, (6, 6, 6), True, ("hs", "cs")),  # one chunk, the toy size's channels
        (6, 2, 8, (5, 2, 7), True, ("hs",)),  # cs unused: its gradient never arrives
        (3, 4, 3, (2, 6, 3), False, ("cs",)),  # hs unused
        (2, 1, 32, (4, 4, 8), True, ("hs", "cs")),
    ],
)
def test_fused_scan_equals_the_pytorch_scan(K, B, C, grid, offset, outputs, monkeypatch):
    inputs = scan_inputs(K, B, C, grid, offset, seed=K + B)
    fused = run_scan(inputs, "1", monkeypatch, outputs)
    plain = run_scan(inputs, "0", monkeypatch, outputs)
    assert_agree(fused, plain, NAMES)
    monkeypatch.setenv(fused_scan.SWITCH, "1")
    with torch.no_grad():  # the forward alone keeps nothing and gives the same states
        hs, cs = convlstm_scan(inputs[:3], *inputs[3:8], offset=inputs[8])
    assert torch.equal(hs, fused[0]) and torch.equal(cs, fused[1])


def perturbed_layer(config: MemoryConfig, seed=0) -> TensorMemory:
    torch.manual_seed(seed)
    layer = TensorMemory(config)
    with torch.no_grad():  # away from the identity initialisation, so every weight matters
        layer.depthwise.add_(0.3 * torch.randn_like(layer.depthwise))
        layer.spread.weight.normal_(0, 0.2)
        if layer.update.depthwise_bias is not None:
            layer.update.depthwise_bias.normal_(0, 0.1)
    return layer


def layer_run(layer, x, weights):
    """Output, final state and every parameter's gradient of one forward+backward."""
    layer.zero_grad(set_to_none=True)
    y, state = layer(x)
    (y * weights).sum().backward()
    return [y.detach(), state.h, state.c] + [p.grad for p in layer.parameters()]


@needs_fused
@pytest.mark.parametrize(
    "chunk_size, grid, depthwise_bias", [(1, (6, 6, 6), False), (4, (4, 5, 3), True), (3, (2, 7, 4), False)]
)
def test_the_layer_is_the_same_with_either_scan(chunk_size, grid, depthwise_bias, monkeypatch):
    layer = perturbed_layer(
        MemoryConfig(
            token_dim=24, channels=8, grid=grid, chunk_size=chunk_size, public_code={"depthwise_bias": depthwise_bias}
        )
    )
    x, weights = torch.randn(3, 12, 24), torch.randn(3, 12, 24)
    monkeypatch.setenv(fused_scan.SWITCH, "1")
    fused = layer_run(layer, x, weights)
    monkeypatch.setenv(fused_scan.SWITCH, "0")
    plain = layer_run(layer, x, weights)
    assert_agree(fused, plain, ["y", "h", "c"] + [name for name, _ in layer.named_parameters()])


def test_the_switch_and_other_inputs_choose_the_pytorch_scan(monkeypatch):
    calls = []
    monkeypatch.setattr(update, "fused_scan", lambda *args: calls.append(args))
    inputs = scan_inputs()
    monkeypatch.setenv(fused_scan.SWITCH, "0")
    hs, _ = convlstm_scan(inputs[:3], *inputs[3:8])
    assert not calls and hs.shape == (4, 3, 3, 4, 5, 5)
    double = [t.detach().double() for t in inputs[:8]]  # not float32: the fused scan does not take it
    monkeypatch.setenv(fused_scan.SWITCH, "1")
    assert not fused_scan.runs_on(double)
    convlstm_scan(double[:3], *double[3:])
    assert not calls
    if fused_scan.kernels() is not None:
        convlstm_scan(inputs[:3], *inputs[3:8])
        assert len(calls) == 1


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_inputs_take_the_pytorch_scan():
    assert not fused_scan.runs_on([t.detach().cuda() for t in scan_inputs()[:8]])


def test_a_failed_build_warns_once_in_one_line_and_falls_back(tmp_path, monkeypatch):
    broken = tmp_path / "broken.cpp"
    broken.write_text("this is not C++\n")
    monkeypatch.setattr(fused_scan, "SOURCE", broken)
    monkeypatch.setattr(fused_scan, "build_directory", lambda: tmp_path / "build")
    monkeypatch.setenv(fused_scan.SWITCH, "1")
    fused_scan.kernels.cache_clear()
    try:
        with pytest.warns(RuntimeWarning) as caught:
            assert fused_scan.kernels() is None
        message = str(caught[0].message)
        assert len(caught) == 1 and "\n" not in message, message
        assert "could not be built" in message and "pure-PyTorch scan" in message
        assert message.endswith(fused_scan.BUILD_COMMAND) and "error" in message
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # once: a second scan neither rebuilds nor warns
            inputs = scan_inputs(seed=7)
            hs, cs = convlstm_scan(inputs[:3], *inputs[3:8])
        plain = run_scan(inputs, "0", monkeypatch)
        assert torch.equal(hs.detach(), plain[0])
    finally:
        fused_scan.kernels.cache_clear()  # later tests load the real operator again


def test_build_command_reports_and_never_fails(monkeypatch, capsys):
    monkeypatch.setattr(fused_scan, "kernels", lambda: None)
    assert build_scan.main([]) == 0
    assert "not built" in capsys.readouterr().out


def scan_before_autocast(tmp_path):
    """update.py's convlstm_scan as it was before this change, from git history."""
    try:
        source = subprocess.run(
            ["git", "show", f"{BEFORE_AUTOCAST}:tensor_memory/memory/update.py"],
            cwd=ROOT,
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip(f"needs the git history ({BEFORE_AUTOCAST})")
    path = tmp_path / "update_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("update_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.convlstm_scan


@pytest.mark.parametrize("offset", [False, True])
def test_without_autocast_the_pytorch_scan_is_bit_identical_to_before(offset, tmp_path, monkeypatch):
    before = scan_before_autocast(tmp_path)
    inputs = scan_inputs(K=3, B=2, C=4, grid=(3, 5, 4), offset=offset, seed=11)
    ours = run_scan(inputs, "0", monkeypatch)
    hs, cs = before(inputs[:3], *inputs[3:8], offset=inputs[8])
    g = torch.Generator().manual_seed(1)
    loss = sum((out * torch.randn(out.shape, generator=g)).sum() for out in (hs, cs))
    theirs = [hs.detach(), cs.detach(), *torch.autograd.grad(loss, [t for t in inputs if t is not None])]
    for name, a, b in zip(NAMES[: len(ours)], ours, theirs, strict=True):
        assert torch.equal(a, b), name


def by_hand(inputs, dtype):
    """One chunk of the update written out, the mix's operands rounded to ``dtype``, everything else float32."""
    fz, fy, fxc, h0, c0, taps, mix, bias = [t.detach() for t in inputs[:8]]
    write = expand_write(fz[0], fy[0], fxc[0])  # (B, D, H, W, C)
    x = torch.cat([write, depthwise3d(h0, taps), torch.ones_like(write[..., :1])], dim=-1)
    weight = torch.cat([mix, bias[:, None]], dim=1)
    pre = (x.to(dtype) @ weight.to(dtype).t()).float()  # (B, D, H, W, 4C)
    i, f, o, g = pre.chunk(4, dim=-1)
    c = torch.sigmoid(f) * c0 + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


@pytest.mark.parametrize("switch", ["1", "0"])
def test_under_autocast_the_mix_runs_in_bf16_and_the_state_in_float32(switch, monkeypatch):
    if switch == "1" and fused_scan.kernels() is None:
        pytest.skip("the fused scan could not be built here")
    monkeypatch.setenv(fused_scan.SWITCH, switch)
    inputs = scan_inputs(K=1, B=2, C=8, grid=(4, 3, 5), seed=5)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        hs, cs = convlstm_scan(inputs[:3], *inputs[3:8])
    assert hs.dtype == cs.dtype == torch.float32
    bf16, f32 = by_hand(inputs, torch.bfloat16), by_hand(inputs, torch.float32)
    for ours, low, full in zip((hs[0], cs[0]), bf16, f32, strict=True):
        # Rounding x differently in its last float32 bit can move a bf16 operand by one step now and then,
        # so "the bf16 computation" is: nearly every value equal to it to float32 rounding, few to float32's.
        assert ((ours - low).abs() <= 1e-5).float().mean() > 0.99
        assert ((ours - full).abs() <= 1e-5).float().mean() < 0.5
    (grad_mix,) = torch.autograd.grad(hs.sum(), inputs[6])  # the backward's products run in bf16 too
    assert grad_mix.dtype == torch.float32


def test_the_layer_under_bf16_autocast_stays_near_float32(monkeypatch):
    """bf16 keeps 8 significant bits (a relative rounding of 2^-9 ≈ 0.002 per operand): the 2C+1 = 33 terms of a
    gate's pre-activation then carry about 0.01 of error, which the recurrence carries from chunk to chunk.
    Measured over 24 chunks at C=16, 6³, with either scan: |Δh| ≤ 0.0096, |Δc| ≤ 0.021, |Δy| ≤ 0.0007, and the
    gradients of the scan's weights and the write content within 1.3% of their largest value; the bounds are
    about three times that. (Small gradients that are sums of cancelling terms move more: σ's bias by 12-40%.)"""
    layer = perturbed_layer(MemoryConfig(token_dim=64, channels=16, grid=(6, 6, 6), chunk_size=1))
    x, weights = torch.randn(4, 24, 64), torch.randn(4, 24, 64)
    full = layer_run(layer, x, weights)
    for switch in ("1", "0"):
        monkeypatch.setenv(fused_scan.SWITCH, switch)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = layer_run(layer, x, weights)
        assert low[0].dtype == low[1].dtype == low[2].dtype == torch.float32  # y, h, c
        for name, a, b, bound in zip(("y", "h", "c"), low[:3], full[:3], (0.002, 0.03, 0.06), strict=True):
            assert (a - b).abs().max() < bound, name
        grads = {name: (a, b) for (name, _), a, b in zip(layer.named_parameters(), low[3:], full[3:], strict=True)}
        for name in ("depthwise", "mix.weight", "mix.bias", "content.weight"):
            a, b = grads[name]
            assert (a - b).abs().max() < 0.04 * b.abs().max(), name
        assert not torch.equal(low[1], full[1])  # autocast did change something
