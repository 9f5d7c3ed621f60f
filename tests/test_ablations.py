"""The mechanism's ablations (the table in docs/results.md), each a MemoryConfig variant off by default: hard
(nearest-voxel) writes, separate read and write coordinate heads, a 1×1×1 update. Off, the layer is the mechanism
(its default path is held bit for bit to git history by tests/test_relayout.py); on, each does what it says."""

from __future__ import annotations

import pytest
import torch

from tensor_memory import MemoryConfig, TensorMemory, hooks, record
from tensor_memory.memory.reference import ReferenceMemory

GRID = (3, 4, 5)  # (D, H, W): every axis a different length, so a mixed-up axis shows
SETTINGS = dict(token_dim=8, channels=2, grid=GRID)


def layer(**settings) -> TensorMemory:
    torch.manual_seed(0)
    return TensorMemory(MemoryConfig(**SETTINGS, **settings))


def test_every_ablation_is_off_by_default_and_adds_no_parameter():
    config = MemoryConfig()
    assert (config.write.profile, config.addressing.separate_heads, config.update.taps) == ("gaussian", False, 3)
    assert set(layer().state_dict()) == set(layer(write={"profile": "nearest"}, update={"taps": 1}).state_dict())
    assert set(layer(addressing={"separate_heads": True}).state_dict()) - set(layer().state_dict()) == {
        "addressing.read_head.weight",
        "addressing.read_head.bias",
    }


def test_settings_are_checked_and_the_reference_refuses_them():
    with pytest.raises(ValueError, match="update.taps must be 3"):
        MemoryConfig(update={"taps": 2})
    with pytest.raises(ValueError, match="write.profile must be one of 'gaussian', 'nearest'"):
        MemoryConfig(write={"profile": "box"})
    with pytest.raises(ValueError, match="needs mode='dense'"):
        MemoryConfig(write={"profile": "nearest", "mode": "local"})
    with pytest.raises(ValueError, match="separate_heads must be True or False"):
        MemoryConfig(addressing={"separate_heads": 1})
    for group, setting in (
        ("write", {"profile": "nearest"}),
        ("addressing", {"separate_heads": True}),
        ("update", {"taps": 1}),
    ):
        with pytest.raises(ValueError, match=f"MemoryConfig.{group}.* asks for a variant it does not have"):
            ReferenceMemory(layer(**{group: setting}))


def test_separate_heads_equal_to_the_shared_one_change_nothing_and_apart_move_only_the_reads():
    shared, apart = layer(), layer(addressing={"separate_heads": True})
    apart.load_state_dict(
        {
            **shared.state_dict(),
            "addressing.read_head.weight": shared.coord_head.weight,
            "addressing.read_head.bias": shared.coord_head.bias,
        }
    )
    x = torch.randn(2, 6, 8)
    with record(shared) as a, record(apart) as b:
        y_shared, _ = shared(x)
        y_apart, _ = apart(x)
    assert torch.equal(y_shared, y_apart)
    with torch.no_grad():
        apart.addressing.read_head.bias.add_(0.3)
    with record(apart) as c:
        apart(x)
    assert torch.equal(c.layers[""].mu_write, b.layers[""].mu_write)
    torch.testing.assert_close(c.layers[""].mu_read, torch.tanh(apart.addressing.read_head(apart.norm(x))))
    assert not torch.allclose(c.layers[""].mu_read, a.layers[""].mu_read)


def test_a_hard_write_puts_everything_on_the_nearest_voxel_and_passes_no_gradient_to_where_or_how_wide():
    memory = layer(write={"profile": "nearest"})
    summaries = torch.randn(2, 4, 8)
    mu = torch.rand(2, 4, 3) * 2 - 1
    write = memory._write(summaries, mu)
    for profile, axis, n in zip(write.profiles, (2, 1, 0), GRID, strict=True):  # profiles (K, B, n) along D, H, W
        nearest = torch.round((mu[..., axis] + 1) / 2 * (n - 1)).long().t()  # (K, B) index of the nearest centre
        assert torch.equal(profile, torch.nn.functional.one_hot(nearest, n).float())
    for hard in (False, True):  # with every read held at one point, μ_write and σ learn through the write only
        memory = layer(write={"profile": "nearest" if hard else "gaussian"})
        with hooks(memory, {"mu_read": torch.zeros_like}):
            memory(torch.randn(2, 6, 8))[0].square().sum().backward()
        grads = [p.grad for p in (memory.coord_head.weight, memory.spread.weight)]  # None: not in the graph at all
        reached = sum(0.0 if g is None else g.abs().sum().item() for g in grads)
        assert (reached == 0) == hard


def test_a_one_tap_update_keeps_each_write_in_its_voxel_where_three_taps_spread_it_to_the_neighbours():
    x = torch.randn(1, 1, 8)
    for taps in (1, 3):
        memory = layer(write={"profile": "nearest"}, update={"taps": taps})
        with torch.no_grad():
            memory.depthwise.uniform_(0.2, 0.6)  # side taps non-zero: a 3-tap update passes content along
        with record(memory) as one:
            memory(x)
        with record(memory) as other, hooks(memory, {"content": lambda c: c + 1.0}):
            memory(x)
        changed = (one.layers[""].h[0, 0] - other.layers[""].h[0, 0]).abs().sum(0) > 0  # (D, H, W) cells
        assert changed.sum() == 1 if taps == 1 else changed.sum() > 1
        if taps == 1:
            memory(torch.randn(2, 5, 8))[0].square().sum().backward()
            grad = memory.depthwise.grad
            assert grad[..., 1].abs().sum() > 0 and grad[..., 0].abs().sum() == 0 and grad[..., 2].abs().sum() == 0
