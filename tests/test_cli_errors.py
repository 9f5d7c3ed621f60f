"""Every expected failure of the command line is one line on stderr and a non-zero exit; --debug shows all."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from safetensors import safe_open
from safetensors.torch import save_file

import analysis.traces.capture as capture_module
from tensor_memory_cli import main

ROOT = Path(__file__).resolve().parents[1]
OCCLUSION = ROOT / "checkpoints" / "occlusion-tensor"


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.mark.parametrize(
    "error, words",
    [
        (
            OSError(28, "No space left on device", "/data/x"),
            "/data/x: no space left on the disk it is on; free some space",
        ),
        (MemoryError(), "out of memory"),
        (
            RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"),
            "out of memory",
        ),
        (KeyError("positions"), "unexpected KeyError: 'positions' (run again with --debug"),
    ],
)
def test_failures_become_one_line_and_debug_shows_the_traceback(monkeypatch, tmp_path, capsys, error, words):
    def failing(*args, **kwargs):
        raise error

    monkeypatch.setattr(capture_module, "run_recorded", failing)
    args = ["trace", "--checkpoint", str(OCCLUSION), "--out", str(tmp_path / "t.safetensors"), "--no-progress"]
    assert main(args) == 2
    line = one_line(capsys)
    assert line.startswith("tensor-memory trace: error: ") and words in line
    with pytest.raises(type(error)):
        main(args + ["--debug"])


def test_eval_refuses_weights_whose_outputs_are_not_finite(tmp_path, capsys):
    """Weights of 3e38 are finite, so they load; the outputs they give are not, and eval says so."""
    broken = Path(shutil.copytree(ROOT / "checkpoints" / "no_harm-tensor", tmp_path / "broken"))
    weights = broken / "model.safetensors"
    with safe_open(str(weights), framework="pt") as handle:
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}
        metadata = handle.metadata()
    save_file(
        {k: v.clamp(-1, 1) * 3e38 if v.is_floating_point() else v for k, v in tensors.items()},
        weights,
        metadata=metadata,
    )
    assert main(["eval", "--checkpoint", str(broken), "--batches", "1", "--batch-size", "4"]) == 2
    assert "NaN or infinite" in one_line(capsys)


@pytest.mark.parametrize(
    "args, words",
    [
        (
            ["train", "--task", "no_harm", "--backbone", "tensor", "--set", "model.memory.channels=1000000000"],
            "MemoryConfig.channels must be at most",
        ),
        (
            ["train", "--task", "no_harm", "--backbone", "tensor", "--set", "training.batch_size=100000000"],
            "TrainConfig.batch_size must be at most",
        ),
        (
            ["eval", "--checkpoint", str(ROOT / "checkpoints" / "no_harm-tensor"), "--batch-size", "100000000"],
            "batch_size must be at most",
        ),
        (
            ["trace", "--checkpoint", str(OCCLUSION), "--param", "frames=100000000"],
            "OcclusionConfig.frames must be at most",
        ),
        (["demo", "--grid", "1000"], "MemoryConfig.grid[D] must be at most 256"),
        (["demo", "--tokens", "0"], "--tokens must be an integer in [1, 65,536]"),
    ],
)
def test_hostile_settings_are_refused_in_one_line_at_once(tmp_path, capsys, args, words):
    import time

    if args[0] in ("train", "trace"):
        args = args + ["--out", str(tmp_path / ("run" if args[0] == "train" else "t.safetensors"))]
    start = time.perf_counter()
    assert main(args) == 2
    assert time.perf_counter() - start < 5
    assert words in one_line(capsys)
    assert not any(tmp_path.iterdir())  # nothing was written


def test_trace_out_paths_that_cannot_be_written_are_refused_before_any_work(tmp_path, capsys):
    a_file = tmp_path / "file.txt"
    a_file.write_text("keep me")
    for out, words in (
        (tmp_path, "is a folder"),
        (a_file / "child.safetensors", "is not a folder"),
        (tmp_path / "missing" / "t.safetensors", "does not exist"),
        (Path("/proc/t.safetensors"), "cannot write in /proc"),
    ):
        assert main(["trace", "--checkpoint", str(OCCLUSION), "--out", str(out)]) == 2
        assert words in one_line(capsys)
    assert a_file.read_text() == "keep me" and sorted(p.name for p in tmp_path.iterdir()) == ["file.txt"]
