"""What every figure shares: colours, the compact layout, the current-chunk marker."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

TEMPLATE = "plotly_white"
MARGIN = dict(l=10, r=10, t=40, b=10)
COLORSCALE = "Viridis"
READ_COLOUR = (31, 119, 180)  # blue
WRITE_COLOUR = (214, 39, 40)  # red
CURRENT_COLOUR = "#444444"
TRUTH_COLOUR = "#2ca02c"
PREDICTION_COLOUR = "#ff7f0e"
AXIS_TITLES = {"x": "x (W)", "y": "y (H)", "z": "z (D)"}


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
