"""Reading and writing files safely: atomic writes, strict JSON, and safetensors checked by hand.

What checkpoints, traces, training runs and reports share:

- **Atomic writes** (a temp file in the same directory, fsync, ``os.replace``): a run killed
  mid-write leaves the file either complete-old or complete-new, never half written.
- **Strict JSON**: no NaN, no duplicate keys, UTF-8, a size cap.
- **safetensors checked by hand**: ``user_files.read_safetensors``.

Every malformed input raises one :class:`FileFormatError` naming the file, the problem and what
to do about it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import re
import stat
import tempfile
from pathlib import Path
from typing import Any

import torch

from ..errors import FileFormatError
from .user_files import check_plain_name, read_user_file, strict_json

PathLike = str | os.PathLike


def _fsync_dir(directory: Path) -> None:
    try:  # makes the rename itself durable; not possible on every platform/filesystem
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# What a path that is no regular file is, in the words of the refusal.
KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def not_a_file(path: PathLike, mode: int, option: str | None = None) -> ValueError:
    """The one-line refusal of writing at ``path``, where something of ``mode`` (``st_mode``) is not a regular file;
    ``option``: the flag that named ``path``."""
    kind = next((name for test, name in KINDS if test(mode)), "a device")
    label = f"{option} {path}" if option else str(path)
    remedy = "choose another file name" if option else "move it away or write elsewhere"
    if stat.S_ISLNK(mode):
        return ValueError(
            f"{label}: is a symbolic link, and nothing is written through one (the link and what it points to are "
            f"left as they are); {remedy}"
        )
    return ValueError(f"{label}: is {kind}, not a regular file; {remedy}")


def check_file_place(path: PathLike, option: str | None = None) -> os.stat_result | None:
    """What is at ``path`` (not following a link) if a file may be written there: None for nothing, a regular file's
    status; anything else there (a symbolic link, even a dangling one, a folder, a named pipe, …) is refused with
    :func:`not_a_file`, left as it is."""
    try:
        status = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not stat.S_ISREG(status.st_mode):
        raise not_a_file(path, status.st_mode, option)
    return status


def open_to_write(path: PathLike, flags: int, mode: int = 0o644) -> int:
    """A descriptor of the regular file ``path`` opened with ``flags`` (``os.O_CREAT`` makes it), never through a
    symbolic link (``O_NOFOLLOW``: a dangling link's target is not created either) and never waiting (a named pipe
    would): anything but a regular file is refused with :func:`not_a_file`, untouched. Truncate only once the file is
    known (``O_TRUNC`` is not for ``flags``). FileNotFoundError passes through."""
    if flags & os.O_TRUNC:
        raise ValueError("open_to_write: truncate with os.ftruncate once the file is known to be the one meant")
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except (FileNotFoundError, NotADirectoryError):
        raise
    except OSError as error:
        if error.errno not in (errno.ELOOP, errno.EISDIR, errno.ENXIO, errno.EMLINK):  # ELOOP/EMLINK: a link
            raise
        check_file_place(path)  # says what is there
        raise
    status = os.fstat(fd)
    if not stat.S_ISREG(status.st_mode):
        os.close(fd)
        raise not_a_file(path, status.st_mode)
    return fd


def append_line(path: PathLike, line: str) -> None:
    """``line`` (UTF-8) appended to the regular file ``path``, made if missing, in one write and never through a
    symbolic link (:func:`open_to_write`): a reader sees whole lines, and at most a cut last one after a kill."""
    data = line.encode("utf-8")
    fd = open_to_write(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        done = 0
        while done < len(data):  # one write does it for a regular file; the loop covers a short one
            done += os.write(fd, data[done:])
    finally:
        os.close(fd)


def check_folder_place(folder: PathLike, option: str | None = None) -> None:
    """A ValueError naming ``folder`` when something other than a folder is there (a symbolic link to one included:
    what is written in it would land elsewhere); nothing there passes."""
    try:
        status = os.lstat(folder)
    except (FileNotFoundError, NotADirectoryError):
        return
    if not stat.S_ISDIR(status.st_mode):
        label = f"{option} {folder}" if option else str(folder)
        kind = next((name for test, name in KINDS if test(status.st_mode)), "a device")
        kind = "a file" if stat.S_ISREG(status.st_mode) else kind
        raise ValueError(
            f"{label}: is {kind}, not a folder, and nothing is written through it; move it away or write elsewhere"
        )


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the complete old file or the complete new one.

    The bytes go to a temp file in the same directory, are fsynced, then ``os.replace``d over
    ``path``. On any error the temp file is removed and ``path`` is untouched; a ``path`` that is not a regular file
    (a symbolic link, a folder, …) is refused first (:func:`check_file_place`), as are the failures naming the temp
    file: they name ``path``.
    """
    path = Path(path)
    status = check_file_place(path)
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as error:  # a read-only or immutable folder, a missing one: say so of the file meant
        raise OSError(error.errno, f"cannot write in its folder {path.parent} ({error.strerror})", str(path)) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644 if status is None else stat.S_IMODE(status.st_mode))  # mkstemp makes 0600 files
        os.replace(tmp, path)
    except BaseException as error:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(error, OSError) and error.filename in (None, tmp):  # name the file meant, not the temp file
            raise OSError(error.errno, f"cannot write it ({error.strerror or error})", str(path)) from None
        raise
    _fsync_dir(path.parent)


