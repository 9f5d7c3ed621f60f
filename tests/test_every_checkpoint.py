"""Every shipped checkpoint with every command that applies to it: ``eval``, ``trace``, ``report``, ``audit`` and the
app opened on it (``tensor-memory app --checkpoint``). Where a command does not apply (a trace of a checkpoint with
no memory layer, the causality audit of a bidirectional encoder), it refuses in one line that names the commands that
do."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from app_helpers import CHECKPOINTS, shown, start

from analysis import load_trace
from app.cli import CHECKPOINT_ENV
from tensor_memory.pretrained.checkpoint import is_pretrained_memory
from tensor_memory_cli import main

SHIPPED = sorted(folder for folder in CHECKPOINTS.iterdir() if (folder / "config.json").exists()) + sorted(
    folder for folder in (CHECKPOINTS / "long_range").iterdir() if (folder / "config.json").exists()
)


def one_line(text: str) -> str:
    assert text.strip() and "\n" not in text.strip(), text
    return text.strip()


def test_every_checkpoint_folder_is_covered():
    assert len(SHIPPED) == 31 + 14 and {
        json.loads((f / "config.json").read_text()).get("kind") == "pretrained_memory" for f in SHIPPED
    } == {True, False}


@pytest.mark.parametrize("folder", SHIPPED, ids=lambda folder: folder.relative_to(CHECKPOINTS).as_posix())
def test_every_command_works_on_the_checkpoint_or_names_the_ones_that_do(folder: Path, tmp_path, capsys, monkeypatch):
    config = json.loads((folder / "config.json").read_text())
    pretrained = is_pretrained_memory(folder)
    traceable = pretrained or config["model"]["kind"] == "tensor"

    assert main(["eval", "--checkpoint", str(folder), "--batches", "1", "--batch-size", "2", "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)["metrics"]
    assert metrics and all(math.isfinite(value) for value in metrics.values() if isinstance(value, float))

    trace = tmp_path / "sample.trace.safetensors"
    code = main(["trace", "--checkpoint", str(folder), "--out", str(trace), "--no-progress"])
    if traceable:
        assert code == 0 and load_trace(trace).num_chunks >= 1
        capsys.readouterr()
        assert main(["report", "--trace", str(trace), "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["addressing"]["verdict"]
    else:
        assert code == 2 and not trace.exists()
        refusal = one_line(capsys.readouterr().err)
        assert "has no memory layer to trace" in refusal and "`tensor-memory eval` and `audit` work on it" in refusal

    code = main(["audit", "--checkpoint", str(folder), "--json"])
    if pretrained:
        assert code == 2 and "`tensor-memory eval` and `tensor-memory trace` apply to it" in one_line(
            capsys.readouterr().err
        )
    else:
        assert code == 0 and json.loads(capsys.readouterr().out)["verdict"]

    monkeypatch.setenv(CHECKPOINT_ENV, str(folder))  # what `tensor-memory app --checkpoint FOLDER` sets
    page = start()
    assert not page.error, [element.value for element in page.error]
    assert any(folder.name in shown(badge.value) for badge in page.markdown), "the page does not name the checkpoint"
