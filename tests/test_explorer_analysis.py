"""The explorer's pure computations in analysis/: volume series, chunk events and inputs, prediction-only
traces, non-finite checks, the chunk view's figures, occlusion figures, multi-frame renderings and exports.

Each is checked against what the trace or an independent computation says, on real traces of the
shipped checkpoints (no numbers of one checkpoint are hard-coded: a retrained one must pass too).
"""

from __future__ import annotations

import dataclasses
import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from analysis import capture, load_trace
from analysis import figures as F
from analysis.figures.annotations import annotation_figure, chunk_events, key_chunk
from analysis.figures.chunk_input import chunk_input_figure, chunk_outcome, class_label
from analysis.figures.export import figure_pngs, figures_html
from analysis.figures.frames import png_bytes, volume_frames
from analysis.figures.occlusion_views import energy_figure, intervention_figure, survival_figure
from analysis.figures.render import screenshot, volume_plotter
from analysis.figures.views import explore_figures, slice_index
from analysis.measures import volumes as V
from analysis.measures.interventions import intervene
from analysis.measures.occlusion import memory_energy
from analysis.measures.volumes import state_series
from analysis.traces.export import trace_bytes, zip_bytes
from analysis.traces.finite import nonfinite_fields
from analysis.traces.predictions import prediction_trace
from tensor_memory import load_checkpoint
from tensor_memory.memory.geometry import nearest_voxel

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"


@pytest.fixture(scope="module")
def occlusion():
    return load_checkpoint(CHECKPOINTS / "occlusion-tensor")


@pytest.fixture(scope="module")
def trace(occlusion):
    return capture(occlusion, seed=3, occlusion_start=4, progress=False)


@pytest.fixture(scope="module")
def binding():
    return capture(CHECKPOINTS / "coordinate_binding-tensor", seed=1, writes=6, progress=False)


# -- volume series ---------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["h", "c"])
def test_state_series_reduces_every_chunk_like_volume_values_with_one_range(trace, field):
    layer = trace.layer()
    for mode, index in (("norm", 0), ("channel", 3)):
        series = state_series(layer, field, mode, index)
        volumes = getattr(layer, field)
        assert series.values.shape == (trace.num_chunks, *layer.grid)
        for k in (0, trace.num_chunks - 1):
            expected = V.volume_values(volumes[k].astype(np.float32), mode, channel=index)
            np.testing.assert_allclose(series.values[k], expected, rtol=1e-6, atol=1e-6)
        low, high = series.value_range
        assert low <= series.values.min() and high >= series.values.max()
    assert state_series(layer, field, "norm").value_range[0] == 0.0


def test_state_series_pca_uses_one_basis_fitted_over_all_chunks(trace):
    layer = trace.layer()
    series = state_series(layer, "h", "pca", 1)
    basis, explained = V.pca_basis(layer.h.astype(np.float32))
    k = trace.num_chunks // 2
    expected = V.volume_values(layer.h[k].astype(np.float32), "pca", component=1, basis=basis)
    np.testing.assert_allclose(series.values[k], expected, rtol=1e-5, atol=1e-5)
    assert f"{explained[1]:.0%}" in series.label


def test_state_series_refuses_what_it_cannot_draw(trace):
    layer = trace.layer()
    with pytest.raises(ValueError, match="field"):
        state_series(layer, "q")
    with pytest.raises(ValueError, match="index"):
        state_series(layer, "h", "channel", layer.channels)
    with pytest.raises(ValueError, match="cell_state=False"):
        state_series(dataclasses.replace(layer, c=None), "c")


def test_nearest_voxel_rounds_coordinates_onto_the_grid():
    assert nearest_voxel(np.array([-1.0, 1.0, 0.0]), (5, 4, 3)) == (2, 3, 0)  # (z, y, x); x=-1 → 0, y=1 → 3
    assert nearest_voxel(np.array([2.0, -3.0, 1.0]), (4, 4, 4)) == (3, 0, 3)  # clamped to the grid


