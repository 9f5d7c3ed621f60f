"""Path integration (MemoryConfig.addressing.write_path="integrated"), off by default: a sequence's first write is
placed by the coordinate head, every later one at the last write's place plus a step from a head of its own, summed
before tanh. Off, the layer is the mechanism (held bit for bit to git history by tests/test_relayout.py); on, its
writes are checked against an independent computation and a stream cut anywhere against one pass."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tensor_memory import MemoryConfig, MemoryState, TensorMemory, hooks
from tensor_memory.memory.reference import ReferenceMemory
from tensor_memory.memory.streaming import streaming

GRID = (3, 4, 5)  # (D, H, W)
CHUNK = 2


def layer(**settings) -> TensorMemory:
    torch.manual_seed(0)
    return TensorMemory(MemoryConfig(token_dim=8, channels=2, grid=GRID, chunk_size=CHUNK, **settings))


def writes(memory: TensorMemory, x: torch.Tensor, state=None) -> tuple[torch.Tensor, MemoryState]:
    """μ_write of every complete chunk of x (B, n_write, 3), read at the hook point, and the state after x."""
    seen = []
    with hooks(memory, {"mu_write": lambda value: seen.append(value.detach())}):
        _, after = memory(x, state)
    return seen[0], after


def test_path_integration_is_off_by_default():
    assert MemoryConfig().addressing.write_path == "free"
    plain = layer()
    _, state = plain(torch.randn(2, 6, 8))
    assert not hasattr(plain.addressing.path, "step_head") and state.place is None
    assert not any("step_head" in name for name in plain.state_dict())


def test_each_write_is_the_first_place_plus_the_summed_steps():
    memory = layer(addressing={"write_path": "integrated"})
    torch.manual_seed(1)
    x = torch.randn(2, 4 * CHUNK, 8)
    mu_write, state = writes(memory, x)
    with torch.no_grad():  # the summaries as step 1 defines them, then the path by a loop
        tokens = memory.norm(x).reshape(2, 4, CHUNK * 8)  # (B, n_write, chunk·d)
        s = F.layer_norm(memory.summary(tokens), (8,))  # (B, n_write, d)
        place = memory.coord_head(s[:, 0])
        expected = [torch.tanh(place)]
        for k in range(1, 4):
            place = place + memory.addressing.path.step_head(s[:, k])
            expected.append(torch.tanh(place))
    torch.testing.assert_close(mu_write, torch.stack(expected, dim=1))
    torch.testing.assert_close(state.place, place)
    free = layer()  # same seed, same shared weights: the first write is where the free layer puts it
    torch.testing.assert_close(mu_write[:, 0], writes(free, x)[0][:, 0])
    assert not torch.allclose(mu_write[:, 1:], writes(free, x)[0][:, 1:])


@pytest.mark.parametrize("cuts", [(CHUNK,), (3,), (1, 4, 5)])
def test_a_stream_cut_anywhere_gives_one_pass(cuts):
    memory = layer(addressing={"write_path": "integrated"})
    torch.manual_seed(2)
    x = torch.randn(2, 5 * CHUNK + 1, 8)
    whole, state_whole = memory(x)
    pieces, state, start = [], None, 0
    for end in (*cuts, x.shape[1]):
        y, state = memory(x[:, start:end], state)
        pieces.append(y)
        start = end
    torch.testing.assert_close(torch.cat(pieces, dim=1), whole)
    torch.testing.assert_close(state.place, state_whole.place)
    forgetful = MemoryState(state_whole.h, state_whole.c, state_whole.pending)  # the same state without its place
    more = torch.randn(2, 2 * CHUNK, 8)
    assert not torch.allclose(writes(memory, more, forgetful)[0], writes(memory, more, state_whole)[0])


def test_the_steps_learn_and_the_streams_state_keeps_the_place():
    memory = layer(addressing={"write_path": "integrated"})
    torch.manual_seed(3)
    x = torch.randn(2, 3 * CHUNK, 8)
    y, _ = memory(x)
    y.square().sum().backward()
    assert memory.addressing.path.step_head.weight.grad.abs().sum() > 0
    with streaming(memory) as stream:
        memory(x[:, : CHUNK + 1])
        carried = stream.states[""]
        stream.detach()  # keeps every value, the place included, without its history
        assert torch.equal(stream.states[""].place, carried.place) and not stream.states[""].place.requires_grad
        y_streamed, _ = memory(x[:, CHUNK + 1 :])
    torch.testing.assert_close(y_streamed, memory(x)[0][:, CHUNK + 1 :])


def test_bad_settings_and_states_are_refused():
    with pytest.raises(ValueError, match="needs coordinates='tanh'"):
        MemoryConfig(addressing={"write_path": "integrated", "coordinates": "soft_argmax"})
    with pytest.raises(ValueError, match="write_path must be one of"):
        MemoryConfig(addressing={"write_path": "sideways"})
    with pytest.raises(ValueError, match="MemoryConfig.addressing asks for a variant it does not have"):
        ReferenceMemory(layer(addressing={"write_path": "integrated"}))
    integrated, plain = layer(addressing={"write_path": "integrated"}), layer()
    _, state = integrated(torch.randn(2, 2 * CHUNK, 8))
    with pytest.raises(ValueError, match="MemoryState.place must be None"):
        plain(torch.randn(2, CHUNK, 8), state)  # a place given to a layer that does not integrate
    with pytest.raises(ValueError, match="MemoryState.place must be None"):
        integrated(torch.randn(2, CHUNK, 8), MemoryState(state.h, state.c, state.pending, state.place[:, :2]))
