"""The image view: masked patch reconstruction measured (analysis.measures.images), drawn, and on its page."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from app_helpers import CHECKPOINTS, ok, report, shown, start

from analysis.figures import timeline_figure
from analysis.figures.annotations import chunk_events
from analysis.figures.chunk_input import chunk_input_figure, chunk_outcome
from analysis.figures.images import memory_overlay_figure, reconstruction_figure, write_places_figure
from analysis.measures.images import (
    chunk_errors,
    grid_aligned,
    memory_on_image,
    reconstruct,
    write_alignment,
    write_places,
)
from analysis.traces.capture import capture, sample_batch
from app.sidebar import OPENING_SEEDS
from tensor_memory import load_checkpoint

IMAGES = "masked_patches-tensor"


@pytest.fixture(scope="module")
def ckpt():
    return load_checkpoint(CHECKPOINTS / IMAGES)


@pytest.fixture(scope="module")
def trace(ckpt):
    return capture(ckpt, seed=0, index=0, progress=False, mask_rate=0.5)


def test_reconstruction_scores_the_sample_as_eval_does(ckpt):
    rec = reconstruct(ckpt, seed=2, index=0, mask_rate=0.5)
    task, batch = sample_batch(ckpt, 2, [0], mask_rate=0.5)
    with torch.no_grad():
        outputs, _ = ckpt.model(batch.inputs)
    counts = task.counts(outputs, batch)
    assert rec.psnr == pytest.approx(counts["psnr"][0]) and rec.ssim == pytest.approx(counts["ssim"][0])
    assert rec.psnr_mean_fill == pytest.approx(counts["psnr_mean_fill"][0])
    assert rec.masked.sum() == 18 and rec.hidden.sum() == 18 * 16
    assert np.array_equal(rec.composite[~rec.hidden], rec.image[~rec.hidden])  # visible pixels handed back as given
    assert np.array_equal(rec.composite[rec.hidden], rec.predicted[rec.hidden])
    assert np.allclose(rec.error[~rec.hidden], 0.0)
    assert rec.psnr > rec.psnr_mean_fill  # the trained model beats filling with the visible mean on this image


def test_memory_on_image_is_the_norm_over_channels_averaged_over_depth(trace):
    assert grid_aligned(trace)
    h = trace.layer().h[7].astype(np.float32)  # (C, D, H, W)
    expected = np.sqrt((h**2).sum(axis=0)).mean(axis=0)
    assert np.allclose(memory_on_image(trace, 7), expected)
    layer = trace.layer()
    plane = {  # a 3 × 3 plane over a 6 × 6 image: every volume cut alike, as a layer's volumes share one shape
        name: np.asarray(getattr(layer, name))[:, :, :, :3, :3]
        for name in ("h", "c", "gate_i", "gate_f", "gate_o", "gate_g")
        if getattr(layer, name) is not None
    }
    other = dataclasses.replace(layer, **plane)
    shrunk = dataclasses.replace(trace, layers={trace.layer_names[-1]: other})
    assert not grid_aligned(shrunk)
    with pytest.raises(ValueError, match="not laid over the 6 × 6 patch grid"):
        memory_on_image(shrunk, 7)


def test_write_places_put_patches_on_their_voxels_and_alignment_scores_an_affine_layout(trace):
    places = write_places(trace)
    assert np.allclose(places["patch"][0], [0, 0]) and np.allclose(places["patch"][8], [2, 1])  # (x, y) = (col, row)
    assert np.array_equal(places["hidden"], np.asarray(trace.meta["masked"], dtype=bool))
    turned = {**places, "write": places["patch"] @ np.array([[0.0, 1.0], [-1.0, 0.0]]) * 0.5 + 2.0}
    fit = write_alignment(turned)
    assert fit["r2_x"] == pytest.approx(1.0) and fit["r2_y"] == pytest.approx(1.0)
    still = {**places, "write": np.ones_like(places["write"])}
    assert write_alignment(still) == {"r2_x": 0.0, "r2_y": 0.0, "spread_voxels": 0.0}
    rng = np.random.default_rng(0)
    folded = places["patch"].copy()
    folded[:, 1] = rng.normal(size=len(folded))  # columns kept, rows thrown away
    fit = write_alignment({**places, "write": folded})
    assert fit["r2_x"] == pytest.approx(1.0) and fit["r2_y"] < 0.3


def test_each_chunk_ends_on_its_last_patch_and_the_gains_are_over_the_mean_fill(ckpt):
    rec = reconstruct(ckpt, seed=0, index=0, mask_rate=0.5)
    side = rec.image.shape[0] // rec.patch  # 6 patches a side
    assert rec.chunk_patch(8, 1) == (8, 8 // side, 8 % side)
    assert rec.chunk_patch(2, 4) == (11, 1, 5)  # a chunk of four patches ends on its fourth
    assert rec.chunk_patch(20, 4) == (side * side - 1, side - 1, side - 1)  # past the image: its last patch
    assert rec.psnr_gain == pytest.approx(rec.psnr - rec.psnr_mean_fill)
    assert rec.ssim_gain == pytest.approx(rec.ssim - rec.ssim_mean_fill)


def test_chunk_errors_are_pixel_errors_of_hidden_patches(trace):
    errors = chunk_errors(trace)
    scored = trace.chunks["scored"]
    assert np.isnan(errors[~scored]).all() and np.isfinite(errors[scored]).all()
    k = int(np.flatnonzero(scored)[0])
    spread = float(trace.meta["visible_spread"][0])
    manual = np.sqrt(np.mean(((trace.chunks["prediction"][k] - trace.chunks["target"][k]) * spread) ** 2))
    assert errors[k] == pytest.approx(manual, rel=1e-5)


def test_generic_views_read_a_trace_of_values(trace):
    k = int(np.flatnonzero(trace.chunks["scored"])[0])
    outcome = chunk_outcome(trace, k)
    assert outcome["event"].endswith("hidden") and outcome["error"] == pytest.approx(chunk_errors(trace)[k])
    assert chunk_outcome(trace, int(np.flatnonzero(~trace.chunks["scored"])[0]))["event"].endswith("visible")
    events = chunk_events(trace)
    assert list(events) == ["hidden"] and np.array_equal(events["hidden"], trace.chunks["scored"])
    bars = timeline_figure(trace, k).data[0]
    assert np.allclose(np.asarray(bars.y, dtype=float), chunk_errors(trace), equal_nan=True)
    assert "patch" in chunk_input_figure(trace, k).layout.title.text


def test_figures_draw_what_they_are_given(ckpt, trace):
    rec = reconstruct(ckpt, seed=0, index=0, mask_rate=0.5)
    fig = reconstruction_figure(rec, current_patch=8)
    assert len(fig.data) == 4 and len(fig.layout.shapes) == 4  # four panels, the current patch outlined in each
    seen = np.asarray(fig.data[1].z)
    assert np.allclose(seen[rec.hidden], 0.5) and np.allclose(seen[~rec.hidden], rec.image[..., 0][~rec.hidden])
    shape = fig.layout.shapes[0]
    assert (shape.x0, shape.y0) == (2 * 4 - 0.5, 1 * 4 - 0.5)  # patch 8 is row 1, column 2
    overlay = memory_overlay_figure(rec.image, memory_on_image(trace, 3), rec.patch, 3)
    assert overlay.data[1].dx == 4 and overlay.data[1].x0 == 1.5  # voxel (r, c) centred on patch (r, c)
    with pytest.raises(ValueError, match="n · patch"):
        memory_overlay_figure(rec.image, np.zeros((4, 4)), rec.patch)
    places = write_places(trace)
    fig = write_places_figure(places, 5, trace.layer().grid)
    assert len(fig.data[1].x) == trace.num_chunks
    assert np.allclose([fig.data[-1].x[1], fig.data[-1].y[1]], places["write"][5])


def test_images_page_shows_the_reconstruction_and_the_memory_on_it(ckpt):
    at = start()
    ok(at.selectbox(key="checkpoint_choice").set_value(IMAGES).run())
    ok(at.selectbox(key="masked_patches.mask_rate").set_value(0.75).run())
    ok(at.switch_page("views/images.py").run())
    assert at.number_input(key="seed").value == OPENING_SEEDS["masked_patches"]  # its opening seed, not occlusion's
    rec = reconstruct(ckpt, seed=OPENING_SEEDS["masked_patches"], index=0, mask_rate=0.75)
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["PSNR on the hidden pixels"] == f"{rec.psnr:.2f} dB"
    assert metrics["SSIM on the hidden pixels"] == f"{rec.ssim:.3f}"
    assert rec.masked.sum() == 27
    chunk = int(at.session_state["chunk"])
    assert chunk == int(np.flatnonzero(rec.masked)[0])  # a sample opens on its first hidden patch
    assert any(f"Patch {chunk} " in label for label in metrics)
    assert any("‖h‖ after chunk" in m.value for m in at.markdown)
    report(at, "images", chunk + 1)  # the browser's stepper shows the next chunk
    assert any(f"Patch {chunk + 1} " in m.label for m in at.metric)


def test_a_seed_left_where_its_task_opened_follows_the_checkpoint_and_a_chosen_one_stays():
    at = start()
    assert at.number_input(key="seed").value == 0  # occlusion opens on seed 0
    ok(at.selectbox(key="checkpoint_choice").set_value(IMAGES).run())
    assert at.number_input(key="seed").value == OPENING_SEEDS["masked_patches"] != 0
    ok(at.selectbox(key="checkpoint_choice").set_value("occlusion-base").run())
    assert at.number_input(key="seed").value == 0  # back where occlusion opens
    ok(at.number_input(key="seed").set_value(5).run())
    ok(at.selectbox(key="checkpoint_choice").set_value(IMAGES).run())
    assert at.number_input(key="seed").value == 5  # chosen by the person: kept


def test_images_page_explains_itself_on_other_tasks():
    at = start()
    ok(at.switch_page("views/images.py").run())
    assert any("masked patch reconstruction" in i.value for i in at.info)
    assert any("occlusion-tensor is an ` occlusion ` checkpoint" in shown(i.value) for i in at.info)  # a/an
