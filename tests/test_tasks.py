"""Diagnostic tasks: determinism, ground truth checked independently, metrics, models, configs."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tensor_memory.backbone import BackboneConfig
from tensor_memory.memory import MemoryConfig
from tensor_memory.tasks import TASKS, Batch, TaskModel, make_task
from tensor_memory.tasks.coordinate_binding import CoordinateBindingConfig
from tensor_memory.tasks.map_building import MapBuildingConfig
from tensor_memory.tasks.occlusion import OcclusionConfig

NEW_TASKS = ("coordinate_binding", "occlusion", "map_building")
USER_DATA = {"action_recognition"}  # tasks that need a data set at a user path: tests/test_dataset_loaders.py


def batches_equal(a: Batch, b: Batch) -> bool:
    same = lambda x, y: x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)  # noqa: E731
    return (
        same(a.inputs, b.inputs)
        and torch.equal(a.targets, b.targets)
        and torch.equal(a.mask, b.mask)
        and same(a.meta, b.meta)
    )


def one_hot_logits(task, batch: Batch) -> torch.Tensor:
    return F.one_hot(batch.targets, task.num_classes).float()


# ---------------------------------------------------------------------------------------
# Every task
# ---------------------------------------------------------------------------------------


def test_registry_has_the_tasks():
    for name in NEW_TASKS + ("no_harm",):
        assert name in TASKS and TASKS[name].name == name


@pytest.mark.parametrize("name", sorted(set(TASKS) - USER_DATA))
def test_deterministic(name):
    task = make_task(name)
    a, b, c = task.sample(4, seed=7), task.sample(4, seed=7), task.sample(4, seed=8)
    assert batches_equal(a, b)
    assert not batches_equal(a, c)
    assert a.mask.dtype == torch.bool
    if task.outputs == "values":  # values to predict at each position (masked patches' pixels)
        assert a.targets.dtype == torch.float32 and a.targets.shape == (*a.mask.shape, task.output_width)
    else:
        assert a.targets.dtype == torch.long and a.targets.shape == a.mask.shape
        assert int(a.targets.min()) >= 0 and int(a.targets.max()) < task.num_classes  # every target a valid class
    for v in a.inputs.values():
        assert v.shape[:2] == a.mask.shape


def test_user_data_tasks_say_where_their_data_go():
    for name in USER_DATA:
        with pytest.raises(ValueError, match="path is required"):
            make_task(name)


@pytest.mark.parametrize("name", NEW_TASKS)
def test_counts_perfect_and_wrong(name):
    task = make_task(name)
    batch = task.sample(8, seed=3)
    perfect = task.counts(one_hot_logits(task, batch), batch)
    wrong = task.counts(F.one_hot((batch.targets + 1) % task.num_classes, task.num_classes).float(), batch)
    assert "accuracy" in perfect
    n = float(batch.mask.sum())
    assert perfect["accuracy"] == (n, n)
    assert wrong["accuracy"] == (0.0, n)
    for metric, (correct, total) in perfect.items():
        if metric.endswith("accuracy") and metric != "oracle_accuracy" and total > 0:
            assert correct == total, metric
    for metric, (correct, _) in wrong.items():
        if metric != "oracle_accuracy":
            assert correct == 0.0, metric


@pytest.mark.parametrize("name", NEW_TASKS)
@pytest.mark.parametrize("kind", ["base", "tensor"])
def test_model_forward(name, kind):
    task = make_task(name)
    batch = task.sample(2, seed=0)
    extra = {}
    if kind == "tensor":
        extra["memory"] = MemoryConfig(token_dim=32, channels=4, grid=(4, 4, 4), chunk_size=task.chunk_size)
    torch.manual_seed(0)
    model = TaskModel(task, BackboneConfig(kind=kind, dim=32, heads=4, layers=1, **extra))
    logits, _ = model(batch.inputs)
    assert logits.shape == (*batch.targets.shape, task.num_classes)
    assert torch.isfinite(logits).all()
    loss = F.cross_entropy(logits[batch.mask], batch.targets[batch.mask])
    loss.backward()
    assert all(p.grad is not None for p in model.encoder.parameters())


def test_sweeps():
    for name in NEW_TASKS:
        task = make_task(name)
        settings = task.sweep()
        assert [s[task.sweep_field] for s in settings] == list(task.sweep_values)
        for s in settings:
            type(task)(task.Config.from_dict(s))  # every sweep point is a valid config
    binding = make_task("coordinate_binding")
    assert binding.extra_sweeps == {"noise": (0.0, 0.05, 0.1)}
    for noise in binding.extra_sweeps["noise"]:
        CoordinateBindingConfig(noise=noise)


@pytest.mark.parametrize(
    "cls, params, field",
    [
        (CoordinateBindingConfig, {"writes": 0}, "CoordinateBindingConfig.writes"),
        (CoordinateBindingConfig, {"noise": -0.1}, "CoordinateBindingConfig.noise"),
        (CoordinateBindingConfig, {"noise": float("nan")}, "CoordinateBindingConfig.noise"),
        (CoordinateBindingConfig, {"queries": 0}, "CoordinateBindingConfig.queries"),
        (CoordinateBindingConfig, {"values": 1}, "CoordinateBindingConfig.values"),
        (CoordinateBindingConfig, {"writes": 2.0}, "CoordinateBindingConfig.writes"),
        (OcclusionConfig, {"frames": 1}, "OcclusionConfig.frames"),
        (OcclusionConfig, {"size": 1}, "OcclusionConfig.size"),
        (OcclusionConfig, {"ball": 16}, "OcclusionConfig.ball"),
        (OcclusionConfig, {"ball": 0}, "OcclusionConfig.ball"),
        (OcclusionConfig, {"patch": 3}, "OcclusionConfig.patch"),
        (OcclusionConfig, {"occlusion_length": -1}, "OcclusionConfig.occlusion_length"),
        (OcclusionConfig, {"occlusion_length": 11}, "OcclusionConfig.occlusion_length"),
        (OcclusionConfig, {"occlusion_start": 1}, "OcclusionConfig.occlusion_start"),
        (OcclusionConfig, {"occlusion_start": 9}, "OcclusionConfig.occlusion_start"),  # 9 + 4 > 12
        (OcclusionConfig, {"occlusion_start": -2}, "OcclusionConfig.occlusion_start"),
        (MapBuildingConfig, {"observations": 0}, "MapBuildingConfig.observations"),
        (MapBuildingConfig, {"map_size": 0}, "MapBuildingConfig.map_size"),
        (MapBuildingConfig, {"patch": 9}, "MapBuildingConfig.patch"),
        (MapBuildingConfig, {"queries": 0}, "MapBuildingConfig.queries"),
        (MapBuildingConfig, {"density": 1.5}, "MapBuildingConfig.density"),
    ],
)
def test_config_validation(cls, params, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        cls(**params)


def test_config_edges_accepted():
    OcclusionConfig(occlusion_length=0, occlusion_start=-1)
    OcclusionConfig(occlusion_length=10)  # two visible frames, then occluded to the end
    OcclusionConfig(occlusion_start=8)  # 8 + 4 = 12: runs to the last frame
    MapBuildingConfig(patch=8, density=0.0)
    with pytest.raises(ValueError, match="unknown field"):
        make_task("occlusion", {"length": 3})


# ---------------------------------------------------------------------------------------
# coordinate_binding
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("noise", [0.0, 0.1, 0.5])
def test_binding_targets_are_nearest_neighbours(noise):
    W, Q, V = 20, 4, 32
    task = make_task("coordinate_binding", {"writes": W, "queries": Q, "values": V, "noise": noise})
    B = 64
    batch = task.sample(B, seed=11)
    m = batch.meta
    keys, values, qk = m["keys"].numpy(), m["values"].numpy(), m["query_keys"].numpy()
    assert keys.shape == (B, W, 3) and values.shape == (B, W) and qk.shape == (B, Q, 3)
    assert m["nearest"].shape == (B, Q)
    assert keys.min() >= -1 and keys.max() <= 1 and qk.min() >= -1 and qk.max() <= 1
    dist = np.linalg.norm(qk[:, :, None, :].astype(np.float64) - keys[:, None, :, :], axis=-1)  # (B, Q, W)
    nearest = dist.argmin(-1)
    expected = np.take_along_axis(values, nearest, axis=1)  # (B, Q)
    assert np.array_equal(m["nearest"].numpy(), nearest)
    assert np.array_equal(batch.targets[:, W:].numpy(), expected)
    # Mask and inputs: writes first, then queries.
    assert batch.targets.shape == (B, W + Q)
    assert not batch.mask[:, :W].any() and batch.mask[:, W:].all()
    assert torch.equal(batch.inputs["is_query"].bool(), batch.mask)
    assert torch.equal(batch.inputs["key"][:, :W], m["keys"]) and torch.equal(
        batch.inputs["key"][:, W:], m["query_keys"]
    )
    assert torch.equal(batch.inputs["value"][:, :W], m["values"]) and (batch.inputs["value"][:, W:] == V).all()
    chosen_value = np.take_along_axis(values, m["chosen"].numpy(), axis=1)
    if noise == 0.0:  # the query key is exactly the chosen key: its value is the answer
        assert np.array_equal(expected, chosen_value)
        assert torch.equal(
            batch.inputs["key"][:, W:], torch.gather(m["keys"], 1, m["chosen"][..., None].expand(B, Q, 3))
        )
    if noise == 0.5:  # large noise: the nearest key is often not the chosen one, and the target follows it
        assert (nearest != m["chosen"].numpy()).any()


def test_binding_values_are_spread():
    batch = make_task("coordinate_binding").sample(64, seed=0)
    assert len(batch.meta["values"].unique()) == 32


# ---------------------------------------------------------------------------------------
# occlusion
# ---------------------------------------------------------------------------------------


def test_occlusion_physics():
    cfg = OcclusionConfig()
    task = make_task("occlusion")
    T, S, L, ball, p = cfg.frames, cfg.size, cfg.occlusion_length, cfg.ball, cfg.patch
    B = 256
    batch = task.sample(B, seed=5)
    m = batch.meta
    frames, occluded, pos, vel, start = (
        m[k] for k in ("frames", "occluded", "positions", "velocity", "occlusion_start")
    )
    assert frames.shape == (B, T, S, S) and frames.dtype == torch.float32
    assert occluded.shape == (B, T) and occluded.dtype == torch.bool
    assert pos.shape == (B, T, 2) and vel.shape == (B, 2) and start.shape == (B,)

    # Velocities: never (0, 0), each component in {-1, 0, 1}, all eight directions occur.
    assert (vel.abs() <= 1).all() and (vel.abs().sum(1) > 0).all()
    assert len({tuple(v) for v in vel.tolist()}) == 8
    # Positions: exact constant-velocity motion with wrap-around; the start is anywhere.
    t = torch.arange(T)[None, :, None]
    assert torch.equal(pos, (pos[:, :1] + t * vel[:, None]) % S)
    assert len({tuple(q) for q in pos[:, 0].tolist()}) > 100

    # The occlusion: L consecutive frames from start, start >= 2, start + L <= T, and it
    # sometimes runs to the last frame.
    assert (start >= 2).all() and (start + L <= T).all()
    assert (start + L == T).any() and (start == 2).any()
    for b in range(B):
        expected = [int(start[b]) <= i < int(start[b]) + L for i in range(T)]
        assert occluded[b].tolist() == expected

    # Rendering, checked pixel by pixel with an independent loop over the ball's cells.
    fr = frames.numpy()
    for b in range(0, B, 8):
        for i in range(T):
            if occluded[b, i]:
                assert (fr[b, i] == 0.5).all()
                continue
            want = np.zeros((S, S), dtype=np.float32)
            y, x = pos[b, i].tolist()
            for dy in range(ball):
                for dx in range(ball):
                    want[(y + dy) % S, (x + dx) % S] = 1.0
            assert np.array_equal(fr[b, i], want)
    visible = ~occluded
    assert (frames[visible].sum((-1, -2)) == ball * ball).all()
    assert set(frames[visible].unique().tolist()) == {0.0, 1.0}
    # Some balls straddle the edge (the wrap is exercised).
    assert (pos[visible] == S - 1).any()

    # Patches reassemble to the frames (row-major patches of row-major pixels).
    n = S // p
    pixels = batch.inputs["pixels"].reshape(B, T, n, n, p, p)
    rebuilt = pixels.permute(0, 1, 2, 4, 3, 5).reshape(B, T, S, S)
    assert torch.equal(rebuilt, frames)
    assert torch.equal(batch.inputs["pixels"][0, 1, :], frames[0, 0, 0:p, p : 2 * p].reshape(-1))  # patch (0, 1)
    assert torch.equal(batch.inputs["patch_index"][0], torch.arange(n * n).repeat(T))
    assert set(batch.inputs) == {"pixels", "patch_index"}  # no occlusion flag, no frame index

    # Targets: the position index on each frame's last token, scored there only.
    assert task.chunk_size == n * n and batch.targets.shape == (B, T * n * n)
    last = torch.arange(T) * n * n + n * n - 1
    mask = torch.zeros_like(batch.mask)
    mask[:, last] = True
    assert torch.equal(batch.mask, mask)
    assert torch.equal(batch.targets[:, last], pos[..., 0] * S + pos[..., 1])
    assert task.num_classes == S * S


def test_occlusion_fixed_start_and_no_occlusion():
    fixed = make_task("occlusion", {"occlusion_start": 3, "occlusion_length": 6}).sample(16, seed=1)
    assert (fixed.meta["occlusion_start"] == 3).all()
    assert fixed.meta["occluded"][:, 3:9].all() and not fixed.meta["occluded"][:, :3].any()
    assert not fixed.meta["occluded"][:, 9:].any()
    none = make_task("occlusion", {"occlusion_length": 0})
    batch = none.sample(16, seed=1)
    assert not batch.meta["occluded"].any() and not (batch.meta["frames"] == 0.5).any()
    counts = none.counts(one_hot_logits(none, batch), batch)
    assert counts["occluded_accuracy"] == (0.0, 0.0)
    assert counts["visible_accuracy"] == (16.0 * 12, 16.0 * 12)


def test_occlusion_counts_split():
    task = make_task("occlusion")
    batch = task.sample(8, seed=2)
    occluded = batch.meta["occluded"]  # (B, T)
    logits = one_hot_logits(task, batch)
    # Break every prediction on occluded frames: occluded accuracy 0, visible untouched.
    P = task.chunk_size
    broken = occluded.repeat_interleave(P, dim=1)
    logits[broken] = F.one_hot((batch.targets[broken] + 1) % task.num_classes, task.num_classes).float()
    counts = task.counts(logits, batch)
    n_occ, n_vis = float(occluded.sum()), float((~occluded).sum())
    assert n_occ == 8 * 4 and n_vis == 8 * 8
    assert counts["occluded_accuracy"] == (0.0, n_occ)
    assert counts["visible_accuracy"] == (n_vis, n_vis)
    assert counts["accuracy"] == (n_vis, n_occ + n_vis)


# ---------------------------------------------------------------------------------------
# map_building
# ---------------------------------------------------------------------------------------


def test_map_bookkeeping_and_oracle():
    cfg = MapBuildingConfig()
    task = make_task("map_building")
    T, Q, S, p = cfg.observations, cfg.queries, cfg.map_size, cfg.patch
    B = 32
    batch = task.sample(B, seed=9)
    m = batch.meta
    grid, observed, obs_pos, cells = m["map"], m["observed"], m["obs_positions"], m["query_cells"]
    assert grid.shape == (B, S, S) and grid.dtype == torch.long and set(grid.unique().tolist()) == {0, 1}
    assert observed.shape == (B, S, S) and observed.dtype == torch.bool
    assert obs_pos.shape == (B, T, 2) and cells.shape == (B, Q, 2)
    assert obs_pos.min() == 0 and obs_pos.max() == S - p and cells.min() == 0 and cells.max() == S - 1  # full ranges
    assert abs(grid.float().mean().item() - cfg.density) < 0.05

    inputs = batch.inputs
    seen_total, oracle_sum = 0.0, 0.0
    for b in range(B):
        seen = np.zeros((S, S), dtype=bool)
        for t in range(T):
            r, c = obs_pos[b, t].tolist()
            assert inputs["row"][b, t] == r and inputs["col"][b, t] == c and inputs["is_query"][b, t] == 0
            want = [float(grid[b, r + i, c + j]) for i in range(p) for j in range(p)]
            assert inputs["values"][b, t].tolist() == want
            seen[r : r + p, c : c + p] = True
        assert np.array_equal(observed[b].numpy(), seen)
        for q in range(Q):
            r, c = cells[b, q].tolist()
            assert inputs["row"][b, T + q] == r and inputs["col"][b, T + q] == c
            assert inputs["is_query"][b, T + q] == 1 and (inputs["values"][b, T + q] == 0).all()
            assert batch.targets[b, T + q] == grid[b, r, c]
            oracle_sum += 1.0 if seen[r, c] else 0.5
            seen_total += 1
    assert not batch.mask[:, :T].any() and batch.mask[:, T:].all()
    assert task.num_classes == 2 and task.chunk_size == 1

    counts = task.counts(torch.zeros(B, T + Q, 2), batch)
    assert counts["oracle_accuracy"] == (oracle_sum, float(B * Q))
    assert 0.5 * B * Q < oracle_sum < B * Q  # some queries are guesses, most are not
    # More observations: a higher ceiling.
    few = make_task("map_building", {"observations": 2}).sample(B, seed=9)
    ratio = lambda bt: (lambda s, n: s / n)(*task.counts(torch.zeros(*bt.targets.shape, 2), bt)["oracle_accuracy"])  # noqa: E731
    assert ratio(few) < ratio(batch)


def test_encoder_embeddings_start_at_the_scale_of_their_role():
    """Markers (places, rows, columns, flags) start at 0.02 so they do not swamp the content beside them;
    what a token carries for the memory (a binding's value, a counter's token) starts at N(0, 1)."""
    from tensor_memory.config import CONTENT_STD, MARKER_STD

    roles = {
        "occlusion": {"place": MARKER_STD},
        "map_building": {"row": MARKER_STD, "col": MARKER_STD, "flag": MARKER_STD},
        "coordinate_binding": {"value": CONTENT_STD, "flag": MARKER_STD},
        "no_harm": {"embed": CONTENT_STD},
        "language_modelling": {"embed": CONTENT_STD},
        "masked_patches": {"place": MARKER_STD, "hidden": MARKER_STD},
        "moving_digits": {"place": MARKER_STD},
        "action_recognition": {"place": MARKER_STD},
    }
    assert set(roles) == set(TASKS)
    torch.manual_seed(0)
    for name, tables in roles.items():
        encoder = make_task(name, {"path": "unused"} if name in USER_DATA else None).encoder(64)
        found = {n: m for n, m in encoder.named_modules() if isinstance(m, torch.nn.Embedding)}
        assert set(found) == set(tables), name
        for table, std in tables.items():
            assert abs(found[table].weight.std().item() - std) < 0.15 * std, (name, table)


def test_occlusion_position_head_scores_rows_and_columns_apart():
    torch.manual_seed(0)
    task = make_task("occlusion", {"size": 8, "patch": 4})
    head = task.head(16)
    features = torch.randn(5, 16)
    logits = head(features)  # (5, 64)
    row, col = head.row(features), head.col(features)
    assert torch.allclose(logits.view(5, 8, 8), row[:, :, None] + col[:, None, :], atol=1e-6)
    target = torch.randint(64, (5,))
    joint = F.cross_entropy(logits, target)
    apart = F.cross_entropy(row, target // 8) + F.cross_entropy(col, target % 8)
    assert torch.allclose(joint, apart, atol=1e-5)  # the softmax over cells factorises
    assert torch.equal(logits.argmax(-1), row.argmax(-1) * 8 + col.argmax(-1))
    assert isinstance(make_task("occlusion", {"head": "joint"}).head(16), torch.nn.Linear)
    with pytest.raises(ValueError, match="head must be one of"):
        make_task("occlusion", {"head": "both"})
