"""Figure builders: Plotly figures (analysis.figures) and off-screen PyVista renderings (analysis.figures.render).

The Plotly figures are checked by what their traces hold against what the inputs imply, on a real
trace of the shipped occlusion checkpoint and on small synthetic arrays. The PyVista renderings
are checked by their images: not blank, different for different data, and oriented as the axes
say.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from analysis import capture
from analysis import figures as F
from analysis.figures import render as R
from analysis.measures import volumes as V
from analysis.traces.trace import LayerTrace, Trace

CHECKPOINT = Path(__file__).resolve().parents[1] / "checkpoints" / "occlusion-tensor"
CURRENT = 8


@pytest.fixture(scope="module")
def trace() -> Trace:
    if not CHECKPOINT.exists():
        pytest.skip(f"shipped checkpoint {CHECKPOINT} not found")
    return capture(CHECKPOINT, seed=0, progress=False)


@pytest.fixture(scope="module")
def layer(trace: Trace) -> LayerTrace:
    return trace.layer()


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def synthetic_layer(
    chunks: int = 6, channels: int = 3, grid=(4, 5, 6), gates: bool = True, seed: int = 0
) -> LayerTrace:
    """A LayerTrace of random values with the shapes a capture gives."""
    g = rng(seed)
    volume = lambda: g.standard_normal((chunks, channels, *grid)).astype(np.float16)  # noqa: E731
    gate = lambda: g.uniform(0, 1, (chunks, channels, *grid)).astype(np.float16)  # noqa: E731
    return LayerTrace(
        mu_read=g.uniform(-1, 1, (chunks, 3)).astype(np.float32),
        read=g.standard_normal((chunks, channels)).astype(np.float32),
        mu_write=g.uniform(-1, 1, (chunks, 3)).astype(np.float32),
        sigma=g.uniform(0.1, 0.5, chunks).astype(np.float32),
        content=g.standard_normal((chunks, channels)).astype(np.float32),
        h=volume(),
        c=volume(),
        gate_scale=0.12,
        gate_i=gate() if gates else None,
        gate_f=gate() if gates else None,
        gate_o=gate() if gates else None,
        gate_g=volume() if gates else None,
    )


def traces_named(fig, name: str) -> list:
    return [d for d in fig.data if d.name == name]


def current_lines(fig) -> list[float]:
    """x of the vertical line shapes in the figure."""
    return [s.x0 for s in fig.layout.shapes if s.type == "line" and s.x0 == s.x1]


# ---------------------------------------------------------------------------------------
# volume_values and pca_basis
# ---------------------------------------------------------------------------------------


def test_volume_values_norm_and_channel_match_numpy(layer):
    volume = layer.h[CURRENT]
    expected = np.sqrt((volume.astype(np.float64) ** 2).sum(axis=0))
    norm = V.volume_values(volume)
    assert norm.shape == layer.grid and norm.dtype == np.float32
    np.testing.assert_allclose(norm, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(V.volume_values(volume, "channel", channel=3), volume[3].astype(np.float32))
    with pytest.raises(ValueError, match="channel must be in 0..15"):
        V.volume_values(volume, "channel", channel=16)
    with pytest.raises(ValueError, match="mode must be one of"):
        V.volume_values(volume, "mean")
    with pytest.raises(ValueError, match=r"\(C, D, H, W\)"):
        V.volume_values(volume[0])


def svd_components(volume: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Independent PCA by SVD: centred samples (V, C), sign-ruled components (C, C), explained ratio."""
    samples = volume.reshape(volume.shape[0], -1).T.astype(np.float64)
    samples = samples - samples.mean(axis=0)
    _, singular, vt = np.linalg.svd(samples, full_matrices=False)
    signs = np.sign(vt[np.arange(len(vt)), np.abs(vt).argmax(axis=1)])
    return samples, vt * signs[:, None], singular**2 / (singular**2).sum()


