"""Two checkpoints side by side: metrics on the same samples and the addressing of each memory."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from analysis.figures.compare import comparison_figure
from analysis.measures import addressing
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


def test_each_threshold_is_the_verdicts_own_in_the_units_of_its_row():
    """The σ row read "2.10" (voxel spacings) beside "below 0.25": the same unit, now said; the numbers come from the
    thresholds the verdicts use, so the table cannot say one and the verdict apply another."""
    measures = {"sigma_voxels": 2.1, "write_spread_voxels": 3.0, "sigma_extent": 0.3, "gate_scale": 0.6}
    summary = {"name": "a", "task": "occlusion", "backbone": "tensor", "samples": 2, "metrics": {}}
    summary["addressing"] = {"verdict": "healthy", "measures": measures}
    rows = {row["measure"]: row for row in comparison_rows(summary, {**summary, "name": "b"})}
    sigma = rows["median σ (voxels)"]
    assert (sigma["a"], sigma["meaning"]) == ("2.10", f"below {addressing.SIGMA_COLLAPSE_VOXELS:g} voxel: σ collapse")
    assert addressing.SIGMA_COLLAPSE_VOXELS == 0.25  # in voxel spacings, as median_sigma_voxels gives σ
    spread = rows["write spread (voxels)"]["meaning"]
    assert spread == f"below {addressing.COLLAPSE_SPREAD_VOXELS:g} voxel: coordinate collapse"
    assert rows["median σ (share of the grid)"]["meaning"].startswith(f"above {addressing.SIGMA_EXPLOSION_EXTENT:.0%}")
    assert rows["σ(γ) read gate"]["meaning"] == f"below {addressing.DEAD_GATE_SCALE:g}: dead memory"
    assert rows["reads within 2σ of a write"]["meaning"].startswith(f"below {addressing.UNREAD_FRACTION:.0%}")
