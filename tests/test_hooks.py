"""Hook points: reading and replacing values on the memory path, recording built on them."""

from __future__ import annotations

import copy
import math
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from tensor_memory import MemoryConfig, MemoryState, TensorMemory, hook_points, hooks, record
from tensor_memory.memory.hookpoints import POINTS

ROOT = Path(__file__).resolve().parents[1]


def layer(seed: int = 0, **overrides) -> TensorMemory:
    torch.manual_seed(seed)
    cfg = dict(token_dim=16, channels=4, grid=(3, 4, 5), chunk_size=2)
    cfg.update(overrides)
    return TensorMemory(MemoryConfig(**cfg)).eval()


def tokens(seed: int = 1, B: int = 2, N: int = 8, d: int = 16) -> torch.Tensor:
    return torch.randn(B, N, d, generator=torch.Generator().manual_seed(seed))


def test_every_point_is_named_by_its_module_path():
    model = torch.nn.Sequential(layer(), layer(1))
    points = hook_points(model)
    assert set(points) == {f"{i}.{p}" for i in (0, 1) for p in POINTS}
    assert set(hook_points(layer())) == set(POINTS)  # a bare layer: the point's name alone


def test_no_hook_gives_exactly_the_plain_forward():
    mem, x = layer(), tokens()
    plain, state = mem(x)
    with hooks(mem, {"mu_write": lambda v: None}):  # an observer that returns None changes nothing
        hooked, hooked_state = mem(x)
    assert torch.equal(plain, hooked) and torch.equal(state.h, hooked_state.h)


def test_replacing_the_addresses_equals_a_head_that_outputs_them():
    """Hooks on mu_read and mu_write set to a point p agree with a copy whose coord_head gives p for every token."""
    mem, x = layer(), tokens()
    p = torch.tensor([0.3, -0.5, 0.7])
    fixed = lambda v: p.expand_as(v).clone()  # noqa: E731
    with hooks(mem, {"mu_read": fixed, "mu_write": fixed}):
        hooked, hooked_state = mem(x)
    twin = copy.deepcopy(mem)
    with torch.no_grad():
        twin.coord_head.weight.zero_()
        twin.coord_head.bias.copy_(torch.atanh(p))
    expected, expected_state = twin(x)
    assert torch.allclose(hooked, expected, atol=1e-6) and torch.allclose(hooked_state.h, expected_state.h, atol=1e-6)
    assert not torch.allclose(hooked, mem(x)[0], atol=1e-3)  # and the hook did change the layer's output


def test_a_hook_on_the_incoming_state_replaces_it():
    mem, x = layer(), tokens()
    _, state = mem(x[:, :4])
    zero = MemoryState(torch.zeros_like(state.h), torch.zeros_like(state.c), state.pending)
    expected, _ = mem(x[:, 4:], zero)
    with hooks(mem, {"h_in": torch.zeros_like, "c_in": torch.zeros_like}):
        hooked, _ = mem(x[:, 4:], state)
    assert torch.equal(hooked, expected)
    assert not torch.allclose(mem(x[:, 4:], state)[0], expected)


def test_the_gate_hook_closes_the_read():
    mem, x = layer(gate_init=0.0), tokens()
    with hooks(mem, {"gate_scale": torch.zeros_like}):
        y, _ = mem(x)
    assert torch.equal(y, x)


def test_recording_sees_the_replaced_value_whatever_the_nesting():
    mem, x = layer(), tokens()
    moved = lambda v: v * 0.5  # noqa: E731
    with record(mem) as outer, hooks(mem, {"mu_write": moved}):
        mem(x)
    with hooks(mem, {"mu_write": moved}), record(mem) as inner:
        mem(x)
    with record(mem) as plain:
        mem(x)
    for rec in (outer, inner):
        assert torch.equal(rec[""].mu_write, plain[""].mu_write * 0.5)


def test_nested_hooks_run_outer_first():
    mem, x = layer(), tokens()
    seen = []
    with hooks(mem, {"sigma": lambda v: seen.append("outer") or v + 1.0}):
        with hooks(mem, {"sigma": lambda v: seen.append("inner") or v * 2.0}), record(mem) as rec:
            mem(x)
        with record(mem) as after_inner:
            mem(x)
    with record(mem) as plain:
        mem(x)
    assert seen == ["outer", "inner", "outer"]
    assert torch.allclose(rec[""].sigma, (plain[""].sigma + 1.0) * 2.0)
    assert torch.allclose(after_inner[""].sigma, plain[""].sigma + 1.0)


def test_bad_hooks_are_refused_with_what_to_do():
    mem, x = layer(), tokens()
    with pytest.raises(ValueError, match="no hook point 'mu_wrote'.*mu_write"):
        with hooks(mem, {"mu_wrote": lambda v: v}):
            pass
    with pytest.raises(ValueError, match="must return a tensor of shape"):
        with hooks(mem, {"content": lambda v: v[:, :1]}):
            mem(x)
    with pytest.raises(ValueError, match="'h' is read-only"):
        with hooks(mem, {"h": torch.zeros_like}):
            mem(x)
    with pytest.raises(ValueError, match="must be a function"):
        with hooks(mem, {"sigma": 3.0}):
            pass
    assert not any(p.active for p in mem.hook_points.values())  # nothing left attached after the errors