def test_volume_values_pca_matches_svd_with_the_sign_rule():
    volume = rng(1).standard_normal((5, 3, 4, 6)) * np.array([5.0, 3.0, 2.0, 1.0, 0.5])[:, None, None, None]
    samples, components, explained = svd_components(volume)
    basis, ratio = V.pca_basis(volume)
    np.testing.assert_allclose(basis, components, atol=1e-9)
    np.testing.assert_allclose(ratio, explained, atol=1e-12)
    assert ratio.argmax() == 0 and ratio.sum() == pytest.approx(1.0)
    assert np.all(np.diff(ratio) <= 1e-12)
    for k in range(3):
        projection = V.volume_values(volume, "pca", component=k)
        np.testing.assert_allclose(projection.ravel(), samples @ components[k], rtol=1e-5, atol=1e-5)
        assert basis[k, np.abs(basis[k]).argmax()] > 0
    with pytest.raises(ValueError, match="component must be in 0..4"):
        V.volume_values(volume, "pca", component=5)


def test_pca_basis_is_shared_across_chunks(layer):
    basis, ratio = V.pca_basis(layer.h)
    assert basis.shape == (layer.channels, layer.channels) and ratio[0] == ratio.max()
    with_basis = V.volume_values(layer.h[CURRENT], "pca", component=0, basis=basis)
    samples = np.moveaxis(layer.h[CURRENT].astype(np.float64), 0, -1)
    expected = (samples - samples.reshape(-1, layer.channels).mean(axis=0)) @ basis[0]
    np.testing.assert_allclose(with_basis, expected, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="basis must have shape"):
        V.volume_values(layer.h[CURRENT], "pca", basis=basis[:, :3])


# ---------------------------------------------------------------------------------------
# Volumes and slices
# ---------------------------------------------------------------------------------------


def test_volume_figure_holds_the_values_at_their_voxels(layer):
    values = V.volume_values(layer.h[CURRENT])
    fig = F.volume_figure(values, title="h")
    (volume,) = fig.data
    assert volume.type == "volume" and fig.layout.template.layout.to_plotly_json() != {}
    np.testing.assert_array_equal(np.asarray(volume.value), values.ravel())
    x, y, z = (np.asarray(getattr(volume, a)).astype(int) for a in "xyz")
    np.testing.assert_array_equal(np.asarray(volume.value), values[z, y, x])
    assert fig.layout.scene.xaxis.title.text == "x (W)" and fig.layout.scene.zaxis.title.text == "z (D)"
    assert (volume.cmin, volume.cmax) == (float(values.min()), float(values.max()))


def test_volume_figure_point_cloud_marks_the_voxels_that_hold_something():
    values = np.zeros((3, 4, 5), dtype=np.float32)
    values[1, 2, 3], values[2, 0, 4], values[0, 3, 0] = 1.0, 0.5, 0.1  # (z, y, x); 0.1 is under the floor
    fig = F.volume_figure(values, kind="points", value_range=(0, 1))
    (cloud,) = fig.data
    assert cloud.type == "scatter3d" and cloud.mode == "markers"
    shown = sorted(zip(cloud.z, cloud.y, cloud.x, cloud.customdata, strict=True))
    assert shown == [(1, 2, 3, 1.0), (2, 0, 4, 0.5)]
    sizes = dict(zip(zip(cloud.z, cloud.y, cloud.x, strict=True), cloud.marker.size, strict=True))
    assert sizes[(1, 2, 3)] == pytest.approx(12.0) and sizes[(2, 0, 4)] == pytest.approx(7.5)  # 3 + 9 · share
    assert (cloud.marker.cmin, cloud.marker.cmax) == (0, 1)
    scene = fig.layout.scene  # the whole grid whatever is drawn, in its proportions
    assert (scene.xaxis.range, scene.yaxis.range, scene.zaxis.range) == ((-0.5, 4.5), (-0.5, 3.5), (-0.5, 2.5))
    assert (scene.aspectratio.x, scene.aspectratio.y, scene.aspectratio.z) == pytest.approx((1.0, 0.8, 0.6))
    signed = np.zeros((3, 4, 5), dtype=np.float32)
    signed[0, 0, 0], signed[1, 1, 1], signed[2, 2, 2] = -2.0, 1.0, 0.2  # a principal component: both signs count
    cloud = F.volume_figure(signed, kind="points", value_range=(-2, 1)).data[0]
    assert sorted(zip(cloud.z, cloud.y, cloud.x, cloud.customdata, strict=True)) == [(0, 0, 0, -2.0), (1, 1, 1, 1.0)]
    empty = F.volume_figure(np.zeros((2, 2, 2), dtype=np.float32), kind="points", value_range=(0, 1))
    assert len(empty.data[0].x) == 0  # nothing held: nothing drawn, the axes still there


