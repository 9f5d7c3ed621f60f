"""Training runs lose nothing: tampered resume files are refused, an earlier run is kept unless replaced,
killed saves leave no litter, and a damaged log names its line. Each case is built here, in seconds."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file
from test_training import kill_run_at, tiny_config

from tensor_memory.training import RESUME_FILE, train
from tensor_memory_cli import main as cli_main


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """A run killed during step 10 of 12: its resume file holds step 8."""
    out = tmp_path_factory.mktemp("killed")
    monkeypatch = pytest.MonkeyPatch()
    try:
        kill_run_at(monkeypatch, tiny_config(steps=12), out, call=10)
    finally:
        monkeypatch.undo()
    return out


def tampered(killed: Path, tmp_path: Path, edit) -> Path:
    """A copy of the killed run whose resume file went through ``edit(tensors, metadata)``."""
    out = tmp_path / "run"
    out.mkdir(parents=True)
    for name in ("config.json", "train_log.jsonl"):
        (out / name).write_bytes((killed / name).read_bytes())
    with safe_open(str(killed / RESUME_FILE), framework="pt") as handle:
        tensors = {k: handle.get_tensor(k) for k in handle.keys()}
        metadata = dict(handle.metadata())
    edit(tensors, metadata)
    save_file(tensors, out / RESUME_FILE, metadata=metadata)
    return out


def snapshot(out: Path) -> dict:
    """Each file's size, time and (when small) bytes: a huge sparse file is compared by its stat, never read."""
    files = [(p, p.stat()) for p in out.iterdir() if p.is_file()]
    return {p.name: (s.st_size, s.st_mtime_ns, p.read_bytes() if s.st_size < 1 << 20 else None) for p, s in files}


def bytes_read() -> int:
    """What this process has read from files and pipes so far (Linux's /proc/self/io ``rchar``)."""
    return int(Path("/proc/self/io").read_text().split("rchar:")[1].split()[0])


def refused(out: Path) -> str:
    before, read = snapshot(out), bytes_read()
    with pytest.raises(ValueError) as info:
        train(tiny_config(steps=12), out, resume=True, progress=False)
    assert bytes_read() - read < 256 << 20  # refused before any work: no file over its cap is read
    assert snapshot(out) == before  # nothing changed
    message = str(info.value)
    assert str(out / RESUME_FILE) in message and "\n" not in message
    return message


def first(tensors, prefix):
    return next(k for k in sorted(tensors) if k.startswith(prefix))


@pytest.mark.parametrize(
    "edit, problem",
    [
        (lambda t, m: t.pop(first(t, "model.")), "missing tensor"),
        (lambda t, m: t.update({"model.extra": torch.zeros(2)}), "unexpected tensor"),
        (lambda t, m: t.update({first(t, "model."): torch.zeros(3, 3)}), "expected F32"),
        (lambda t, m: t.update({first(t, "model."): t[first(t, "model.")].half()}), "is F16"),
        (
            lambda t, m: t.update({first(t, "model."): torch.full_like(t[first(t, "model.")], float("nan"))}),
            "NaN or infinite",
        ),
        (lambda t, m: [t.pop(k) for k in [k for k in t if k.startswith("optim.")]], "no optimizer state"),
        (lambda t, m: m.update(step="100000"), "outside [0, 12]"),
        (lambda t, m: m.update(step="-50"), "outside [0, 12]"),
        (lambda t, m: m.update(step="4"), "its optimizer took 8"),
        (lambda t, m: m.pop("step"), "lacks a valid step"),
    ],
)
def test_a_tampered_resume_file_is_refused_naming_it(killed, tmp_path, edit, problem):
    assert problem in refused(tampered(killed, tmp_path, edit))


def test_a_resume_file_that_is_a_folder_or_huge_is_refused_unread(killed, tmp_path):
    out = tampered(killed, tmp_path, lambda t, m: None)
    (out / RESUME_FILE).unlink()
    (out / RESUME_FILE).mkdir()
    assert f"{RESUME_FILE}: is a folder, not a regular file" in refused(out)  # refused before any work
    (out / RESUME_FILE).rmdir()
    with open(out / RESUME_FILE, "wb") as handle:  # 8 GiB, sparse: refused by its size, never read
        handle.truncate(8 << 30)
    assert "over the" in refused(out)


