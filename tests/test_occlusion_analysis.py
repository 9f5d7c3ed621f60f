"""Occlusion diagnostics and interventions, checked against independent runs of the model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from analysis import capture
from analysis.capture import sample_batch
from analysis.interventions import gates_closed, intervene, memory_layers, run_intervened
from analysis.occlusion import belief, belief_survival, memory_energy, occlusion_memory
from tensor_memory import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
OCCLUSION = ROOT / "checkpoints" / "occlusion-tensor"
BINDING = ROOT / "checkpoints" / "coordinate_binding-tensor"


@pytest.fixture(scope="module")
def trace(occlusion):
    return capture(occlusion, seed=1, index=4, occlusion_start=5, progress=False)


def test_belief_is_the_prediction_distribution_over_the_frame(trace):
    b = belief(trace)
    T = trace.num_chunks
    assert b["probs"].shape == (T, 16, 16)
    assert np.allclose(b["probs"].sum((1, 2)), 1.0, atol=1e-5)
    for t in range(T):  # the predicted cell is the distribution's argmax, as (y, x)
        assert tuple(b["predicted"][t]) == np.unravel_index(b["probs"][t].argmax(), (16, 16))
        y, x = trace.meta["positions"][t]
        assert b["truth_probability"][t] == b["probs"][t, y, x]
    assert b["occluded"].tolist() == [False] * 5 + [True] * 4 + [False] * 3
    assert b["correct"][~b["occluded"]].all()  # every visible frame is right for this checkpoint


def test_belief_survival_counts_each_hidden_frame(occlusion):
    s = belief_survival(occlusion, lengths=(0, 3), samples=32, seed=2)
    assert s["by_offset"][0] == [] and s["occluded_accuracy"][0] is None
    assert len(s["by_offset"][3]) == 3
    # Independent count for L = 3 from a direct run on the same batch.
    from tensor_memory.evaluation import task_with
    from tensor_memory.tasks.base import derive_seed

    task = task_with(occlusion, {"occlusion_length": 3})
    batch = task.sample(32, derive_seed("survival", 2, 3))
    with torch.no_grad():
        logits, _ = occlusion.model(batch.inputs)
    hit = (logits.argmax(-1) == batch.targets)[batch.mask].view(32, 12)
    occluded = batch.meta["occluded"]
    assert s["occluded_accuracy"][3] == pytest.approx(hit[occluded].float().mean().item())
    assert s["visible_accuracy"][3] == pytest.approx(hit[~occluded].float().mean().item())
    first = occluded & ~torch.roll(occluded, 1, dims=1)
    assert s["by_offset"][3][0] == pytest.approx(hit[first].float().mean().item())
    with pytest.raises(ValueError, match="occlusion"):
        belief_survival(load_checkpoint(BINDING))


def test_memory_energy_and_the_last_visible_write(trace):
    layer = trace.layer()
    energy = memory_energy(layer)
    assert energy.shape == (trace.num_chunks, *layer.grid)
    assert np.allclose(energy[3], (layer.h[3].astype(np.float32) ** 2).sum(0))
    m = occlusion_memory(trace)
    assert m["last_visible"] == 4 and m["occluded_chunks"] == [5, 6, 7, 8]
    write = (layer.mu_write[4].astype(np.float64) + 1) * 5 / 2  # voxel units at 6 voxels per axis
    assert np.allclose(m["write_voxel"], write)
    reads = (layer.mu_read[5:9].astype(np.float64) + 1) * 5 / 2
    assert np.allclose(m["read_distance_voxels"], np.linalg.norm(reads - write, axis=1))


def test_zeroing_the_memory_equals_a_run_whose_state_was_zeroed_by_hand(occlusion):
    _, batch = sample_batch(occlusion, 0, [0, 1])
    model = occlusion.model
    got = run_intervened(model, batch.inputs, "zero", chunk=6)
    with torch.no_grad():  # by hand: run 6 frames, zero both layers' memory states, run the rest
        first, state = model({k: v[:, :96] for k, v in batch.inputs.items()})
        for layer in state.layers:
            layer.memory.h.zero_(), layer.memory.c.zero_()
        rest, _ = model({k: v[:, 96:] for k, v in batch.inputs.items()}, state)
        untouched, _ = model(batch.inputs)
    assert torch.equal(got, torch.cat([first, rest], 1))
    # Nothing before the intervention changes (a stream cut equals one pass up to float rounding),
    # and the zeroed memory does reach the outputs after it.
    torch.testing.assert_close(got[:, :96], untouched[:, :96], atol=1e-4, rtol=1e-5)
    assert (got[:, 96:] - untouched[:, 96:]).abs().max() > 0.1


def test_zeroing_a_region_only_touches_that_region(occlusion):
    _, batch = sample_batch(occlusion, 0, [0])
    model = occlusion.model
    everything = run_intervened(model, batch.inputs, "zero_region", chunk=3, region=((0, 6), (0, 6), (0, 6)))
    assert torch.equal(everything, run_intervened(model, batch.inputs, "zero", chunk=3))
    with pytest.raises(ValueError, match="0 <= start < end <= 6"):
        run_intervened(model, batch.inputs, "zero_region", chunk=3, region=((0, 7), (0, 6), (0, 6)))
    with pytest.raises(ValueError, match="chunk must be in"):
        run_intervened(model, batch.inputs, "zero", chunk=12)


def test_gate_off_removes_the_read_and_restores_the_model(occlusion):
    _, batch = sample_batch(occlusion, 0, [0])
    model = occlusion.model
    memories = [memory for _, memory in memory_layers(model).values()]
    assert len(memories) == 2  # both layers carry a memory; the intervention closes every gate
    gammas = [memory.gate.detach().clone() for memory in memories]
    off = run_intervened(model, batch.inputs, "gate_off", chunk=0)
    assert all(torch.equal(m.gate.detach(), g) for m, g in zip(memories, gammas))  # restored
    with torch.no_grad(), gates_closed(memories):
        assert all(torch.sigmoid(m.gate).item() == 0.0 for m in memories)
        expected, _ = model(batch.inputs)
    assert torch.equal(off, expected)
    with torch.no_grad():
        normal, _ = model(batch.inputs)
    assert not torch.equal(off, normal)


def test_intervene_reports_the_effect_side_by_side():
    result = intervene(BINDING, "zero", chunk=20, seed=0, index=3)
    s = result.summary()
    assert s["chunks_after"] == 4 and s["region"] is None
    assert result.baseline["scored"][20:].all() and not result.baseline["scored"][:20].any()
    assert not result.changed[:20].any()  # before the intervention nothing changes
    # The binding memory is used: wiping it before the queries changes predictions.
    assert s["chunks_changed"] >= 1
    drop = result.target_probability("baseline") - result.target_probability("intervened")
    assert s["target_probability_drop"] == pytest.approx(np.nanmean(drop[20:]))
    with pytest.raises(ValueError, match="unknown intervention"):
        intervene(BINDING, "scramble")
