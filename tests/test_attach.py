"""Attaching a Tensor Memory to existing blocks and taking it off again."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tensor_memory.backbone import Backbone, BackboneConfig
from tensor_memory.backbone.attach import AttachedBlock, AttachedEncoderLayer, attach_memory, detach_memory
from tensor_memory.memory import MemoryConfig, MemoryState, TensorMemory, memory_layers

DIM = 16
pytestmark = [
    pytest.mark.filterwarnings("ignore:enable_nested_tensor is True"),  # norm_first=True encoders
    pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors"),
]  # torch's own fast path


def memory_config(**kw) -> MemoryConfig:
    return MemoryConfig(token_dim=DIM, channels=4, grid=(3, 3, 3), **kw)


def relative_change(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def close_gates(model: nn.Module) -> None:
    """σ(γ) = 0 exactly (sigmoid(-200) underflows to 0 in float32): the memory adds exactly nothing."""
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, TensorMemory):
                module.gate.fill_(-200.0)


# ---------------------------------------------------------------------------------------
# Our own Backbone
# ---------------------------------------------------------------------------------------


def backbone(**kw) -> Backbone:
    torch.manual_seed(0)
    return Backbone(BackboneConfig(**{"kind": "base", "dim": DIM, "layers": 3, "heads": 2, **kw})).eval()


def test_attach_and_detach_on_backbone_blocks():
    bb = backbone()
    x = torch.randn(2, 12, DIM)
    originals = list(bb.blocks)
    names = [name for name, _ in bb.named_parameters()]
    with torch.no_grad():
        before, _ = bb(x)
    assert attach_memory(bb, memory_config(gate_init=-9.0), layers=[0, 2]) is bb
    assert isinstance(bb.blocks[0], AttachedBlock) and bb.blocks[1] is originals[1]
    assert isinstance(bb.blocks[2], AttachedBlock) and bb.blocks[2].block is originals[2]
    assert sum(p.numel() for block in (bb.blocks[0], bb.blocks[2]) for p in block.memory.parameters()) > 0
    with torch.no_grad():
        attached, state = bb(x)
    assert 0 < relative_change(attached, before) < 0.01
    assert isinstance(state.layers[0].memory, MemoryState) and state.layers[1].memory is None
    assert state.layers[0].memory is not state.layers[2].memory
    assert detach_memory(bb) is bb
    assert all(a is b for a, b in zip(bb.blocks, originals, strict=True))
    assert [name for name, _ in bb.named_parameters()] == names
    with torch.no_grad():
        assert torch.equal(bb(x)[0], before)


def test_attached_backbone_stays_causal_and_streams_exactly():
    bb = backbone(window=4)
    attach_memory(bb, memory_config(chunk_size=2, gate_init=0.0))
    x = torch.randn(2, 16, DIM)
    with torch.no_grad():
        whole, _ = bb(x)
        outs, state, i = [], None, 0
        for n in (5, 1, 3, 7):
            y, state = bb(x[:, i : i + n], state)
            outs.append(y)
            i += n
        torch.testing.assert_close(torch.cat(outs, dim=1), whole, atol=1e-5, rtol=0)
        future = x.clone()
        future[:, 9:] += torch.randn_like(future[:, 9:])
        torch.testing.assert_close(bb(future)[0][:, :9], whole[:, :9], atol=1e-6, rtol=0)
        past = x.clone()
        past[:, 1] += torch.randn(DIM)  # beyond the window of 4 (×3 layers) only the memory carries it
        assert (bb(past)[0][:, 15] - whole[:, 15]).abs().max() > 1e-5


def test_attach_refuses_what_it_cannot_do():
    bb = backbone()
    with pytest.raises(ValueError, match="token_dim"):
        attach_memory(bb, MemoryConfig(token_dim=DIM * 2))
    with pytest.raises(ValueError, match="layers"):
        attach_memory(bb, memory_config(), layers=[3])
    with pytest.raises(ValueError, match="no layers it knows"):
        attach_memory(nn.Sequential(nn.Linear(DIM, DIM)), memory_config())
    attach_memory(bb, memory_config(), layers=[1])
    with pytest.raises(ValueError, match="already"):
        attach_memory(bb, memory_config(), layers=[1])
    torch.manual_seed(0)
    tensor = Backbone(
        BackboneConfig(kind="tensor", dim=DIM, layers=2, heads=2, memory=memory_config(), memory_layers=[0])
    )
    with pytest.raises(ValueError, match="already"):
        attach_memory(tensor, memory_config(), layers=[0])
    attach_memory(tensor, memory_config(), layers=[1])  # the block without one is fine


def fingerprint(model: nn.Module) -> tuple:
    """What must come back bit for bit: the module tree (names, classes, repr) and the state dict's keys and values."""
    tree = [(name, type(module).__name__) for name, module in model.named_modules()]
    return tree, repr(model), model.state_dict()


def same(got: tuple, want: tuple) -> None:
    assert got[0] == want[0] and got[1] == want[1]
    assert list(got[2]) == list(want[2])
    assert all(torch.equal(got[2][key], want[2][key]) for key in want[2])