def test_two_threads_hooking_one_model_see_only_their_own_hooks():
    """Hooks live in a context variable: concurrent users of one model do not see each other's hooks."""
    mem, x = layer(), tokens(N=16)
    scales = [0.0, 1.0, 0.25, 0.75]
    expected = {}
    for s in scales:
        with hooks(mem, {"gate_scale": lambda v, s=s: torch.full_like(v, s)}):
            expected[s] = mem(x)[0]
    results, barrier = {}, threading.Barrier(len(scales))

    def run(s: float) -> None:
        with hooks(mem, {"gate_scale": lambda v: torch.full_like(v, s)}):
            barrier.wait()  # every thread is inside its block before any runs the model
            outs = [mem(x)[0] for _ in range(5)]
        results[s] = outs

    threads = [threading.Thread(target=run, args=(s,)) for s in scales]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in scales:
        assert all(torch.equal(out, expected[s]) for out in results[s])
    assert not any(p.active for p in mem.hook_points.values())


def test_a_trace_is_identical_to_the_one_captured_before_hooks_existed():
    """tests/data holds a trace of the shipped occlusion model captured with the record points of before
    (commit caa3de7, gates and cells included). The hook-based recording gives the same arrays: bit for bit on
    the CPU that captured it; on another (one with AVX-512/AMX kernels) float32 matrix products round
    differently in the last bits — 2e-7 here, a float16 volume's last bit — so the arrays are compared within
    that rounding, and the predictions exactly."""
    from analysis.traces.capture import capture
    from analysis.traces.trace import load_trace

    before = load_trace(ROOT / "tests/data/occlusion-tensor-seed7-before-hooks.trace.safetensors")
    after = capture(ROOT / "checkpoints/occlusion-tensor", seed=7, index=0, gates=True, progress=False)
    assert set(before.layers) == set(after.layers)
    for name, lay in before.layers.items():
        for field in (
            "mu_read",
            "read",
            "mu_write",
            "sigma",
            "content",
            "h",
            "c",
            "gate_i",
            "gate_f",
            "gate_o",
            "gate_g",
        ):
            a, b = np.asarray(getattr(lay, field)), np.asarray(getattr(after.layers[name], field))
            ulp = 2e-3 if a.dtype == np.float16 else 1e-5  # one float16 step, or float32 rounding
            assert a.shape == b.shape and a.dtype == b.dtype, (name, field)
            assert np.allclose(a.astype(np.float64), b.astype(np.float64), rtol=ulp, atol=ulp), (name, field)
        assert math.isclose(lay.gate_scale, after.layers[name].gate_scale, rel_tol=0, abs_tol=0)
    for key, value in before.chunks.items():
        if key == "probs":
            assert np.allclose(value, after.chunks[key], rtol=1e-5, atol=1e-6)
        else:
            assert np.array_equal(value, after.chunks[key]), key


def test_memory_layers_are_found_by_type_wherever_they_sit():
    """One finder (tensor_memory.memory_layers) serves hooks, recordings and captures: a memory inside a torch
    encoder layer, in a Sequential, or a bare layer, is found with the same path the hooks and records use."""
    from tensor_memory import attach_memory, memory_layers

    torch.manual_seed(0)
    encoder = torch.nn.TransformerEncoder(
        torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True), 2, enable_nested_tensor=False
    )
    attach_memory(encoder, MemoryConfig(token_dim=16, channels=2, grid=(2, 2, 2)), layers=[1])
    found = memory_layers(encoder)
    assert list(found) == ["layers.1.memory"] and isinstance(found["layers.1.memory"], TensorMemory)
    assert set(hook_points(encoder)) == {f"layers.1.memory.{p}" for p in POINTS}
    with torch.no_grad(), record(encoder) as rec:
        encoder(tokens(N=5))
    assert list(rec.layers) == list(found) and rec["layers.1.memory"].mu_write.shape == (2, 5, 3)
    assert list(memory_layers(layer())) == [""] and memory_layers(torch.nn.Linear(2, 2)) == {}


def test_recordings_and_traces_keep_the_points_their_one_list_names():
    """The recorded fields are derived from POINTS: a MemoryRecord and a LayerTrace hold one field per recorded
    point, and the incoming state (h_in, c_in) is the only kind left out."""
    import dataclasses

    from analysis.traces.trace import LayerTrace
    from tensor_memory.memory.hookpoints import GATE_POINTS, RECORDED_POINTS, VECTOR_POINTS, VOLUME_POINTS
    from tensor_memory.memory.recording import MemoryRecord

    assert set(POINTS) - set(RECORDED_POINTS) == {"h_in", "c_in"}
    assert set(RECORDED_POINTS) == {*VECTOR_POINTS, *VOLUME_POINTS, *GATE_POINTS, "gate_scale"}
    for record_type in (MemoryRecord, LayerTrace):
        assert {field.name for field in dataclasses.fields(record_type)} == set(RECORDED_POINTS)
    mem = layer()
    with torch.no_grad(), record(mem) as rec:
        mem(tokens())
    assert all(getattr(rec[""], field) is not None for field in RECORDED_POINTS)
