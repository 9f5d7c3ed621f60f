"""The shipped long-range checkpoints (checkpoints/long_range/): each loads, keeps to the equal-state
rule of its task, and re-measures to its record in long_range.json — accuracy by distance for the diagnostics, the
streamed perplexities for the language models."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tensor_memory import load_checkpoint
from tensor_memory.training.distance import distance_evaluation
from tensor_memory.training.streamed import stream_evaluation

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = ROOT / "checkpoints" / "long_range"
RECORD = json.loads((SHIPPED / "long_range.json").read_text())
CHECK = RECORD["evaluation"]["check"]
FOLDERS = sorted(folder for folder in SHIPPED.iterdir() if (folder / "config.json").exists())


def test_every_shipped_long_range_checkpoint_has_its_record():
    assert len(FOLDERS) >= 6
    assert {folder.name for folder in FOLDERS} <= set(RECORD["runs"])
    for folder in FOLDERS:
        assert RECORD["runs"][folder.name]["checkpoint"] == f"checkpoints/long_range/{folder.name}"
        assert (folder / "model.safetensors").stat().st_size < 5_000_000  # a few MB


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda folder: folder.name)
def test_a_long_range_checkpoint_re_measures_to_its_record(folder):
    ckpt = load_checkpoint(folder)
    recorded = RECORD["runs"][folder.name]["check"]
    if ckpt.task.name == "language_modelling":
        result = stream_evaluation(ckpt, rows=CHECK["rows"], tokens=CHECK["tokens"], progress=False)
        for run in ("carried", "reset", "reads off, carried"):
            if run in recorded:
                assert result[run]["perplexity"] == pytest.approx(recorded[run]["perplexity"], rel=1e-3), run
        return
    result = distance_evaluation(ckpt, CHECK["seed"], CHECK["batches"], CHECK["batch_size"], progress=False)
    assert [row["scored"] for row in result["rows"]] == [row["scored"] for row in recorded["rows"]]
    for ours, theirs in zip(result["rows"], recorded["rows"], strict=True):
        for run in ("accuracy", "reads_off"):
            if run in theirs:
                assert ours[run] == pytest.approx(theirs[run], abs=2e-3), (ours["from"], run)


@pytest.mark.parametrize("task", ["occlusion", "map_building", "coordinate_binding", "language_modelling"])
def test_the_local_baseline_holds_about_as_many_numbers_as_the_memory(task):
    budgets = {
        kind: RECORD["runs"][f"{task}-{kind}"]["state_budget"]["total_state_numbers"] for kind in ("tensor", "local")
    }
    assert abs(budgets["local"] - budgets["tensor"]) <= 0.1 * budgets["tensor"]
    if task != "language_modelling":  # XL's cached segment holds as many numbers as local's window
        assert RECORD["runs"][f"{task}-xl"]["state_numbers"] == RECORD["runs"][f"{task}-local"]["state_numbers"]