def test_the_untampered_file_still_resumes(killed, tmp_path):
    out = tampered(killed, tmp_path, lambda t, m: None)
    train(tiny_config(steps=12), out, resume=True, progress=False)
    assert (out / "model.safetensors").exists() and not (out / RESUME_FILE).exists()


def test_an_earlier_run_is_kept_unless_resumed_or_replaced(tmp_path, capsys):
    out = tmp_path / "run"
    train(tiny_config(steps=4), out, progress=False)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(ValueError, match="already holds a run .*--resume.*--overwrite"):
        train(tiny_config(steps=4), out, progress=False)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert (
        cli_main(
            ["train", "--task", "no_harm", "--backbone", "base", "--out", str(out), "--steps", "2", "--no-progress"]
        )
        == 2
    )
    assert "already holds a run" in capsys.readouterr().err
    train(tiny_config(steps=4, seed=1), out, progress=False, overwrite=True)  # asked for: replaced
    assert (out / "model.safetensors").read_bytes() != before["model.safetensors"]


def test_a_killed_save_leaves_no_temp_file_for_good(killed, tmp_path):
    out = tampered(killed, tmp_path, lambda t, m: None)
    litter = out / ".model.safetensors.ab12cd34.tmp"  # what a kill during os.replace leaves
    litter.write_bytes(b"half a file")
    keep = out / "notes.tmp"  # not ours: left alone
    keep.write_text("mine")
    train(tiny_config(steps=12), out, resume=True, progress=False)
    assert not litter.exists() and keep.exists()


def test_a_damaged_log_names_its_line_and_a_cut_last_line_is_dropped(killed, tmp_path):
    out = tampered(killed, tmp_path, lambda t, m: None)
    log = out / "train_log.jsonl"
    log.write_text(log.read_text() + '{"step": 9, "loss"')  # killed while writing the last line
    train(tiny_config(steps=12), out, resume=True, progress=False)
    assert all(json.loads(line)["step"] >= 0 for line in log.read_text().splitlines())
    out2 = tampered(killed, tmp_path / "b", lambda t, m: None)
    (out2 / "train_log.jsonl").write_text('{"step": 1}\nnot json at all\n{"step": 2}\n')
    with pytest.raises(ValueError, match="train_log.jsonl, line 2: not JSON"):
        train(tiny_config(steps=12), out2, resume=True, progress=False)


