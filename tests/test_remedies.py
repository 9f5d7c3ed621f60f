"""Remedies for addressing that must organise itself, each a switch off by default: off, the layer and the
training are what they were (the default path is held bit for bit to the layer in git history by
tests/test_relayout.py); on, each does what it says, checked against an independent computation."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from test_training import tiny_config

from tensor_memory import MemoryConfig, TensorMemory, record
from tensor_memory.memory.reference import ReferenceMemory
from tensor_memory.tasks import TaskModel
from tensor_memory.training import TrainConfig, resolve
from tensor_memory.training.loop import make_optimizer, set_learning_rate

GRID = (3, 4, 5)  # (D, H, W): every axis a different length, so a mixed-up axis shows


def layer(**settings) -> TensorMemory:
    torch.manual_seed(0)
    return TensorMemory(MemoryConfig(token_dim=8, channels=2, grid=GRID, **settings))


def test_both_remedies_are_off_by_default():
    assert MemoryConfig().addressing.coordinates == "tanh" and layer().coord_head.out_features == 3
    task, backbone, cfg = resolve(tiny_config())
    assert cfg.coord_lr_scale == 1.0
    optimizer = make_optimizer(TaskModel(task, backbone), cfg)
    assert len(optimizer.param_groups) == 2 and not any("lr_scale" in g for g in optimizer.param_groups)


def test_soft_argmax_coordinates_are_the_expected_voxel_centre_of_each_axis():
    memory = layer(addressing={"coordinates": "soft_argmax"})
    assert memory.coord_head.out_features == sum(GRID)
    x = torch.randn(2, 5, 8)
    with record(memory) as rec:
        memory(x)
    tokens = memory.norm(x)  # chunk_size 1: each token is its chunk's query
    logits = memory.coord_head(tokens)  # (2, 5, W + H + D)
    D, H, W = GRID
    expected = []
    for start, n in ((0, W), (W, H), (W + H, D)):  # x over W voxels, y over H, z over D
        p = torch.softmax(logits[..., start : start + n].double(), dim=-1)
        expected.append((p * torch.linspace(-1, 1, n, dtype=torch.float64)).sum(-1))
    torch.testing.assert_close(rec.layers[""].mu_read.double(), torch.stack(expected, -1), atol=1e-6, rtol=0)
    assert rec.layers[""].mu_read.abs().max() < 1


def test_soft_argmax_gives_every_voxel_of_every_axis_gradient_where_tanh_at_a_face_gives_none():
    soft = layer(addressing={"coordinates": "soft_argmax"})
    x = torch.randn(2, 6, 8)
    soft(x)[0].square().sum().backward()
    assert (soft.coord_head.weight.grad.abs().sum(1) > 0).all()  # every voxel's logit learns
    pinned = layer()
    with torch.no_grad():
        pinned.coord_head.bias.fill_(30.0)  # tanh(30) = 1 in float32: every read and write at a face
    pinned(x)[0].square().sum().backward()
    assert pinned.coord_head.weight.grad.abs().max() == 0


def test_soft_argmax_starts_at_the_centre_with_centre_init_and_moves_to_a_voxel_its_logit_picks():
    memory = layer(addressing={"coordinates": "soft_argmax"}, coord_init="centre")
    x = torch.randn(1, 3, 8)
    with record(memory) as rec:
        memory(x)
    assert rec.layers[""].mu_read.abs().max() < 1e-7  # linspace's centres cancel to float32 rounding
    D, H, W = GRID
    with torch.no_grad():
        memory.coord_head.bias[W - 1] = 50.0  # x: the last voxel
        memory.coord_head.bias[W] = 50.0  # y: the first
        memory.coord_head.bias[W + H + 1] = 50.0  # z: the middle one of three
    with record(memory) as rec:
        memory(x)
    torch.testing.assert_close(rec.layers[""].mu_read[0, 0], torch.tensor([1.0, -1.0, 0.0]), atol=1e-6, rtol=0)


def test_the_literal_reference_refuses_a_remedy_it_does_not_have():
    with pytest.raises(ValueError, match="MemoryConfig.addressing asks for a variant it does not have"):
        ReferenceMemory(layer(addressing={"coordinates": "soft_argmax"}))
    with pytest.raises(ValueError, match="coordinates must be one of 'tanh', 'soft_argmax'"):
        MemoryConfig(addressing={"coordinates": "argmax"})


def test_a_coordinate_learning_rate_scale_moves_only_the_coordinate_heads_that_much_faster():
    """AdamW's first step moves every weight by about lr (its update is g/|g|): the coordinate heads by 10·lr."""
    config = tiny_config(coord_lr_scale=10.0, weight_decay=0.0)
    task, backbone, cfg = resolve(config)
    torch.manual_seed(0)
    model = TaskModel(task, backbone)
    optimizer = make_optimizer(model, cfg)
    heads = {name for name, _ in model.named_parameters() if "coord_head" in name}
    assert heads and sum(len(g["params"]) for g in optimizer.param_groups) == len(list(model.parameters()))
    set_learning_rate(optimizer, 1, cfg)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    batch = task.draw("train", 4, 0, 0)
    outputs, _ = model(batch.inputs)
    task.loss(outputs, batch).backward()
    optimizer.step()
    lr = optimizer.param_groups[0]["lr"]
    for name, p in model.named_parameters():
        moved = (p.detach() - before[name]).abs().max().item()
        if p.grad is None or p.grad.abs().max() == 0:
            continue
        assert moved == pytest.approx(10 * lr if name in heads else lr, rel=0.05), name


