"""tensor_memory.memory.measures (what training logs) against independent computations, and the training log."""

import json

import numpy as np
import pytest
import torch

from analysis.figures.training import addressing_history_figure
from analysis.traces.training_log import addressing_history
from tensor_memory import MemoryConfig, TensorMemory, record
from tensor_memory.memory.measures import (
    boundary_fraction,
    layer_measures,
    median_sigma_voxels,
    read_write_distances,
    write_spread_voxels,
)
from tensor_memory.training import train
from tensor_memory.training.log import read_training_log
from tensor_memory.training.loop import addressing_during_training

GRID = (3, 5, 4)  # (D, H, W): spacings 2/3, 1/2, 1 along x, y, z


def voxels(mu):  # (x, y, z) in [-1, 1] → voxel indices, written out per axis
    mu = np.asarray(mu, dtype=np.float64)
    return np.stack(
        [(mu[..., 0] + 1) * (4 - 1) / 2, (mu[..., 1] + 1) * (5 - 1) / 2, (mu[..., 2] + 1) * (3 - 1) / 2], -1
    )


def test_measures_match_a_direct_computation():
    rng = np.random.default_rng(0)
    mu_read = rng.uniform(-1, 1, (3, 6, 3))
    mu_write = rng.uniform(-1, 1, (3, 5, 3))
    mu_write[0, 0] = [0.99, 0.0, 0.0]  # one pinned write
    sigma = rng.uniform(0.1, 0.9, (3, 5))
    w = voxels(mu_write).reshape(-1, 3)
    assert write_spread_voxels(torch.tensor(mu_write), GRID) == pytest.approx(np.sqrt(w.var(0).sum()))
    distances = []
    for s in range(3):
        r, ws = voxels(mu_read[s]), voxels(mu_write[s])
        for k in range(1, 6):  # read k sees writes 0 … k-1
            distances.append(min(np.linalg.norm(r[k] - ws[j]) for j in range(k)))
    got = read_write_distances(torch.tensor(mu_read), torch.tensor(mu_write), GRID).numpy()
    assert np.allclose(np.sort(got), np.sort(distances))
    pinned = np.concatenate(
        [(np.abs(mu_read.reshape(-1, 3)) > 0.98).any(-1), (np.abs(mu_write.reshape(-1, 3)) > 0.98).any(-1)]
    )
    assert boundary_fraction(torch.tensor(mu_read), torch.tensor(mu_write), grid=GRID) == pytest.approx(pinned.mean())
    assert pinned.mean() > 0
    mean_spacing = np.mean([2 / 3, 2 / 4, 2 / 2])
    assert median_sigma_voxels(torch.tensor(sigma), GRID) == pytest.approx(np.median(sigma / mean_spacing))


def test_an_axis_of_two_voxels_counts_neither_as_a_face_to_be_pinned_at_nor_as_a_voxel_spacing():
    sheet = (2, 8, 8)  # (D, H, W): map building's sheet, voxel centres at z = ±1 only
    on_layers = torch.tensor([[[0.1, 0.2, -1.0], [0.3, -0.4, 1.0]]])  # both on a layer of voxel centres
    at_x_face = torch.tensor([[[1.0, 0.0, -1.0], [0.0, 0.0, 0.5]]])  # one pinned at the x face
    assert boundary_fraction(on_layers, grid=sheet) == 0.0
    assert boundary_fraction(on_layers, grid=(3, 8, 8)) == 1.0  # three deep: z = ±1 is a face like any other
    assert boundary_fraction(at_x_face, grid=sheet) == 0.5
    assert boundary_fraction(on_layers, at_x_face, grid=sheet) == 0.25  # pooled
    sigma = torch.tensor([0.1, 0.2, 0.3])
    assert median_sigma_voxels(sigma, sheet) == pytest.approx(0.2 / (2 / 7))  # the in-plane spacing, not z's 2.0
    assert median_sigma_voxels(sigma, (2, 2, 2)) == pytest.approx(0.2 / 2)  # nothing spans: every axis


def test_collapsed_writes_measure_zero_spread_and_layer_measures_has_every_field():
    torch.manual_seed(0)
    mem = TensorMemory(MemoryConfig(token_dim=8, channels=2, grid=(3, 3, 3), coord_init="centre"))
    with torch.no_grad(), record(mem) as rec:
        mem(torch.randn(2, 6, 8))
    m = layer_measures(rec.layers[""], (3, 3, 3))
    assert m["write_spread_voxels"] == 0.0 and m["boundary_fraction"] == 0.0
    assert m["read_write_distance_voxels"] == 0.0  # every read sits where every write did
    assert m["gate_scale"] == pytest.approx(torch.sigmoid(torch.tensor(-2.0)).item())
    gates = rec.layers[""]
    assert m["gate_f_mean"] == pytest.approx(gates.gate_f.double().mean().item())
    assert set(m) >= {"sigma_voxels", "gate_i_mean", "gate_o_mean"}


