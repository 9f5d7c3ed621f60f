"""Long traces: a capture in segments gives the arrays of one pass, a language model's trace carries its
text, the overview measures every chunk as defined, and the explorer sends a long trace to the browser a page at
a time, each chunk's views as they would be on their own page, numbered as the trace numbers them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from app_helpers import CHECKPOINTS, chart, counter, figure, ok, payload, report, start

from analysis import capture, load_trace
from analysis.figures.annotations import annotation_figure
from analysis.figures.overview import bin_note, binned, overview_figure
from analysis.figures.views import explore_figures
from analysis.measures.overview import chunk_overview
from analysis.measures.volumes import state_series
from analysis.traces import capture as capture_module
from app.cli import TRACE_ENV
from app.paging import STEPPING_WINDOW, stepping_span
from app.views.explore import explore_payload
from app.views.occlusion import occlusion_payload
from tensor_memory import load_checkpoint
from tensor_memory.memory.geometry import in_voxels

FRAMES = 150  # chunks of the long occlusion sample: three capture segments, three stepping pages


@pytest.fixture(scope="module")
def long_trace():
    return capture(CHECKPOINTS / "occlusion-tensor", seed=2, frames=FRAMES, progress=False)


def test_a_capture_in_segments_gives_the_arrays_of_one_pass(long_trace, monkeypatch):
    monkeypatch.setattr(capture_module, "SEGMENT_CHUNKS", 10_000)  # the whole sample in one forward call
    whole = capture(CHECKPOINTS / "occlusion-tensor", seed=2, frames=FRAMES, progress=False)
    assert long_trace.num_chunks == whole.num_chunks == FRAMES
    for name in whole.layer_names:
        ours, theirs = long_trace.layer(name), whole.layer(name)
        for field in ("mu_read", "mu_write", "sigma", "read"):
            np.testing.assert_allclose(getattr(ours, field), getattr(theirs, field), atol=2e-5, rtol=0)
        for field in ("h", "c", "gate_f"):  # float16 volumes: equal up to the last bit of rounding
            np.testing.assert_allclose(
                np.asarray(getattr(ours, field), dtype=np.float32),
                np.asarray(getattr(theirs, field), dtype=np.float32),
                atol=2e-3,
                rtol=1e-3,
            )
    assert np.array_equal(long_trace.chunks["prediction"], whole.chunks["prediction"])
    np.testing.assert_allclose(long_trace.chunks["probs"], whole.chunks["probs"], atol=1e-5)


def test_a_language_models_trace_carries_its_text_and_each_positions_prediction():
    ckpt = load_checkpoint(CHECKPOINTS / "language_modelling-tensor")
    trace = capture(ckpt, seed=1, progress=False)
    batch = ckpt.task.draw("trace", 1, 1, 0)
    assert trace.tokens == ckpt.task.decode(batch.inputs["tokens"][0]) and len(trace.tokens) == 128
    with torch.no_grad():
        logits, _ = ckpt.model(batch.inputs)
    probs = torch.softmax(logits[0].double(), -1)  # computed whole here, a block at a time there
    target = batch.targets[0]
    assert np.array_equal(trace.per_token["target"], target.numpy())
    assert np.array_equal(trace.per_token["prediction"], probs.argmax(-1).numpy())
    np.testing.assert_allclose(
        trace.per_token["p_target"], probs[torch.arange(128), target].numpy(), rtol=1e-4, atol=1e-7
    )


def test_the_overview_measures_every_chunk_as_defined(long_trace):
    name = long_trace.layer_names[0]
    lay = long_trace.layer(name)
    overview = chunk_overview(long_trace, name)
    h = np.asarray(lay.h, dtype=np.float64)
    np.testing.assert_allclose(overview["energy"], (h**2).sum(axis=(1, 2, 3, 4)), rtol=1e-9)
    writes, reads = in_voxels(lay.mu_write, lay.grid), in_voxels(lay.mu_read, lay.grid)
    assert np.isnan(overview["write_step_voxels"][0]) and np.isnan(overview["read_to_write_voxels"][0])
    np.testing.assert_allclose(overview["write_step_voxels"][7], np.linalg.norm(writes[7] - writes[6]))
    nearest = min(np.linalg.norm(reads[40] - writes[j]) for j in range(40))  # read 40 against writes 0 … 39
    assert overview["read_to_write_voxels"][40] == pytest.approx(nearest, rel=1e-9)
    right = long_trace.chunks["prediction"] == long_trace.chunks["target"]
    assert np.array_equal(overview["correct"], right.astype(float))  # every frame of occlusion is scored
    assert overview["sigma_voxels"] == pytest.approx(lay.sigma * 5 / 2)  # a 6³ grid: 2 / 5 per voxel spacing


def test_a_long_overview_is_drawn_as_bin_means():
    values = np.arange(2500, dtype=np.float64)
    values[10] = np.nan  # left out of its bin's mean
    x, y = binned(values, 1000)
    assert len(x) == len(y) == 1000
    edges = np.linspace(0, 2500, 1001).round().astype(int)
    assert y[3] == values[edges[3] : edges[4]].mean() and x[3] == (edges[3] + edges[4] - 1) / 2
    assert y[4] == pytest.approx(np.nanmean(values[edges[4] : edges[5]]))
    fig = overview_figure({"p_target": values / 2500, "energy": values}, 2000, (1984, 2047 - 48))
    assert len(fig.data) == 2 and all(len(trace.x) == 1000 for trace in fig.data)
    assert "each point the mean of 2 or 3 chunks" in fig.layout.title.text  # whole chunks, as the bins hold
    assert bin_note(2000, 1000) == "2 chunks" and bin_note(1001, 1000) == "1 or 2 chunks"


def test_long_traces_go_to_the_browser_a_page_at_a_time():
    assert stepping_span(5, STEPPING_WINDOW) is None  # a trace that fits goes whole
    assert stepping_span(0, 150) == (0, 63) and stepping_span(64, 150) == (64, 127)
    assert stepping_span(149, 150) == (128, 149) and stepping_span(10_000, 150) == (128, 149)


def test_a_page_holds_only_its_chunks_each_as_drawn_alone(long_trace):
    name = long_trace.layer_names[-1]
    series = state_series(long_trace.layer(name), "h", "norm", 0)
    span = stepping_span(100, long_trace.num_chunks)
    sent = explore_payload(long_trace, "sample", name, series, "volume", "write", span=span).to_json()
    assert (sent["offset"], sent["count"], sent["total"]) == (64, 64, FRAMES)
    assert all(len(cells) == 64 for cells in sent["views"].values()) and len(sent["events"]) == 64
    alone = explore_figures(long_trace, 100, name, series, "volume", "write", span)
    for view in ("volume", "timeline", "sigma", "gates", "trajectory"):
        drawn = figure(sent, view, 100)
        assert drawn["data"] == json.loads(alone[view].to_json())["data"], view
    timeline = alone["timeline"]
    assert list(timeline.data[0].x) == list(range(64, 128))  # only the page's chunks
    sigma = alone["sigma"]
    whole = explore_figures(long_trace, 100, name, series, "volume", "write")["sigma"]
    assert list(sigma.data[0].y) == list(whole.data[0].y[64:128])  # the same values, cut to the page
    track = annotation_figure(long_trace, 100, span)
    assert tuple(track.layout.xaxis.range) == (63.5, 127.5)
    assert all(min(trace.x, default=64) >= 64 and max(trace.x, default=127) <= 127 for trace in track.data[1:])
    occlusion = occlusion_payload(long_trace, "sample", name, True, span).to_json()
    assert occlusion["count"] == 64 and occlusion["offset"] == 64
    energy = figure(occlusion, "energy", 100)
    assert energy["layout"]["shapes"]  # the current chunk marked (and occluded runs shaded) on the page


def test_the_explorer_opens_a_long_trace_and_moves_between_its_pages(long_trace, tmp_path, monkeypatch):
    path = long_trace.save(tmp_path / "long.trace.safetensors")
    monkeypatch.setenv(TRACE_ENV, str(path))
    at = start()
    sent = payload(at)
    first = sent["start"]
    assert counter(at) == f"Chunk {first} / {FRAMES - 1}"
    assert sent["offset"] == first // 64 * 64 and sent["count"] == 64 and sent["total"] == FRAMES
    assert chart(at, "the whole trace, 150 chunks")  # the overview, drawn by the server
    assert chart(at, "after chunk", first)
    later = next(b for b in at.button if b.key == "explore.later")
    ok(later.click().run())
    sent = payload(at)
    assert sent["offset"] == sent["start"] == first // 64 * 64 + 64
    go = next(n for n in at.number_input if n.key.startswith("explore.go."))
    ok(go.set_value(140).run())
    sent = payload(at)
    assert (sent["offset"], sent["count"], sent["start"]) == (128, 22, 140)
    assert chart(at, "after chunk 140", 140)
    go = next(n for n in at.number_input if n.key.startswith("explore.go."))
    ok(go.set_value(130).run())  # within the page the browser holds: the same views, and a move it must follow
    assert (payload(at)["id"], payload(at)["start"], payload(at)["moves"]) == (sent["id"], 130, sent["moves"] + 1)
    earlier = next(b for b in at.button if b.key == "explore.earlier")
    assert earlier.label == "Chunks 64–127"  # the page before the last, short, one
    ok(earlier.click().run())
    assert (payload(at)["offset"], payload(at)["start"]) == (64, 127)


def test_the_text_view_reads_a_long_language_model_trace_chunk_by_chunk(tmp_path, monkeypatch):
    trace = capture(CHECKPOINTS / "language_modelling-tensor", seq_len=1280, progress=False)  # 80 chunks
    path = trace.save(tmp_path / "text.trace.safetensors")
    monkeypatch.setenv(TRACE_ENV, str(path))
    at = start()
    ok(at.switch_page("views/text.py").run())
    assert counter(at) == "Chunk 0 / 79" and payload(at)["offset"] == 0  # a long trace opens on its first chunk
    report(at, "text", 38)
    heading = next(m.value for m in at.markdown if m.value.startswith("##### Chunk"))
    assert heading == "##### Chunk 38: tokens 608–623"
    shown = load_trace(path)
    rows = at.dataframe[0].value
    assert list(rows["token"]) == shown.tokens[608:624]
    assert list(rows["p(target)"]) == pytest.approx([round(float(p), 4) for p in shown.per_token["p_target"][608:624]])
