"""The second audit's lines a user could not act on, each now one line naming the field or file and what to do;
and the settings that are valid but cannot train well, warned about."""

from __future__ import annotations

import errno
import os
import re

import pytest
from test_dataset_loaders import cub, cub_copy  # noqa: F401 (fixtures)

from tensor_memory.errors import describe
from tensor_memory.storage.files import FileFormatError, atomic_write_bytes
from tensor_memory.tasks.data import images as I
from tensor_memory_cli import main


def one_line(capsys) -> str:
    said = capsys.readouterr().err.strip().splitlines()
    assert len(said) == 1, said
    return said[0]


def train(tmp_path, *extra: str) -> list[str]:
    return [
        "train",
        "--task",
        "no_harm",
        "--backbone",
        "base",
        "--out",
        str(tmp_path / "run"),
        "--steps",
        "1",
        "--no-progress",
        "--set",
        "training.warmup_steps=0",
        *extra,
    ]  # (the default warm-up outlasts one step)


def toml(tmp_path, text: str) -> str:
    path = tmp_path / "run.toml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    "text, words",
    [
        ("a = " + "[" * 5000 + "]" * 5000 + "\n", "nested too deeply to be a run config"),
        ("task = 5\n", "task must be a table ([task] with name = value lines), got 5"),
        (
            '[task]\nname = "no_harm"\nparams = "abc"\n',
            "task.params must be a table ([task.params] with name = value lines), got 'abc'",
        ),
        (
            '[task]\nname = "no_harm"\n[training]\nsteps = "ten"\n',
            "TrainConfig.steps must be an integer >= 1, got 'ten'",
        ),
        ('[task]\nname = "no_harm"\n[backbone]\nbase = 3\n', "backbone.base must be a table of settings, got 3"),
    ],
)
def test_a_malformed_run_config_is_named_in_one_line(tmp_path, capsys, text, words):
    path = toml(tmp_path, text)
    assert (
        main(
            [
                "train",
                "--config",
                path,
                "--task",
                "no_harm",
                "--backbone",
                "base",
                "--out",
                str(tmp_path / "run"),
                "--no-progress",
            ]
        )
        == 2
    )
    said = one_line(capsys)
    assert words in said and "unexpected" not in said, said


def test_a_flag_replaces_a_wrong_typed_config_value_without_being_blamed_for_it(tmp_path, capsys):
    path = toml(tmp_path, '[task]\nname = "no_harm"\n[training]\nsteps = "ten"\n')
    assert (
        main(
            [
                "train",
                "--config",
                path,
                "--task",
                "no_harm",
                "--backbone",
                "base",
                "--out",
                str(tmp_path / "run"),
                "--steps",
                "1",
                "--no-progress",
            ]
        )
        == 0
    )  # the flag's 1 is the run's steps
    assert (tmp_path / "run" / "model.safetensors").is_file()


def test_a_seed_past_64_bits_is_named(tmp_path, capsys):
    assert main(train(tmp_path, "--set", "training.seed=99999999999999999999999")) == 2
    assert "TrainConfig.seed must be at most 9,223,372,036,854,775,807" in one_line(capsys)


@pytest.mark.parametrize(
    "command",
    [
        ["demo", "--seed=-1"],
        ["eval", "--checkpoint", "x", "--seed=-5"],
        ["train", "--task", "no_harm", "--backbone", "base", "--seed=-1"],
        ["trace", "--checkpoint", "x", "--out", "y", "--seed", str(2**63)],
    ],
)
def test_every_seed_flag_takes_the_same_range(capsys, command):
    with pytest.raises(SystemExit) as exited:
        main(command)
    said = one_line(capsys)  # the refusal alone, not after a usage block
    assert exited.value.code == 2 and "a seed is 0 to 2^63 − 1" in said
    assert said.endswith(f"(see tensor-memory {command[0]} --help)")


def test_an_out_name_with_a_newline_is_refused_before_anything_is_written(tmp_path, capsys):
    out = tmp_path / "new\nline"
    assert (
        main(
            [
                "train",
                "--task",
                "no_harm",
                "--backbone",
                "base",
                "--out",
                str(out),
                "--steps",
                "1",
                "--no-progress",
                "--set",
                "training.warmup_steps=0",
            ]
        )
        == 2
    )
    assert "holds a control character (a newline, a tab); choose a plain name" in one_line(capsys)
    assert not out.exists()
    assert (
        main(
            [
                "trace",
                "--checkpoint",
                "checkpoints/occlusion-tensor",
                "--out",
                str(tmp_path / "t\t.safetensors"),
                "--no-progress",
            ]
        )
        == 2
    )
    assert "holds a control character" in one_line(capsys)