def test_figures_are_white_whether_or_not_it_is_plotly_default():
    import plotly.io as pio

    white = pio.templates[F.TEMPLATE]
    before = pio.templates.default
    try:
        for default in ("plotly", F.TEMPLATE):
            pio.templates.default = default
            fig = F.volume_figure(rng(2).uniform(0, 1, (2, 2, 2)), kind="points")
            assert fig.layout.template == white, default
    finally:
        pio.templates.default = before


def test_volume_figure_fixed_range_and_isosurface():
    values = rng(2).uniform(0, 1, (3, 4, 5)).astype(np.float32)
    fig = F.volume_figure(values, kind="isosurface", value_range=(-2, 2))
    (iso,) = fig.data
    assert iso.type == "isosurface" and (iso.cmin, iso.cmax, iso.isomin, iso.isomax) == (-2, 2, -2, 2)
    assert len(iso.value) == values.size
    with pytest.raises(ValueError, match="kind must be"):
        F.volume_figure(values, kind="voxels")
    with pytest.raises(ValueError, match=r"values must have shape \(D, H, W\)"):
        F.volume_figure(values[0])
    with pytest.raises(ValueError, match="high > low"):
        F.volume_figure(values, value_range=(1, 1))


def test_slices_figure_shows_the_three_planes_on_one_scale():
    values = rng(3).standard_normal((3, 4, 5)).astype(np.float32)
    fig = F.slices_figure(values, index=(2, 1, 4))
    planes = [np.asarray(d.z) for d in fig.data]
    assert [d.type for d in fig.data] == ["heatmap"] * 3
    np.testing.assert_array_equal(planes[0], values[2])
    np.testing.assert_array_equal(planes[1], values[:, 1, :])
    np.testing.assert_array_equal(planes[2], values[:, :, 4])
    assert {d.coloraxis for d in fig.data} == {"coloraxis"}
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (float(values.min()), float(values.max()))
    centre = F.slices_figure(values)
    np.testing.assert_array_equal(np.asarray(centre.data[0].z), values[1])
    with pytest.raises(ValueError, match="x index must be in 0..4"):
        F.slices_figure(values, index=(0, 0, 5))


# ---------------------------------------------------------------------------------------
# Addressing
# ---------------------------------------------------------------------------------------


def ellipsoid_centre_and_radii(mesh) -> tuple[np.ndarray, np.ndarray]:
    points = np.stack([np.asarray(mesh.x), np.asarray(mesh.y), np.asarray(mesh.z)], axis=1)
    return points.mean(axis=0), (points.max(axis=0) - points.min(axis=0)) / 2


@pytest.mark.parametrize("source", ["checkpoint", "synthetic"])
def test_trajectory_figure_paths_and_footprint(source, request):
    layer = request.getfixturevalue("layer") if source == "checkpoint" else synthetic_layer()
    upto = min(CURRENT, layer.mu_write.shape[0] - 1)
    fig = F.trajectory_figure(layer, upto, tail=3)
    names = [d.name for d in fig.data]
    assert {"read", "write", "1σ", "2σ"} <= set(names)
    D, H, W = layer.grid
    for name, mu in (("read", layer.mu_read), ("write", layer.mu_write)):
        (path,) = traces_named(fig, name)
        expected = (mu[: upto + 1].astype(np.float64) + 1) * (np.array([W, H, D]) - 1) / 2
        np.testing.assert_allclose(np.stack([path.x, path.y, path.z], axis=1), expected, atol=1e-6)
        recency = np.asarray(path.marker.color)
        assert recency[-1] == 1.0 and np.all(np.diff(recency) >= 0) and recency[0] < recency[-1]
    write_voxel = (layer.mu_write[upto].astype(np.float64) + 1) * (np.array([W, H, D]) - 1) / 2
    sigma_voxels = float(layer.sigma[upto]) * (np.array([W, H, D]) - 1) / 2
    for level in (1, 2):
        (mesh,) = traces_named(fig, f"{level}σ")
        centre, radii = ellipsoid_centre_and_radii(mesh)
        assert mesh.type == "mesh3d"
        assert np.abs(centre - write_voxel).max() < 0.1
        np.testing.assert_allclose(radii, level * sigma_voxels, rtol=1e-6)
    with pytest.raises(ValueError, match="upto"):
        F.trajectory_figure(layer, layer.mu_write.shape[0])