def test_a_learning_rate_scale_must_be_positive():
    with pytest.raises(ValueError, match="coord_lr_scale"):
        resolve(tiny_config(coord_lr_scale=0.0))


def test_sigma_annealing_floors_every_write_on_the_schedule_then_lets_go():
    from tensor_memory.training.anneal import sigma_annealing, sigma_floor

    assert sigma_floor(0, 100, 1.0, 0.4) == 1.0 and sigma_floor(100, 100, 1.0, 0.4) == 0.0
    assert sigma_floor(50, 100, 1.0, 0.4) == pytest.approx(0.4**0.5)  # geometric: σ₀(σ₁/σ₀)^(1/2)
    assert sigma_floor(5, 0, 1.0, 0.4) == 0.0  # off
    memory = layer(sigma_init=0.4)
    x = torch.randn(2, 6, 8)
    with record(memory) as plain:
        y_plain, _ = memory(x)
    learned = plain.layers[""].sigma
    for step, floor in ((0, 1.0), (50, 0.4**0.5), (99, 1.0 * 0.4**0.99)):
        with sigma_annealing(memory, step, 100, 1.0), record(memory) as rec:
            memory(x)
        torch.testing.assert_close(rec.layers[""].sigma, learned.clamp(min=floor))
        assert (rec.layers[""].sigma >= floor - 1e-7).all()
    with sigma_annealing(memory, 100, 100, 1.0), record(memory) as after:  # the schedule is over: untouched
        y_after, _ = memory(x)
    assert torch.equal(after.layers[""].sigma, learned) and torch.equal(y_after, y_plain)


def test_sigma_annealing_is_off_by_default_and_its_settings_are_checked():
    task, backbone, cfg = resolve(tiny_config())
    assert cfg.sigma_anneal_steps == 0
    with pytest.raises(ValueError, match="sigma_anneal_from"):
        resolve(tiny_config(sigma_anneal_steps=10, sigma_anneal_from=-1.0))


def test_the_place_probe_scores_writes_against_true_places_on_samples_it_was_not_fitted_on():
    import numpy as np

    from analysis.measures.world import place_fit

    rng = np.random.default_rng(0)
    places = rng.uniform(-1, 1, (8, 10, 2))
    mixed = places @ np.array([[0.5, 0.1, -0.2], [-0.3, 0.4, 0.1]]) + 0.2  # (8, 10, 3): a linear image of them
    assert place_fit(mixed, places) == pytest.approx(1.0, abs=1e-4)
    unrelated = rng.uniform(-1, 1, (8, 10, 3))
    assert place_fit(unrelated, places) < 0.1
    with pytest.raises(ValueError, match="at least two samples"):
        place_fit(mixed[:1], places[:1])
    hidden = rng.uniform(size=(8, 10)) < 0.3  # frames where the object is hidden: the writes there say nothing
    wrong = np.where(hidden[..., None], unrelated, mixed)
    assert place_fit(wrong, places) < 0.9 and place_fit(wrong, places, ~hidden) == pytest.approx(1.0, abs=1e-4)


