"""Every figure of the explorer: Plotly pictures of traces and measures, PyVista renderings, exports.

``base`` holds what every figure shares, ``state`` the volumes, ``addressing`` the trajectories,
σ and gates, ``timeline`` predictions and frames; the other modules draw one view each, ``render``
and ``frames`` render volumes with PyVista off-screen, ``report`` writes the offline report and
``export`` turns figures into HTML and PNG files.

The figure builders are pure: they read numpy arrays (or a :class:`~analysis.traces.trace.LayerTrace`
or :class:`~analysis.traces.trace.Trace`), never modify them, and return a new
``plotly.graph_objects.Figure`` (no Streamlit, no external resources, the same figure for the
same inputs). Wrong shapes raise ``ValueError`` naming the argument and the shape expected.

Conventions, as in the mechanism (``tensor_memory/memory/``):

* a state volume is ``(C, D, H, W)``; ``analysis.measures.volumes.volume_values`` reduces it to ``(D, H, W)``;
* 3D axes are voxel indices: x along W, y along H, z along D;
* coordinates ``mu`` are ``(x, y, z)`` in ``[-1, 1]`` with voxel centres at ``linspace(-1, 1, n)``,
  so a coordinate sits at voxel ``(mu + 1)(n - 1)/2`` (``tensor_memory.memory.geometry.in_voxels``) and a
  spread σ covers ``σ(n - 1)/2`` voxel spacings;
* time plots have the chunk index on x and mark the current chunk with a dashed vertical line.
"""

from analysis.figures.addressing import GATE_LINES, gates_figure, sigma_figure, trajectory_figure
from analysis.figures.base import (
    AXIS_TITLES,
    COLORSCALE,
    CURRENT_COLOUR,
    MARGIN,
    PREDICTION_COLOUR,
    READ_COLOUR,
    TEMPLATE,
    TRUTH_COLOUR,
    WRITE_COLOUR,
    chunk_span,
    finish,
    flag_runs,
    mark_current,
    rgb,
    templated,
    use_template_by_default,
    voxel_scene,
)
from analysis.figures.state import slices_figure, volume_figure
from analysis.figures.timeline import belief_figure, frame_figure, timeline_figure

__all__ = [
    "TEMPLATE",
    "MARGIN",
    "COLORSCALE",
    "READ_COLOUR",
    "WRITE_COLOUR",
    "CURRENT_COLOUR",
    "TRUTH_COLOUR",
    "PREDICTION_COLOUR",
    "AXIS_TITLES",
    "GATE_LINES",
    "finish",
    "templated",
    "use_template_by_default",
    "rgb",
    "flag_runs",
    "chunk_span",
    "voxel_scene",
    "mark_current",
    "volume_figure",
    "slices_figure",
    "trajectory_figure",
    "sigma_figure",
    "gates_figure",
    "timeline_figure",
    "belief_figure",
    "frame_figure",
]