def test_sigma_figure_in_voxel_spacings(layer):
    fig = F.sigma_figure(layer.sigma, CURRENT, layer.grid)
    (line,) = traces_named(fig, "σ")
    n = layer.grid[0]
    np.testing.assert_allclose(np.asarray(line.y), layer.sigma * (n - 1) / 2, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(line.customdata), layer.sigma, rtol=1e-6)
    (marker,) = traces_named(fig, "current")
    assert list(marker.x) == [CURRENT] and current_lines(fig) == [CURRENT]
    uneven = F.sigma_figure(np.array([0.2, 0.4]), 1, (2, 5, 5))
    assert {d.name for d in uneven.data} == {"σ along x, y", "σ along z", "current"}
    np.testing.assert_allclose(traces_named(uneven, "σ along z")[0].y, [0.1, 0.2])


def test_gates_figure_means_and_gate_scale(layer):
    fig = F.gates_figure(layer, CURRENT)
    for name, volume in (
        ("i (input)", layer.gate_i),
        ("f (forget)", layer.gate_f),
        ("o (output)", layer.gate_o),
        ("|g| (candidate)", np.abs(layer.gate_g)),
    ):
        (line,) = traces_named(fig, name)
        np.testing.assert_allclose(np.asarray(line.y), volume.astype(np.float64).mean(axis=(1, 2, 3, 4)), rtol=1e-4)
    (scale,) = traces_named(fig, "σ(γ) read gate")
    np.testing.assert_allclose(np.asarray(scale.y), layer.gate_scale)
    assert current_lines(fig) == [CURRENT]
    bare = F.gates_figure(dataclasses.replace(layer, gate_i=None, gate_f=None, gate_o=None, gate_g=None), 0)
    assert [d.name for d in bare.data] == ["σ(γ) read gate"]
    assert [a.text for a in bare.layout.annotations if a.text.startswith("gate")] == ["gate volumes were not captured"]


# ---------------------------------------------------------------------------------------
# Predictions and occlusion
# ---------------------------------------------------------------------------------------


def test_timeline_figure_on_the_occlusion_trace(trace):
    fig = F.timeline_figure(trace, CURRENT)
    probs, target, prediction = (trace.chunks[k] for k in ("probs", "target", "prediction"))
    (line,) = traces_named(fig, "p(target)")
    np.testing.assert_allclose(np.asarray(line.y), probs[np.arange(len(target)), target], rtol=1e-6)
    (correct,) = traces_named(fig, "correct")
    (incorrect,) = traces_named(fig, "incorrect")
    np.testing.assert_array_equal(correct.x, np.flatnonzero(prediction == target))
    np.testing.assert_array_equal(incorrect.x, np.flatnonzero(prediction != target))
    occluded = np.flatnonzero(trace.meta["occluded"])
    rects = [(s.x0, s.x1) for s in fig.layout.shapes if s.type == "rect"]
    assert rects == [(occluded[0] - 0.5, occluded[-1] + 0.5)]  # one run of occluded frames in this sample
    assert "occluded" in [a.text for a in fig.layout.annotations]
    assert current_lines(fig) == [CURRENT]


def test_timeline_figure_leaves_unscored_chunks_as_gaps():
    probs = np.full((4, 3), 1 / 3)
    probs[0] = [0.7, 0.2, 0.1]
    chunks = dict(
        prediction=np.array([0, 1, 2, 0]),
        target=np.array([0, -1, 1, 0]),
        scored=np.array([True, False, True, True]),
        probs=probs,
    )
    trace = Trace(info={"task": "toy"}, layers={}, chunks=chunks, meta={})
    fig = F.timeline_figure(trace, 3)
    y = np.asarray(traces_named(fig, "p(target)")[0].y, dtype=float)
    assert np.isnan(y[1]) and y[0] == pytest.approx(0.7)
    assert list(traces_named(fig, "correct")[0].x) == [0, 3]
    assert list(traces_named(fig, "incorrect")[0].x) == [2]
    assert not [s for s in fig.layout.shapes if s.type == "rect"]
    with pytest.raises(ValueError, match="current"):
        F.timeline_figure(trace, 4)