# -- chunk events and inputs ------------------------------------------------------------------------


def test_chunk_events_follow_the_task_metadata(trace, binding):
    events = chunk_events(trace)
    assert events["occluded"].tolist() == trace.meta["occluded"].astype(bool).tolist()
    right = trace.chunks["prediction"] == trace.chunks["target"]
    assert (events["correct"] == (right & trace.chunks["scored"])).all()
    assert not (events["correct"] & events["wrong"]).any()
    assert key_chunk(trace) == 4  # the first occluded frame
    writes = binding.info["task_params"]["writes"]
    b = chunk_events(binding)
    assert b["write"].tolist() == [True] * writes + [False] * (binding.num_chunks - writes)
    assert key_chunk(binding) == writes  # the first query


def test_annotation_figure_marks_every_event_and_the_current_chunk(trace):
    fig = annotation_figure(trace, 5)
    occluded = [d for d in fig.data if d.name == "occluded"][0]
    assert list(occluded.x) == np.flatnonzero(trace.meta["occluded"]).tolist()
    (band,) = fig.layout.shapes
    assert (band.x0, band.x1) == (4.5, 5.5)
    with pytest.raises(ValueError):
        annotation_figure(trace, trace.num_chunks)


def test_chunk_outcome_and_input_for_occlusion(trace):
    k = 6
    outcome = chunk_outcome(trace, k)
    y, x = trace.meta["positions"][k]
    assert outcome["truth"] == f"(y {y}, x {x})" and outcome["event"] == "frame 6, occluded"
    probs = trace.chunks["probs"][k]
    assert outcome["p_truth"] == pytest.approx(float(probs[y * 16 + x]))
    assert outcome["correct"] == bool(trace.chunks["prediction"][k] == trace.chunks["target"][k])
    fig = chunk_input_figure(trace, k)
    np.testing.assert_array_equal(np.asarray(fig.data[0].z), trace.meta["frames"][k])
    assert "occluded" in fig.layout.title.text


def test_chunk_input_for_binding_shows_the_keys_written_so_far(binding):
    writes = binding.info["task_params"]["writes"]
    fig = chunk_input_figure(binding, 2)
    assert len(fig.data[0].x) == 3 and list(fig.data[0].text) == [str(v) for v in binding.meta["values"][:3]]
    assert chunk_outcome(binding, 2)["scored"] is False
    query = chunk_input_figure(binding, writes)
    nearest = [d for d in query.data if d.name == "nearest written key"][0]
    np.testing.assert_allclose(nearest.x[1], binding.meta["keys"][binding.meta["nearest"][0]][0])
    assert class_label(binding, 17) == "17"


def test_prediction_trace_matches_capture_for_a_memory_checkpoint(occlusion, trace):
    plain = prediction_trace(occlusion, seed=3, occlusion_start=4)
    assert plain.layers == {} and plain.num_chunks == trace.num_chunks
    np.testing.assert_array_equal(plain.chunks["prediction"], trace.chunks["prediction"])
    np.testing.assert_allclose(plain.chunks["probs"], trace.chunks["probs"], atol=1e-5)
    base = prediction_trace(CHECKPOINTS / "occlusion-base", seed=3, occlusion_start=4)
    assert base.info["backbone"] == "base" and base.num_chunks == 12
    np.testing.assert_array_equal(base.meta["positions"], trace.meta["positions"])  # the same sample


def test_nonfinite_fields_names_layer_field_and_chunks(trace):
    assert nonfinite_fields(trace) == []
    layer = trace.layer()
    h = layer.h.copy()
    h[2, 0, 0, 0, 0] = np.nan
    h[5, 1, 1, 1, 1] = np.inf
    broken = dataclasses.replace(trace, layers={trace.layer_names[0]: dataclasses.replace(layer, h=h)})
    (line,) = nonfinite_fields(broken)
    assert line == f"layer {trace.layer_names[0]}: h at chunks 2, 5"


