"""The moving-digits video view: the belief measures, the filmstrip and identity figures, and the Occlusion page.

The measures are checked against independent computations — the trace's joint probabilities summed by
hand, the task's own ``counts`` — on a tiny moving-digits model trained here in seconds, and on traces
built by hand where every case of right and wrong is known. The page runs through Streamlit's AppTest
on that tiny model, and on the shipped ``checkpoints/moving_digits-tensor`` once it exists.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from app_helpers import CHECKPOINTS, chart, figure, ok, payload, start, values

from analysis import capture
from analysis.figures.annotations import chunk_events
from analysis.figures.chunk_input import chunk_input_figure, chunk_outcome, class_label
from analysis.figures.video import digit_box, filmstrip_figure, identity_belief_figure
from analysis.measures.interventions import intervene
from analysis.measures.occlusion import (
    belief,
    belief_of,
    belief_survival,
    identity_marginal,
    occlusion_memory,
    position_marginal,
)
from analysis.traces.trace import Trace
from tensor_memory import load_checkpoint
from tensor_memory.training import train
from tensor_memory.training.evaluation import task_with

SHIPPED = CHECKPOINTS / "moving_digits-tensor"
S, CELLS, T = 16, 256, 12  # the task's defaults: 16 × 16 frames, 12 frames
TINY = {
    "task": {"name": "moving_digits", "params": {}},
    "model": {"kind": "tensor", "dim": 16, "layers": 1, "heads": 2, "memory": {"channels": 2, "grid": [2, 3, 2]}},
    "training": {
        "steps": 2,
        "batch_size": 4,
        "lr": 3e-3,
        "warmup_steps": 1,
        "eval_every": 100,
        "eval_batches": 1,
        "log_every": 1,
    },
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A moving-digits Tensor Memory model trained for two steps: real shapes and a real trace, in seconds."""
    out = tmp_path_factory.mktemp("moving_digits") / "moving_digits-tiny"
    train(TINY, out, progress=False)
    return out


@pytest.fixture(scope="module")
def trace(tiny) -> Trace:
    return capture(tiny, seed=3, index=1, occlusion_start=4, progress=False)


def handmade(probs: np.ndarray, digit: int, positions: np.ndarray, occluded: np.ndarray) -> Trace:
    """A moving-digits trace of len(probs) frames whose predictions are the argmax of ``probs``."""
    frames = len(probs)
    frames_meta = np.zeros((frames, S, S), dtype=np.float32)
    frames_meta[occluded] = 0.5
    targets = digit * CELLS + positions[:, 0] * S + positions[:, 1]
    info = {
        "task": "moving_digits",
        "task_params": {"size": S, "patch": 4, "frames": frames},
        "chunk_size": 16,
        "num_tokens": frames * 16,
    }
    chunks = {
        "probs": probs.astype(np.float32),
        "prediction": probs.argmax(1),
        "target": targets,
        "scored": np.ones(frames, dtype=bool),
    }
    meta = {
        "frames": frames_meta,
        "occluded": occluded,
        "positions": positions,
        "digit": np.array(digit),
        "digit_index": np.array(0),
        "velocity": np.array([1, 0]),
        "occlusion_start": np.array(1),
    }
    return Trace(info=info, layers={}, chunks=chunks, meta=meta)


# -- the measures --------------------------------------------------------------------------------------


