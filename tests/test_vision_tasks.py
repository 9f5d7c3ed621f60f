"""The vision tasks on shipped data: masked patch reconstruction (photographs) and moving digits (real digits)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from skimage.metrics import structural_similarity

from tensor_memory.backbone import BackboneConfig
from tensor_memory.memory import MemoryConfig
from tensor_memory.tasks import TaskModel, make_task
from tensor_memory.tasks import masked_patches as MP
from tensor_memory.tasks import moving_digits as MD
from tensor_memory.tasks.data import images as I
from tensor_memory.tasks.masked_patches import MaskedPatchesConfig
from tensor_memory.tasks.moving_digits import MovingDigitsConfig
from tensor_memory.tasks.patches import patchify, unpatchify

# ---------------------------------------------------------------------------------------
# masked_patches: data
# ---------------------------------------------------------------------------------------


def test_patches_are_raster_order_and_invert():
    images = torch.rand(2, 8, 8, 3)
    patches = patchify(images, 4)  # (2, 4, 48)
    assert patches.shape == (2, 4, 48)
    # patch 1 is row 0, column 1: pixels [0:4, 4:8], row-major, channels last
    assert torch.equal(patches[1, 1], images[1, 0:4, 4:8].reshape(-1))
    assert torch.equal(patches[0, 2], images[0, 4:8, 0:4].reshape(-1))
    assert torch.equal(unpatchify(patches, 4, 3), images)


def test_photographs_and_faces_go_whole_to_one_split():
    names = {split: set(I.PHOTO_SPLITS[split]) for split in I.SPLITS}
    assert (
        not names["train"] & names["test"]
        and not names["train"] & names["valid"]
        and not names["valid"] & names["test"]
    )
    faces = {split: set(I.face_indices(split)) for split in I.SPLITS}
    assert set().union(*faces.values()) == set(range(200))
    assert sum(len(f) for f in faces.values()) == 200  # disjoint
    assert faces["test"] == set(range(0, 200, 10))
    for split in I.SPLITS:  # faces (0–99) and non-faces (100–199) in every split
        assert min(faces[split]) < 100 <= max(faces[split])


def test_a_sample_is_a_crop_of_its_split_and_the_same_for_every_model():
    task = make_task("masked_patches")
    batch = task.draw("eval", 16, 1, 0)
    again = make_task("masked_patches").draw("eval", 16, 1, 0)
    assert torch.equal(batch.meta["image"], again.meta["image"]) and torch.equal(batch.mask, again.mask)
    photos, faces = I.skimage_pools("test", 1)
    kinds = set()
    for b in range(16):
        kind, index, top, left = batch.meta["origin"][b].tolist()
        kinds.add(kind)
        pool = photos if kind == MP.SOURCE_CODES["photo"] else faces
        expected = I.crop(pool.fetch(index), top, left, 24)
        assert np.array_equal(batch.meta["image"][b].numpy(), expected)
    assert kinds == {0, 1}  # both photographs and faces
    train = task.draw("train", 16, 1, 0)
    assert not torch.equal(train.meta["image"], batch.meta["image"])


@pytest.mark.parametrize("rate, hidden", [(0.25, 9), (0.5, 18), (0.75, 27)])
def test_the_mask_hides_its_share_and_nothing_of_it_reaches_the_model(rate, hidden):
    task = make_task("masked_patches", {"mask_rate": rate})
    batch = task.sample(8, seed=3)
    assert (batch.mask.sum(1) == hidden).all()
    assert torch.equal(batch.inputs["masked"].bool(), batch.mask)
    assert (batch.inputs["pixels"][batch.mask] == 0).all()
    # Perturb the hidden pixels: the inputs (standardised by the visible pixels alone) do not move.
    pictures = batch.meta["image"].clone()
    hidden_pixels = torch.from_numpy(np.stack([MP.hidden_pixels(m, 24, 4) for m in batch.mask.numpy()]))
    pictures[hidden_pixels] = torch.rand(int(hidden_pixels.sum()), 1)
    mean, spread = MP.visible_statistics(pictures, batch.mask, 4)
    assert torch.allclose(mean, batch.meta["visible_mean"]) and torch.allclose(spread, batch.meta["visible_spread"])


def test_mixed_masks_draw_the_three_rates():
    batch = make_task("masked_patches").sample(64, seed=0)
    assert set(batch.mask.sum(1).tolist()) == {9, 18, 27}
    assert set(batch.meta["mask_rate"].tolist()) == {0.25, 0.5, 0.75}


def test_visible_statistics_against_numpy():
    batch = make_task("masked_patches", {"mask_rate": 0.5}).sample(4, seed=1)
    for b in range(4):
        hidden = MP.hidden_pixels(batch.mask[b].numpy(), 24, 4)
        visible = batch.meta["image"][b].numpy()[~hidden]
        assert math.isclose(float(batch.meta["visible_mean"][b, 0]), float(visible.mean()), rel_tol=1e-5)
        assert math.isclose(
            float(batch.meta["visible_spread"][b, 0]), max(float(visible.std()), MP.MIN_SPREAD), rel_tol=1e-4
        )


# ---------------------------------------------------------------------------------------
# masked_patches: scores
# ---------------------------------------------------------------------------------------


def test_to_pixels_inverts_the_standardisation():
    task = make_task("masked_patches")
    batch = task.sample(4, seed=2)
    assert torch.allclose(task.to_pixels(batch.targets, batch.meta), batch.meta["image"], atol=1e-5)


def test_psnr_and_ssim_against_an_independent_computation():
    task = make_task("masked_patches", {"mask_rate": 0.5})
    batch = task.sample(6, seed=4)
    noise = torch.randn(batch.targets.shape, generator=torch.Generator().manual_seed(0)) * 0.3
    counts = task.counts(batch.targets + noise, batch)
    predicted = np.clip(task.to_pixels(batch.targets + noise, batch.meta).numpy(), 0, 1)
    psnrs, ssims = [], []
    for b in range(6):
        truth = batch.meta["image"][b].numpy().astype(np.float64)
        hidden = MP.hidden_pixels(batch.mask[b].numpy(), 24, 4)
        mse = np.mean((predicted[b][hidden] - truth[hidden]) ** 2)
        psnrs.append(10 * np.log10(1.0 / mse))
        composite = truth.copy()
        composite[hidden] = predicted[b][hidden]
        _, full = structural_similarity(truth[..., 0], composite[..., 0], data_range=1.0, full=True)
        ssims.append(full[hidden].mean())
    assert counts["psnr"][1] == 6 and math.isclose(counts["psnr"][0] / 6, np.mean(psnrs), rel_tol=1e-6)
    assert math.isclose(counts["ssim"][0] / 6, np.mean(ssims), rel_tol=1e-6)


def test_a_zero_prediction_is_the_visible_mean_fill_and_a_perfect_one_tops_it():
    task = make_task("masked_patches")
    batch = task.sample(8, seed=5)
    zero = task.counts(torch.zeros_like(batch.targets), batch)
    assert math.isclose(zero["psnr"][0], zero["psnr_mean_fill"][0], rel_tol=1e-6)  # float32 against float64 means
    assert math.isclose(zero["ssim"][0], zero["ssim_mean_fill"][0], rel_tol=1e-6)
    perfect = task.counts(batch.targets, batch)
    assert perfect["psnr"][0] / 8 > 80 and math.isclose(perfect["ssim"][0] / 8, 1.0, rel_tol=1e-6)
    assert perfect["mse"][0] < 1e-9


def test_the_loss_scores_hidden_patches_only():
    task = make_task("masked_patches")
    batch = task.sample(4, seed=6)
    outputs = batch.targets.clone()
    outputs[~batch.mask] += 5.0  # wrong on visible patches: not scored
    assert task.loss(outputs, batch).item() == 0.0
    outputs[batch.mask] += 1.0
    assert math.isclose(task.loss(outputs, batch).item(), 1.0, rel_tol=1e-6)


def test_true_places_lay_patches_on_the_memory_plane():
    task = make_task("masked_patches")
    batch = task.sample(1, seed=0)
    places = task.true_places(batch.inputs)[0]  # (36, 3)
    assert torch.allclose(places[0], torch.tensor([-1.0, -1.0, MP.PLANE_Z]))
    assert torch.allclose(places[5], torch.tensor([1.0, -1.0, MP.PLANE_Z]))  # row 0, last column
    assert torch.allclose(places[35], torch.tensor([1.0, 1.0, MP.PLANE_Z]))


@pytest.mark.parametrize(
    "params, field",
    [
        ({"source": "flickr"}, "source"),
        ({"source": "cub"}, "path"),
        ({"image_size": 30}, "image_size"),
        ({"patch": 5}, "patch"),
        ({"patch": 24}, "tokens"),
        ({"channels": 2}, "channels"),
        ({"mask_rate": 1.0}, "mask_rate"),
        ({"mask_rate": 0.0}, "mask_rate"),
        ({"image_size": 4}, "image_size"),
    ],
)
def test_masked_patches_config_refusals(params, field):
    with pytest.raises(ValueError, match="MaskedPatchesConfig"):
        MaskedPatchesConfig(**params)


def test_rgb_crops_keep_colour_and_grey_faces_repeat():
    task = make_task("masked_patches", {"channels": 3})
    batch = task.sample(8, seed=0)
    assert batch.meta["image"].shape == (8, 24, 24, 3) and batch.targets.shape[-1] == 48
    for b in range(8):
        picture = batch.meta["image"][b]
        if batch.meta["origin"][b, 0] == MP.SOURCE_CODES["face"]:
            assert torch.equal(picture[..., 0], picture[..., 1])


@pytest.mark.parametrize("kind", ["tensor", "base", "registers"])
def test_masked_patches_model_trains_on_its_loss(kind):
    task = make_task("masked_patches")
    extra = {"memory": MemoryConfig(token_dim=16, channels=4, grid=(2, 6, 6))} if kind == "tensor" else {}
    torch.manual_seed(0)
    model = TaskModel(task, BackboneConfig(kind=kind, dim=16, heads=2, layers=1, causal=False, **extra))
    batch = task.sample(8, seed=0)
    outputs, _ = model(batch.inputs)
    assert outputs.shape == batch.targets.shape
    task.loss(outputs, batch).backward()
    assert model.head.weight.grad.abs().sum() > 0


# ---------------------------------------------------------------------------------------
# moving_digits
# ---------------------------------------------------------------------------------------


def test_digit_splits_are_disjoint_and_hold_every_digit():
    splits = {s: set(MD.digit_indices(s).tolist()) for s in I.SPLITS}
    assert (
        not splits["train"] & splits["test"]
        and not splits["train"] & splits["valid"]
        and not splits["valid"] & splits["test"]
    )
    assert set().union(*splits.values()) == set(range(1797))
    labels = MD._digits()[1]
    for indices in splits.values():
        assert set(labels[sorted(indices)].tolist()) == set(range(10))
    assert 0.15 < len(splits["test"]) / 1797 < 0.25


def test_digits_are_pasted_where_the_trajectory_says_wrapping_at_the_edges():
    task = make_task("moving_digits", {"occlusion_length": 0})
    batch = task.draw("eval", 6, 1, 0)
    images, labels = MD._digits()
    for b in range(6):
        digit = images[batch.meta["digit_index"][b]]
        assert batch.meta["digit"][b] == labels[batch.meta["digit_index"][b]]
        for t in range(task.config.frames):
            y, x = batch.meta["positions"][b, t].tolist()
            expected = torch.roll(F.pad(digit, (0, 8, 0, 8)), shifts=(y, x), dims=(0, 1))  # 16 × 16, wrapped
            assert torch.equal(batch.meta["frames"][b, t], expected)


def test_targets_name_identity_and_cell_on_every_frame_occluded_ones_included():
    task = make_task("moving_digits")
    batch = task.sample(8, seed=2)
    P, S = task.config.tokens_per_frame, task.config.size
    scored = batch.targets[batch.mask].view(8, task.config.frames)
    expected = (
        batch.meta["digit"][:, None] * S * S + batch.meta["positions"][..., 0] * S + batch.meta["positions"][..., 1]
    )
    assert torch.equal(scored, expected)
    assert batch.mask.view(8, -1, P)[..., -1].all() and batch.mask.sum() == 8 * task.config.frames
    hidden = batch.meta["frames"][batch.meta["occluded"]]
    assert (hidden == 0.5).all() and batch.meta["occluded"].sum(1).eq(4).all()


def test_eval_clips_use_test_digits_only():
    task = make_task("moving_digits")
    test = set(MD.digit_indices("test").tolist())
    assert set(task.draw("eval", 64, 1, 0).meta["digit_index"].tolist()) <= test
    assert not set(task.draw("train", 64, 1, 0).meta["digit_index"].tolist()) & test


def test_digit_head_factorises_into_identity_row_and_column():
    torch.manual_seed(0)
    task = make_task("moving_digits", {"size": 8, "patch": 4})
    head = task.head(16)
    features = torch.randn(5, 16)
    logits = head(features)  # (5, 10·64)
    assert logits.shape == (5, 640)
    target = torch.randint(640, (5,))
    joint = F.cross_entropy(logits, target)
    apart = (
        F.cross_entropy(head.digit(features), target // 64)
        + F.cross_entropy(head.row(features), target % 64 // 8)
        + F.cross_entropy(head.col(features), target % 8)
    )
    assert torch.allclose(joint, apart, atol=1e-5)


def test_digit_counts_split_place_and_identity():
    task = make_task("moving_digits")
    batch = task.sample(4, seed=1)
    cells = task.config.size**2
    right_place = batch.targets % cells + ((batch.targets // cells + 1) % 10) * cells  # wrong digit, right cell
    counts = task.counts(F.one_hot(right_place, task.num_classes).float(), batch)
    n = float(batch.mask.sum())
    assert counts["position_accuracy"] == (n, n) and counts["identity_accuracy"] == (0.0, n)
    assert counts["accuracy"] == (0.0, n)
    hidden = float((batch.mask & batch.meta["occluded"].repeat_interleave(task.config.tokens_per_frame, 1)).sum())
    assert counts["occluded_position_accuracy"] == (hidden, hidden)
    perfect = task.counts(F.one_hot(batch.targets, task.num_classes).float(), batch)
    assert all(c == t for c, t in perfect.values())


def test_moving_digits_config_refusals():
    with pytest.raises(ValueError, match="MovingDigitsConfig.size"):
        MovingDigitsConfig(size=6, patch=2)
    with pytest.raises(ValueError, match="MovingDigitsConfig.occlusion_start"):
        MovingDigitsConfig(occlusion_start=1)
