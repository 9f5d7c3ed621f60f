"""The address scaffold: the task's true places blended into the memory's coordinates, then withdrawn."""

import pytest
import torch

from tensor_memory.memory import record
from tensor_memory.tasks import TaskModel, make_task
from tensor_memory.training import TrainConfig, resolve, train
from tensor_memory.training.loop import loss_on, training_loss
from tensor_memory.training.scaffold import address_scaffold, check_scaffold, scaffold_weight

LAYER = "backbone.blocks.0.memory"


def map_model(chunk_size: int = 1, kind: str = "tensor"):
    config = {
        "task": {"name": "map_building", "params": {"observations": 6, "queries": 3, "map_size": 4}},
        "model": {
            "kind": kind,
            "dim": 16,
            "layers": 1,
            "heads": 2,
            **({"memory": {"channels": 2, "grid": [2, 4, 4], "chunk_size": chunk_size}} if kind == "tensor" else {}),
        },
        "training": {
            "steps": 6,
            "batch_size": 4,
            "warmup_steps": 1,
            "eval_every": 3,
            "eval_batches": 1,
            "log_every": 1,
            "address_scaffold_steps": 4,
        },
    }
    task, backbone, cfg = resolve(config)
    torch.manual_seed(0)
    return config, task, TaskModel(task, backbone), cfg


def coordinates(model, inputs, places=None, weight=0.0):
    with address_scaffold(model, places, weight), record(model) as rec:
        model(inputs)
    layer = rec.layers[LAYER]
    return layer.mu_read, layer.mu_write


def test_weight_falls_linearly_from_one_to_zero_and_stays_there():
    assert [scaffold_weight(s, 4) for s in range(6)] == [1.0, 0.75, 0.5, 0.25, 0.0, 0.0]
    assert scaffold_weight(0, 0) == 0.0  # 0 steps: off from the start


def test_map_places_are_the_queried_cell_and_the_patch_centre_on_the_map_plane():
    task = make_task("map_building", {"map_size": 8, "patch": 2})
    inputs = {
        "row": torch.tensor([[0, 7, 3]]),
        "col": torch.tensor([[0, 7, 5]]),
        "is_query": torch.tensor([[0, 1, 1]]),
        "values": torch.zeros(1, 3, 4),
    }
    z = -0.9  # near the z = −1 layer of voxel centres, inside tanh's working band
    expected = torch.tensor(
        [
            [
                [0.5 / 7 * 2 - 1, 0.5 / 7 * 2 - 1, z],  # observation at (0, 0): centre (0.5, 0.5)
                [1.0, 1.0, z],  # query at cell (7, 7): the far corner
                [5 / 7 * 2 - 1, 3 / 7 * 2 - 1, z],
            ]
        ]
    )  # (x, y) = (col, row)
    assert torch.allclose(task.true_places(inputs), expected)


def test_binding_places_are_the_keys_and_other_tasks_have_none():
    binding = make_task("coordinate_binding", {})
    batch = binding.sample(2, 0)
    assert torch.equal(binding.true_places(batch.inputs), batch.inputs["key"])
    occlusion = make_task("occlusion", {})
    assert occlusion.true_places(occlusion.sample(1, 0).inputs) is None


def test_blend_is_exact_at_every_weight_and_absent_at_zero():
    _, task, model, _ = map_model()
    batch = task.sample(3, 1)
    places = task.true_places(batch.inputs)
    own_read, own_write = coordinates(model, batch.inputs)
    for weight in (1.0, 0.3):
        read, write = coordinates(model, batch.inputs, places, weight)
        assert torch.allclose(read, weight * places + (1 - weight) * own_read, atol=1e-6)
        assert torch.allclose(write, weight * places + (1 - weight) * own_write, atol=1e-6)
    read, write = coordinates(model, batch.inputs, places, 0.0)
    assert torch.equal(read, own_read) and torch.equal(write, own_write)


def test_the_coordinate_head_learns_only_as_the_places_withdraw():
    _, task, model, cfg = map_model()
    batch = task.sample(4, 2)

    def head_gradient(step):
        model.zero_grad()
        training_loss(model, task, batch, step, cfg)[0].backward()
        return model.backbone.blocks[0].memory.coord_head.weight.grad.abs().sum().item()

    assert head_gradient(0) == 0.0  # all places: nothing reaches the head
    assert head_gradient(2) > 0.0  # half: the head trains
    own, _ = loss_on(model, task, batch)
    assert torch.equal(training_loss(model, task, batch, cfg.address_scaffold_steps, cfg)[0], own)  # withdrawn


def test_scaffold_refuses_what_it_cannot_steer():
    _, task, model, _ = map_model(kind="base")
    with pytest.raises(ValueError, match="no memory layer"):
        check_scaffold(model, task, 10)
    _, task, model, _ = map_model(chunk_size=2)
    with pytest.raises(ValueError, match="chunk_size = 1"):
        check_scaffold(model, task, 10)
    occlusion = make_task("occlusion", {})
    _, _, model, _ = map_model()
    with pytest.raises(ValueError, match="no true places"):
        check_scaffold(model, occlusion, 10)
    check_scaffold(model, occlusion, 0)  # off: nothing to check
    with pytest.raises(ValueError, match="address_scaffold_steps"):
        TrainConfig(address_scaffold_steps=-1)
    with pytest.raises(ValueError, match="own addressing once the scaffold is gone"):
        TrainConfig(steps=500, address_scaffold_steps=500)  # never withdrawn: the model never addresses alone
    TrainConfig(steps=501, address_scaffold_steps=500)


def test_training_with_the_scaffold_writes_a_model_that_runs_without_it(tmp_path):
    from tensor_memory import load_checkpoint

    config, task, _, _ = map_model()
    train(config, tmp_path, progress=False)
    ckpt = load_checkpoint(tmp_path)
    assert ckpt.config["training"]["address_scaffold_steps"] == 4
    batch = task.sample(2, 5)
    read, _ = coordinates(ckpt.model, batch.inputs)
    assert not torch.allclose(read, task.true_places(batch.inputs), atol=1e-2)  # its own addressing
