"""How every file a user names is read: only a regular file under its cap, and nothing can block.

A path from a user may name a named pipe (reading it waits for a writer for good), a device such as
``/dev/zero`` (it never ends), a folder, or a file far larger than what it should be. Every reader of
such a path (pictures, frames, videos, tokenizers, lists, corpora, run configs, logs, JSON) goes
through :func:`read_user_file`, which opens without waiting, checks what was opened and reads to the
cap at most.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import FileFormatError

FILE_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISCHR, "a character device"),
              (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def read_user_file(path: "str | os.PathLike[str]", cap: int, what: str, fix: str = "") -> bytes:
    """The bytes of ``path``, a regular file of at most ``cap`` bytes: how every file a user names is read.

    Nothing can block: the file is opened without waiting (``O_NONBLOCK``), and what was opened, links followed,
    must be a regular file (a named pipe, ``/dev/zero`` or a folder is refused unread); at most ``cap`` bytes are
    read, so a file that grows while it is read is refused too. A missing file raises ``FileNotFoundError`` for the
    caller to say where it should come from; every other problem a :class:`FileFormatError` naming the file, what it
    should be (``what``) and ``fix`` (", …" appended)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as error:
        raise FileFormatError(f"{path}: cannot read {what}: {error.strerror or error}{fix}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in FILE_KINDS if test(mode)), "not a regular file")
            raise FileFormatError(f"{path}: is {kind}, not {what} (a regular file){fix}")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, min(1 << 20, cap + 1 - total))
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                raise FileFormatError(f"{path}: larger than the {_amount(cap)} {what} may be{fix}")
    except OSError as error:
        raise FileFormatError(f"{path}: cannot read {what}: {error.strerror or error}{fix}") from None
    finally:
        os.close(fd)


def read_user_text(path: "str | os.PathLike[str]", cap: int, what: str, missing: str) -> str:
    """:func:`read_user_file` decoded as UTF-8 text (a byte-order mark dropped); a missing file is a
    :class:`FileFormatError` that says ``missing`` (where the file should come from)."""
    try:
        raw = read_user_file(path, cap, what)
    except FileNotFoundError:
        raise FileFormatError(f"{path}: no such file; {missing}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise FileFormatError(f"{path}: {what} is not UTF-8 text ({error.reason} at byte {error.start})") from None


def _amount(size: int) -> str:
    """A size in the unit people would say: 16 MB, 64 KB, 99 bytes."""
    if size >= 2**20:
        return f"{size / 2**20:.0f} MB"
    return f"{size / 2**10:.0f} KB" if size >= 2**10 else f"{size} bytes"


def check_plain_name(path: "str | os.PathLike[str]", option: str) -> None:
    """A ValueError naming ``option`` when a path a user gives to write to holds a control character (a newline, a
    tab): a file name nobody can type or read back in a listing."""
    if any(ord(character) < 32 or ord(character) == 127 for character in str(path)):
        raise ValueError(f"{option} {str(path)!r}: holds a control character (a newline, a tab); choose a plain name")


__all__ = ["read_user_file", "read_user_text", "check_plain_name"]
