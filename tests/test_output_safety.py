"""Nothing outside the folder or file a command is told to write is ever written or removed: a symbolic link (even a
dangling one), a folder or a named pipe where a file is to be written is refused in one line naming it, the link and
what it points to untouched. And an empty flag value is refused like any other bad value, naming the flag."""

from __future__ import annotations

import errno
import os
import re
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from analysis.traces.trace import load_trace
from tensor_memory.errors import describe
from tensor_memory.storage.files import append_line, atomic_write_bytes
from tensor_memory.training.run_folder import hold_run_folder
from tensor_memory.training.run_log import RunLog
from tensor_memory_cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
LINK = "is a symbolic link, and nothing is written through one (the link and what it points to are left as they are)"


def one_line(capsys) -> str:
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1, said
    return said[0]


def train_args(out: Path) -> list[str]:
    return ["train", "--task", "no_harm", "--backbone", "base", "--steps", "1", "--out", str(out), "--no-progress"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished run of one step: the folder `train --resume` refuses as "already finished"."""
    out = tmp_path_factory.mktemp("finished") / "run"
    assert main([*train_args(out), "--set", "training.warmup_steps=0"]) == 0
    return out


@pytest.fixture
def decoy(tmp_path) -> tuple[Path, bytes, int]:
    """A file outside every run folder, with bytes and a time that must stay as they are."""
    path = tmp_path / "elsewhere" / "decoy.txt"
    path.parent.mkdir()
    path.write_bytes(b"precious\n")
    os.utime(path, ns=(1_500_000_000 * 10**9, 1_500_000_000 * 10**9))
    return path, b"precious\n", path.stat().st_mtime_ns


def untouched(decoy: tuple[Path, bytes, int]) -> None:
    path, data, mtime = decoy
    assert path.read_bytes() == data and path.stat().st_mtime_ns == mtime


def copy_run(finished: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(finished, tmp_path / "run"))


@pytest.mark.parametrize("flags", [["--resume"], ["--overwrite"]])
def test_a_lock_that_is_a_link_to_a_file_is_refused_and_neither_is_touched(finished, tmp_path, decoy, capsys, flags):
    out = copy_run(finished, tmp_path)
    (out / "train.lock").symlink_to(decoy[0])
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.is_symlink()}
    assert main([*train_args(out), *flags]) == 2
    assert (
        one_line(capsys) == f"tensor-memory train: error: {out / 'train.lock'}: {LINK}; move it away or write elsewhere"
    )
    untouched(decoy)
    assert (out / "train.lock").is_symlink() and os.readlink(out / "train.lock") == str(decoy[0])
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and not p.is_symlink()} == before


def test_a_dangling_lock_link_does_not_create_its_target(tmp_path, capsys):
    out, target = tmp_path / "run", tmp_path / "elsewhere" / "made.txt"
    out.mkdir()
    target.parent.mkdir()
    (out / "train.lock").symlink_to(target)
    assert main(train_args(out)) == 2
    assert f"{out / 'train.lock'}: {LINK}" in one_line(capsys)
    assert not os.path.lexists(target) and (out / "train.lock").is_symlink()
    assert sorted(p.name for p in out.iterdir()) == ["train.lock"]


@pytest.mark.parametrize("make, kind", [(os.mkdir, "a folder"), (os.mkfifo, "a named pipe")])
def test_a_folder_or_a_pipe_in_the_locks_place_is_refused_at_once(tmp_path, capsys, make, kind):
    out = tmp_path / "run"
    out.mkdir()
    make(out / "train.lock")
    start = time.perf_counter()
    assert main(train_args(out)) == 2
    assert time.perf_counter() - start < 10  # a pipe opened to write would wait for a reader
    assert one_line(capsys).endswith(
        f"{out / 'train.lock'}: is {kind}, not a regular file; move it away or write elsewhere"
    )
    assert sorted(p.name for p in out.iterdir()) == ["train.lock"]


@pytest.mark.parametrize("name", ["config.json", "train_log.jsonl", "resume.safetensors", "run_log.jsonl", "run.json"])
def test_any_file_of_the_run_that_is_a_link_is_refused_before_any_work(finished, tmp_path, decoy, capsys, name):
    out = copy_run(finished, tmp_path)
    (out / name).unlink(missing_ok=True)
    (out / name).symlink_to(decoy[0])
    assert main([*train_args(out), "--overwrite"]) == 2
    assert f"{out / name}: {LINK}" in one_line(capsys)
    untouched(decoy)
    assert (out / name).is_symlink() and (out / "model.safetensors").is_file()  # the run it would replace: kept


def test_a_tensorboard_folder_that_is_a_link_is_refused(finished, tmp_path, decoy, capsys):
    out = copy_run(finished, tmp_path)
    shutil.rmtree(out / "tensorboard", ignore_errors=True)
    (out / "tensorboard").symlink_to(decoy[0].parent, target_is_directory=True)
    assert main([*train_args(out), "--overwrite"]) == 2
    assert f"{out / 'tensorboard'}: is a symbolic link, not a folder" in one_line(capsys)
    assert sorted(p.name for p in decoy[0].parent.iterdir()) == ["decoy.txt"]
    untouched(decoy)


def test_an_out_that_is_a_link_is_refused(finished, tmp_path, capsys):
    (tmp_path / "link").symlink_to(finished, target_is_directory=True)
    before = {p.name: p.read_bytes() for p in finished.iterdir() if p.is_file()}
    assert main([*train_args(tmp_path / "link"), "--overwrite"]) == 2
    assert one_line(capsys).endswith(f"--out {tmp_path / 'link'}: is a symbolic link; give the folder itself")
    assert {p.name: p.read_bytes() for p in finished.iterdir() if p.is_file()} == before


def test_the_lock_is_removed_only_while_it_is_the_file_held(tmp_path):
    out = tmp_path / "run"
    with hold_run_folder(out):
        assert (out / "train.lock").read_text().strip() == str(os.getpid())
        os.replace(out / "train.lock", tmp_path / "held")
        (out / "train.lock").write_text("another run's\n")  # what a run that took the folder since would hold
    assert (out / "train.lock").read_text() == "another run's\n"
    with hold_run_folder(out):  # the stale one is taken over (no process holds its lock) and removed at the end
        pass
    assert not (out / "train.lock").exists()


@pytest.mark.parametrize("kind", ["link", "dangling", "folder", "pipe"])
def test_every_file_writer_refuses_what_is_not_a_regular_file(tmp_path, decoy, kind):
    path = tmp_path / "out.bin"
    if kind == "link":
        path.symlink_to(decoy[0])
    elif kind == "dangling":
        path.symlink_to(tmp_path / "nowhere")
    elif kind == "folder":
        path.mkdir()
    else:
        os.mkfifo(path)
    said = {"link": LINK, "dangling": LINK, "folder": "is a folder, not a regular file", "pipe": "is a named pipe"}
    for write in (lambda: atomic_write_bytes(path, b"x"), lambda: append_line(path, "x\n")):
        with pytest.raises(ValueError) as refused:
            write()
        assert str(refused.value).startswith(f"{path}: {said[kind]}") and "\n" not in str(refused.value)
    untouched(decoy)
    assert not (tmp_path / "nowhere").exists() and sorted(p.name for p in tmp_path.iterdir()) == [
        "elsewhere",
        "out.bin",
    ]


def test_a_run_logs_records_and_snapshots_are_never_written_through_a_link(tmp_path, decoy):
    from run_helpers import model, start_run

    log = start_run(tmp_path / "run", last=0)
    log.records.unlink()
    log.records.symlink_to(decoy[0])
    with pytest.raises(ValueError, match=re.escape(f"{log.records}: {LINK}")):
        log.append(1, {})
    (log.folder / "snapshots").symlink_to(decoy[0].parent, target_is_directory=True)
    with pytest.raises(ValueError, match="snapshots: is a symbolic link, not a folder"):
        log.snapshot_path(1)
    with pytest.raises(ValueError, match="snapshots: is a symbolic link, not a folder"):
        RunLog(log.folder).start(model(), every=1, snapshot_every=None)  # refused before the header is written
    untouched(decoy)


@pytest.mark.parametrize("suffix", [".safetensors", ".trace.zarr"])
def test_trace_refuses_an_out_that_is_a_link(tmp_path, decoy, capsys, suffix):
    out = tmp_path / f"t{suffix}"
    out.symlink_to(tmp_path / "nowhere" if suffix.endswith("zarr") else decoy[0])
    args = ["trace", "--checkpoint", str(ROOT / "checkpoints" / "no_harm-tensor"), "--out", str(out), "--overwrite"]
    assert main(args + ["--no-progress"]) == 2
    line = one_line(capsys)
    assert f"--out {out}: is a symbolic link" in line
    untouched(decoy)
    assert not (tmp_path / "nowhere").exists()


def test_saving_a_trace_onto_a_folder_names_the_folder(tmp_path):
    import torch

    from analysis import trace_model
    from tensor_memory import MemoryConfig, TensorMemory

    torch.manual_seed(0)
    trace = trace_model(TensorMemory(MemoryConfig(token_dim=8, channels=2, grid=(3, 3, 3))), torch.randn(1, 6, 8))
    (tmp_path / "t.safetensors").mkdir()
    with pytest.raises(ValueError) as refused:
        trace.save(tmp_path / "t.safetensors")
    assert (
        str(refused.value)
        == f"{tmp_path / 't.safetensors'}: is a folder, not a regular file; move it away or write elsewhere"
    )
    assert list((tmp_path / "t.safetensors").iterdir()) == []
    np.testing.assert_array_equal(
        load_trace(trace.save(tmp_path / "u.safetensors")).layers[""].sigma, trace.layers[""].sigma
    )


def test_migrate_names_the_checkpoint_it_cannot_write_in(tmp_path, monkeypatch, capsys):
    folder = Path(shutil.copytree(ROOT / "checkpoints" / "no_harm-base", tmp_path / "ckpt"))
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    def read_only(*args, **kwargs):  # what an immutable folder or a read-only file system says to a new file there
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(folder / ".model.safetensors.abcd1234.tmp"))

    monkeypatch.setattr("tensor_memory.storage.files.tempfile.mkstemp", read_only)
    assert main(["migrate", "--checkpoint", str(folder)]) == 2
    assert one_line(capsys) == (
        f"tensor-memory migrate: error: {folder / 'model.safetensors'}: cannot write in its folder {folder} "
        f"(Operation not permitted)"
    )
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_failed_replace_names_the_file_not_the_temp_file(tmp_path, monkeypatch):
    target = tmp_path / "metrics.json"
    target.write_text("old")

    def refuse(*args):
        raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), args[0], args[1])

    monkeypatch.setattr("tensor_memory.storage.files.os.replace", refuse)
    with pytest.raises(OSError) as failed:
        atomic_write_bytes(target, b"new")
    assert describe(failed.value) == f"{target}: cannot write it (Operation not permitted)"
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["metrics.json"]


# Where a file is opened to write, replaced or copied other than through tensor_memory/storage/files.py, and why that
# is safe: any other place must use its helpers (open_to_write, append_line, atomic_write_bytes).
WRITES = re.compile(
    r"os\.open\(|\bopen\([^)]*,\s*[\"'][wax]b?\+?[\"']|\.open\([\"'][wax]b?\+?[\"']|\.write_(text|bytes)\(|os\.replace\(|"
    r"shutil\.(copy|move)"
)
SHOWN_SAFE = {
    "tensor_memory/storage/files.py": "the helpers themselves",
    "tensor_memory/storage/user_files.py": "opens a user's file to read (O_RDONLY)",
    "analysis/traces/run_log.py": "opens a run log to read (O_RDONLY | O_NOFOLLOW)",
    "app/upload.py": "unpacks into a folder it has just made (tempfile.mkdtemp), renamed whole",
    "app/browser_stepper.py": "copies its own files into a folder it has just made (tempfile.mkdtemp), renamed whole",
}


def test_files_are_written_only_through_the_shared_helpers():
    found = {
        str(path.relative_to(ROOT))
        for package in ("tensor_memory", "tensor_memory_cli", "analysis", "app")
        for path in (ROOT / package).rglob("*.py")
        if WRITES.search(path.read_text())
    }
    assert found <= set(SHOWN_SAFE), found - set(SHOWN_SAFE)


@pytest.fixture(autouse=True)
def no_server(monkeypatch):
    """`tensor-memory app` never starts a server here, whatever it is given."""

    def refuse(*args):
        raise AssertionError("the app's server was about to start")

    monkeypatch.setattr("app.cli.serve", refuse)


def value_flags() -> list[tuple[str, str]]:
    """(subcommand, flag) of every flag of every `tensor-memory` subcommand that takes a value."""
    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command")  # noqa: SLF001 - argparse lists them only here
    return [
        (name, action.option_strings[-1])
        for name, sub in commands.choices.items()
        for action in sub._actions  # noqa: SLF001
        if action.option_strings and action.nargs != 0
    ]


def test_every_flag_of_every_subcommand_is_walked():
    flags = set(value_flags())
    assert {("app", "--trace"), ("app", "--data-root"), ("trace", "--device"), ("migrate", "--checkpoint")} <= flags
    assert {name for name, _ in flags} == {
        "demo",
        "train",
        "eval",
        "migrate",
        "trace",
        "report",
        "audit",
        "import",
        "app",
    }


@pytest.mark.parametrize("command, flag", value_flags())
@pytest.mark.parametrize("form", ["apart", "joined"])
def test_an_empty_flag_value_is_refused_naming_the_flag(capsys, command, flag, form):
    args = [command, flag, ""] if form == "apart" else [command, f"{flag}="]
    with pytest.raises(SystemExit) as stopped:
        main(args)
    assert stopped.value.code == 2
    line = one_line(capsys)
    assert line.startswith(f"tensor-memory {command}: error: argument {flag}: empty; give "), line


def test_import_names_its_segment_flag_and_the_value_given(capsys):
    with pytest.raises(SystemExit):
        main(["import", "--weights", "w", "--inputs", "x", "--out", "o.safetensors", "--segment", "-1"])
    assert one_line(capsys) == (
        "tensor-memory import: error: argument --segment: expected a positive integer, got -1 "
        "(see tensor-memory import --help)"
    )


@pytest.mark.parametrize(
    "args, said",
    [
        (["app", "--trace", ""], "argument --trace: empty; give a file or a folder"),
        (["app", "--data-root", ""], "argument --data-root: empty; give a folder"),
        (["trace", "--device", "", "--checkpoint", "c", "--out", "o"], "argument --device: empty; give auto, cpu"),
        (["migrate", "--checkpoint", ""], "argument --checkpoint: empty; give a folder"),
    ],
)
def test_the_empty_values_that_were_taken_as_absent_are_refused(capsys, args, said):
    with pytest.raises(SystemExit):
        main(args)
    assert said in one_line(capsys)