# -- the chunk view --------------------------------------------------------------------------------


def test_explore_figures_show_the_chunk_of_the_series(trace):
    series = state_series(trace.layer(), "h", "norm")
    k = 7
    figs = explore_figures(trace, k, None, series, "isosurface", "read")
    assert set(figs) == {"input", "timeline", "volume", "slices", "trajectory", "sigma", "gates"}
    volume = figs["volume"].data[0]
    assert volume.type == "isosurface" and (volume.cmin, volume.cmax) == series.value_range
    np.testing.assert_allclose(np.asarray(volume.value), series.values[k].ravel(), rtol=1e-6)
    z, y, x = nearest_voxel(trace.layer().mu_read[k], trace.layer().grid)
    assert slice_index(trace, None, k, "read") == (z, y, x)
    assert figs["slices"].layout.annotations[0].text.startswith(f"z = {z}")
    assert set(explore_figures(trace, k)) == {"input", "timeline"}  # predictions only


def test_energy_and_intervention_figures(occlusion, trace):
    layer = trace.layer()
    fig = energy_figure(layer, 3, trace.meta["occluded"])
    energy = memory_energy(layer)
    np.testing.assert_allclose(fig.data[0].y, energy.sum(axis=(1, 2, 3)), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(fig.data[1].z), energy.reshape(len(energy), -1).T, rtol=1e-5)
    result = intervene(occlusion, "gate_off", 4, seed=3, occlusion_start=4)
    fig = intervention_figure(result)
    np.testing.assert_allclose(fig.data[0].y, result.target_probability("baseline"))
    np.testing.assert_allclose(fig.data[1].y, result.target_probability("intervened"))
    survival = {"samples": 8, "by_offset": {0: [], 2: [0.5, 0.25]}}
    assert [d.name for d in survival_figure(survival).data] == ["L = 2"]


# -- renderings and exports ------------------------------------------------------------------------


def test_volume_frames_equal_fresh_renderings(trace):
    series = state_series(trace.layer(), "h", "norm")
    before = series.values.copy()
    frames = volume_frames(series.values[2:5], series.value_range, window_size=(160, 120))
    assert np.array_equal(series.values, before)  # rendering never writes into the values it is given
    assert len(frames) == 3 and frames[0].shape == (120, 160, 3)
    fresh = screenshot(volume_plotter(series.values[3], clim=series.value_range, window_size=(160, 120)))
    np.testing.assert_array_equal(frames[1], fresh)
    assert png_bytes(frames[0])[:8] == b"\x89PNG\r\n\x1a\n"


def test_trace_bytes_and_zip_round_trip(tmp_path, trace):
    path = tmp_path / "t.safetensors"
    path.write_bytes(trace_bytes(trace))
    again = load_trace(path)
    np.testing.assert_array_equal(again.layer().h, trace.layer().h)
    archive = zipfile.ZipFile(io.BytesIO(zip_bytes({"a.txt": b"1", "b/c.bin": b"22"})))
    assert {i.filename: archive.read(i) for i in archive.infolist()} == {"a.txt": b"1", "b/c.bin": b"22"}


def test_figures_html_holds_every_figure_and_plotly_once(trace):
    figs = explore_figures(trace, 2)
    page = figures_html(figs, "t")
    assert page.count("<section>") == 2 and page.count("Plotly.newPlot") == 2
    assert page.count("plotly.js v") <= 2  # the library's banner: inlined once


@pytest.mark.skipif(
    not Path("/usr/bin/chromium").exists(),
    reason="PNG export draws in Debian's /usr/bin/chromium, absent here (apt-get install -y chromium)",
)
def test_figure_pngs_draw_each_figure(trace):
    pngs = figure_pngs({"timeline": F.timeline_figure(trace, 1)}, scale=1.0)
    from PIL import Image

    image = np.asarray(Image.open(io.BytesIO(pngs["timeline"])))
    assert image.shape[:2] == (600, 900) and image.std() > 5  # drawn, not blank
