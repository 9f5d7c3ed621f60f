"""A training run's folder: whether a run may write there (:func:`check_out`), and one writer at a time.

``train`` holds ``<out>/train.lock`` while it runs. The lock is the operating system's
(``fcntl.flock``) on that file, which holds the process id of its holder. A second ``train`` on
the same folder (fresh, with ``--overwrite`` or ``--resume``) is refused in one line naming that
process, before it writes anything. A run that was killed leaves the file but not the lock, which
the system releases with the process: the next run finds the file unlocked, recognises the process
id in it as gone, and takes the lock as its own. A run that ends, even by an error, removes the
file.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from ..storage.files import RUN_FILES, check_file_place, check_folder_place, open_to_write
from .log import TENSORBOARD
from .run_log import HEADER_FILE, RECORDS_FILE, check_run_folder

LOCK_FILE = "train.lock"


def check_out(out: Path, resume: bool, overwrite: bool) -> None:
    """Refuse an ``out`` that holds an earlier run unless told to resume it or to replace it, and one where a file or
    folder the run writes is not a regular file or folder (a symbolic link: nothing is written outside ``out``)."""
    check_run_folder(out, "--out")
    for name in (*RUN_FILES, LOCK_FILE, HEADER_FILE, RECORDS_FILE):
        check_file_place(out / name)
    check_folder_place(out / TENSORBOARD)
    found = [name for name in RUN_FILES if (out / name).exists()]
    if found and not (resume or overwrite):
        raise ValueError(
            f"--out {out}: already holds a run ({', '.join(found)}); continue it with --resume, "
            f"replace it with --overwrite, or choose another --out"
        )
    if not out.exists():
        parent = next((p for p in out.parents if p.exists()), Path("."))
        if not parent.is_dir() or not os.access(parent, os.W_OK):
            raise ValueError(f"--out {out}: cannot create the folder there ({parent} is not a writable folder)")
    elif not os.access(out, os.W_OK):
        raise ValueError(f"--out {out}: the folder is not writable")


class RunFolderBusy(ValueError):
    """Another training run is writing in the folder; the message names its process."""


def _open_lock(path: Path, flags: int) -> int:
    """The lock file opened without waiting and never through a symbolic link (:func:`open_to_write`): a link, a
    folder or a named pipe in its place is refused in one line naming it, and left as it is."""
    try:
        return open_to_write(path, flags)
    except (FileNotFoundError, NotADirectoryError, ValueError):
        raise
    except OSError as error:
        raise ValueError(f"{path}: cannot open the run's lock file ({error.strerror}); remove it") from None


def _recorded_pid(fd: int) -> int | None:
    """The process id written in an open lock file, or None if it holds none (yet)."""
    text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    return int(text) if text.isdigit() else None


def _busy(out: Path, pid: int | None) -> RunFolderBusy:
    who = f"process {pid}" if pid else "another process"
    return RunFolderBusy(
        f"--out {out}: another training run ({who}) is writing there; wait for it to end, stop it, "
        f"or choose another --out"
    )


def check_free(out: Path) -> None:
    """:class:`RunFolderBusy` if a running ``train`` holds ``out``; writes nothing (``out`` may not exist)."""
    try:
        fd = _open_lock(Path(out) / LOCK_FILE, os.O_RDONLY)
    except (FileNotFoundError, NotADirectoryError):  # no lock file (or no folder): nobody is writing there
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise _busy(Path(out), _recorded_pid(fd)) from None
    finally:
        os.close(fd)  # closing releases the shared lock taken just to look


@contextlib.contextmanager
def hold_run_folder(out: Path) -> Iterator[None]:
    """Hold ``out`` (created if missing) for the block: :class:`RunFolderBusy` at once if another run holds it."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / LOCK_FILE
    while True:
        fd = _open_lock(path, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _recorded_pid(fd)
            os.close(fd)
            raise _busy(out, pid) from None
        try:  # the file may have been removed by the run that held it, between our open and our lock
            if _same_file(os.lstat(path), os.fstat(fd)):
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # a lock on a removed file guards nothing: take the new one
    try:
        os.ftruncate(fd, 0)  # a killed run's process id, if it left one
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        with contextlib.suppress(OSError):
            if _same_file(os.lstat(path), os.fstat(fd)):  # not what someone put in its place since
                path.unlink()  # removed while still locked: a run waiting on the old file tries again
        os.close(fd)


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


__all__ = ["LOCK_FILE", "RunFolderBusy", "check_out", "check_free", "hold_run_folder"]
