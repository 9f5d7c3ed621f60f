"""Accuracy against distance (tensor_memory.training.distance, ``eval --distance``): each task's distances agree with
a count done by hand, the binned accuracies add up to the evaluation's own, the reads-off control is the hooked
model's, and binding's distractors move the queries without changing what they ask."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tensor_memory import load_checkpoint
from tensor_memory.memory import memory_layers
from tensor_memory.memory.hooking import hooks, reads_off
from tensor_memory.tasks import make_task
from tensor_memory.training import evaluate
from tensor_memory.training.distance import bin_width, distance_counts, distance_evaluation
from tensor_memory_cli import main

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"


def test_occlusion_distance_counts_frames_since_the_ball_was_last_seen():
    task = make_task("occlusion", {"frames": 20, "occlusion_length": 9})
    batch = task.sample(16, seed=3)
    distance = task.distances(batch)
    P = task.config.tokens_per_frame
    for b in range(16):
        hidden = batch.meta["occluded"][b].tolist()
        for t in range(task.config.frames):
            last_seen = max(s for s in range(t + 1) if not hidden[s])  # frame 0 and 1 are always visible
            assert distance[b, t * P + P - 1] == t - last_seen
            assert (distance[b, t * P : t * P + P - 1] == -1).all()  # only the frame's last token is scored


def test_map_distance_counts_tokens_since_the_cells_last_glimpse():
    task = make_task("map_building", {"observations": 24, "queries": 10})
    batch = task.sample(12, seed=5)
    distance = task.distances(batch)
    T, p = 24, task.config.patch
    assert (distance[:, :T] == -1).all()
    for b in range(12):
        for q, (row, col) in enumerate(batch.meta["query_cells"][b].tolist()):
            glimpses = [
                t
                for t, (r, c) in enumerate(batch.meta["obs_positions"][b].tolist())
                if r <= row < r + p and c <= col < c + p
            ]
            assert distance[b, T + q] == (T + q - glimpses[-1] if glimpses else -1)
    assert (distance[:, T:] == -1).any() and (distance[:, T:] > 0).any()  # both kinds occur in this batch


def test_binding_distractors_move_the_queries_and_keep_what_they_ask():
    plain = make_task("coordinate_binding", {"writes": 10})
    long = make_task("coordinate_binding", {"writes": 10, "distractors": 30})
    a, b = plain.sample(8, seed=9), long.sample(8, seed=9)
    assert long.tokens == plain.tokens + 30 == b.targets.shape[1]
    assert torch.equal(a.inputs["key"][:, :10], b.inputs["key"][:, :10])  # the same writes
    assert torch.equal(a.targets[:, 10:], b.targets[:, 40:])  # the same queries and answers, 30 tokens later
    assert torch.equal(a.inputs["key"][:, 10:], b.inputs["key"][:, 40:])
    filler = slice(10, 40)
    assert (b.inputs["value"][:, filler] == long.config.values).all() and (b.inputs["is_query"][:, filler] == 0).all()
    assert not b.mask[:, filler].any()
    distance = long.distances(b)
    expected = 40 + torch.arange(4)[None, :] - b.meta["nearest"]
    assert torch.equal(distance[:, 40:], expected) and (distance[:, :40] == -1).all()
    assert torch.equal(plain.distances(a)[:, 10:], expected - 30)


@pytest.fixture(scope="module")
def occlusion():
    return load_checkpoint(CHECKPOINTS / "occlusion-tensor")


def test_binned_counts_add_up_to_the_evaluations_accuracies(occlusion):
    model, task = occlusion.model, occlusion.task
    counts = distance_counts(model, task, seed=4, batches=2, batch_size=16)
    metrics = evaluate(model, task, seed=4, batches=2, batch_size=16)
    hidden = [c for d, c in counts.items() if d >= 1]
    assert sum(c for c, _ in hidden) / sum(n for _, n in hidden) == metrics["occluded_accuracy"]
    assert counts[0][0] / counts[0][1] == metrics["visible_accuracy"]
    assert sorted(counts) == list(range(task.config.occlusion_length + 1))
    with hooks(model, reads_off(list(memory_layers(model)))):
        off = evaluate(model, task, seed=4, batches=2, batch_size=16)
    result = distance_evaluation(occlusion, seed=4, batches=2, batch_size=16)
    rows = result["rows"]
    assert [r["from"] for r in rows] == [r["to"] for r in rows] == sorted(counts)
    assert sum(r["reads_off"] * r["scored"] for r in rows[1:]) / sum(r["scored"] for r in rows[1:]) == pytest.approx(
        off["occluded_accuracy"], abs=1e-12
    )
    assert rows[-1]["accuracy"] > 0.9 > 0.2 > rows[-1]["reads_off"]  # the shipped memory carries the hidden ball
    assert result["unit"] == "frames" and result["tokens_per_unit"] == 16 and result["W"] == 24


def test_bins_are_single_distances_up_to_32_then_sixteen_rows():
    assert bin_width(0) == bin_width(31) == 1
    assert bin_width(32) == 3 and bin_width(255) == 16
    assert -(-(255 + 1) // bin_width(255)) <= 16


def test_eval_distance_prints_the_table_and_json(capsys):
    code = main(
        [
            "eval",
            "--checkpoint",
            str(CHECKPOINTS / "coordinate_binding-base"),
            "--distance",
            "--batches",
            "1",
            "--batch-size",
            "8",
            "--json",
        ]
    )
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["distance"]["unit"] == "tokens"
    assert all("reads_off" not in row for row in result["distance"]["rows"])  # no memory, no control
    assert sum(row["scored"] for row in result["distance"]["rows"]) == 8 * 4
    code = main(
        [
            "eval",
            "--checkpoint",
            str(CHECKPOINTS / "occlusion-tensor"),
            "--distance",
            "--batches",
            "1",
            "--batch-size",
            "4",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0 and "distance (frames)" in out and "reads off" in out and "1.5 frames" in out


@pytest.mark.parametrize("extra", [["--stream"], []])
def test_eval_distance_refuses_what_it_cannot_measure_in_one_line(capsys, extra):
    code = main(["eval", "--checkpoint", str(CHECKPOINTS / "no_harm-tensor"), "--distance", *extra])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert ("two different evaluations" if extra else "applies to occlusion, map_building") in err


def test_the_distance_figure_draws_each_curve_at_its_bins_middles_in_percent():
    from analysis.figures.distance import distance_figure

    rows = [{"from": 0, "to": 0, "accuracy": 1.0}, {"from": 1, "to": 3, "accuracy": 0.25}]
    fig = distance_figure({"tensor": rows, "tensor, reads off": [{**rows[0], "accuracy": 0.5}]}, "frames", "t", 9.6)
    assert list(fig.data[0].x) == [0.0, 2.0] and list(fig.data[0].y) == [100.0, 25.0]
    assert fig.data[1].line.dash == "dot" and fig.data[0].line.dash == "solid"
    assert fig.layout.shapes[0].x0 == 9.6 and "frames since" in fig.layout.xaxis.title.text
    with pytest.raises(ValueError, match="at least one curve"):
        distance_figure({}, "frames", "t")


def test_eval_param_changes_the_task_of_one_evaluation(capsys):
    from tensor_memory.training.evaluation import evaluate_checkpoint

    folder = CHECKPOINTS / "coordinate_binding-tensor"
    code = main(
        [
            "eval",
            "--checkpoint",
            str(folder),
            "--batches",
            "1",
            "--batch-size",
            "8",
            "--json",
            "--param",
            "distractors=30",
        ]
    )
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["params"]["distractors"] == 30
    expected = evaluate_checkpoint(load_checkpoint(folder), 0, 1, 8, task_params={"distractors": 30})["metrics"]
    assert result["metrics"] == expected
    assert (
        main(
            [
                "eval",
                "--checkpoint",
                str(folder),
                "--distance",
                "--batches",
                "1",
                "--batch-size",
                "8",
                "--json",
                "--param",
                "distractors=30",
            ]
        )
        == 0
    )
    rows = json.loads(capsys.readouterr().out)["distance"]["rows"]
    assert rows[0]["from"] >= 31  # every answer is at least the 30 distractors and one token back
    assert main(["eval", "--checkpoint", str(folder), "--sweep", "--param", "distractors=30"]) == 2
    assert "give --param without them" in capsys.readouterr().err
    assert main(["eval", "--checkpoint", str(folder), "--param", "values=7"]) == 2  # a shape the model lacks
    assert "change the shapes" in capsys.readouterr().err
