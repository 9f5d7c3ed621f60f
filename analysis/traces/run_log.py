"""A run folder (docs/formats.md), read with checks and followed while the run writes it.

``tensor_memory.training.run_log`` writes it (``tensor-memory train``, ``analysis.monitor``). :class:`RunFollower`
opens it — the header checked, anything that is not a run folder refused in one line — and :meth:`RunFollower.poll`
reads only the bytes appended since the last poll, never rereading: complete lines become checked records, a cut
last line waits until its newline arrives. A records file replaced by a shorter one (a resumed ``train`` trims the
steps it redoes) is read again from its start, and ``restarted`` says so. :meth:`RunFollower.history` is the
addressing history ``addressing_history_figure`` draws; :meth:`RunFollower.newest_snapshot` the latest trace.
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path
from typing import Any

from analysis.traces.training_log import addressing_history
from tensor_memory.errors import FileFormatError
from tensor_memory.storage.user_files import read_user_file, strict_json
from tensor_memory.training.run_log import HEADER_FILE, RECORDS_FILE, RUN_FORMAT, RUN_VERSION, SNAPSHOTS

MAX_HEADER_BYTES = 64 * 1024  # a header names a few layers: a few hundred bytes
MAX_LINE_BYTES = 1024 * 1024  # one record: ~300 bytes a layer
MAX_RECORDS_BYTES = 256 * 1024 * 1024  # 10⁵ records of several layers fit well under this
SNAPSHOT_NAME = re.compile(r"^step-(\d{10})\.trace\.safetensors$")
RECORD_KEYS = {"step", "time", "loss", "metrics", "layers"}
FIX = "; open the folder `train` or `analysis.monitor` wrote"


def _number_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))


def _count(value: Any, least: int = 1) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


def _not_a_link(path: Path, what: str) -> None:
    if path.is_symlink():
        raise FileFormatError(f"{path}: is a symbolic link, not {what}{FIX}")


def read_header(folder: Path) -> dict[str, Any]:
    """The checked ``run.json`` of ``folder``; a FileFormatError naming what is wrong."""
    path = folder / HEADER_FILE
    _not_a_link(folder, "a run folder")
    if not folder.is_dir():
        raise FileFormatError(f"{folder}: is not a folder{FIX}")
    _not_a_link(path, "a run header")
    try:
        header = strict_json(read_user_file(path, MAX_HEADER_BYTES, "a run header", FIX).decode())
    except FileNotFoundError:
        raise FileFormatError(f"{folder}: not a run folder (no {HEADER_FILE}){FIX}") from None
    except (ValueError, UnicodeDecodeError, RecursionError) as error:
        raise FileFormatError(f"{path}: not JSON ({error}){FIX}") from None
    if not isinstance(header, dict) or header.get("format") != RUN_FORMAT:
        raise FileFormatError(f"{path}: not a run header (format is not {RUN_FORMAT!r}){FIX}")
    if header.get("version") != RUN_VERSION:
        raise FileFormatError(
            f"{path}: run format version {header.get('version')!r}; this reader reads version {RUN_VERSION} "
            f"(update the explorer for a newer one)"
        )
    layers = header.get("layers")
    good_layers = isinstance(layers, dict) and all(
        isinstance(spec, dict)
        and isinstance(spec.get("grid"), list)
        and len(spec["grid"]) == 3
        and all(_count(n) for n in spec["grid"])
        and _count(spec.get("channels"))
        for spec in layers.values()
    )
    snapshot_every = header.get("snapshot_every")
    if not (
        good_layers
        and isinstance(header.get("model"), str)
        and _count(header.get("every"))
        and (snapshot_every is None or _count(snapshot_every))
        and isinstance(header.get("started"), str)
    ):
        raise FileFormatError(
            f"{path}: a run header needs model (text), layers ({{path: {{grid: [D, H, W], channels}}}}), "
            f"every and snapshot_every (steps) and started{FIX}"
        )
    return header


def _prefixed(metrics: dict[str, Any]) -> dict[str, Any]:
    """A record's metrics named as a training log names its validation metrics."""
    return {f"val_{name}": value for name, value in metrics.items()}


def check_record(entry: Any, layers: dict[str, Any]) -> str | None:
    """What is wrong with one parsed record (None when it is a good one)."""
    if not isinstance(entry, dict):
        return "not a JSON object"
    if set(entry) - RECORD_KEYS:
        return f"unexpected keys {sorted(set(entry) - RECORD_KEYS)}"
    if not _count(entry.get("step"), 0):
        return "'step' must be a whole number ≥ 0"
    if not (_number_or_none(entry.get("time")) and _number_or_none(entry.get("loss"))):
        return "'time' and 'loss' must be finite numbers (or null)"
    metrics = entry.get("metrics", {})
    if not isinstance(metrics, dict) or not all(_number_or_none(v) for v in metrics.values()):
        return "'metrics' must map names to finite numbers (or null)"
    recorded = entry.get("layers")
    if not isinstance(recorded, dict):
        return "'layers' must be an object"
    for name, measures in recorded.items():
        if name not in layers:
            return f"layer {name!r} is not one of the header's layers"
        if not isinstance(measures, dict) or not all(_number_or_none(v) for v in measures.values()):
            return f"layer {name!r}: measures must be finite numbers (or null)"
    return None


