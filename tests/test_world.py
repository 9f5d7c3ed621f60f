"""Read-outs of the world from the memory (analysis.measures.world): the fits, and the shipped models."""

from pathlib import Path

import numpy as np
import pytest

from analysis.figures.world import decoded_map_figure, write_position_figure
from analysis.measures.world import (
    apply_linear,
    decoded_map,
    fit_linear,
    map_probe,
    r_squared,
    world_readout,
    write_position_fit,
)
from analysis.traces.capture import capture
from tensor_memory import load_checkpoint

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"


def test_fit_linear_recovers_an_exact_map_and_r_squared_is_the_textbook_one():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 3))
    truth = np.array([[1.0, -2.0], [0.5, 0.0], [0.0, 3.0]])
    y = x @ truth + np.array([4.0, -1.0])
    weights = fit_linear(x, y, ridge=0.0)
    assert np.allclose(weights[:-1], truth) and np.allclose(weights[-1], [4.0, -1.0])
    assert r_squared(y, apply_linear(weights, x)) == pytest.approx(1.0)
    assert r_squared(y, np.broadcast_to(y.mean(0), y.shape)) == pytest.approx(0.0)
    noisy = y + rng.normal(size=y.shape)
    expected = 1 - ((noisy - y) ** 2).sum() / ((noisy - noisy.mean(0)) ** 2).sum()
    assert r_squared(noisy, y) == pytest.approx(expected)


@pytest.fixture(scope="module")
def occlusion():
    return load_checkpoint(CHECKPOINTS / "occlusion-tensor")


def test_write_position_fit_scores_unseen_samples(occlusion):
    fit = write_position_fit(occlusion, samples=16, eval_seeds=(1,))
    assert fit["weights"].shape == (4, 2) and fit["fit_frames"] > 0
    assert fit["r2_visible"] <= 1.0 and fit["r2_hidden"] <= 1.0
    with pytest.raises(ValueError, match="fit and score on different samples"):
        write_position_fit(occlusion, samples=4, fit_seed=1, eval_seeds=(1,))
    trace = capture(occlusion, seed=1, progress=False)
    layer = trace.layer(fit["layer"])
    fig = write_position_figure(fit, layer.mu_write, trace.meta["positions"], trace.meta["occluded"])
    assert len(fig.data) == 2 and np.allclose(
        np.c_[fig.data[1].y, fig.data[1].x], apply_linear(fit["weights"], layer.mu_write.astype(np.float64))
    )


def test_map_probe_and_the_decoded_map(occlusion):
    ckpt = load_checkpoint(CHECKPOINTS / "map_building-tensor")
    probe = map_probe(ckpt, samples=8, eval_seeds=(1,))
    assert probe["weights"].shape == (ckpt.model.backbone.config.memory.channels + 1, 1)
    assert 0 < probe["cells_observed"] < 1
    # The shipped memory holds the map: a linear read of a cell's h gives its occupancy on unseen samples
    # (chance 0.5; the memory trained from scratch, before the address scaffold, got 0.533).
    assert probe["accuracy_observed"] > 0.95
    decoded = decoded_map(ckpt, probe, seed=1, index=0)
    size = ckpt.task.config.map_size
    assert all(v.shape == (size, size) for v in decoded.values())
    assert ((decoded["decoded"] >= 0) & (decoded["decoded"] <= 1)).all()
    fig = decoded_map_figure(decoded)
    wrong = ((decoded["decoded"] > 0.5) != decoded["map"].astype(bool)) & decoded["observed"].astype(bool)
    assert np.array_equal(fig.data[2].z, wrong.astype(float))
    with pytest.raises(ValueError, match="for map_building checkpoints"):
        map_probe(occlusion)


def test_a_task_without_a_read_out_has_none(monkeypatch):
    binding = load_checkpoint(CHECKPOINTS / "coordinate_binding-tensor")
    assert world_readout(binding) is None
    occlusion = load_checkpoint(CHECKPOINTS / "occlusion-tensor")
    from analysis.measures import world

    monkeypatch.setitem(world.READOUTS, "occlusion", lambda ckpt, layer: ("fitted", ckpt, layer))
    assert world_readout(occlusion, "blocks.0.memory") == ("fitted", occlusion, "blocks.0.memory")  # the task's own
