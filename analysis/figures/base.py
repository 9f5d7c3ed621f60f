"""What every figure shares: colours, the compact layout, validation of inputs, the current-chunk marker."""

from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import plotly.graph_objects as go
from numpy.typing import ArrayLike

TEMPLATE = "plotly_white"
MARGIN = dict(l=10, r=10, t=40, b=10)
COLORSCALE = "Viridis"
READ_COLOUR = (31, 119, 180)  # blue
WRITE_COLOUR = (214, 39, 40)  # red
CURRENT_COLOUR = "#444444"
TRUTH_COLOUR = "#2ca02c"
PREDICTION_COLOUR = "#ff7f0e"
AXIS_TITLES = {"x": "x (W)", "y": "y (H)", "z": "z (D)"}
VOLUME_MODES = ("norm", "channel", "pca")


# ---------------------------------------------------------------------------------------
# Validation and shared layout
# ---------------------------------------------------------------------------------------

def check_array(value: ArrayLike, ndim: int, name: str, expected: str) -> np.ndarray:
    """``value`` as an array with ``ndim`` dimensions, or a ValueError naming the expected shape."""
    array = np.asarray(value)
    if array.ndim != ndim:
        raise ValueError(f"{name} must have shape {expected}, got shape {tuple(array.shape)}")
    return array


def check_index(value: int, size: int, name: str) -> int:
    """``value`` as an index into ``size`` items, or a ValueError giving the valid range."""
    index = int(value)
    if not 0 <= index < size:
        raise ValueError(f"{name} must be in 0..{size - 1}, got {value}")
    return index


def colour_range(values: np.ndarray, value_range: Optional[Sequence[float]] = None) -> tuple[float, float]:
    """(low, high) for colours: ``value_range`` when given (high > low), else the data's range.

    Constant data gets (value, value + 1), so it shows as the low end rather than an arbitrary colour.
    """
    if value_range is not None:
        low, high = (float(v) for v in value_range)
        if not high > low:
            raise ValueError(f"value_range must be (low, high) with high > low, got {tuple(value_range)}")
        return low, high
    low, high = float(values.min()), float(values.max())
    return (low, high) if high > low else (low, low + 1.0)


def finish(fig: go.Figure, title: str, **layout) -> go.Figure:
    """The shared compact layout: white template, small margins, the title top left."""
    fig.update_layout(template=TEMPLATE, margin=MARGIN, title=dict(text=title, x=0.01, font=dict(size=14)),
                      **layout)
    return fig


def voxel_scene() -> dict:
    """A 3D scene in voxel-index axes with true proportions."""
    return dict(xaxis=dict(title=AXIS_TITLES["x"]), yaxis=dict(title=AXIS_TITLES["y"]),
                zaxis=dict(title=AXIS_TITLES["z"]), aspectmode="data")


def mark_current(fig: go.Figure, current: int) -> None:
    """A dashed vertical line at chunk ``current``."""
    fig.add_vline(x=current, line_dash="dash", line_color=CURRENT_COLOUR, line_width=1,
                  annotation_text=f"chunk {current}", annotation_position="top right")


def rgb(colour: tuple[int, int, int], white: float = 0.0) -> str:
    """``colour`` mixed with a fraction ``white`` of white, as a CSS rgb string."""
    r, g, b = (round(c + (255 - c) * white) for c in colour)
    return f"rgb({r},{g},{b})"


def flag_runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) index of each run of True in a 1D boolean array."""
    padded = np.concatenate([[False], flags.astype(bool), [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [(int(a), int(b) - 1) for a, b in zip(edges[::2], edges[1::2])]
