"""Where figures put their labels: no label drawn over another, axes that fit what they show, and a box split over
two edges of a frame says why.

Label rows are computed from the layout the way Plotly places them: the title's line at the top of the figure
(a title without a position sits in the middle of the top margin), labels standing on the plot area's top
(subplot titles, notes) above it, each a line of its font high and raised by its ``yshift``.
"""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
import torch

from analysis import capture
from analysis import figures as F
from analysis.figures.chunk_input import LEAVES
from analysis.figures.training import addressing_history_figure
from analysis.figures.video import identity_belief_figure
from analysis.figures.world import write_position_figure
from analysis.traces.training_log import addressing_history
from tensor_memory.tasks.occlusion import render

LINE, LABEL_SIZE = 1.3, 12  # a line of text is 1.3 × its font high; an annotation's font is 12 px unless named
CHECKPOINT = Path(__file__).resolve().parents[1] / "checkpoints" / "occlusion-tensor"


@pytest.fixture(scope="module")
def trace():
    if not CHECKPOINT.exists():
        pytest.skip(f"shipped checkpoint {CHECKPOINT} not found")
    return capture(CHECKPOINT, seed=0, progress=False)


def rows_above(fig) -> list[tuple[str, float, float]]:
    """(text, top, bottom) in pixels from the figure's top of its title and of each label above the plot area."""
    layout = fig.layout
    top = layout.margin.t
    plot_height = (layout.height or 450) - top - layout.margin.b
    title = layout.title
    size = title.font.size or 17
    if title.y is None or title.yref != "container":  # Plotly's "auto": the middle of the top margin
        title_top = top / 2 - LINE * size / 2
    else:
        assert title.y == 1 and title.yanchor == "top"
        title_top = title.pad.t or 0
    rows = [(title.text, title_top, title_top + LINE * size)]
    for label in layout.annotations:
        if label.yref not in ("paper", "y domain") or label.y is None or label.y < 1:  # figures with one y axis
            continue
        lines = 1 + (label.text or "").count("<br>")
        high = label.height or LINE * (label.font.size or LABEL_SIZE) * lines
        foot = top - (label.y - 1) * plot_height - (label.yshift or 0)
        if label.yanchor != "bottom":  # "auto" or "middle": centred on its y
            foot += high / 2
        rows.append((label.text, foot - high, foot))
    return rows


def overlapping(rows: list[tuple[str, float, float]]) -> list[tuple[str, str]]:
    """The pairs of rows that share pixels, or that reach above the figure."""
    pairs = [(a, b) for i, (a, top_a, foot_a) in enumerate(rows) for b, top_b, foot_b in rows[i + 1 :]]
    spans = {text: (top, foot) for text, top, foot in rows}
    clash = [
        (a, b)
        for a, b in pairs
        if spans[a] != spans[b] and min(spans[a][1], spans[b][1]) > max(spans[a][0], spans[b][0])
    ]
    return clash + [(text, "the figure's top") for text, top, _ in rows if top < 0]


def distinct_rows(rows):
    """The rows with one entry per row (subplot titles of one row share their pixels and never meet)."""
    return list({(top, foot): (text, top, foot) for text, top, foot in rows}.values())


def test_the_training_figure_keeps_title_note_and_panel_titles_apart():
    entries = [json.loads(line) for line in (CHECKPOINT / "train_log.jsonl").read_text().splitlines() if line]
    fig = addressing_history_figure(addressing_history(entries), scaffold_steps=300)
    rows = sorted(distinct_rows(rows_above(fig)), key=lambda row: row[1])  # top to bottom
    texts = [text for text, _, _ in rows]
    assert texts == [fig.layout.title.text, "address scaffold, withdrawn by step 300", "validation accuracy"]
    assert overlapping(rows) == []  # title, the scaffold's note, the panels' titles: three rows
    assert overlapping(distinct_rows(rows_above(addressing_history_figure(addressing_history(entries))))) == []