class RunFollower:
    """A run folder opened with checks, its records read as they are appended (see the module docstring)."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self.header = read_header(self.folder)
        self.path = self.folder / RECORDS_FILE
        self.records: list[dict[str, Any]] = []
        self.restarted = False  # the last poll found the records file replaced and read it again from its start
        self._offset = 0  # bytes of the file consumed, the cut last line's included
        self._pending = b""  # the cut last line, kept until its newline arrives
        self._lines = 0  # complete lines read
        self._identity: tuple[int, int] | None = None  # (device, inode) of the file read

    def poll(self) -> list[dict[str, Any]]:
        """The records appended since the last poll, checked (after a restart: every record, anew)."""
        self.restarted = False
        data = self._read_new()
        lines = (self._pending + data).split(b"\n")
        pending = lines.pop()  # b"" after a complete line; else a line still being written
        if len(pending) > MAX_LINE_BYTES:
            raise FileFormatError(f"{self.path}: a line longer than {MAX_LINE_BYTES:,} bytes{FIX}")
        new = [self._parse(raw, self._lines + number) for number, raw in enumerate(lines, start=1)]
        new = [entry for entry in new if entry is not None]
        self._offset += len(data)
        self._pending, self._lines = pending, self._lines + len(lines)
        self.records.extend(new)
        return list(self.records) if self.restarted else new

    def _read_new(self) -> bytes:
        """The bytes past the offset, up to the file's size now; restarts when the file was replaced or cut."""
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
        try:
            fd = os.open(self.path, flags)
        except FileNotFoundError:
            raise FileFormatError(f"{self.folder}: not a run folder (no {RECORDS_FILE}){FIX}") from None
        except OSError as error:  # ELOOP: the name is a symbolic link
            raise FileFormatError(f"{self.path}: cannot read the run's records ({error.strerror}){FIX}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise FileFormatError(f"{self.path}: is not a regular file{FIX}")
            if info.st_size > MAX_RECORDS_BYTES:
                raise FileFormatError(f"{self.path}: over the {MAX_RECORDS_BYTES:,}-byte limit of a run's records")
            identity = (info.st_dev, info.st_ino)
            if self._identity is not None and (identity != self._identity or info.st_size < self._offset):
                self.records, self._offset, self._pending, self._lines, self.restarted = [], 0, b"", 0, True
            self._identity = identity
            parts, at = [], self._offset
            while at < info.st_size:  # what was there when we looked; later appends wait for the next poll
                got = os.pread(fd, info.st_size - at, at)
                if not got:
                    break
                parts.append(got)
                at += len(got)
            return b"".join(parts)
        finally:
            os.close(fd)

    def _parse(self, raw: bytes, number: int) -> dict[str, Any] | None:
        if not raw.strip():
            return None
        if len(raw) > MAX_LINE_BYTES:
            raise FileFormatError(f"{self.path}, line {number}: longer than {MAX_LINE_BYTES:,} bytes{FIX}")
        try:
            entry = strict_json(raw.decode())
        except (ValueError, UnicodeDecodeError, RecursionError) as error:
            raise FileFormatError(f"{self.path}, line {number}: not JSON ({error}){FIX}") from None
        problem = check_record(entry, self.header["layers"])
        if problem:
            raise FileFormatError(f"{self.path}, line {number}: {problem}{FIX}")
        return entry

    def history(self, metric: str | None = None) -> dict[str, Any]:
        """The records so far as ``analysis.traces.training_log.addressing_history`` gives them: with the run's
        validation ``metric`` (default accuracy, when the records carry metrics), else the training loss."""
        with_metrics = [entry for entry in self.records if entry.get("metrics")]
        if with_metrics:
            names = {name for entry in with_metrics for name in entry["metrics"]}
            metric = metric or ("accuracy" if "accuracy" in names else sorted(names)[0])
            entries = [
                {"step": e["step"], "addressing": e["layers"], **_prefixed(e.get("metrics", {}))} for e in self.records
            ]
            return addressing_history(entries, metric)
        entries = [{"step": e["step"], "addressing": e["layers"], "val_loss": e.get("loss")} for e in self.records]
        return {**addressing_history(entries, "loss"), "metric_label": "training loss", "metric_unit": ""}

    def newest_snapshot(self) -> Path | None:
        """The snapshot trace of the latest step (a regular file named as the writer names them), or None."""
        folder = self.folder / SNAPSHOTS
        if folder.is_symlink() or not folder.is_dir():
            return None
        found = [
            (int(match.group(1)), Path(entry.path))
            for entry in os.scandir(folder)
            if (match := SNAPSHOT_NAME.match(entry.name)) and entry.is_file(follow_symlinks=False)
        ]
        return max(found)[1] if found else None


def follow_run(folder: str | os.PathLike[str]) -> RunFollower:
    """A :class:`RunFollower` of ``folder`` that has read every record written so far."""
    follower = RunFollower(folder)
    follower.poll()
    return follower


__all__ = ["RunFollower", "follow_run", "read_header", "check_record", "MAX_LINE_BYTES", "MAX_RECORDS_BYTES"]
