"""A checkpoint's training log, read back: how its addressing developed over the training steps.

Training writes, at every evaluation, the validation metrics and each memory layer's addressing
measures (``tensor_memory.memory.measures``) into ``train_log.jsonl``, which
``tensor_memory.training.log.read_training_log`` reads with its checks. :func:`addressing_history`
turns its entries into one series per measure (``analysis/figures/training.py`` plots them against
the step, so a collapse shows when it happened).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def addressing_history(entries: list[dict[str, Any]], metric: str = "accuracy") -> dict[str, Any]:
    """``{"layers": {layer: {measure: (steps, values)}}, "val_<metric>": (steps, values), "metric": metric}``.

    ``metric`` is the validation metric to follow (the task's headline: accuracy, or masked patches' psnr).
    Series are numpy arrays in step order; a measure a log entry lacks (or logged as null) is left
    out of that series rather than drawn as zero. Logs written before training recorded
    addressing give empty ``layers``.
    """
    layers: dict[str, dict[str, list[tuple[int, float]]]] = {}
    accuracy: list[tuple[int, float]] = []
    for entry in entries:
        step = entry["step"]
        value = entry.get(f"val_{metric}")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            accuracy.append((step, float(value)))
        addressing = entry.get("addressing")
        if not isinstance(addressing, dict):
            continue
        for layer, measures in addressing.items():
            if not isinstance(measures, dict):
                continue
            for name, value in measures.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    layers.setdefault(layer, {}).setdefault(name, []).append((step, float(value)))

    def series(points: list[tuple[int, float]]) -> tuple[np.ndarray, np.ndarray]:
        points = sorted(points)
        return np.array([p[0] for p in points], dtype=np.int64), np.array([p[1] for p in points])

    return {
        "layers": {
            layer: {name: series(points) for name, points in measures.items()} for layer, measures in layers.items()
        },
        f"val_{metric}": series(accuracy),
        "metric": metric,
    }


__all__ = ["addressing_history"]