def test_figures_with_panel_titles_keep_them_under_the_title(trace):
    probs, positions, occluded = trace.chunks["probs"], trace.meta["positions"], trace.meta["occluded"]
    belief = F.belief_figure(probs, positions, occluded, frames=[5, 6, 7])
    slices = F.slices_figure(trace.layer().h[3].astype(np.float32).sum(0), title="slices")
    for fig in (belief, slices):
        rows = distinct_rows(rows_above(fig))
        assert len(rows) == 2 and overlapping(rows) == []
    # side by side in the Explore column (about 470 px, less the margins and the colour bar): each slice's title
    # (at most 0.6 em a character) fits between its neighbours' centres
    plot_width = 470 - 20 - 60
    centres = [(a.x, len(a.text) * 0.6 * a.font.size) for a in slices.layout.annotations]
    assert all((right - left) * plot_width >= width for (left, width), (right, _) in pairwise(centres))
    for fig in (belief, slices):  # a square panel in a wide strip keeps to the top, under its title
        assert {axis.constraintoward for axis in fig.select_yaxes()} == {"top"}
    # the belief's marker is named in its title: no legend to sit on the colour bar's title
    assert belief.layout.showlegend is False and "○ truth" in belief.layout.title.text
    plain = F.timeline_figure(trace, 0)  # the current chunk's label alone stands on its plot area
    assert [text for text, _, _ in rows_above(plain)[1:]] == ["chunk 0"] and overlapping(rows_above(plain)) == []


def test_occluded_band_and_current_chunk_are_labelled_in_different_rows(trace):
    first = int(np.flatnonzero(trace.meta["occluded"])[0])  # the chunk the stepper opens on
    fig = F.timeline_figure(trace, first)
    band = [a for a in fig.layout.annotations if a.text == "occluded"]
    marker = fig.layout.annotations[-1]
    assert marker.text == f"chunk {first}" and band
    assert all((a.y, a.yanchor) == (0, "bottom") for a in band)  # the band's stands on the foot
    assert (marker.y, marker.yanchor) == (1, "bottom")  # the current chunk's label stands on the plot's top:
    [(_, top, foot)] = rows_above(fig)[1:]  # above the plot area (p = 1 and its markers), under the title
    assert foot <= fig.layout.margin.t and overlapping(rows_above(fig)) == []


def test_the_current_chunk_label_stands_above_every_plot_it_marks(trace):
    """Over the gates' and σ's lines, and above the identity belief's "occluded" labels, which stand there too."""
    layer = trace.layer()
    belief = {
        "identity_probs": np.full((6, 3), 1 / 3),
        "identity_truth": np.zeros(6, int),
        "identity_predicted": np.ones(6, int),
        "occluded": np.array([0, 1, 1, 0, 0, 0], bool),
    }
    figures = [F.gates_figure(layer, 2), F.sigma_figure(layer.sigma, 2, layer.grid)]
    for fig in [*figures, identity_belief_figure(belief, 2)]:  # the stepper patches the marker's x and text
        marker = fig.layout.annotations[-1]
        assert (marker.text, marker.x, marker.yref, marker.yanchor) == ("chunk 2", 2, "paper", "bottom")
        rows = rows_above(fig)
        assert "chunk 2" in [text for text, _, _ in rows] and overlapping(rows) == []
        assert all(foot <= fig.layout.margin.t for _, _, foot in rows)


def test_the_world_read_out_spans_the_frame_and_widens_only_for_a_read_off_outside_it():
    identity = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0], [0.0, 0.0]])  # μ_write (y, x, ·) read as (y, x)
    positions = np.array([[3, 13], [3, 14], [3, 15], [3, 0], [3, 1]])  # leaving the right edge, back on the left
    inside = np.c_[positions, np.zeros(5)].astype(np.float64)
    fig = write_position_figure({"weights": identity, "r2_visible": 0.9}, inside, positions, np.zeros(5), size=16)
    assert list(fig.layout.xaxis.range) == [-0.5, 15.5] and list(fig.layout.yaxis.range) == [15.5, -0.5]
    assert fig.layout.xaxis.constrain == fig.layout.yaxis.constrain == "domain"  # square pixels, no widened range
    ball = fig.data[0]
    assert list(ball.x) == [13, 14, 15, None, 0, 1] and list(ball.text) == ["0", "1", "2", "", "3", "4"]
    outside = inside.copy()
    outside[2, 0] = -6.2  # one read-off above the frame
    wide = write_position_figure({"weights": identity}, outside, positions, np.zeros(5), size=16)
    assert list(wide.layout.yaxis.range) == [15.5, -7.5] and list(wide.layout.xaxis.range) == [-0.5, 15.5]


