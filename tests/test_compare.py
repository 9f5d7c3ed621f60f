"""Two checkpoints side by side: metrics on the same samples and the addressing of each memory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from analysis.figures.compare import comparison_figure
from analysis.measures.addressing import addressing_report
from analysis.measures.compare import checkpoint_summary, comparison_note, comparison_rows, sample_metrics
from analysis.traces.capture import capture_many, sample_batch
from tensor_memory import load_checkpoint

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
SAMPLES = 6


@pytest.fixture(scope="module")
def tensor():
    return load_checkpoint(CHECKPOINTS / "occlusion-tensor")


@pytest.fixture(scope="module")
def base():
    return load_checkpoint(CHECKPOINTS / "occlusion-base")


def test_sample_metrics_count_the_task_metrics_on_the_samples(base):
    metrics = sample_metrics(base, seed=1, samples=SAMPLES, occlusion_length=3)
    task, batch = sample_batch(base, 1, list(range(SAMPLES)), occlusion_length=3)
    with torch.no_grad():
        logits, _ = base.model(batch.inputs)
    hit = (logits.argmax(-1) == batch.targets)[batch.mask]
    assert metrics["accuracy"] == pytest.approx(hit.float().mean().item())
    assert set(metrics) >= {"accuracy", "occluded_accuracy", "visible_accuracy"}
    with pytest.raises(ValueError):
        sample_metrics(base, samples=0)


def test_summaries_and_comparison(tensor, base):
    mine = checkpoint_summary(tensor, seed=1, samples=SAMPLES)
    theirs = checkpoint_summary(base, seed=1, samples=SAMPLES)
    expected = addressing_report(capture_many(tensor, 1, list(range(SAMPLES)), cell_state=False, progress=False))
    assert mine["addressing"]["verdict"] == expected["verdict"]
    assert mine["addressing"]["measures"]["write_spread_voxels"] == pytest.approx(
        expected["measures"]["write_spread_voxels"], rel=1e-5
    )
    assert theirs["addressing"] is None and theirs["memory_layers"] == []
    assert comparison_note(mine, theirs) is None
    rows = {row["measure"]: row for row in comparison_rows(mine, theirs)}
    assert rows["addressing verdict"]["occlusion-base"] == "no memory layers"
    assert rows["accuracy"]["occlusion-tensor"] == f"{mine['metrics']['accuracy']:.1%}"
    fig = comparison_figure(mine, theirs)
    assert [d.name for d in fig.data] == ["occlusion-tensor", "occlusion-base"]
    assert list(fig.data[1].y)[0] == pytest.approx(theirs["metrics"]["accuracy"])


def test_different_tasks_are_noted_and_the_same_one_twice_gets_two_columns(tensor):
    binding = checkpoint_summary(load_checkpoint(CHECKPOINTS / "coordinate_binding-tensor"), samples=2)
    mine = checkpoint_summary(tensor, samples=2)
    assert "different tasks" in comparison_note(mine, binding)
    rows = comparison_rows(mine, mine)
    assert set(rows[0]) == {"measure", "occlusion-tensor", "occlusion-tensor (2)", "meaning"}