def test_sigma_pull_adds_its_weight_times_the_squared_log_ratio_of_each_write_to_the_layers_sigma_init():
    from tensor_memory.training.loop import loss_on, training_loss

    config = tiny_config(sigma_pull=0.5)
    config["model"]["memory"]["sigma_init"] = 0.3
    task, backbone, cfg = resolve(config)
    torch.manual_seed(0)
    model = TaskModel(task, backbone)
    with torch.no_grad():
        model.backbone.blocks[0].memory.spread.weight.normal_(0, 0.5)  # σ differs from write to write
    batch = task.draw("train", 4, 0, 0)
    with record(model, gates=False) as rec:
        plain, _ = training_loss(model, task, batch, 0, dataclasses.replace(cfg, sigma_pull=0.0))
    assert torch.equal(plain, loss_on(model, task, batch)[0])  # off: the task's loss, bit for bit
    sigma = next(iter(rec.layers.values())).sigma.double()
    expected = 0.5 * (sigma.log() - torch.log(torch.tensor(0.3, dtype=torch.float64))).square().mean()
    pulled, _ = training_loss(model, task, batch, 0, cfg)
    assert expected > 0.01
    torch.testing.assert_close((pulled - plain).double(), expected, atol=1e-6, rtol=1e-5)
    pulled.backward()
    assert model.backbone.blocks[0].memory.spread.weight.grad.abs().sum() > 0
    assert TrainConfig().sigma_pull == 0.0  # off by default
    with pytest.raises(ValueError, match="sigma_pull"):
        resolve(tiny_config(sigma_pull=-1.0))


def test_occupancy_shortfall_is_one_minus_the_normalised_entropy_of_where_a_samples_writes_land():
    import numpy as np

    from tensor_memory.training.penalties import occupancy_shortfall

    torch.manual_seed(0)
    mu = torch.rand(2, 5, 3, dtype=torch.float64) * 2 - 1
    D, H, W = GRID
    centres = np.stack(np.meshgrid(*(np.linspace(-1, 1, n) for n in (W, H, D)), indexing="ij"), -1)  # (W, H, D, 3)
    expected = []
    for sample in mu.numpy():  # an independent computation: the 3-D Gaussian at every voxel centre, normalised
        masses = [np.exp(-((centres - m) ** 2).sum(-1) / (2 * 0.3**2)) for m in sample]
        p = np.mean([m / m.sum() for m in masses], axis=0).ravel()
        expected.append(1 + (p * np.log(p)).sum() / np.log(p.size))
    torch.testing.assert_close(occupancy_shortfall(mu, 0.3, GRID), torch.tensor(np.mean(expected), dtype=torch.float64))
    one_place = torch.zeros(1, 6, 3)
    spread = torch.cartesian_prod(*(torch.tensor([-1.0, 1.0]),) * 3)[None]  # the grid's eight corners
    assert occupancy_shortfall(spread, 0.3, GRID) < 0.5 * occupancy_shortfall(one_place, 0.3, GRID)


def test_the_occupancy_penalty_moves_the_coordinates_and_leaves_sigma_out():
    from tensor_memory.training.loop import training_loss
    from tensor_memory.training.penalties import occupancy_shortfall

    task, backbone, cfg = resolve(tiny_config(occupancy_weight=2.0))
    assert TrainConfig().occupancy_weight == 0.0
    torch.manual_seed(0)
    model = TaskModel(task, backbone)
    batch = task.draw("train", 4, 0, 0)
    memory = model.backbone.blocks[0].memory
    with record(model, gates=False) as rec:
        plain, _ = training_loss(model, task, batch, 0, dataclasses.replace(cfg, occupancy_weight=0.0))
    mu = next(iter(rec.layers.values())).mu_write
    expected = 2.0 * occupancy_shortfall(mu, memory.config.sigma_init, memory.config.grid)
    penalised, _ = training_loss(model, task, batch, 0, cfg)
    torch.testing.assert_close(penalised - plain, expected, atol=1e-6, rtol=1e-5)
    model.zero_grad()
    (penalised - plain).backward()  # the penalty alone
    assert memory.coord_head.weight.grad.abs().sum() > 0
    assert memory.spread.weight.grad is None or memory.spread.weight.grad.abs().sum() == 0
