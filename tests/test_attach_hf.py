"""attach_memory on Hugging Face Transformers models (small random configs, nothing downloaded) and on
any layer named by path; streaming(model) carrying the memory state across calls."""

from __future__ import annotations

import pytest
import torch
from test_attach import fingerprint, same
from torch import nn
from transformers import (
    BertConfig,
    BertModel,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)
from transformers.utils import logging

from tensor_memory import MemoryConfig, attach_memory, detach_memory, memory_layers, streaming
from tensor_memory.backbone.attach import AttachedAfter

logging.set_verbosity_error()
WIDTH, VOCAB = 32, 61
LLAMA_LIKE = dict(
    hidden_size=WIDTH,
    intermediate_size=64,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB,
    max_position_embeddings=128,
)
FAMILIES = {
    "gpt2": (
        lambda: GPT2LMHeadModel(
            GPT2Config(
                n_embd=WIDTH, n_layer=3, n_head=4, vocab_size=VOCAB, n_positions=128, bos_token_id=0, eos_token_id=0
            )
        ),
        "transformer.h",
        True,
    ),
    "bert": (
        lambda: BertModel(
            BertConfig(
                hidden_size=WIDTH,
                num_hidden_layers=3,
                num_attention_heads=4,
                intermediate_size=64,
                vocab_size=VOCAB,
                max_position_embeddings=128,
            )
        ),
        "encoder.layer",
        False,
    ),
    "llama": (lambda: LlamaForCausalLM(LlamaConfig(**LLAMA_LIKE)), "model.layers", True),
    "mistral": (lambda: MistralForCausalLM(MistralConfig(**LLAMA_LIKE)), "model.layers", True),
    "qwen2": (lambda: Qwen2ForCausalLM(Qwen2Config(**LLAMA_LIKE)), "model.layers", True),
}


def build(family: str) -> nn.Module:
    torch.manual_seed(0)
    return FAMILIES[family][0]().eval()


def output(model: nn.Module, ids: torch.Tensor, **kwargs) -> torch.Tensor:
    out = model(input_ids=ids, **kwargs)
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def memory(gate: float, chunk: int = 4) -> MemoryConfig:
    return MemoryConfig(token_dim=WIDTH, channels=4, grid=(4, 4, 4), chunk_size=chunk, gate_init=gate)