@pytest.mark.parametrize("layers", [[0, 2], ["blocks.0"], ["blocks.2", "norm"]], ids=str)
def test_detach_gives_a_backbone_back_bit_for_bit(layers):
    """By index or by path, next to a built-in memory (block 1's): outputs, state dict and module tree come back."""
    bb, fresh = (backbone(kind="tensor", memory=memory_config(), memory_layers=[1]) for _ in range(2))
    x = torch.randn(2, 12, DIM, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        attach_memory(bb, memory_config(gate_init=0.0), layers=layers)
        assert len(memory_layers(bb)) == 1 + len(layers)
        assert not torch.equal(bb(x)[0], fresh(x)[0])
        assert detach_memory(bb) is bb
        assert torch.equal(bb(x)[0], fresh(x)[0])
    assert list(memory_layers(bb)) == ["blocks.1.memory"]  # the built-in memory stays
    same(fingerprint(bb), fingerprint(fresh))


# ---------------------------------------------------------------------------------------
# torch.nn.TransformerEncoder with "pretrained" weights
# ---------------------------------------------------------------------------------------


def pretrained_encoder(norm_first: bool, batch_first: bool) -> nn.TransformerEncoder:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(
        d_model=DIM, nhead=2, dim_feedforward=32, dropout=0.0, norm_first=norm_first, batch_first=batch_first
    )
    encoder = nn.TransformerEncoder(layer, num_layers=3)  # enable_nested_tensor defaults to True
    with torch.no_grad():  # arbitrary weights, far from the default initialisation (LayerNorm gains too)
        for p in encoder.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return encoder.eval()


@pytest.mark.parametrize("norm_first", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
def test_attach_and_detach_on_a_pretrained_transformer_encoder(norm_first, batch_first):
    encoder = pretrained_encoder(norm_first, batch_first)
    B, N = 3, 10
    x = torch.randn(B, N, DIM) if batch_first else torch.randn(N, B, DIM)
    mask = nn.Transformer.generate_square_subsequent_mask(N)
    padding = torch.zeros(B, N, dtype=torch.bool)
    padding[0, 7:] = True  # right padding in one row
    real = ~padding if batch_first else ~padding.t()  # (B, N) or (N, B): positions holding tokens
    originals = list(encoder.layers)

    # In eval mode without gradients nn.TransformerEncoderLayer takes a fused "fast path" (and
    # nn.TransformerEncoder may turn padded input into nested tensors); with gradients enabled it
    # runs the documented module-by-module path. The two differ in the last bits, so exact
    # comparisons are made path for path.
    with torch.no_grad():
        fast = encoder(x, mask=mask)
        fast_padded = encoder(x, src_key_padding_mask=padding)
    slow = encoder(x, mask=mask, is_causal=True).detach()  # gradients on: the slow path
    slow_padded = encoder(x, src_key_padding_mask=padding).detach()

    attach_memory(encoder, memory_config(gate_init=-9.0))
    assert all(isinstance(layer, AttachedEncoderLayer) for layer in encoder.layers)
    with torch.no_grad():
        moved = encoder(x, mask=mask)
        moved_padded = encoder(x, src_key_padding_mask=padding)
    assert 0 < relative_change(moved, fast) < 0.01  # a suppressing gate barely moves a pretrained model
    assert relative_change(moved_padded[real], fast_padded[real]) < 0.01

    close_gates(encoder)  # with σ(γ) = 0 the wrapper must be exactly the layer's own slow path
    assert torch.equal(encoder(x, mask=mask, is_causal=True), slow)
    assert torch.equal(encoder(x, src_key_padding_mask=padding), slow_padded)

    assert detach_memory(encoder) is encoder
    assert all(a is b for a, b in zip(encoder.layers, originals, strict=True))
    with torch.no_grad():  # detached: bit-identical on the same path as before attaching
        assert torch.equal(encoder(x, mask=mask), fast)
        assert torch.equal(encoder(x, src_key_padding_mask=padding), fast_padded)
    assert torch.equal(encoder(x, mask=mask, is_causal=True), slow)


def test_padding_mask_with_only_a_later_layer_attached():
    # The first layer stays a plain nn.TransformerEncoderLayer, so in eval mode without gradients
    # nn.TransformerEncoder would hand the layers nested tensors; attaching switches that off and
    # detaching switches it back on.
    encoder = pretrained_encoder(norm_first=False, batch_first=True)
    assert encoder.use_nested_tensor
    x = torch.randn(3, 10, DIM)
    padding = torch.zeros(3, 10, dtype=torch.bool)
    padding[0, 6:] = True
    with torch.no_grad():
        before = encoder(x, src_key_padding_mask=padding)
        attach_memory(encoder, memory_config(gate_init=-9.0), layers=[1])
        assert not encoder.use_nested_tensor
        moved = encoder(x, src_key_padding_mask=padding)
        assert relative_change(moved[~padding], before[~padding]) < 0.01
        detach_memory(encoder)
        assert encoder.use_nested_tensor
        assert torch.equal(encoder(x, src_key_padding_mask=padding), before)


def test_attached_memory_trains_and_starts_from_zero_each_call():
    encoder = pretrained_encoder(norm_first=True, batch_first=True).train()
    attach_memory(encoder, memory_config(), layers=[1])
    x = torch.randn(2, 8, DIM)
    first = encoder(x)
    torch.testing.assert_close(encoder(x), first, atol=0, rtol=0)  # no state leaks between calls
    first.pow(2).mean().backward()
    memory = encoder.layers[1].memory
    assert memory.gate.grad is not None and memory.gate.grad.abs() > 0
    assert encoder.layers[0].self_attn.in_proj_weight.grad.abs().max() > 0


def test_a_single_layer_can_be_the_model():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=DIM, nhead=2, dim_feedforward=32, dropout=0.0).eval()
    x = torch.randn(7, 2, DIM)  # (N, B, d): batch_first=False
    before = layer(x).detach()
    wrapped = attach_memory(layer, memory_config())
    assert isinstance(wrapped, AttachedEncoderLayer) and wrapped.block is layer
    assert wrapped(x).shape == x.shape and wrapped(x[:, 0]).shape == (7, DIM)  # batched and unbatched
    assert wrapped.self_attn is layer.self_attn and wrapped.norm_first is False  # the layer's attributes show through
    assert detach_memory(wrapped) is layer
    assert torch.equal(layer(x).detach(), before)