def test_an_unwritable_out_is_refused_before_any_work(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("x")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        train(tiny_config(steps=2), blocked, progress=False)
    with pytest.raises(ValueError, match="cannot create the folder there"):
        train(tiny_config(steps=2), blocked / "child", progress=False)
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(ValueError, match="not writable"):
            train(tiny_config(steps=2), locked, progress=False)


LONG_RUN = """
import sys
sys.path.insert(0, {tests!r})
from test_training import tiny_config
from tensor_memory.training import train
train(tiny_config(steps=100_000, eval_every=2), {out!r}, progress=False)
"""


def running_train(out: Path):
    """A ``train`` in another process on ``out``, once it holds the folder and has saved a resume file."""
    import subprocess
    import sys

    tests = str(Path(__file__).resolve().parent)
    process = subprocess.Popen(
        [sys.executable, "-c", LONG_RUN.format(tests=tests, out=str(out))],
        cwd=Path(tests).parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 120
    while not ((out / "train.lock").is_file() and (out / RESUME_FILE).is_file()):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"the first run did not start: {process.stderr.read().decode()[-2000:]}")
        time.sleep(0.1)
    return process


def test_a_second_train_on_a_folder_being_written_is_refused_naming_the_process(tmp_path, capsys):
    out = tmp_path / "run"
    first = running_train(out)
    try:
        for flags in ({}, {"overwrite": True}, {"resume": True}):
            start = time.perf_counter()
            with pytest.raises(ValueError, match=f"another training run \\(process {first.pid}\\) is writing there"):
                train(tiny_config(steps=4), out, progress=False, **flags)
            assert time.perf_counter() - start < 5, flags
        for flags in ([], ["--overwrite"], ["--resume"]):
            assert (
                cli_main(
                    [
                        "train",
                        "--task",
                        "no_harm",
                        "--backbone",
                        "base",
                        "--out",
                        str(out),
                        "--steps",
                        "2",
                        "--no-progress",
                        *flags,
                    ]
                )
                == 2
            )
            said = capsys.readouterr().err.strip()
            assert f"(process {first.pid}) is writing there" in said and "\n" not in said, said
        assert first.poll() is None  # the first run goes on, its files in place
        assert {"config.json", "train_log.jsonl", RESUME_FILE} <= {p.name for p in out.iterdir()}
    finally:
        first.kill()
        first.wait()


def test_a_killed_runs_lock_does_not_block_its_resume(tmp_path, monkeypatch):
    out = tmp_path / "run"
    first = running_train(out)
    first.kill()  # SIGKILL: no clean-up; the lock file stays, with the dead process's id
    first.wait()
    assert (out / "train.lock").read_text().strip() == str(first.pid)
    with pytest.raises(ValueError, match="already holds a run"):  # free, but still the folder of a run
        train(tiny_config(steps=4), out, progress=False)
    with safe_open(str(out / RESUME_FILE), framework="pt") as handle:
        saved = int(handle.metadata()["step"])
    kill_run_at(monkeypatch, tiny_config(steps=100_000, eval_every=2), out, call=3, resume=True)
    steps = [json.loads(line)["step"] for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert steps[-1] == saved + 2  # resumed from the killed run's resume file, two steps done, the third cut
    assert not (out / "train.lock").exists()  # an ending run, even by an error, leaves the folder free
    train(tiny_config(steps=4), out, progress=False, overwrite=True)  # and the next run takes it
    assert not (out / "train.lock").exists() and (out / "model.safetensors").is_file()


def test_a_run_refused_for_its_data_writes_nothing_and_keeps_the_run_it_would_replace(tmp_path, capsys):
    import shutil

    corpus = tmp_path / "wiki"  # a train split and a test split, but no wiki.valid.tokens
    corpus.mkdir()
    words = " ".join(f"w{k}" for k in range(40))
    for split in ("train", "test"):
        (corpus / f"wiki.{split}.tokens").write_text((words + "\n") * 20)
    data = [
        "--set",
        "task.params.corpus=wikitext",
        "--set",
        f"task.params.path={corpus}",
        "--set",
        "task.params.vocab_size=42",
        "--set",
        "task.params.seq_len=8",
        "--set",
        "task.params.chunk=4",
    ]
    train_lm = ["train", "--task", "language_modelling", "--backbone", "base", "--steps", "2", "--no-progress", *data]
    fresh = tmp_path / "fresh"
    assert cli_main([*train_lm, "--out", str(fresh)]) == 2
    assert "wiki.valid.tokens: no such file" in capsys.readouterr().err
    assert not fresh.exists()  # no half-made run to trip over when it is run again
    kept = tmp_path / "kept"
    shutil.copytree(Path(__file__).resolve().parents[1] / "checkpoints" / "no_harm-base", kept)
    before = {p.name: p.read_bytes() for p in kept.iterdir()}
    assert cli_main([*train_lm, "--out", str(kept), "--overwrite"]) == 2
    assert {p.name: p.read_bytes() for p in kept.iterdir()} == before  # the run it would have replaced, untouched


def test_a_lock_file_that_is_a_named_pipe_is_refused_at_once(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    os.mkfifo(out / "train.lock")
    start = time.perf_counter()
    assert (
        cli_main(
            ["train", "--task", "no_harm", "--backbone", "base", "--steps", "2", "--out", str(out), "--no-progress"]
        )
        == 2
    )
    assert time.perf_counter() - start < 10
    assert "train.lock: is a named pipe, not a regular file; move it away" in capsys.readouterr().err
