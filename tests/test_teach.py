"""The teaching walkthrough: one chunk recomputed by the checkpoint's own memory layer.

Fed a trace's recorded addressing, :func:`analysis.measures.teach.mechanism_step` must give the recorded
read, gates and new state (to the float16 the trace keeps volumes in), and its pieces must agree
with the mechanism's definitions: the read is the trilinear mix of its corner voxels, the write
volume is the Gaussian of step 4 (tensor_memory/memory/), the update follows c ← f⊙c + i⊙g, h ← o⊙tanh(c).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from analysis import capture
from analysis.figures import teach as teach_figures
from analysis.measures import teach
from tensor_memory import TensorMemory, load_checkpoint
from tensor_memory.memory.config import WriteVariant
from tensor_memory.memory.geometry import in_voxels

CHECKPOINT = Path(__file__).resolve().parents[1] / "checkpoints" / "coordinate_binding-tensor"


@pytest.fixture(scope="module")
def setup():
    ckpt = load_checkpoint(CHECKPOINT)
    trace = capture(ckpt, seed=2, progress=False)
    name = trace.layer_names[-1]
    return trace, name, teach.memory_module(ckpt.model, name)


@pytest.mark.parametrize("chunk", [0, 5, -1])
def test_recorded_chunk_is_reproduced(setup, chunk):
    trace, name, memory = setup
    k = chunk % trace.num_chunks
    layer = trace.layer(name)
    step, agreement = teach.walkthrough(trace, memory, name, k)
    scale = float(np.abs(layer.h[k].astype(np.float32)).max())
    assert agreement <= 2e-3 * max(scale, 1.0)  # float16 volumes in the trace
    np.testing.assert_allclose(step.read, layer.read[k], atol=2e-3 * max(scale, 1.0))
    for gate in "ifog":
        recorded = getattr(layer, f"gate_{gate}")[k].astype(np.float32)
        np.testing.assert_allclose(step.gates[gate], recorded, atol=2e-3)
    assert step.gate_scale == pytest.approx(layer.gate_scale, rel=1e-6)


def test_pieces_follow_the_mechanism(setup):
    trace, name, memory = setup
    k = 4
    step, _ = teach.walkthrough(trace, memory, name, k)
    # the read mixes the corner voxels of h before the chunk with weights summing to one
    assert sum(w for _, w in step.corners) == pytest.approx(1.0)
    mixed = sum(w * step.h_prev[:, z, y, x] for (z, y, x), w in step.corners)
    np.testing.assert_allclose(step.read, mixed, atol=1e-5)
    # the write volume is content ⊗ a Gaussian of width σ around μ_write
    D, H, W = step.grid
    zz, yy, xx = np.meshgrid(*(np.linspace(-1, 1, n) for n in (D, H, W)), indexing="ij")
    x, y, z = step.mu_write
    gaussian = np.exp(-((xx - x) ** 2 + (yy - y) ** 2 + (zz - z) ** 2) / (2 * step.sigma**2))
    np.testing.assert_allclose(step.write, step.content[:, None, None, None] * gaussian, rtol=1e-4, atol=1e-6)
    # the LSTM update
    g = step.gates
    c_new = g["f"] * step.c_prev + g["i"] * g["g"]
    np.testing.assert_allclose(step.c_new, c_new, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(step.h_new, g["o"] * np.tanh(c_new), rtol=1e-4, atol=1e-5)
    units = teach.voxel_units(step)
    np.testing.assert_allclose(units["write"], in_voxels(step.mu_write, step.grid))


def test_step_sizes_are_the_norms_the_walkthrough_shows(setup):
    trace, name, memory = setup
    step, _ = teach.walkthrough(trace, memory, name, 4)
    sizes = teach.step_sizes(step)
    assert sizes["read"] == pytest.approx(np.sqrt((step.read.astype(np.float64) ** 2).sum()))
    assert sizes["content"] == pytest.approx(np.sqrt((step.content.astype(np.float64) ** 2).sum()))
    peak = max(
        np.sqrt(sum(float(step.write[c, z, y, x]) ** 2 for c in range(step.write.shape[0])))
        for z, y, x in np.ndindex(*step.grid)
    )  # voxel by voxel, over the channels
    assert sizes["write_peak"] == pytest.approx(peak, rel=1e-6)
    before, after = (np.sqrt((h.astype(np.float64) ** 2).sum()) for h in (step.h_prev, step.h_new))
    assert (sizes["h_before"], sizes["h_after"]) == (pytest.approx(before, rel=1e-6), pytest.approx(after, rel=1e-6))
    assert sizes["h_change"] == pytest.approx(after - before, rel=1e-5, abs=1e-6)


def test_hand_set_step_on_an_empty_memory(setup):
    _, _, memory = setup
    C, grid = memory.config.channels, memory.config.grid
    zeros = np.zeros((C, *grid), dtype=np.float32)
    content = np.zeros(C, dtype=np.float32)
    content[3] = 2.0
    step = teach.mechanism_step(
        memory, zeros, zeros, np.array([0.2, -0.1, 0.5]), np.array([1.0, -1.0, 0.0]), 0.3, content
    )
    # an empty memory reads zeros, so the message is out_proj's bias, scaled by σ(γ)
    assert np.abs(step.read).max() == 0.0
    assert step.added_norm == pytest.approx(step.gate_scale * float(memory.out_proj.bias.detach().norm()), rel=1e-5)
    assert np.abs(step.write[[c for c in range(C) if c != 3]]).max() == 0.0
    z, y, x = np.unravel_index(np.abs(step.write[3]).argmax(), grid)  # the write's voxel: x = 1, y = -1, z = 0
    assert (y, x) == (0, grid[2] - 1) and abs(z - (grid[0] - 1) / 2) <= 0.5
    with pytest.raises(ValueError, match="sigma"):
        teach.mechanism_step(memory, zeros, zeros, np.zeros(3), np.zeros(3), 0.0, content)
    with pytest.raises(ValueError, match="h_prev"):
        teach.mechanism_step(memory, zeros[:1], zeros, np.zeros(3), np.zeros(3), 0.3, content)


def test_read_corners_at_a_voxel_centre_and_the_border():
    assert teach.read_corners(np.array([-1.0, -1.0, -1.0]), (3, 3, 3)) == [((0, 0, 0), 1.0)]
    corners = dict(teach.read_corners(np.array([0.25, 1.0, 5.0]), (3, 3, 3)))  # clamped to the border
    assert corners == pytest.approx({(2, 2, 1): 0.75, (2, 2, 2): 0.25})


def test_figures_of_a_step(setup):
    trace, name, memory = setup
    step, _ = teach.walkthrough(trace, memory, name, 3)
    fig = teach_figures.addressing_figure(step, "t")
    assert fig.layout.title.text == "t" and {"read", "write", "1σ", "2σ"} <= {d.name for d in fig.data}
    bars = teach_figures.gates_bar_figure(step)
    assert bars.data[0].y[1] == pytest.approx(float(step.gates["f"].mean()))
    assert set(teach_figures.update_figures(step, (0, 0, 0))) == {"before", "after", "change"}
    np.testing.assert_allclose(teach_figures.vector_figure(step.read, "r").data[0].y, step.read, rtol=1e-6)


def test_walkthrough_follows_a_local_update_memory():
    """With write mode "local" the walkthrough runs the local update the layer runs, not the dense one."""
    ckpt = load_checkpoint(CHECKPOINT)
    for name, module in list(ckpt.model.named_modules()):  # each memory rebuilt as a local update, same weights
        if isinstance(module, TensorMemory):
            config = dataclasses.replace(module.config, write=WriteVariant(mode="local", window_k=1.0))
            local = TensorMemory(config)
            local.load_state_dict(module.state_dict())
            parent, _, attribute = name.rpartition(".")
            setattr(ckpt.model.get_submodule(parent), attribute, local.eval())
    trace = capture(ckpt, seed=2, progress=False)
    name = trace.layer_names[-1]
    memory = teach.memory_module(ckpt.model, name)
    layer = trace.layer(name)
    local = 0
    for k in range(20):  # every write (a ±1σ box between voxel centres holds none and writes nothing)
        step, agreement = teach.walkthrough(trace, memory, name, k)
        assert agreement <= 2e-3 * max(float(np.abs(layer.h[k].astype(np.float32)).max()), 1.0)
        written = np.abs(step.write).sum(0) > 0  # the box: outside it the write is exactly zero
        if written.any() and not written.all():
            local += 1
            kept = np.all(step.h_new == step.h_prev, axis=0)  # cells far from the write keep h bit for bit
            assert kept.any() and not kept.all()
    assert local >= 2  # the property was checked on writes that touch part of the grid