def test_an_empty_corpus_split_is_named_not_blamed_on_the_vocabulary(tmp_path, capsys):
    folder = tmp_path / "wikitext"
    folder.mkdir()
    for split in ("train", "valid", "test"):
        (folder / f"wiki.{split}.tokens").write_text("\n \n")
    assert (
        main(
            [
                "train",
                "--task",
                "language_modelling",
                "--backbone",
                "base",
                "--out",
                str(tmp_path / "lm"),
                "--steps",
                "1",
                "--no-progress",
                "--set",
                "task.params.corpus=wikitext",
                "--set",
                f"task.params.path={folder}",
                "--set",
                "training.warmup_steps=0",
            ]
        )
        == 2
    )
    said = one_line(capsys)
    assert f"{folder / 'wiki.train.tokens'}: holds no text" in said and "vocab_size" not in said


def test_a_warmup_longer_than_the_run_is_warned_about(tmp_path, capsys):
    assert main(train(tmp_path, "--set", "training.warmup_steps=50")) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning" in line]
    assert warned == [
        "tensor-memory train: warning: training.warmup_steps=50 is not below training.steps=1: the "
        "learning rate never reaches training.lr and the run ends still warming up; lower warmup_steps "
        "(a tenth of the steps is usual) or raise steps"
    ]
    assert main(train(tmp_path, "--set", "training.warmup_steps=0", "--overwrite")) == 0
    assert "warning" not in capsys.readouterr().err


def test_a_symbolic_link_loop_among_the_pictures_is_named(cub, tmp_path):  # noqa: F811
    folder = cub_copy(cub, tmp_path)
    first = I.cub_split_paths(folder)["test"][0]
    first.unlink()
    first.symlink_to(first.name)  # a link to itself
    with pytest.raises(
        FileFormatError,
        match=f"{re.escape(str(first))}: image \\d+ of images.txt is a loop of "
        f"symbolic links; replace it with the picture itself",
    ):
        I.cub_split_paths(folder)


def test_a_full_disk_names_the_file_says_what_to_do_and_keeps_the_old_one(tmp_path, monkeypatch):
    target = tmp_path / "metrics.json"
    target.write_text("old")

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr("tensor_memory.storage.files.os.fsync", full)
    with pytest.raises(OSError) as failed:
        atomic_write_bytes(target, b"new")
    said = describe(failed.value)
    assert said.startswith(f"{target}: no space left on the disk it is on; free some space") and "--resume" in said
    assert target.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["metrics.json"]  # no temp left


def test_the_describe_line_of_a_plain_os_error_is_unchanged():
    assert describe(OSError(errno.EACCES, "Permission denied", "/x")) == "/x: Permission denied"
    assert describe(FileFormatError("a\n b")) == "a b"


@pytest.mark.parametrize(
    "item, words",
    [
        ("training.steps=2\nlr = 99", "holds a line break or another control character; give one value"),
        ("training.lr=1e-3\n[x]", "holds a line break or another control character"),
        ("model.kind=xl", "--set model.kind: --backbone chooses it"),
        ("task.name=occlusion", "--set task.name: --task chooses it"),
    ],
)
def test_a_set_item_that_would_say_more_than_one_value_is_refused(tmp_path, capsys, item, words):
    assert main(train(tmp_path, "--set", item)) == 2
    assert words in one_line(capsys) and not (tmp_path / "run").exists()


def test_a_byte_order_mark_is_not_part_of_the_first_word(tmp_path):
    from tensor_memory.tasks.data import corpus as C

    (tmp_path / "wiki.train.tokens").write_text("\ufeffthe cat\nthe dog\n", encoding="utf-8")
    assert C.read_lines(tmp_path / "wiki.train.tokens") == ["the cat", "the dog"]


def test_a_listed_video_that_is_a_pipe_is_named_as_one_not_as_missing(tmp_path):
    from pathlib import PurePosixPath

    from tensor_memory.tasks.data import ucf101 as U
    from tensor_memory.tasks.data import video as V

    root = tmp_path / "UCF-101"
    (root / "Cls").mkdir(parents=True)
    os.mkfifo(root / "Cls" / "v_Cls_g01_c01.avi")
    found = U.locate(root, PurePosixPath("Cls/v_Cls_g01_c01.avi"))
    with pytest.raises(FileFormatError, match=f"^{re.escape(str(found))}: is a named pipe, not a video"):
        V.read_video(found, 16, 3, V.FrameCache(1 << 20))


def test_a_demo_too_long_to_show_is_refused_naming_its_flags(capsys):
    assert main(["demo", "--tokens", "65536", "--dim", "4096"]) == 2
    assert "makes 65,536 chunks; the demo shows at most 1,024: lower --tokens or raise --chunk-size" in one_line(capsys)
    assert main(["demo", "--tokens", "2048", "--chunk-size", "2"]) == 0  # 1,024 chunks: shown
