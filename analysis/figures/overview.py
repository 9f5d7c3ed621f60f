"""The overview of a whole trace: one row per :func:`~analysis.measures.overview.chunk_overview` series over every
chunk, the page of chunks loaded for stepping shaded and the current chunk marked, to find where to look."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from analysis.figures.base import CURRENT_COLOUR, finish
from analysis.measures.overview import SERIES

MAX_POINTS = 1000  # per row: a longer trace is drawn as the mean of equal bins of chunks


def _edges(K: int, bins: int) -> np.ndarray:
    """The ``bins + 1`` edges of ``bins`` equal runs of ``K`` chunks (their lengths differ by at most one)."""
    return np.linspace(0, K, bins + 1).round().astype(int)


def bin_note(K: int, bins: int) -> str:
    """How many chunks each of :func:`binned`'s points averages, in words: "2 chunks", "2 or 3 chunks" (K > bins)."""
    sizes = np.diff(_edges(K, bins))
    low, high = int(sizes.min()), int(sizes.max())
    return f"{low} or {high} chunks" if low != high else f"{low} chunks"  # K > bins: a run holds 2 or more


def binned(values: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """(centres, means): ``values`` (K,) averaged over ``bins`` equal runs of chunks (NaNs left out; a run of only
    NaN gives NaN); the chunks themselves when K ≤ bins."""
    K = len(values)
    if K <= bins:
        return np.arange(K, dtype=np.float64), values
    edges = _edges(K, bins)
    sums = np.add.reduceat(np.nan_to_num(values), edges[:-1])
    counts = np.add.reduceat(np.isfinite(values).astype(np.int64), edges[:-1])
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.where(counts > 0, sums / np.maximum(counts, 1), np.nan)
    return (edges[:-1] + edges[1:] - 1) / 2.0, means


def overview_figure(
    overview: dict[str, np.ndarray], current: int, span: tuple[int, int] | None = None, max_points: int = MAX_POINTS
) -> go.Figure:
    """Each series of ``overview`` over the chunks (binned past ``max_points``), ``span`` (first, last) shaded as
    the chunks loaded, chunk ``current`` marked. A click on a point names its chunk (the app jumps there)."""
    rows = [name for name in overview if name in SERIES]
    if not rows:
        raise ValueError("the overview has no series to draw (a trace without predictions or memory layers)")
    K = len(overview[rows[0]])
    if not 0 <= current < K:
        raise ValueError(f"current must be in 0..{K - 1}, got {current}")
    fig = make_subplots(rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=0.02)
    binned_note = K > max_points
    for row, name in enumerate(rows, start=1):
        x, y = binned(np.asarray(overview[name], dtype=np.float64), max_points)
        short, meaning = SERIES[name]
        label = meaning + (" (mean of a bin)" if binned_note else "")
        fig.add_trace(
            go.Scatter(
                x=x,
                y=y,
                mode="lines" if K > 80 else "lines+markers",
                name=short,
                connectgaps=False,
                line=dict(width=1),
                hovertemplate=f"chunk %{{x:.0f}}<br>{label} = %{{y:.3f}}<extra></extra>",
            ),
            row=row,
            col=1,
        )
        fig.update_yaxes(title_text=short, title_font=dict(size=11), row=row, col=1)
        if span is not None:
            fig.add_vrect(
                x0=span[0] - 0.5,
                x1=span[1] + 0.5,
                fillcolor="#ff7f0e",
                opacity=0.15,
                line_width=0,
                layer="below",
                row=row,
                col=1,
            )
        fig.add_vline(x=current, line_dash="dash", line_color=CURRENT_COLOUR, line_width=1, row=row, col=1)
    fig.update_xaxes(title_text="chunk", row=len(rows), col=1)
    title = f"the whole trace, {K:,} chunks" + (
        f" (each point the mean of {bin_note(K, max_points)})" if binned_note else ""
    )
    return finish(fig, title, height=90 + 95 * len(rows), showlegend=False, hovermode="x unified")


__all__ = ["overview_figure", "binned", "bin_note", "MAX_POINTS"]