def test_a_box_over_two_edges_says_the_world_wraps_as_the_task_draws_it(trace):
    frame = render(torch.tensor([15, 4]), 16, 2).numpy()  # the task's own frame: the ball's rows 15 and 0
    assert frame[15, 4:6].all() and frame[0, 4:6].all() and frame.sum() == 4
    split = F.frame_figure(frame, truth=(15, 4), title="frame 7")
    whole = F.frame_figure(render(torch.tensor([5, 4]), 16, 2).numpy(), truth=(5, 4), title="frame 2")
    assert "wraps around" in split.layout.annotations[0].text and whole.layout.annotations[0].text == ""
    assert overlapping(rows_above(split)) == []  # the note has its own rows under the title
    assert split.layout.margin.t == whole.layout.margin.t  # room kept while no box wraps: stepping never jumps
    hidden = F.frame_figure(frame, truth=None, prediction=(3, 3))  # a hidden box's copies say nothing
    assert hidden.layout.annotations[0].text == ""
    k = int(np.flatnonzero([tuple(p) == (15, 4) for p in trace.meta["positions"]])[0])
    leaves = LEAVES["occlusion"](trace, k)  # the stepper patches the note per chunk
    assert "wraps around" in leaves[("layout", "annotations", 0, "text")]


def test_3d_scenes_stand_back_far_enough_for_their_axis_titles(trace):
    """Plotly's camera (1.25, 1.25, 1.25) puts the lower corners' titles ("y (H)", "x (W)") past the foot of a
    340 px chart: every voxel scene (Teach, the sandbox, Explore, Text) sees the box from its direction, farther."""
    default = np.full(3, 1.25)
    volume = F.volume_figure(np.random.default_rng(0).random((6, 6, 6)), "volume", "‖V‖")
    for fig in (volume, F.trajectory_figure(trace.layer(), 3)):
        eye = fig.layout.scene.camera.eye
        eye = np.array([eye.x, eye.y, eye.z])
        assert np.allclose(eye / np.linalg.norm(eye), default / np.linalg.norm(default))  # the same view
        assert np.linalg.norm(eye) >= 1.25 * np.linalg.norm(default)  # the box a fifth smaller at least
        assert fig.layout.scene.xaxis.title.text == "x (W)"


def whiteness(colour: str) -> float:
    """The share of white mixed into a "#rrggbb" colour (HWB's whiteness, its least channel): a pale colour's is
    high."""
    return min(int(colour[i : i + 2], 16) for i in (1, 3, 5)) / 255


def test_the_validation_line_is_as_strong_as_the_measures_lines():
    entries = [json.loads(line) for line in (CHECKPOINT / "train_log.jsonl").read_text().splitlines() if line]
    fig = addressing_history_figure(addressing_history(entries))
    colorway, strong = fig.layout.template.layout.colorway, fig.layout.template.layout.colorway[:6]
    validation = fig.data[-1]
    assert validation.name == "validation accuracy" and validation.line.color  # not the template's pale ninth
    assert whiteness(colorway[len(fig.data) - 1]) > max(map(whiteness, strong))  # the pink it would be
    assert whiteness(validation.line.color) <= max(map(whiteness, strong))  # as strong as the measures' first six
    assert validation.line.color.lower() not in {c.lower() for c in colorway[: len(fig.data) - 1]}  # and its own