def test_the_belief_sums_the_joint_probabilities_by_hand(trace):
    b = belief(trace)
    probs = trace.chunks["probs"]  # (T, 10 · 256), class digit · 256 + y · 16 + x
    assert probs.shape == (T, 10 * CELLS) and b["probs"].shape == (T, S, S) and b["identity_probs"].shape == (T, 10)
    for t in range(T):
        by_cell = sum(probs[t, d * CELLS : (d + 1) * CELLS] for d in range(10)).reshape(S, S)
        by_digit = [probs[t, d * CELLS : (d + 1) * CELLS].sum() for d in range(10)]
        np.testing.assert_allclose(b["probs"][t], by_cell, rtol=1e-6)
        np.testing.assert_allclose(b["identity_probs"][t], by_digit, rtol=1e-5)
    np.testing.assert_allclose(b["probs"].sum((1, 2)), 1.0, atol=1e-5)
    np.testing.assert_allclose(b["identity_probs"].sum(1), 1.0, atol=1e-5)
    target, prediction = trace.chunks["target"], trace.chunks["prediction"]
    assert (b["identity_truth"] == int(trace.meta["digit"])).all() and (b["identity_truth"] == target // CELLS).all()
    assert (b["identity_predicted"] == prediction // CELLS).all()
    # The head scores digit, row and column apart, so the joint argmax is the argmax of each marginal.
    assert (b["identity_predicted"] == b["identity_probs"].argmax(1)).all()
    assert [tuple(p) for p in b["predicted"]] == [np.unravel_index(p.argmax(), (S, S)) for p in b["probs"]]
    assert (b["truth"] == trace.meta["positions"]).all()
    assert (b["correct"] == (prediction % CELLS == target % CELLS)).all()
    assert (b["joint_correct"] == (prediction == target)).all()
    assert b["occluded"].tolist() == [False] * 4 + [True] * 4 + [False] * 4
    for t, (y, x) in enumerate(b["truth"]):
        assert b["truth_probability"][t] == b["probs"][t, y, x]
        assert b["identity_truth_probability"][t] == b["identity_probs"][t, b["identity_truth"][t]]


def test_joint_correctness_on_a_handmade_clip():
    positions = np.array([[2, 3], [2, 4], [2, 5], [2, 6]])
    probs = np.full((4, 10 * CELLS), 1e-8)
    cell = lambda t, dy=0: (positions[t, 0] + dy) * S + positions[t, 1]  # noqa: E731
    probs[0, 3 * CELLS + cell(0)] = 0.6  # digit and place right; a second digit on the same cell and elsewhere
    probs[0, 5 * CELLS + cell(0)] = 0.3
    probs[0, 5 * CELLS + cell(0, dy=3)] = 0.1
    probs[1, 7 * CELLS + cell(1)] = 0.9  # place right, digit wrong
    probs[2, 3 * CELLS + cell(2, dy=1)] = 0.9  # digit right, place wrong
    probs[3, 1 * CELLS + cell(3, dy=2)] = 0.9  # both wrong
    probs /= probs.sum(1, keepdims=True)
    occluded = np.array([False, True, True, False])
    b = belief(handmade(probs, 3, positions, occluded))
    assert b["correct"].tolist() == [True, True, False, False]
    assert b["identity_correct"].tolist() == [True, False, True, False]
    assert b["joint_correct"].tolist() == [True, False, False, False]
    assert b["identity_predicted"].tolist() == [3, 7, 3, 1]
    assert b["predicted"].tolist() == [[2, 3], [2, 4], [3, 5], [4, 6]]
    assert b["probs"][0, 2, 3] == pytest.approx(0.9, abs=1e-3)  # both digits' mass on the cell
    assert b["identity_probs"][0, 3] == pytest.approx(0.6, abs=1e-3)
    assert b["identity_probs"][0, 5] == pytest.approx(0.4, abs=1e-3)
    # An intervened run of the same clip gives the same measures from its own probabilities.
    meta = {"positions": positions, "occluded": occluded, "digit": np.array(3)}
    again = belief_of(probs.astype(np.float32), probs.argmax(1), meta, S)
    assert all(np.array_equal(again[k], b[k]) for k in b)


def test_marginals_keep_the_ball_and_refuse_a_wrong_class_count():
    probs = np.random.default_rng(0).dirichlet(np.ones(CELLS), size=3)
    assert np.array_equal(position_marginal(probs, S), probs)  # the ball: one identity, nothing summed
    assert np.allclose(identity_marginal(probs, S), 1.0)
    with pytest.raises(ValueError, match="identities × 16² cells"):
        position_marginal(np.ones((2, 300)), S)


def test_belief_survival_scores_place_and_identity_like_the_task(tiny):
    ckpt = load_checkpoint(tiny)
    s = belief_survival(ckpt, lengths=(0, 3), samples=16, seed=2)
    assert s["by_offset"][0] == [] and s["occluded_accuracy"][0] is None and s["position"]["by_offset"][0] == []
    task = task_with(ckpt, {"occlusion_length": 3})
    batch = task.draw("survival", 16, 2, 3)
    with torch.no_grad():
        logits, _ = ckpt.model(batch.inputs)
    counts = task.counts(logits, batch)  # the task's own metrics: (hits, total)
    rate = lambda name: counts[name][0] / counts[name][1]  # noqa: E731
    for where in ("occluded", "visible"):
        assert s[f"{where}_accuracy"][3] == pytest.approx(rate(f"{where}_accuracy"))
        assert s["position"][f"{where}_accuracy"][3] == pytest.approx(rate(f"{where}_position_accuracy"))
        assert s["identity"][f"{where}_accuracy"][3] == pytest.approx(rate(f"{where}_identity_accuracy"))
    predicted = logits.argmax(-1)[batch.mask].view(16, T)
    truth = batch.targets[batch.mask].view(16, T)
    occluded = batch.meta["occluded"]
    first = occluded & ~torch.roll(occluded, 1, dims=1)  # the first hidden frame of each clip
    assert s["identity"]["by_offset"][3][0] == pytest.approx(
        (predicted // CELLS == truth // CELLS)[first].float().mean().item()
    )
    assert len(s["position"]["by_offset"][3]) == 3


def test_occlusion_survival_keeps_its_outputs(occlusion):
    s = belief_survival(occlusion, lengths=(2,), samples=4)
    assert set(s) == {"lengths", "by_offset", "occluded_accuracy", "visible_accuracy", "samples"}


def test_occlusion_memory_follows_the_digit(trace):
    m = occlusion_memory(trace)
    assert m["last_visible"] == 3 and m["occluded_chunks"] == [4, 5, 6, 7]
    write = (trace.layer().mu_write[3].astype(np.float64) + 1) * (np.array([2, 3, 2]) - 1) / 2  # (x, y, z) voxels
    assert np.allclose(m["write_voxel"], write)


# -- the figures ---------------------------------------------------------------------------------------


def box_corners(scatter) -> set[tuple[float, float]]:
    return {(x, y) for x, y in zip(scatter.x, scatter.y, strict=True) if x is not None}


def test_filmstrip_shows_each_frame_with_the_digit_boxes_and_titles(trace):
    b = belief(trace)
    fig = filmstrip_figure(trace)
    heatmaps = [d for d in fig.data if d.type == "heatmap"]
    assert len(heatmaps) == T
    for t, heatmap in enumerate(heatmaps):
        np.testing.assert_array_equal(heatmap.z, trace.meta["frames"][t])
    assert np.all(np.asarray(heatmaps[5].z) == 0.5)  # behind the curtain
    titles = [a.text for a in fig.layout.annotations]
    assert titles == [f"{b['identity_truth'][t]} → {b['identity_predicted'][t]}" for t in range(T)]
    colours = [a.font.color for a in fig.layout.annotations]
    assert colours == ["#2ca02c" if right else "#d62728" for right in b["joint_correct"]]
    truths = [d for d in fig.data if d.name == "truth"]
    predictions = [d for d in fig.data if d.name == "prediction"]
    assert len(truths) == len(predictions) == T
    for t in range(T):
        for scatter, (y, x) in ((truths[t], b["truth"][t]), (predictions[t], b["predicted"][t])):
            assert (x - 0.5, y - 0.5) in box_corners(scatter) and (x + 7.5, y + 7.5) in box_corners(scatter)
            assert scatter.xaxis == ("x" if t == 0 else f"x{t + 1}")  # on its own frame
    assert [fig.layout[f"xaxis{'' if t == 0 else t + 1}"].title.text for t in (3, 4)] == ["3", "4 · hidden"]
    window = filmstrip_figure(trace, [2, 9])
    assert [a.text for a in window.layout.annotations] == [titles[2], titles[9]]


def test_a_box_wraps_at_the_edges_like_the_digit():
    inside = digit_box("truth", (2, 3), S, "green", "solid")
    assert None not in inside.x and box_corners(inside) == {(2.5, 1.5), (10.5, 1.5), (10.5, 9.5), (2.5, 9.5)}
    corner = digit_box("truth", (12, 10), S, "green", "solid")  # runs off the bottom and the right
    assert list(corner.x).count(None) == 3  # four copies, one frame apart
    assert {(9.5, 11.5), (-6.5, 11.5), (9.5, -4.5), (-6.5, -4.5)} <= box_corners(corner)


def test_identity_belief_marks_truth_occlusion_and_the_current_frame(trace):
    b = belief(trace)
    fig = identity_belief_figure(b, 6)
    heatmap, truth, prediction = fig.data
    np.testing.assert_array_equal(heatmap.z, b["identity_probs"].T)
    assert list(truth.y) == b["identity_truth"].tolist() and list(prediction.y) == b["identity_predicted"].tolist()
    shapes = fig.layout.shapes
    assert [(s.x0, s.x1) for s in shapes if s.type == "rect"] == [(3.5, 7.5)]  # frames 4–7 hidden
    assert [s.x0 for s in shapes if s.type == "line"] == [6]
    with pytest.raises(ValueError, match="moving_digits"):
        identity_belief_figure({k: v for k, v in b.items() if not k.startswith("identity")}, 0)


def test_figures_refuse_a_ball(occlusion):
    ball = capture(occlusion, seed=0, progress=False)
    with pytest.raises(ValueError, match="moving_digits trace"):
        filmstrip_figure(ball)


def test_chunk_input_and_events_speak_of_the_digit(trace):
    digit = int(trace.meta["digit"])
    assert class_label(trace, 3 * CELLS + 4 * S + 5) == "digit 3 at (y 4, x 5)"
    outcome = chunk_outcome(trace, 5)
    y, x = trace.meta["positions"][5]
    assert outcome["event"] == "frame 5, occluded" and outcome["truth"] == f"digit {digit} at (y {y}, x {x})"
    assert chunk_outcome(trace, 2)["event"] == "frame 2, visible"
    assert chunk_events(trace)["occluded"].tolist() == trace.meta["occluded"].tolist()
    fig = chunk_input_figure(trace, 5)
    np.testing.assert_array_equal(fig.data[0].z, trace.meta["frames"][5])
    assert fig.layout.title.text == f"frame 5 · occluded: the digit ({digit}) is behind the curtain"
    truth = next(d for d in fig.data if d.name == "truth")
    assert (x - 0.5, y - 0.5) in box_corners(truth) and (x + 7.5, y + 7.5) in box_corners(truth)


# -- the page ------------------------------------------------------------------------------------------


def check_video_page(at, path: Path) -> None:
    """The Occlusion page of the moving-digits checkpoint ``path`` (already open in ``at``) shows the video view."""
    ok(at.switch_page("views/occlusion.py").run())
    params = at.session_state["context"].sample.params  # the sidebar's sample settings (the checkpoint's own)
    sample = capture(path, seed=0, progress=False, **params)
    b = belief(sample)
    film = chart(at, "the clip")
    assert [a["text"] for a in film["layout"]["annotations"]] == [
        f"{b['identity_truth'][t]} → {b['identity_predicted'][t]}" for t in range(sample.num_chunks)
    ]
    metrics = {m.label: m.value for m in at.metric}
    hidden = b["occluded"]
    assert metrics["Right on hidden frames"] == f"{b['joint_correct'][hidden].mean():.0%}"
    assert metrics["Place right on visible frames"] == f"{b['correct'][~hidden].mean():.0%}"
    assert metrics["Digit right on hidden frames"] == f"{b['identity_correct'][hidden].mean():.0%}"
    sent, k = payload(at), int(at.session_state["chunk"])  # the frames step in the browser: every frame's views
    for shown_at in (k, sample.num_chunks - 1):
        first = int(np.clip(shown_at - 4, 0, max(sample.num_chunks - 8, 0)))
        position = figure(sent, "belief", shown_at)
        np.testing.assert_allclose(values(position["data"][0]["z"]).ravel(), b["probs"][first].ravel(), rtol=1e-6)
    identity = figure(sent, "identity", k)
    np.testing.assert_allclose(values(identity["data"][0]["z"]), b["identity_probs"].T, rtol=1e-6)
    # An intervention's belief is summed over the digits the same way.
    at.radio(key="intervention.kind").set_value("zero")
    next(s for s in at.slider if s.label == "Before chunk").set_value(5)
    ok(next(button for button in at.button if button.label == "Run the intervention").click().run())
    zeroed = intervene(path, "zero", 5, seed=0, **params)
    run = belief_of(zeroed.intervened["probs"], zeroed.intervened["prediction"], zeroed.meta, S)
    assert any(m.value == "**Belief, memory zeroed**" for m in at.markdown)
    specs = [json.loads(c.proto.spec) for c in at.get("plotly_chart")]
    shown = [spec for spec in specs if "identity belief" in spec["layout"].get("title", {}).get("text", "")]
    assert len(shown) == 2  # the untouched run's and the zeroed run's (the sample's is in the browser's payload)
    np.testing.assert_allclose(values(shown[1]["data"][0]["z"]), run["identity_probs"].T, rtol=1e-6)
    ok(at.button(key="survival").click().run())
    table = at.dataframe[0].value
    assert list(table.columns) == ["occlusion length L", "digit and place", "place", "digit"]
    assert not at.exception and not at.error


def test_the_page_plays_the_clip_of_a_small_model(tiny, monkeypatch):
    monkeypatch.setenv("TENSOR_MEMORY_CHECKPOINT", str(tiny))  # the app opens on it
    check_video_page(start(), tiny)


@pytest.mark.skipif(
    not (SHIPPED / "config.json").is_file(),
    reason="checkpoints/moving_digits-tensor is not shipped yet (being trained into runs/grid/)",
)
def test_the_page_plays_the_clip_of_the_shipped_checkpoint():
    at = start()
    ok(at.selectbox(key="checkpoint_choice").set_value("moving_digits-tensor").run())
    check_video_page(at, SHIPPED)
