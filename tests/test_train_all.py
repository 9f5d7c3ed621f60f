"""checkpoints/train_all.py ships, per (task, backbone), the healthy run with the best validation accuracy."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("train_all", ROOT / "checkpoints" / "train_all.py")
train_all = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train_all)


def _run(lr, accuracy, verdicts=None, error=False, task="occlusion"):
    run = {"task": task, "lr": lr, "validation": {"accuracy": accuracy}}
    if verdicts is not None:
        run["addressing_verdicts"] = verdicts
    if error:
        run["error"] = ["diverged"]
    return run


def test_a_healthy_memory_beats_a_more_accurate_collapsed_one():
    collapsed = _run(2e-3, 1.0, {"a": "sigma explosion", "b": "healthy"})
    healthy = _run(1e-3, 0.99, {"a": "healthy", "b": "healthy"})
    assert train_all.best([collapsed, healthy]) is healthy
    assert train_all.best([healthy, collapsed]) is healthy


def test_without_a_healthy_run_accuracy_decides_and_a_failed_run_loses():
    low, high = _run(1e-3, 0.5, {"a": "coordinate collapse"}), _run(2e-3, 0.6, {"a": "coordinate collapse"})
    assert train_all.best([low, high]) is high
    failed = _run(1e-3, -1.0, error=True)
    assert train_all.best([failed, low]) is low
    baseline_a, baseline_b = _run(1e-3, 0.90, {}), _run(2e-3, 0.91, {})  # no memory: accuracy alone
    assert train_all.best([baseline_a, baseline_b]) is baseline_b


def test_masked_patches_runs_are_chosen_by_psnr():
    sharp = {
        "task": "masked_patches",
        "lr": 1e-3,
        "validation": {"psnr": 28.0, "ssim": 0.70},
        "addressing_verdicts": {},
    }
    blurred = {
        "task": "masked_patches",
        "lr": 2e-3,
        "validation": {"psnr": 27.0, "ssim": 0.75},
        "addressing_verdicts": {},
    }
    assert train_all.best([blurred, sharp]) is sharp


def test_the_windowed_variant_takes_the_local_baselines_window():
    kind, sets = train_all.variant("masked_patches", "tensor_windowed")
    assert kind == "tensor" and sets == ["model.window=7"]
    assert train_all.variant("masked_patches", "local") == ("local", [])


def test_a_finished_run_is_reused_not_retrained(tmp_path):
    out = tmp_path / "no_harm-base-lr1e-3"
    out.mkdir()
    (out / train_all.RUN_RECORD).write_text('{"task": "no_harm", "lr": 0.001, "validation": {"accuracy": 1.0}}')
    assert train_all.run("no_harm", "base", "1e-3", tmp_path, threads=1, reuse=True)["lr"] == 0.001