def test_belief_figure_heatmaps_and_truth(trace):
    probs, positions, occluded = trace.chunks["probs"], trace.meta["positions"], trace.meta["occluded"]
    fig = F.belief_figure(probs, positions, occluded)
    heatmaps = [d for d in fig.data if d.type == "heatmap"]
    truths = traces_named(fig, "truth")
    assert len(heatmaps) == len(truths) == len(probs)
    for t, (heatmap, truth) in enumerate(zip(heatmaps, truths, strict=True)):
        np.testing.assert_array_equal(np.asarray(heatmap.z), probs[t].reshape(16, 16))
        assert (truth.x[0], truth.y[0]) == (positions[t, 1], positions[t, 0])
    titles = [a.text for a in fig.layout.annotations]
    assert [("occluded" in title) for title in titles] == list(occluded)
    subset = F.belief_figure(probs, positions, occluded, frames=[7, 2])
    np.testing.assert_array_equal(np.asarray(subset.data[0].z), probs[7].reshape(16, 16))
    assert [a.text for a in subset.layout.annotations] == ["frame 7 · occluded", "frame 2"]
    with pytest.raises(ValueError, match=r"probs must have shape \(T, 64\)"):
        F.belief_figure(probs, positions, occluded, size=8)


def test_frame_figure_outlines_truth_and_prediction():
    frame = rng(4).uniform(0, 1, (8, 8)).astype(np.float32)
    fig = F.frame_figure(frame, truth=(2, 5), prediction=(6, 1), title="frame")
    np.testing.assert_array_equal(np.asarray(fig.data[0].z), frame)
    (truth,) = traces_named(fig, "truth")
    (prediction,) = traces_named(fig, "prediction")
    assert (min(truth.x), max(truth.x), min(truth.y), max(truth.y)) == (4.5, 6.5, 1.5, 3.5)
    assert (min(prediction.x), max(prediction.x), min(prediction.y), max(prediction.y)) == (0.5, 2.5, 5.5, 7.5)
    assert truth.line.color != prediction.line.color
    shown = [d.type for d in F.frame_figure(frame).data if d.visible is not False]
    assert shown == ["heatmap"]  # boxes without a position are drawn hidden: every frame's figure has the same traces


# ---------------------------------------------------------------------------------------
# All figures: layout, purity, determinism
# ---------------------------------------------------------------------------------------


def build_all(trace: Trace, layer: LayerTrace) -> list:
    values = V.volume_values(layer.h[CURRENT])
    return [
        F.volume_figure(values),
        F.slices_figure(values),
        F.trajectory_figure(layer, CURRENT),
        F.sigma_figure(layer.sigma, CURRENT, layer.grid),
        F.gates_figure(layer, CURRENT),
        F.timeline_figure(trace, CURRENT),
        F.belief_figure(trace.chunks["probs"], trace.meta["positions"], trace.meta["occluded"]),
        F.frame_figure(trace.meta["frames"][0], tuple(trace.meta["positions"][0]), (0, 0)),
    ]


def test_figures_are_pure_deterministic_and_compact(trace, layer):
    before = {name: array.copy() for name, array in trace.arrays().items()}
    first = build_all(trace, layer)
    for name, array in trace.arrays().items():
        np.testing.assert_array_equal(array, before[name], err_msg=f"{name} was modified")
    second = build_all(trace, layer)
    for a, b in zip(first, second, strict=True):
        assert a.to_json() == b.to_json()
        assert a.layout.margin.l <= 20 and a.layout.margin.t <= 60
        assert a.layout.template.layout.paper_bgcolor == "white"
        assert "https://" not in a.to_json()


# ---------------------------------------------------------------------------------------
# PyVista off-screen rendering
# ---------------------------------------------------------------------------------------


def corner_volume(z: int, y: int, x: int, shape=(3, 4, 5)) -> np.ndarray:
    values = np.zeros(shape, dtype=np.float32)
    values[z, y, x] = 1.0
    return values


