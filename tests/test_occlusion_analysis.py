"""Occlusion diagnostics and interventions, checked against independent runs of the model."""

from __future__ import annotations

import copy
import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis import capture
from analysis.measures.interventions import intervene, intervention_defaults, run_intervened
from analysis.measures.occlusion import (
    belief,
    belief_survival,
    frames_around,
    hit_rates,
    memory_energy,
    occlusion_memory,
)
from analysis.traces.capture import sample_batch
from tensor_memory import load_checkpoint, memory_layers, record

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
    from tensor_memory.tasks.base import derive_seed
    from tensor_memory.training.evaluation import task_with

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
    distances = sorted(np.linalg.norm(reads - write, axis=1))
    assert m["median_read_distance_voxels"] == pytest.approx((distances[1] + distances[2]) / 2)  # four reads
    sigma = layer.sigma[4] * 5 / 2  # σ in voxels along each axis of a 6³ grid
    near = [np.linalg.norm((read - write) / sigma) <= 2 for read in reads]
    assert m["reads_within_2sigma_count"] == sum(near) and m["read_within_2sigma"] == near


def test_hit_rates_count_frames_right_hidden_and_visible_apart():
    hidden = np.array([False, True, True, False, True])
    place = np.array([True, True, False, False, True])
    digit = np.array([True, False, False, True, True])
    ball = hit_rates({"occluded": hidden, "correct": place})
    assert ball == {"hidden": pytest.approx(2 / 3), "visible": pytest.approx(1 / 2)}
    both = place & digit  # frames 0 and 4
    rates = hit_rates({"occluded": hidden, "correct": place, "identity_correct": digit, "joint_correct": both})
    assert rates == {
        "hidden": pytest.approx(1 / 3),
        "visible": pytest.approx(1 / 2),
        "place_hidden": pytest.approx(2 / 3),
        "place_visible": pytest.approx(1 / 2),
        "digit_hidden": pytest.approx(1 / 3),
        "digit_visible": pytest.approx(1.0),
    }
    assert hit_rates({"occluded": np.zeros(3, bool), "correct": np.ones(3, bool)})["hidden"] is None  # none hidden


def test_frames_around_a_frame_stay_inside_the_clip():
    assert frames_around(5, 4, 12) == [3, 4, 5, 6]  # the frame at width // 2
    assert frames_around(0, 4, 12) == [0, 1, 2, 3] and frames_around(11, 4, 12) == [8, 9, 10, 11]
    assert frames_around(2, 8, 5) == [0, 1, 2, 3, 4]  # a clip shorter than the window: all of it


def test_an_intervention_starts_at_the_first_hidden_frame_around_the_write_before_it(trace):
    layer = trace.layer()
    start = intervention_defaults(trace, None, chunk=9)
    assert start["chunk"] == 5  # the first hidden frame, whatever chunk the session is on
    before = np.rint((layer.mu_write[4].astype(np.float64) + 1) * 5 / 2).astype(int)  # (x, y, z) in voxels
    assert start["region"] == tuple((max(v - 1, 0), min(v + 1, 5)) for v in before[::-1])  # (z, y, x), ends in
    assert start["write_voxel"] == tuple(np.rint((layer.mu_write[5].astype(np.float64) + 1) * 5 / 2).astype(int))
    binding = capture(BINDING, seed=0, index=3, progress=False)
    assert intervention_defaults(binding, None, chunk=7)["chunk"] == 7  # nothing hidden: the session's chunk


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


def parameters_of(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def test_gate_off_equals_a_copy_whose_gates_are_closed_and_edits_nothing(occlusion):
    _, batch = sample_batch(occlusion, 0, [0])
    model = occlusion.model
    assert len(memory_layers(model)) == 2  # both layers carry a memory; the intervention closes every gate
    before = parameters_of(model)
    off = run_intervened(model, batch.inputs, "gate_off", chunk=0)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())  # no parameter was touched
    closed = copy.deepcopy(model)
    with torch.no_grad():
        for memory in memory_layers(closed).values():
            memory.gate.fill_(-float("inf"))  # σ(γ) = 0 exactly, on the copy
        expected, _ = closed(batch.inputs)
        normal, _ = model(batch.inputs)
    assert torch.equal(off, expected)
    assert not torch.equal(off, normal)


@pytest.mark.parametrize("kind, setting", [("move_write", dict(to=(0.9, -0.9, 0.1))), ("set_sigma", dict(sigma=2.0))])
def test_a_write_moved_or_widened_changes_that_write_alone(occlusion, kind, setting):
    _, batch = sample_batch(occlusion, 0, [0])
    model, k = occlusion.model, 5
    with record(model) as plain:
        untouched = model(batch.inputs)[0]
    with record(model) as changed:
        got = run_intervened(model, batch.inputs, kind, chunk=k, **setting)
    for name, lay in plain.layers.items():
        field = "mu_write" if kind == "move_write" else "sigma"
        value = torch.tensor(setting.get("to", setting.get("sigma")))
        new, old = getattr(changed[name], field), getattr(lay, field)
        assert torch.equal(new[:, k], value.expand_as(new[:, k]))  # the chosen write, set
        assert torch.allclose(new[:, :k], old[:, :k], atol=1e-5)  # the writes before it as they were
    cut = (k + 1) * 16  # chunk k reads before it writes: its tokens and the earlier ones are unchanged
    torch.testing.assert_close(got[:, :cut], untouched[:, :cut], atol=1e-4, rtol=1e-5)
    assert (got[:, cut:] - untouched[:, cut:]).abs().max() > 1e-3
    with pytest.raises(ValueError, match=kind):
        run_intervened(model, batch.inputs, kind, chunk=k)  # the setting is required


def test_two_users_intervening_at_once_get_independent_results(occlusion):
    """The app's users share one loaded model: concurrent interventions of every kind must not mix."""
    asked = [
        ("zero", {}),
        ("gate_off", {}),
        ("zero_region", dict(region=((0, 3), (0, 6), (0, 6)))),
        ("move_write", dict(to=(0.5, 0.5, 0.5))),
        ("set_sigma", dict(sigma=0.1)),
    ]
    alone = {kind: intervene(occlusion, kind, 6, seed=2, **kw).intervened["probs"] for kind, kw in asked}
    together, barrier = {}, threading.Barrier(len(asked))

    def run(kind, kw):
        barrier.wait()
        together[kind] = [intervene(occlusion, kind, 6, seed=2, **kw).intervened["probs"] for _ in range(3)]

    threads = [threading.Thread(target=run, args=item) for item in asked]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for kind, _ in asked:
        assert all(np.array_equal(p, alone[kind]) for p in together[kind]), kind
    assert len({alone[k].tobytes() for k in alone}) == len(asked)  # the five really differ


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
    right = lambda run: (run["prediction"] == run["target"])[20:].mean()  # noqa: E731  (every query is scored)
    assert s["accuracy_change"] == pytest.approx(right(result.intervened) - right(result.baseline))
    with pytest.raises(ValueError, match="unknown intervention"):
        intervene(BINDING, "scramble")
