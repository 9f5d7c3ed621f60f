"""Backbones: causality, streaming, state size, configs, training — for every kind."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tensor_memory.backbone import KINDS, Backbone, BackboneConfig, BackboneState, LinearAttention, SlotState
from tensor_memory.memory import MemoryConfig, MemoryState, record

DIM = 16
SEGMENT = 5  # xl segment: the streaming cuts below fall inside and across segments


def make(kind: str, window=None, chunk: int = 1, causal: bool = True, layers: int = 2, **kw) -> Backbone:
    torch.manual_seed(0)
    extra = {}
    if kind == "tensor":
        extra["memory"] = MemoryConfig(token_dim=DIM, channels=4, grid=(3, 3, 3), chunk_size=chunk)
    if kind == "slots":
        extra.update(slot_chunk=chunk, num_slots=4)
    extra.update(kw)
    cfg = BackboneConfig(
        kind=kind,
        dim=DIM,
        layers=layers,
        heads=2,
        causal=causal,
        window=window,
        xl_segment=SEGMENT,
        num_registers=2,
        **extra,
    )
    return Backbone(cfg).eval()


def inputs(n: int, batch: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randn(batch, n, DIM, generator=torch.Generator().manual_seed(seed))


# Every causal variant: each kind with and without a window (local always has one), memory
# kinds with one-token and three-token chunks.
CASES = [
    (kind, window, chunk)
    for kind in KINDS
    for window in ((4,) if kind == "local" else (None, 4))
    for chunk in ((1, 3) if kind in ("tensor", "slots") else (1,))
]
IDS = [f"{k}-w{w}-c{c}" for k, w, c in CASES]


# ---------------------------------------------------------------------------------------
# Causality
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind,window,chunk", CASES, ids=IDS)
def test_causal_outputs_ignore_the_future_but_not_the_past(kind, window, chunk):
    bb = make(kind, window, chunk)
    x = inputs(14)
    with torch.no_grad():
        y, _ = bb(x)
        for t in (0, 4, 7, 10):
            future = x.clone()
            future[:, t + 1 :] += torch.randn_like(future[:, t + 1 :])
            torch.testing.assert_close(bb(future)[0][:, : t + 1], y[:, : t + 1], atol=1e-6, rtol=0)
            past = x.clone()
            past[:, t] += torch.randn(DIM)  # random, not constant: a LayerNorm would remove a constant shift
            assert (bb(past)[0][:, t + 1 :] - y[:, t + 1 :]).abs().max() > 1e-4, "the past must reach later tokens"


@pytest.mark.parametrize("kind,window,chunk", CASES, ids=IDS)
def test_causal_gradients_of_an_output_vanish_on_later_inputs(kind, window, chunk):
    bb = make(kind, window, chunk)
    x = inputs(12).requires_grad_(True)
    t = 6
    y, _ = bb(x)
    y[:, t].pow(2).sum().backward()
    assert x.grad[:, t + 1 :].abs().max() == 0
    assert x.grad[:, t].abs().max() > 0


@pytest.mark.parametrize("kind", ["tensor", "slots"])
def test_memory_carries_information_beyond_the_attention_window(kind):
    # Window 2 over 2 layers: attention alone sees at most 2 tokens back; the memory sees further.
    t, later = 2, 11
    for name, expect_change in ((kind, True), ("local", False)):
        bb = make(name, window=2)
        x = inputs(14)
        past = x.clone()
        past[:, t] += torch.randn(DIM)
        with torch.no_grad():
            moved = (bb(past)[0][:, later] - bb(x)[0][:, later]).abs().max().item()
        assert (moved > 1e-5) == expect_change, (name, moved)


def test_window_bounds_what_one_layer_sees():
    bb = make("local", window=3, layers=1)
    x = inputs(12)
    past = x.clone()
    past[:, 4] += torch.randn(DIM)
    with torch.no_grad():
        moved = (bb(past)[0] - bb(x)[0]).abs().amax(dim=(0, 2))  # (N,)
    assert (moved[4:7] > 1e-4).all()  # positions 4, 5, 6 see position 4
    assert (moved[7:] == 0).all()  # position 7 attends to (4, 7]


def test_xl_sees_one_previous_segment_through_stop_gradient_keys():
    bb = make("xl", layers=1)  # segments [0, 5), [5, 10), [10, 15)
    x = inputs(15)
    past = x.clone()
    past[:, 1] += torch.randn(DIM)
    with torch.no_grad():
        moved = (bb(past)[0] - bb(x)[0]).abs().amax(dim=(0, 2))
    assert (moved[5:10] > 1e-4).all()  # the next segment attends to segment 0
    assert (moved[10:] == 0).all()  # two segments later it is out of reach
    x = x.clone().requires_grad_(True)
    bb(x)[0][:, 7].pow(2).sum().backward()
    assert x.grad[:, :5].abs().max() == 0  # previous segment: keys/values from detached inputs
    assert x.grad[:, 5:8].abs().max() > 0  # own segment keeps its gradient


def test_registers_stay_visible_beyond_the_window():
    bb = make("registers", window=2)
    y, _ = bb(inputs(20))
    y[:, 19].pow(2).sum().backward()
    assert bb.registers.grad.abs().max() > 0


def test_linear_attention_matches_the_formula():
    torch.manual_seed(0)
    attn = LinearAttention(BackboneConfig(kind="linear", dim=DIM, heads=2))
    a = inputs(7)
    out, _ = attn(a, attn.init_cache(2), 0)
    q, k, v = attn.split(attn.query(a)), *attn.keys_values(a)
    q, k = F.elu(q) + 1, F.elu(k) + 1
    rows = []
    for t in range(7):
        w = torch.einsum("bhd,bhjd->bhj", q[:, :, t], k[:, :, : t + 1])  # (B, heads, t+1)
        rows.append(torch.einsum("bhj,bhjd->bhd", w, v[:, :, : t + 1]) / w.sum(-1, keepdim=True))
    torch.testing.assert_close(out, attn.merge(torch.stack(rows, dim=2)), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------------------------------
# Streaming
# ---------------------------------------------------------------------------------------


def stream(bb: Backbone, x: torch.Tensor, cuts=(5, 0, 1, 7, 11)):
    outs, state, i = [], None, 0
    for n in cuts:
        y, state = bb(x[:, i : i + n], state)
        outs.append(y)
        i += n
    assert i == x.shape[1]
    return torch.cat(outs, dim=1), state


@pytest.mark.parametrize("kind,window,chunk", CASES, ids=IDS)
def test_streaming_in_uneven_segments_reproduces_one_pass(kind, window, chunk):
    bb = make(kind, window, chunk)
    x = inputs(24).requires_grad_(True)
    whole, state = bb(x)
    (whole * torch.linspace(-1, 1, DIM)).sum().backward()
    grad_whole, x.grad = x.grad, None
    pieces, streamed = stream(bb, x)
    torch.testing.assert_close(pieces, whole, atol=1e-5, rtol=0)
    assert streamed.pos == state.pos == 24
    (pieces * torch.linspace(-1, 1, DIM)).sum().backward()  # gradients flow through the carried state too
    torch.testing.assert_close(x.grad, grad_whole, atol=1e-4, rtol=1e-4)


def test_detached_state_continues_the_stream_with_the_same_values():
    bb = make("tensor", window=4)
    x = inputs(12)
    whole, _ = bb(x)
    y1, state = bb(x[:, :5])
    state = state.detach()
    assert all(t.grad_fn is None for t in (state.layers[0].attn.k, state.layers[0].memory.h))
    y2, _ = bb(x[:, 5:], state)
    torch.testing.assert_close(torch.cat([y1, y2], dim=1), whole, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------
# State size
# ---------------------------------------------------------------------------------------


def sizes(bb: Backbone, n: int = 30) -> list[int]:
    x, state, out = inputs(n), None, []
    with torch.no_grad():
        for t in range(n):
            _, state = bb(x[:, t : t + 1], state)
            out.append(state.numel())
    return out


# tensor and slots keep softmax attention beside their memory: fixed-size with a window.
@pytest.mark.parametrize(
    "kind,window,chunk", [("tensor", 4, 1), ("local", 4, 1), ("linear", None, 1), ("linear", 4, 1), ("slots", 4, 1)]
)
def test_fixed_size_state_does_not_grow_while_streaming(kind, window, chunk):
    numels = sizes(make(kind, window, chunk))
    assert len(set(numels[4:])) == 1, numels


@pytest.mark.parametrize("kind", ["tensor", "slots"])
def test_state_with_chunks_only_cycles_with_the_incomplete_chunk(kind):
    numels = sizes(make(kind, 4, chunk=3))
    assert all(numels[t] == numels[t + 3] for t in range(4, 27)), numels
    assert max(numels) == max(numels[:7])


def test_tensor_local_state_holds_memory_volumes_and_a_window_of_keys():
    bb = make("tensor", window=4)
    numels = sizes(bb)
    B, C, cells, layers = 2, 4, 27, 2
    kv = 2 * B * (4 - 1) * DIM  # keys and values of window − 1 tokens, all heads
    assert numels[-1] == layers * (B * 2 * C * cells + kv)


def test_xl_state_is_bounded_by_two_segments():
    numels = sizes(make("xl"))
    assert max(numels) <= 2 * 2 * (2 * SEGMENT - 1) * DIM  # layers · B · (< 2 segments) · dim
    assert all(numels[t] == numels[t + SEGMENT] for t in range(SEGMENT, 30 - SEGMENT))


@pytest.mark.parametrize("kind", ["base", "registers", "tensor", "slots"])
def test_unbounded_kv_cache_grows(kind):
    numels = sizes(make(kind))  # no window: the KV cache keeps every token
    assert all(b > a for a, b in zip(numels, numels[1:], strict=False))


def test_each_memory_layer_owns_its_state():
    bb = make("tensor")
    with torch.no_grad():
        _, state = bb(inputs(10))
    first, second = state.layers[0].memory, state.layers[1].memory
    assert isinstance(first, MemoryState) and isinstance(second, MemoryState) and first is not second
    assert first.h.abs().max() > 0 and second.h.abs().max() > 0
    assert not torch.allclose(first.h, second.h)
    bb = make("slots")
    with torch.no_grad():
        _, state = bb(inputs(10))
    assert isinstance(state.layers[0].memory, SlotState)
    assert not torch.allclose(state.layers[0].memory.slots, state.layers[1].memory.slots)


def test_memory_layers_are_recorded_under_their_block_paths():
    bb = make("tensor", chunk=3)
    with record(bb) as rec:
        bb(inputs(7))
    assert sorted(rec.layers) == ["blocks.0.memory", "blocks.1.memory"]
    assert rec["blocks.1.memory"].mu_read.shape == (2, 3, 3)  # (B, chunks read, xyz)


def test_memory_layers_selects_the_blocks_with_memory():
    bb = make("tensor", memory_layers=[1])
    assert bb.blocks[0].memory is None and bb.blocks[1].memory is not None
    _, state = bb(inputs(4))
    assert state.layers[0].memory is None and isinstance(state.layers[1].memory, MemoryState)


# ---------------------------------------------------------------------------------------
# Bidirectional mode
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_bidirectional_models_process_whole_sequences(kind):
    bb = make(kind, window=4 if kind == "local" else None, causal=False)
    x = inputs(10)
    y, state = bb(x)
    assert y.shape == x.shape and state is None
    with pytest.raises(ValueError, match="bidirectional"):
        bb(x, BackboneState(0, []))
    with pytest.raises(ValueError, match="bidirectional"):
        bb.init_state(2)


def test_bidirectional_outputs_depend_on_later_inputs():
    bb = make("base", causal=False)
    x = inputs(10)
    later = x.clone()
    later[:, 9] += torch.randn(DIM)
    with torch.no_grad():
        assert (bb(later)[0][:, 0] - bb(x)[0][:, 0]).abs().max() > 1e-4
    bb = make("local", window=2, causal=False, layers=1)  # |t − j| < 2: one token each side
    with torch.no_grad():
        moved = (bb(later)[0] - bb(x)[0]).abs().amax(dim=(0, 2))
    assert moved[8] > 1e-4 and (moved[:8] == 0).all()


# ---------------------------------------------------------------------------------------
# Configuration and input checks
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,field",
    [
        (dict(kind="rnn"), "BackboneConfig.kind"),
        (dict(dim=0), "BackboneConfig.dim"),
        (dict(layers=0), "BackboneConfig.layers"),
        (dict(dim=16, heads=3), "BackboneConfig.heads"),
        (dict(mlp_ratio=0), "BackboneConfig.mlp_ratio"),
        (dict(causal="yes"), "BackboneConfig.causal"),
        (dict(window=0), "BackboneConfig.window"),
        (dict(kind="local"), "BackboneConfig.window"),
        (dict(kind="xl", xl_segment=0), "BackboneConfig.xl_segment"),
        (dict(kind="slots", num_slots=0), "BackboneConfig.num_slots"),
        (dict(kind="slots", slot_chunk=0), "BackboneConfig.slot_chunk"),
        (dict(kind="registers", num_registers=0), "BackboneConfig.num_registers"),
        (dict(dim=16, memory=MemoryConfig(token_dim=32)), "token_dim"),
        (dict(kind="base", memory=MemoryConfig(token_dim=64)), "BackboneConfig.memory"),
        (dict(layers=2, memory_layers=[2]), "BackboneConfig.memory_layers"),
        (dict(layers=2, memory_layers=[0, 0]), "BackboneConfig.memory_layers"),
        (dict(kind="base", memory_layers=[0]), "BackboneConfig.memory_layers"),
    ],
)
def test_config_validation_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        BackboneConfig(**kwargs)


def test_config_round_trips_through_json_with_nested_memory():
    cfg = BackboneConfig(
        kind="tensor",
        dim=16,
        heads=2,
        window=8,
        memory_layers=[1],
        memory=MemoryConfig(token_dim=16, channels=4, grid=(3, 4, 5), chunk_size=2),
    )
    data = json.loads(json.dumps(cfg.to_dict()))
    assert data["memory"]["grid"] == [3, 4, 5]
    again = BackboneConfig.from_dict(data)
    assert again == cfg and isinstance(again.memory, MemoryConfig) and again.memory.grid == (3, 4, 5)
    assert BackboneConfig(kind="tensor", dim=32).memory == MemoryConfig(token_dim=32)  # default memory
    assert BackboneConfig.from_dict(BackboneConfig(kind="slots").to_dict()).memory is None
    with pytest.raises(ValueError, match="unknown field"):
        BackboneConfig.from_dict({**data, "dropout": 0.1})


def test_input_checks():
    bb = make("base")
    for bad in (torch.randn(2, 5, DIM + 1), torch.randn(5, DIM)):
        with pytest.raises(ValueError, match=r"BackboneConfig\.dim"):
            bb(bad)
    x = inputs(5)
    x[0, 2, 3] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        bb(x)
    _, state = bb(inputs(5, batch=2))
    with pytest.raises(ValueError, match="batch size"):
        bb(inputs(5, batch=3), state)


# ---------------------------------------------------------------------------------------
# Every kind learns
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_learns_to_copy_the_token_two_back(kind):
    torch.manual_seed(0)
    vocab, dim, n, batch = 8, 32, 16, 16
    extra = {"window": 4} if kind == "local" else {}
    if kind == "tensor":  # one small memory layer keeps the test fast
        extra.update(memory=MemoryConfig(token_dim=dim, channels=4, grid=(3, 3, 3)), memory_layers=[1])
    bb = Backbone(BackboneConfig(kind=kind, dim=dim, layers=2, heads=2, xl_segment=8, num_registers=2, **extra))
    embed, head = nn.Embedding(vocab, dim), nn.Linear(dim, vocab)
    opt = torch.optim.AdamW([*embed.parameters(), *bb.parameters(), *head.parameters()], lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(60):
        tokens = torch.randint(0, vocab, (batch, n), generator=gen)
        y, _ = bb(embed(tokens))
        loss = F.cross_entropy(head(y)[:, 2:].reshape(-1, vocab), tokens[:, :-2].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-5:]) / 5 < 0.7 * losses[0], losses


def test_positions_none_adds_nothing_and_sinusoidal_adds_the_table():
    from tensor_memory.backbone import sinusoidal_positions

    torch.manual_seed(0)
    plain = Backbone(BackboneConfig(kind="base", dim=16, layers=1, heads=2, positions="none")).eval()
    with_pe = Backbone(BackboneConfig(kind="base", dim=16, layers=1, heads=2, positions="sinusoidal")).eval()
    with_pe.load_state_dict(plain.state_dict())
    x = torch.randn(2, 7, 16)
    pe = sinusoidal_positions(0, 7, 16)
    assert torch.allclose(plain(x + pe)[0], with_pe(x)[0], atol=1e-6)
    assert not torch.allclose(plain(x)[0], with_pe(x)[0], atol=1e-3)
    with pytest.raises(ValueError, match="positions must be one of"):
        BackboneConfig(kind="base", positions="learned")
