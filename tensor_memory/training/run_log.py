"""A run folder that can be followed while training goes on: a header, addressing records line by line, snapshots.

Whoever trains writes it — ``tensor-memory train`` into its output folder at every evaluation, ``analysis.monitor``
from anyone's own loop — and ``analysis.traces.run_log`` reads and follows it. The layout is in docs/formats.md:
``run.json`` (what was run, written once), ``run_log.jsonl`` (one JSON object per recorded step, appended whole and
flushed, so a reader sees complete lines and at most one cut last line) and ``snapshots/`` (traces of a probe).
Each record holds, per memory layer, the inputs of the addressing verdict (:func:`layer_summary`).
"""

from __future__ import annotations

import datetime
import json
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

from ..memory import Recording, memory_layers
from ..memory.measures import layer_measures, occupancy
from ..storage.files import append_line, atomic_write_text, check_file_place, check_folder_place
from ..storage.user_files import check_plain_name

RUN_FORMAT = "tensor-memory-run"
RUN_VERSION = 1
HEADER_FILE = "run.json"
RECORDS_FILE = "run_log.jsonl"
SNAPSHOTS = "snapshots"
SNAPSHOT_SUFFIX = ".trace.safetensors"


def snapshot_name(step: int) -> str:
    """The snapshot file of ``step``: zero-padded, so names sort as steps do."""
    return f"step-{step:010d}{SNAPSHOT_SUFFIX}"


def finite_or_none(value: Any) -> float | None:
    """``value`` as a float, or None where it is missing or not finite (JSON has no NaN)."""
    if value is None:
        return None
    value = float(value.item() if hasattr(value, "item") else value)  # a tensor's or numpy number's too
    return value if math.isfinite(value) else None


def layer_summary(record: Any, grid: tuple[int, int, int]) -> dict[str, float | None]:
    """One layer's record of a probe: its addressing measures (``memory/measures.py``: write spread, median σ,
    read→write distance, boundary fraction, σ(γ), gate means when recorded) and its occupancy (the share of voxels
    some write reaches at ≥ e⁻²); a value that is not finite becomes None."""
    summary = {**layer_measures(record, grid), "occupancy": occupancy(record.mu_write, record.sigma, grid)}
    return {name: finite_or_none(value) for name, value in summary.items()}


def summaries(
    recording: Recording | None, model: nn.Module, measure: Callable[..., dict[str, float | None]] = layer_summary
) -> dict[str, dict[str, float | None]]:
    """{layer path: ``measure``(its record, its grid)} of every layer ``recording`` holds; {} for no recording."""
    if recording is None:
        return {}
    grids = {name: memory.config.grid for name, memory in memory_layers(model).items()}
    return {name: measure(layer, grids[name]) for name, layer in recording.layers.items()}


def memory_layout(model: nn.Module) -> dict[str, dict[str, Any]]:
    """{layer path: {"grid": [D, H, W], "channels": C}} of every memory layer of ``model``."""
    return {
        name: {"grid": list(memory.config.grid), "channels": memory.config.channels}
        for name, memory in memory_layers(model).items()
    }


def check_run_folder(folder: Path, where: str) -> None:
    """A ValueError saying what to do when ``folder`` cannot hold a run: a file, a link, an odd name."""
    check_plain_name(folder, where)
    if folder.is_symlink():
        raise ValueError(f"{where} {folder}: is a symbolic link; give the folder itself")
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{where} {folder}: is a file, not a folder; choose a folder for the run")


class RunLog:
    """The writer of one run folder: its header once, then one record per recorded step."""

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.folder = Path(folder)
        self.records = self.folder / RECORDS_FILE
        self.snapshots = self.folder / SNAPSHOTS

    def start(self, model: nn.Module, every: int, snapshot_every: int | None, **about: Any) -> RunLog:
        """Begin a fresh run: the header written (``about`` adds its own keys, e.g. the writer and the probe),
        the records emptied, earlier snapshots removed."""
        self.folder.mkdir(parents=True, exist_ok=True)
        header = {
            "format": RUN_FORMAT,
            "version": RUN_VERSION,
            "model": type(model).__name__,
            "layers": memory_layout(model),
            "every": every,
            "snapshot_every": snapshot_every,
            "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
            **about,
        }
        check_folder_place(self.snapshots)  # a symbolic link there is refused, before anything is written
        earlier = sorted(self.snapshots.glob(f"*{SNAPSHOT_SUFFIX}"))
        for old in earlier:  # only regular files are removed: a link or a folder of that name is refused
            check_file_place(old)
        atomic_write_text(self.records, "")
        atomic_write_text(self.folder / HEADER_FILE, json.dumps(header, indent=2) + "\n")
        for old in earlier:
            old.unlink(missing_ok=True)
        return self

    def append(
        self,
        step: int,
        layers: dict[str, dict[str, float | None]],
        loss: float | None = None,
        metrics: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Append the record of ``step`` as one whole line, flushed to the file; returns it."""
        entry: dict[str, Any] = {"step": int(step), "time": round(time.time(), 3)}
        if loss is not None:
            entry["loss"] = finite_or_none(loss)
        if metrics:
            entry["metrics"] = {name: finite_or_none(value) for name, value in metrics.items()}
        entry["layers"] = layers
        append_line(self.records, json.dumps(entry, allow_nan=False) + "\n")
        return entry

    def snapshot_path(self, step: int) -> Path:
        """Where the snapshot of ``step`` goes (its folder made; a symbolic link there is refused)."""
        check_folder_place(self.snapshots)
        self.snapshots.mkdir(exist_ok=True)
        return self.snapshots / snapshot_name(step)


__all__ = [
    "RUN_FORMAT",
    "RUN_VERSION",
    "HEADER_FILE",
    "RECORDS_FILE",
    "SNAPSHOTS",
    "SNAPSHOT_SUFFIX",
    "snapshot_name",
    "finite_or_none",
    "layer_summary",
    "summaries",
    "memory_layout",
    "check_run_folder",
    "RunLog",
]