def config(kind="tensor", steps=4):
    model = {"kind": kind, "dim": 16, "layers": 1, "heads": 2, "positions": "none"}
    if kind == "tensor":
        model["memory"] = {"channels": 2, "grid": [2, 3, 3]}
    return {
        "task": {"name": "coordinate_binding", "params": {"writes": 3, "queries": 2}},
        "model": model,
        "training": {
            "steps": steps,
            "batch_size": 4,
            "eval_every": 2,
            "eval_batches": 1,
            "log_every": 1,
            "warmup_steps": 1,
        },
    }


def test_training_logs_addressing_at_every_evaluation_and_the_history_reads_it_back(tmp_path):
    train(config(), tmp_path, progress=False)
    entries = read_training_log(tmp_path)
    evaluations = [e for e in entries if "val_accuracy" in e]
    assert [e["step"] for e in evaluations] == [2, 4]
    for entry in evaluations:
        measures = entry["addressing"]["backbone.blocks.0.memory"]
        assert {
            "write_spread_voxels",
            "sigma_voxels",
            "read_write_distance_voxels",
            "boundary_fraction",
            "gate_scale",
            "gate_i_mean",
            "gate_f_mean",
            "gate_o_mean",
        } <= set(measures)
    history = addressing_history(entries)
    steps, values = history["layers"]["backbone.blocks.0.memory"]["gate_scale"]
    assert steps.tolist() == [2, 4] and values.tolist() == [
        e["addressing"]["backbone.blocks.0.memory"]["gate_scale"] for e in evaluations
    ]
    fig = addressing_history_figure(history)
    assert len(fig.data) >= 6 and "blocks.0.memory" in fig.layout.title.text
    assert not fig.layout.shapes
    shaded = addressing_history_figure(history, scaffold_steps=3)  # the scaffold's steps, shaded in every panel
    panels = len(shaded.layout.annotations) - 1  # one title per panel, plus the scaffold's note
    assert len(shaded.layout.shapes) == panels and all((s.x0, s.x1) == (0, 3) for s in shaded.layout.shapes)
    assert any("withdrawn by step 3" in a.text for a in shaded.layout.annotations)


def test_the_logged_measures_are_those_of_the_recorded_validation_samples(tmp_path):
    from tensor_memory.tasks import TaskModel
    from tensor_memory.tasks.base import derive_seed
    from tensor_memory.training import resolve
    from tensor_memory.training.loop import ADDRESSING_SAMPLES

    task, backbone, _ = resolve(config())
    torch.manual_seed(0)
    model = TaskModel(task, backbone)
    logged = addressing_during_training(model, task, seed=3)
    batch = task.sample(ADDRESSING_SAMPLES, derive_seed("val-addressing", 3, 0))
    with torch.no_grad(), record(model) as rec:
        model(batch.inputs)
    assert logged == {"backbone.blocks.0.memory": layer_measures(rec["backbone.blocks.0.memory"], (2, 3, 3))}
    assert model.training  # the model's mode is restored


def test_a_model_without_memory_logs_no_addressing(tmp_path):
    train(config("base"), tmp_path, progress=False)
    history = addressing_history(read_training_log(tmp_path / "train_log.jsonl"))
    assert history["layers"] == {} and len(history["val_accuracy"][0]) == 2
    with pytest.raises(ValueError, match="no addressing measures"):
        addressing_history_figure(history)


@pytest.mark.parametrize(
    "text, phrase",
    [
        ('{"step": 1}\n{"step": 2', "line 2: not JSON"),
        ('{"loss": 1}\n', "line 1: expected an object with an integer 'step'"),
        ("[1, 2]\n", "line 1: expected"),
        (b"\xff\xfe\n", "line 1: not JSON"),
    ],
)
def test_a_damaged_log_is_refused_with_the_line(tmp_path, text, phrase):
    path = tmp_path / "train_log.jsonl"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(ValueError, match=phrase):
        read_training_log(path)


def test_a_missing_log_and_measures_logged_as_null(tmp_path):
    with pytest.raises(FileNotFoundError, match="no training log"):
        read_training_log(tmp_path)
    lines = [
        {"step": 5, "val_accuracy": 0.5, "addressing": {"m": {"sigma_voxels": None, "gate_scale": 0.2}}},
        {"step": 3, "addressing": {"m": {"sigma_voxels": 1.5, "gate_scale": 0.1}}},
    ]
    (tmp_path / "train_log.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    history = addressing_history(read_training_log(tmp_path))
    assert history["layers"]["m"]["sigma_voxels"][0].tolist() == [3]  # the null is left out, not drawn as 0
    assert history["layers"]["m"]["gate_scale"][0].tolist() == [3, 5]  # in step order
