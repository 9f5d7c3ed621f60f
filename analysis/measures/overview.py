"""A whole trace at a glance, one number per chunk: how well the model predicts and how the memory addresses.

What the overview of a long trace plots (:func:`analysis.figures.overview.overview_figure`) to find the chunks
worth stepping through: p(target) and right/wrong (or a reconstruction's error), and for a memory layer the
write spread σ, how far the write moved since the chunk before, how far the read lands from the nearest earlier
write, and the energy ‖h‖² the memory holds.
"""

from __future__ import annotations

import numpy as np

from analysis.measures.images import chunk_errors
from analysis.traces.trace import Trace
from tensor_memory.memory.geometry import in_voxels
from tensor_memory.memory.measures import sigma_unit

# Each series: (the overview row's short name, what it is).
SERIES = {
    "p_target": ("p(target)", "p(target)"),
    "correct": ("right", "right (1) or wrong (0)"),
    "error": ("error", "RMS pixel error"),
    "sigma_voxels": ("σ", "write σ (voxels)"),
    "write_step_voxels": ("step", "how far the write moved since the chunk before (voxels)"),
    "read_to_write_voxels": ("read→write", "the read's distance to the nearest earlier write (voxels)"),
    "energy": ("Σ‖h‖²", "the energy the memory holds, Σ‖h‖²"),
}


def chunk_overview(trace: Trace, layer: str | None = None) -> dict[str, np.ndarray]:
    """Ordered ``{series: (K,) float64}`` of :data:`SERIES`, NaN where a chunk has no value (an unscored chunk's
    p(target); chunk 0's step and read distance). The memory's series need ``layer`` (a layer name)."""
    out: dict[str, np.ndarray] = {}
    if trace.predicts_values:
        out["error"] = np.asarray(chunk_errors(trace), dtype=np.float64)
    elif trace.has_predictions:
        p_target, _ = trace.target_probabilities()
        scored = np.asarray(trace.chunks["scored"], dtype=bool) & (np.asarray(trace.chunks["target"]) >= 0)
        right = np.asarray(trace.chunks["prediction"]) == np.asarray(trace.chunks["target"])
        out["p_target"] = p_target.astype(np.float64)
        out["correct"] = np.where(scored, right.astype(np.float64), np.nan)
    if layer is None:
        return out
    lay = trace.layer(layer)
    grid = lay.grid
    out["sigma_voxels"] = np.asarray(lay.sigma, dtype=np.float64) / sigma_unit(grid)  # as the addressing report
    writes = in_voxels(np.asarray(lay.mu_write, dtype=np.float64), grid)  # (K, 3)
    out["write_step_voxels"] = np.concatenate([[np.nan], np.linalg.norm(np.diff(writes, axis=0), axis=1)])
    summary = trace.summary(layer)  # the read distances and energies, measured once a segment at a time
    out["read_to_write_voxels"] = summary["read_to_write_voxels"].copy()  # the trace's own stay as they are
    out["energy"] = summary["energy"].copy()
    return out


__all__ = ["chunk_overview", "SERIES"]
