"""When a collapse began: from an addressing history, the step from which a layer has stayed collapsed.

The criteria are the addressing verdicts' (``analysis.measures.addressing``), on the measures a history follows:
writes within :data:`COLLAPSE_SPREAD_VOXELS` of one point, σ under :data:`SIGMA_COLLAPSE_VOXELS` voxels, over
:data:`BOUNDARY_FRACTION` of the coordinates pinned at a face, σ(γ) under :data:`DEAD_GATE_SCALE`. A collapse
begins at the first step from which its criterion holds at every record through the latest one; a layer that
recovered (the latest record passes) has none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from analysis.measures.addressing import (
    BOUNDARY_FRACTION,
    COLLAPSE_SPREAD_VOXELS,
    DEAD_GATE_SCALE,
    SIGMA_COLLAPSE_VOXELS,
)

# verdict → (the measure of the history it reads, whether a value of it is collapsed), in the order of VERDICTS
CRITERIA: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    "dead memory": ("gate_scale", lambda v: v < DEAD_GATE_SCALE),
    "coordinate collapse": ("write_spread_voxels", lambda v: v < COLLAPSE_SPREAD_VOXELS),
    "sigma collapse": ("sigma_voxels", lambda v: v < SIGMA_COLLAPSE_VOXELS),
    "boundary saturation": ("boundary_fraction", lambda v: v > BOUNDARY_FRACTION),
}


def holding_since(steps: np.ndarray, collapsed: np.ndarray) -> int | None:
    """The first step of the run of ``collapsed`` records that reaches the latest one (steps in order), or None."""
    if not len(collapsed) or not collapsed[-1]:
        return None
    passing = np.flatnonzero(~collapsed)
    return int(steps[passing[-1] + 1] if len(passing) else steps[0])


def collapse_onset(history: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """{layer: None, or {"step", "criterion", "onsets"}} for every layer of ``history`` (the shape
    ``analysis.traces.training_log.addressing_history`` gives): ``step`` the earliest onset of the criteria that
    hold now, ``criterion`` its verdict (the first of VERDICTS on a tie), ``onsets`` {verdict: step} of them all."""
    found: dict[str, dict[str, Any] | None] = {}
    for layer, measures in history["layers"].items():
        onsets = {}
        for verdict, (name, collapsed) in CRITERIA.items():
            if name in measures:
                steps, values = measures[name]
                order = np.argsort(steps, kind="stable")
                since = holding_since(np.asarray(steps)[order], collapsed(np.asarray(values, dtype=float)[order]))
                if since is not None:
                    onsets[verdict] = since
        first = min(onsets, key=lambda verdict: onsets[verdict]) if onsets else None  # dicts keep VERDICTS' order
        found[layer] = None if first is None else {"step": onsets[first], "criterion": first, "onsets": onsets}
    return found


__all__ = ["CRITERIA", "collapse_onset", "holding_since"]
