"""What every figure shares: colours, the compact layout, the current-chunk marker."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

# Imported whole before any figure is built: Plotly looks pandas up in sys.modules without importing it, so a figure
# built in one thread while another thread is still importing pandas fails ("partially initialized module 'pandas'
# has no attribute 'Series'"). The app's sessions are threads: eight visitors on a cold server met it. A thread past
# this import has waited on Python's import lock until pandas was complete.
import pandas  # noqa: F401
import plotly.graph_objects as go
import plotly.io as pio

from analysis.figures.stepped import Leaves

TEMPLATE = "plotly_white"
MARGIN = dict(l=10, r=10, t=40, b=10)
TITLE_SIZE, TITLE_PAD = 14, 8  # the title's font and its distance from the figure's top, in pixels
LABEL_SIZE, LABEL_GAP = 12, 4  # an annotation's font when it names none; the gap under the title's line
LINE = 1.3  # a line of text is this many times its font size high
COLORSCALE = "Viridis"
READ_COLOUR = (31, 119, 180)  # blue
WRITE_COLOUR = (214, 39, 40)  # red
CURRENT_COLOUR = "#444444"
TRUTH_COLOUR = "#2ca02c"
PREDICTION_COLOUR = "#ff7f0e"
AXIS_TITLES = {"x": "x (W)", "y": "y (H)", "z": "z (D)"}
# Where a 3D scene's camera stands: Plotly's direction, 1.3 times Plotly's distance (1.25 each), so the box's lower
# corners and their axis titles stay inside a chart 340 px high instead of running off its foot.
SCENE_EYE = dict(x=1.6, y=1.6, z=1.6)


def finish(fig: go.Figure, title: str, **layout) -> go.Figure:
    """The shared compact layout: white template, small margins, the title top left. Labels standing on the plot
    area's top (subplot titles, notes) get their own rows between the title and the plot."""
    margin = {**MARGIN, "t": top_margin(fig), **layout.pop("margin", {})}
    heading = dict(
        text=title, x=0.01, y=1, yref="container", yanchor="top", pad=dict(t=TITLE_PAD), font_size=TITLE_SIZE
    )
    fig.update_layout(**templated(margin=margin, title=heading, **layout))
    return fig


def labels_above(fig: go.Figure) -> float:
    """How far above the plot area, in pixels, the labels standing on its top reach: annotations on the paper's (or
    the first y axis's) top edge anchored at their foot (subplot titles, a band's label, the current chunk's), each
    its ``height`` or its lines of its font, raised by its ``yshift``."""
    return max(
        (
            (label.height or LINE * (label.font.size or LABEL_SIZE) * (1 + (label.text or "").count("<br>")))
            + (label.yshift or 0)
            for label in fig.layout.annotations
            if label.yref in ("paper", "y domain")
            and label.y is not None
            and label.y >= 1
            and label.yanchor == "bottom"
        ),
        default=0.0,
    )


def top_margin(fig: go.Figure) -> int:
    """The top margin that holds the title's line and, under it, :func:`labels_above` (the title's line is kept
    even while it is empty: a stepped figure's title may be filled in later)."""
    above = labels_above(fig)
    return MARGIN["t"] if not above else int(np.ceil(TITLE_PAD + LINE * TITLE_SIZE + LABEL_GAP + above))


def templated(**layout) -> dict:
    """``layout`` with the white template, unless new figures get it anyway: a figure built while :data:`TEMPLATE`
    is Plotly's default (:func:`use_template_by_default`) has it, and setting it again validates and copies the
    whole template, about 10 ms a figure."""
    return layout if pio.templates.default == TEMPLATE else {"template": TEMPLATE, **layout}


def use_template_by_default() -> None:
    """Make :data:`TEMPLATE` Plotly's default template in this process (the app does: it builds many figures)."""
    pio.templates.default = TEMPLATE


def voxel_scene(shape: Sequence[int] | None = None) -> dict:
    """A 3D scene in voxel-index axes with true proportions, seen from :data:`SCENE_EYE`; with the grid's ``shape``
    (D, H, W) the axes span the whole grid whatever is drawn (a point cloud may cover a corner of it)."""
    scene = dict(
        xaxis=dict(title=AXIS_TITLES["x"]),
        yaxis=dict(title=AXIS_TITLES["y"]),
        zaxis=dict(title=AXIS_TITLES["z"]),
        aspectmode="data",
        camera=dict(eye=SCENE_EYE),
    )
    if shape is not None:
        D, H, W = shape
        for axis, n in (("xaxis", W), ("yaxis", H), ("zaxis", D)):
            scene[axis]["range"] = [-0.5, n - 0.5]
        longest = max(shape)
        scene.update(aspectmode="manual", aspectratio=dict(x=W / longest, y=H / longest, z=D / longest))
    return scene


def _marker_label(current: int) -> str:
    return f"chunk {current}"


def mark_current(fig: go.Figure, current: int) -> None:
    """A dashed vertical line at chunk ``current`` (the figure's last shape and last annotation), its label above
    the plot area, clear of the data, over any labels already standing there (:func:`finish` makes room for it)."""
    above = labels_above(fig)
    fig.add_vline(x=current, line_dash="dash", line_color=CURRENT_COLOUR, line_width=1)
    fig.add_annotation(
        x=current,
        xref="x",
        xanchor="left",
        y=1,
        yref="paper",
        yanchor="bottom",
        yshift=above,
        text=_marker_label(current),
        showarrow=False,
    )


def marker_leaves(current: int) -> Leaves:
    """What :func:`mark_current` puts in a figure that differs at chunk ``current`` (see ``stepped``)."""
    current = int(current)
    return Leaves(
        {
            ("layout", "shapes", -1, "x0"): current,
            ("layout", "shapes", -1, "x1"): current,
            ("layout", "annotations", -1, "x"): current,
            ("layout", "annotations", -1, "text"): _marker_label(current),
        }
    )


def chunk_span(span: tuple[int, int] | None, count: int, current: int) -> np.ndarray:
    """The chunks a figure over time draws: all ``count`` of them, or those of ``span`` (first, last), which must
    hold ``current`` (a long trace's figures draw the stepper's window of it, not thousands of chunks each)."""
    if span is None:
        return np.arange(count)
    first, last = (int(i) for i in span)
    if not 0 <= first <= current <= last < count:
        raise ValueError(
            f"span must be (first, last) with 0 <= first <= current <= last < {count}, got {span} "
            f"around chunk {current}"
        )
    return np.arange(first, last + 1)


def rgb(colour: tuple[int, int, int], white: float = 0.0) -> str:
    """``colour`` mixed with a fraction ``white`` of white, as a CSS rgb string."""
    r, g, b = (round(c + (255 - c) * white) for c in colour)
    return f"rgb({r},{g},{b})"


def flag_runs(flags: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) index of each run of True in a 1D boolean array."""
    padded = np.concatenate([[False], flags.astype(bool), [False]])
    edges = np.flatnonzero(padded[1:] != padded[:-1])
    return [(int(a), int(b) - 1) for a, b in zip(edges[::2], edges[1::2], strict=True)]