IDS = torch.randint(0, VOCAB, (2, 22), generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("family", list(FAMILIES))
def test_layers_found_gate_closed_barely_moves_and_detached_is_bit_identical(family):
    model = build(family)
    stack = model.get_submodule(FAMILIES[family][1])
    originals = list(stack)
    with torch.no_grad():
        before = output(model, IDS)
        attach_memory(model, memory(gate=-12.0), layers=[0, 2])
        assert list(memory_layers(model)) == [f"{FAMILIES[family][1]}.{i}.memory" for i in (0, 2)]
        assert isinstance(stack[0], AttachedAfter) and stack[1] is originals[1]
        closed = output(model, IDS)
        for mem in memory_layers(model).values():
            mem.gate.fill_(0.0)  # σ(γ) = 0.5: the memory now shapes the outputs
        opened = output(model, IDS)
        detach_memory(model)
        after = output(model, IDS)
    assert 0 < (closed - before).norm() / before.norm() < 1e-3
    assert (opened - before).norm() / before.norm() > 1e-2
    assert all(a is b for a, b in zip(stack, originals, strict=True))
    assert torch.equal(after, before)


@pytest.mark.parametrize("family", ["gpt2", "llama", "qwen2"])
def test_streaming_with_the_kv_cache_equals_one_pass_and_calls_are_fresh_otherwise(family):
    model = attach_memory(build(family), memory(gate=0.0, chunk=3), layers=[1])
    with torch.no_grad():
        whole = output(model, IDS, use_cache=False)
        with streaming(model) as stream:
            first = model(input_ids=IDS[:, :10], use_cache=True)  # 10 tokens: a chunk cut in two
            second = model(input_ids=IDS[:, 10:], cache=first.cache, use_cache=True)
            stream.reset()
            restarted = output(model, IDS[:, :10], use_cache=False)
        again = output(model, IDS[:, 10:], use_cache=False)
        alone = output(model, IDS[:, 10:], use_cache=False)
    torch.testing.assert_close(torch.cat([first.logits, second.logits], dim=1), whole, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(restarted, whole[:, :10], atol=1e-5, rtol=1e-5)
    assert torch.equal(again, alone)  # outside the stream every call starts from zero
    assert (alone - whole[:, 10:]).abs().max() > 1e-3  # … which differs from reading the earlier writes


def test_training_a_few_steps_moves_only_the_memory_and_lowers_the_loss():
    model = attach_memory(build("gpt2"), memory(gate=-4.0), layers=[2]).train()
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if ".memory." not in n}
    for name, p in model.named_parameters():
        p.requires_grad_(".memory." in name)
    optimiser = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    ids = IDS.repeat(4, 1)
    losses = []
    for _ in range(8):
        loss = model(input_ids=ids, labels=ids).loss
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
    assert all(torch.equal(p, frozen[n]) for n, p in model.named_parameters() if n in frozen)


class Stack(nn.Module):
    """Someone's own model: layers returning (hidden, extra), not a known block type."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(Pair() for _ in range(2))

    def forward(self, x):
        for layer in self.layers:
            x, extra = layer(x)
        return x, extra


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return torch.tanh(self.linear(x)), x.sum()


def test_any_layer_named_by_path_gets_the_memory_after_it():
    torch.manual_seed(0)
    model, x = Stack(), torch.randn(2, 12, WIDTH)
    with pytest.raises(ValueError, match="no layers it knows"):
        attach_memory(model, memory(gate=0.0))
    before = model(x)
    attach_memory(model, memory(gate=0.0), layers=["layers.1"])
    mem = model.layers[1].memory
    inner = model.layers[1].block(model.layers[0](x)[0])
    y, extra = model(x)
    torch.testing.assert_close(y, mem(inner[0])[0])  # h + σ(γ)·mem(LN(h)) on the layer's first output
    assert torch.equal(extra, inner[1])  # the rest of the tuple passes through
    with pytest.raises(ValueError, match="already has a memory"):
        attach_memory(model, memory(gate=0.0), layers=["layers.1"])
    with pytest.raises(ValueError, match="no module 'layers.7'"):
        attach_memory(model, memory(gate=0.0), layers=["layers.7"])
    detach_memory(model)
    assert all(torch.equal(a, b) for a, b in zip(model(x), before, strict=True))


def test_width_and_streaming_misuse_are_refused_clearly():
    with pytest.raises(ValueError, match="token_dim=16 does not match"):
        attach_memory(build("bert"), MemoryConfig(token_dim=16, channels=4, grid=(4, 4, 4)), layers=[0])
    with pytest.raises(ValueError, match="no TensorMemory layer in this model"):
        with streaming(build("bert")):
            pass
    model = attach_memory(build("bert"), memory(gate=0.0), layers=[0])
    with torch.no_grad(), streaming(model):
        model(input_ids=IDS)
        with pytest.raises(ValueError, match="call stream.reset"):
            model(input_ids=IDS[:1])


DETACH_CASES = {
    "gpt2 by index": ("gpt2", [0, 2]),
    "gpt2 by path inside a block": ("gpt2", ["transformer.h.0.mlp", "transformer.h.1.attn"]),
    "gpt2 index then a path inside it": ("gpt2", [1], ["transformer.h.1.block.mlp"]),
    "gpt2 path then its block by index": ("gpt2", ["transformer.h.0.mlp"], [0]),
    "bert by index": ("bert", [1]),
    "bert by path inside a block": ("bert", ["encoder.layer.1.output", "encoder.layer.0.attention"]),
}


@pytest.mark.parametrize("case", list(DETACH_CASES))
def test_detach_gives_the_model_back_bit_for_bit_whatever_was_attached_where(case):
    family, *attachments = DETACH_CASES[case]
    model = build(family)
    fresh = build(family)  # the same seed: an independent copy never attached to
    modules = dict(model.named_modules())
    with torch.no_grad():
        for layers in attachments:
            attach_memory(model, memory(gate=0.0), layers=layers)
        assert len(memory_layers(model)) == sum(len(layers) for layers in attachments)
        assert not torch.equal(output(model, IDS), output(fresh, IDS))  # the memories were in the way
        assert detach_memory(model) is model
        assert torch.equal(output(model, IDS), output(fresh, IDS))
    assert memory_layers(model) == {}  # nothing left for streaming or a trace to find
    same(fingerprint(model), fingerprint(fresh))
    assert all(module is modules[name] for name, module in model.named_modules())  # the very same objects