# The temp files atomic_write_bytes makes: ".<name>.<8 random characters>.tmp" (tempfile.mkstemp).
TEMP_PATTERN = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")


def remove_stale_temp_files(directory: PathLike) -> list[Path]:
    """Delete the temp files that killed atomic writes left in ``directory``; returns what was removed.

    Call it where one process owns the folder (a training run's --out, a checkpoint being saved).
    """
    removed = []
    try:
        entries = list(Path(directory).iterdir())
    except OSError:
        return removed
    for path in entries:
        if TEMP_PATTERN.match(path.name) and path.is_file() and not path.is_symlink():
            try:
                path.unlink()
                removed.append(path)
            except OSError:
                pass
    return removed


# Files that belong to a checkpoint or a run: never the --out of another command.
RUN_FILES = ("model.safetensors", "config.json", "metrics.json", "train_log.jsonl", "resume.safetensors")


def check_output_path(path: PathLike, overwrite: bool = False, inputs: tuple = (), option: str = "--out") -> Path:
    """``path`` if a command may write its result there, else a ValueError saying why, before any work.

    Refused always: a folder, a symbolic link or anything else that is not a regular file, a path whose folder is
    missing or not writable, a file of a checkpoint or run (:data:`RUN_FILES` beside a ``config.json``), and one of
    the command's own ``inputs``. Refused unless ``overwrite``: any other existing file.
    """
    path = Path(path)
    where = f"{option} {path}"
    check_plain_name(path, option)
    if path.is_dir() and not path.is_symlink():
        raise ValueError(f"{where}: is a folder; give a file name inside it")
    check_file_place(path, option)  # a symbolic link (even a dangling one), a named pipe, …
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"{where}: its folder {parent} does not exist (or is not a folder); create it first")
    if path.name in RUN_FILES and (parent / "config.json").exists():
        raise ValueError(
            f"{where}: is a file of the checkpoint or run in {parent}; writing there would destroy "
            f"it, so choose another file name"
        )
    for source in inputs:
        if path.exists() and Path(source).exists() and os.path.samefile(path, source):
            raise ValueError(f"{where}: is this command's own input; choose another file name")
    if path.exists() and not overwrite:
        raise ValueError(f"{where}: exists already; pass --overwrite to replace it, or choose another file name")
    try:  # can a file be created there at all (read-only folders, /proc, …)?
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise ValueError(f"{where}: cannot write in {parent} ({error.strerror or error})") from None
    return path


def atomic_write_text(path: PathLike, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def finite_or_none(value: Any) -> Any:
    """Metrics: NaN/inf (a diverged loss) become null, so the file stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return finite_or_none(value.item())
    return value


def dumps_json(data: Any) -> str:
    """Strict JSON (no NaN), indented, with a trailing newline."""
    return json.dumps(data, indent=2, allow_nan=False, default=_json_default) + "\n"


def json_type(value: Any) -> str:
    names = {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
        int: "a number",
        float: "a number",
    }
    return names.get(type(value), type(value).__name__)


def read_json(path: PathLike, cap: int, what: str = "the JSON file") -> dict[str, Any]:
    """A JSON object from ``path``: strict JSON (no NaN, no duplicate keys), UTF-8, at most ``cap`` bytes."""
    path = Path(path)
    try:
        raw = read_user_file(path, cap, what)
    except FileNotFoundError:
        raise FileFormatError(f"{path}: cannot read {what}: no such file") from None
    if not raw.strip():
        raise FileFormatError(f"{path}: {what} is empty; it should hold a JSON object (re-save the checkpoint)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FileFormatError(f"{path}: {what} is not UTF-8 text, so not valid JSON (re-save the checkpoint)") from None
    try:
        data = strict_json(text)
    except json.JSONDecodeError as error:
        raise FileFormatError(
            f"{path}: invalid JSON in {what}: {error.msg} at line {error.lineno} column "
            f"{error.colno} (fix the file or re-save the checkpoint)"
        ) from None
    except (ValueError, RecursionError) as error:
        problem = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise FileFormatError(f"{path}: invalid JSON in {what}: {problem}") from None
    if not isinstance(data, dict):
        raise FileFormatError(f"{path}: {what} must hold a JSON object ({{...}}), got {json_type(data)}")
    return data


__all__ = [
    "FileFormatError",
    "PathLike",
    "atomic_write_bytes",
    "atomic_write_text",
    "dumps_json",
    "finite_or_none",
    "json_type",
    "read_json",
    "remove_stale_temp_files",
    "check_output_path",
    "check_file_place",
    "check_folder_place",
    "open_to_write",
    "append_line",
    "not_a_file",
    "RUN_FILES",
]