def assert_not_blank(image: np.ndarray) -> None:
    assert image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8
    background = (image == 255).all(axis=2)
    assert image.std() > 10 and background.mean() < 0.995


def yellow_centroid(image: np.ndarray) -> np.ndarray:
    """(row, column) centroid of the yellow pixels (the top of the viridis map)."""
    r, g, b = (image[..., i].astype(int) for i in range(3))
    rows, cols = np.nonzero((r > 180) & (g > 150) & (b < 140))
    assert len(rows) > 20, "no rendered voxel found"
    return np.array([rows.mean(), cols.mean()])


def top_view(values: np.ndarray) -> np.ndarray:
    """Render looking down z (x to the right, y up) with a fixed colour range."""
    plotter = R.volume_plotter(values, clim=(0, 1))
    plotter.view_xy()
    return R.screenshot(plotter)


def test_volume_plotter_renders_and_changes_with_the_data():
    first = R.screenshot(R.volume_plotter(rng(5).uniform(0, 1, (4, 4, 4)), title="noise"))
    second = R.screenshot(R.volume_plotter(corner_volume(0, 0, 0, (4, 4, 4)), title="corner"))
    assert_not_blank(first)
    assert_not_blank(second)
    assert np.abs(first.astype(int) - second.astype(int)).mean() > 2


def test_volume_plotter_draws_a_constant_volume_transparent():
    image = R.screenshot(R.volume_plotter(np.zeros((4, 4, 4))))
    r, g, b = (image[..., i].astype(int) for i in range(3))
    assert ((r < 120) & (g < 60) & (b > 60)).mean() < 0.01  # no voxels in viridis' dark purple


def test_volume_plotter_orientation():
    values = corner_volume(2, 0, 4)  # z = D-1, y = 0, x = W-1
    plotter = R.volume_plotter(values)
    (volume,) = [a for a in plotter.actors.values() if type(a).__name__ == "Volume"]
    image = volume.mapper.dataset
    assert tuple(image.dimensions) == (5, 4, 3)
    np.testing.assert_array_equal(image.points[np.argmax(image.point_data["value"])], [4, 0, 2])
    plotter.close()
    right, left = yellow_centroid(top_view(corner_volume(0, 0, 4))), yellow_centroid(top_view(corner_volume(0, 0, 0)))
    top = yellow_centroid(top_view(corner_volume(0, 3, 0)))
    assert right[1] > left[1] + 50  # x grows to the right
    assert top[0] < left[0] - 50  # y grows upwards in the image


def test_footprint_plotter_renders_meshes_only_and_follows_the_chunk(layer):
    plotter = R.footprint_plotter(layer, CURRENT)
    assert not [a for a in plotter.actors.values() if type(a).__name__ == "Volume"]
    early = R.screenshot(plotter)
    late = R.screenshot(R.footprint_plotter(synthetic_layer(grid=(4, 4, 4)), 5))
    assert_not_blank(early)
    assert np.abs(early.astype(int) - late.astype(int)).mean() > 1
    assert plotter.render_window is None  # screenshot closed it


def test_plotter_html_exports_the_scene():
    plotter = R.footprint_plotter(synthetic_layer(), 3)
    try:
        html = R.plotter_html(plotter)
    finally:
        plotter.close()
    assert "<html" in html.lower() and "OfflineLocalView" in html


RACE = """
import threading
import analysis.figures  # what the app's sessions import before building a figure
import plotly.graph_objects as go

failures = []

def import_pandas():  # as Streamlit does in another session's thread
    import pandas  # noqa: F401

def build_figures():
    try:
        while importer.is_alive():
            go.Figure(go.Scatter(x=[1, 2, 3], y=[3, 1, 2]), layout=dict(title="t"))
    except Exception as error:
        failures.append(repr(error))

importer, builder = threading.Thread(target=import_pandas), threading.Thread(target=build_figures)
importer.start(); builder.start(); importer.join(); builder.join()
print(failures)
"""


def test_figures_built_while_another_thread_imports_pandas():
    """Plotly reads pandas from sys.modules without importing it: without analysis.figures importing it whole first,
    a figure built while another thread imports pandas fails ('partially initialized module'), as the app's first
    page did for 7 of 8 visitors on a cold server. Run in a fresh interpreter, where pandas is not yet imported."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", RACE], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
