"""A run's ``train_log.jsonl``: one JSON object per line with an integer ``step``, read with checks.

The trainer appends to it and, on resume, keeps the entries of the steps it will not redo; the
analysis reads it to plot the addressing over training. Both read it here: within a size cap, each
line one JSON object with an integer ``step``, and anything else named by file and line. A last line
cut short by a killed run (no newline, not JSON) is what a kill mid-write leaves: :func:`read_training_log`
with ``allow_cut_last_line`` drops it, since the resumed run redoes that step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..storage.files import append_line, check_folder_place
from ..storage.user_files import read_user_file

LOG_FILE = "train_log.jsonl"
TENSORBOARD = "tensorboard"  # the folder of TensorBoard's event files, in the run's
MAX_LOG_BYTES = 64 * 1024 * 1024  # a log of 10⁵ evaluations is well under this


def read_training_log(path: str | Path, allow_cut_last_line: bool = False) -> list[dict[str, Any]]:
    """The entries of a ``train_log.jsonl`` (a file, or the checkpoint folder holding one).

    Raises ``ValueError`` naming the file and the first bad line for anything that is not one JSON
    object with an integer ``step`` per line; a missing file is a ``FileNotFoundError``.
    """
    path = Path(path)
    if path.is_dir():
        path = path / LOG_FILE
    try:
        lines = read_user_file(path, MAX_LOG_BYTES, "a training log", "; pass the train_log.jsonl the run wrote").split(
            b"\n"
        )
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path}: no training log (checkpoints written by `tensor-memory train` have one)"
        ) from None
    entries = []
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            entry = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            if allow_cut_last_line and number == len(lines):  # no newline after it: cut short by a kill
                break
            raise ValueError(
                f"{path}, line {number}: not JSON ({error}); was the run killed while "
                f"writing it? Delete that line to read the rest"
            ) from None
        step = entry.get("step") if isinstance(entry, dict) else None
        if isinstance(step, bool) or not isinstance(step, int):
            raise ValueError(f"{path}, line {number}: expected an object with an integer 'step'")
        entries.append(entry)
    return entries


def append_entry(path: Path, writer, entry: dict[str, Any]) -> None:
    """One entry at the end of the log, and its numbers to TensorBoard when a ``writer`` is open."""
    append_line(path, json.dumps(entry) + "\n")
    if writer is not None:
        for key, value in scalars(entry):
            writer.add_scalar(key, value, entry["step"])


def scalars(entry: dict[str, Any], prefix: str = ""):
    """(name, number) of every numeric value in a log entry but the step; nested names joined with '/'."""
    for key, value in entry.items():
        if isinstance(value, dict):
            yield from scalars(value, f"{prefix}{key}/")
        elif key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
            yield f"{prefix}{key}", value


def tensorboard_writer(out: Path):
    """A TensorBoard event writer in ``out/tensorboard`` when tensorboard is installed, else None."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    check_folder_place(out / TENSORBOARD)  # its event files stay in ``out``
    return SummaryWriter(str(out / TENSORBOARD))


__all__ = [
    "LOG_FILE",
    "TENSORBOARD",
    "MAX_LOG_BYTES",
    "read_training_log",
    "append_entry",
    "scalars",
    "tensorboard_writer",
]
