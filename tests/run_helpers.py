"""Run folders for the app's tests: one written record by record with the run log's writer, whose layer's writes
collapse to one place from a known step."""

from __future__ import annotations

from pathlib import Path

from torch import nn

from tensor_memory import MemoryConfig, TensorMemory
from tensor_memory.training.run_log import RunLog

LAYER = "blocks.3"
EVERY = 250
ONSET = 1250  # from this step on the writes stay within 0.2 voxels of one point: a coordinate collapse


def model() -> nn.Module:
    """Three plain blocks and a memory layer, at the path ``blocks.3``."""
    module = nn.Module()
    memory = TensorMemory(MemoryConfig(token_dim=8, channels=2, grid=(4, 4, 4), chunk_size=2))
    module.blocks = nn.ModuleList([nn.Identity(), nn.Identity(), nn.Identity(), memory])
    return module


def measures(step: int, collapsed: bool | None = None) -> dict[str, dict[str, float]]:
    """The layer's record at ``step``: its write spread falls from 2 voxels and, from ONSET on (or as ``collapsed``
    says), stays at 0.2; the other measures stay healthy."""
    collapsed = step >= ONSET if collapsed is None else collapsed
    spread = 0.2 if collapsed else max(2.0 - step / 1000, 0.6)
    return {
        LAYER: {
            "write_spread_voxels": spread,
            "sigma_voxels": 1.0,
            "read_write_distance_voxels": 1.0,
            "boundary_fraction": 0.1,
            "occupancy": 0.4,
            "gate_scale": 0.3,
        }
    }


def start_run(folder: Path, last: int = 2000) -> RunLog:
    """A run folder holding the records of steps 0, EVERY, …, ``last``; its writer, to append more."""
    log = RunLog(folder).start(model(), every=EVERY, snapshot_every=None, writer="tests")
    for step in range(0, last + 1, EVERY):
        log.append(step, measures(step), loss=1.0 / (1 + step / 100))
    return log
