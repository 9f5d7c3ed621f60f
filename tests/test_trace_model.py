"""analysis.trace_model: any model's memories recorded on one input (Hugging Face families from small random
configs, this project's backbone, someone's own module), saved, reloaded and validated."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from safetensors import safe_open
from safetensors.numpy import load_file, save_file
from torch import nn
from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from transformers.utils import logging

from analysis import load_trace, trace_model
from analysis.traces.trace import TraceError
from tensor_memory import Backbone, BackboneConfig, MemoryConfig, attach_memory, record
from tensor_memory.memory import TensorMemory

logging.set_verbosity_error()
WIDTH, VOCAB, N = 32, 61, 26
IDS = torch.randint(0, VOCAB, (1, N), generator=torch.Generator().manual_seed(3))
TOKENS = [f"tok{i}" + ("é" if i % 5 == 0 else "") for i in range(N)]  # non-ASCII survives the round trip


def memory(chunk: int = 4) -> MemoryConfig:
    return MemoryConfig(token_dim=WIDTH, channels=4, grid=(4, 4, 4), chunk_size=chunk, gate_init=0.0)


def family(name: str) -> nn.Module:
    torch.manual_seed(0)
    model = {
        "gpt2": lambda: GPT2LMHeadModel(
            GPT2Config(n_embd=WIDTH, n_layer=2, n_head=4, vocab_size=VOCAB, bos_token_id=0, eos_token_id=0)
        ),
        "bert": lambda: BertModel(
            BertConfig(
                hidden_size=WIDTH, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, vocab_size=VOCAB
            )
        ),
        "llama": lambda: LlamaForCausalLM(
            LlamaConfig(
                hidden_size=WIDTH,
                intermediate_size=64,
                num_hidden_layers=2,
                num_attention_heads=4,
                num_key_value_heads=2,
                vocab_size=VOCAB,
            )
        ),
    }[name]()
    return attach_memory(model.eval(), memory(), layers=[0, 1])


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama"])
def test_hugging_face_families_traced_saved_and_reloaded(name, tmp_path):
    model = family(name)
    targets = None if name == "bert" else IDS[0, 1:]  # the next tokens; BERT's base model has no logits
    trace = trace_model(model, {"input_ids": IDS}, tokens=TOKENS, targets=targets, name=f"tiny-{name}")
    assert trace.num_chunks == N // 4  # complete chunks (the last 2 positions are read, not written)
    with record(model) as rec, torch.no_grad():
        model(input_ids=IDS)
    for path, layer in trace.layers.items():  # the trace holds what the hook points saw
        np.testing.assert_allclose(layer.mu_write, rec[path].mu_write[0].numpy(), atol=1e-6)
        np.testing.assert_allclose(layer.h.astype(np.float32), rec[path].h[0].numpy(), atol=2e-3, rtol=2e-3)
    loaded = load_trace(trace.save(tmp_path / f"{name}.trace.safetensors"))
    assert loaded.is_model_trace and loaded.tokens == TOKENS and loaded.info["checkpoint_name"] == f"tiny-{name}"
    assert list(loaded.layers) == [
        f"{stack}.{i}.memory"
        for i in (0, 1)
        for stack in [{"gpt2": "transformer.h", "bert": "encoder.layer", "llama": "model.layers"}[name]]
    ]
    for path in trace.layers:
        assert np.array_equal(loaded.layers[path].h, trace.layers[path].h)
    if targets is None:
        assert loaded.info["outputs"] == "none" and not loaded.chunks["scored"].any()
        return
    logits = model(input_ids=IDS).logits[0].detach()
    probs = torch.softmax(logits, -1)
    last = [4 * k + 3 for k in range(trace.num_chunks)]  # each chunk's last position (all have targets)
    assert loaded.chunks["prediction"].tolist() == logits[last].argmax(-1).tolist()
    np.testing.assert_allclose(loaded.chunks["p_target"], probs[last, IDS[0, [p + 1 for p in last]]].numpy(), rtol=1e-5)
    assert loaded.per_token["target"][-1] == -1  # the last position has no next token


def test_segments_with_the_state_carried_equal_one_pass():
    torch.manual_seed(0)
    backbone = Backbone(
        BackboneConfig(
            kind="tensor",
            dim=16,
            layers=2,
            heads=2,
            causal=True,
            memory=MemoryConfig(token_dim=16, channels=4, grid=(4, 4, 4), chunk_size=3, gate_init=0.0),
        )
    ).eval()
    x = torch.randn(1, 38, 16)  # the last segment (36..38) holds no complete chunk
    whole, pieces = trace_model(backbone, x), trace_model(backbone, x, segment=9)
    assert whole.num_chunks == pieces.num_chunks == 12
    for path in whole.layers:
        for field in ("h", "c", "gate_f", "mu_read", "mu_write", "sigma", "read"):
            a, b = getattr(whole.layers[path], field), getattr(pieces.layers[path], field)
            ulp = 2.0**-10 if field in ("h", "c", "gate_f") else 0.0  # float16 volumes: a rounding may flip
            np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), atol=1e-5, rtol=ulp)
    own = nn.Sequential(nn.Linear(16, 16), TensorMemoryOnly(16))  # a model that never passes a state
    a, b = trace_model(own, x), trace_model(own, x, segment=6)
    np.testing.assert_allclose(a.layers["1.memory"].read, b.layers["1.memory"].read, atol=1e-5)
    assert np.abs(trace_model(own, x[:, 18:]).layers["1.memory"].read - a.layers["1.memory"].read[6:]).max() > 1e-3


class TensorMemoryOnly(nn.Module):
    """Someone's own layer calling its memory without a state: streaming carries it between segments."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.memory = TensorMemory(
            MemoryConfig(token_dim=width, channels=4, grid=(4, 4, 4), chunk_size=3, gate_init=0.0)
        )

    def forward(self, x):
        return self.memory(x)[0]


def test_bad_models_and_inputs_are_refused_clearly():
    with pytest.raises(TraceError, match="no TensorMemory layer in this model"):
        trace_model(nn.Linear(4, 4), torch.randn(1, 8, 4))
    model = family("gpt2")
    with pytest.raises(ValueError, match="one sequence"):
        trace_model(model, {"input_ids": IDS.repeat(2, 1)})
    with pytest.raises(ValueError, match="multiple of the memory's chunk size"):
        trace_model(model, {"input_ids": IDS}, segment=6)
    with pytest.raises(ValueError, match="26 strings"):
        trace_model(model, {"input_ids": IDS}, tokens=TOKENS[:-1])
    with pytest.raises(ValueError, match="targets must be"):
        trace_model(model, {"input_ids": IDS}, targets=torch.zeros(5))
    with pytest.raises(ValueError, match="no logits"):
        trace_model(family("bert"), {"input_ids": IDS}, targets=IDS[0])


def test_a_file_that_lies_about_its_tokens_is_refused(tmp_path):
    path = trace_model(family("gpt2"), {"input_ids": IDS}, tokens=TOKENS).save(tmp_path / "t.safetensors")
    arrays = load_file(path)
    with safe_open(str(path), "np") as handle:
        metadata = handle.metadata()
    arrays["tokens/offsets"] = arrays["tokens/offsets"][::-1].copy()  # offsets out of order
    save_file(arrays, tmp_path / "bad.safetensors", metadata=metadata)
    with pytest.raises(TraceError, match="token offsets"):
        load_trace(tmp_path / "bad.safetensors")
    header = json.loads(metadata["trace"])
    header["info"]["num_tokens"] = N + 4  # claims more tokens than its arrays hold
    save_file(load_file(path), tmp_path / "long.safetensors", metadata={"trace": json.dumps(header)})
    with pytest.raises(TraceError, match="tokens/offsets"):
        load_trace(tmp_path / "long.safetensors")


def test_the_import_command_traces_a_memory_trained_with_the_public_code(tmp_path, capsys):
    from safetensors.torch import save_file as save_torch
    from test_public_code import D_MODEL, literal_public, public_state

    from tensor_memory_cli import main

    sd, x = public_state(3), torch.randn(20, D_MODEL, generator=torch.Generator().manual_seed(5))
    save_torch(sd, str(tmp_path / "interface.safetensors"))
    save_torch({"x": x}, str(tmp_path / "input.safetensors"))
    files = ["--weights", str(tmp_path / "interface.safetensors"), "--inputs", str(tmp_path / "input.safetensors")]
    assert main(["import", *files, "--out", str(tmp_path / "one.safetensors"), "--no-progress"]) == 0
    assert "tensor-memory app --trace" in capsys.readouterr().out
    assert main(["import", *files, "--out", str(tmp_path / "two.safetensors"), "--segment", "2"]) == 0
    one, two = load_trace(tmp_path / "one.safetensors"), load_trace(tmp_path / "two.safetensors")
    zeros = torch.zeros(1, sd["out_proj.weight"].shape[1], 4, 5, 6)
    _, (h, _), write_xyz = literal_public(sd, x[None], zeros, zeros, 3)
    assert one.num_chunks == 7  # the public code pads and writes the last, incomplete chunk
    np.testing.assert_allclose(one.layers["memory"].mu_write, write_xyz[0].numpy(), atol=1e-5)
    np.testing.assert_allclose(one.layers["memory"].h[-1].astype(np.float32), h[0].numpy(), atol=2e-3)
    np.testing.assert_allclose(one.layers["memory"].read, two.layers["memory"].read, atol=1e-5)
    torch.save(sd, tmp_path / "pickled.pt")
    assert (
        main(
            [
                "import",
                "--weights",
                str(tmp_path / "pickled.pt"),
                *files[2:],
                "--out",
                str(tmp_path / "three.safetensors"),
            ]
        )
        == 2
    )
    assert "pickle" in capsys.readouterr().err.lower()
    for name, bad, said in (
        ("nan", x.clone().index_fill_(0, torch.tensor([3]), float("nan")), "holds NaN"),
        ("narrow", x[:, :7], f"holds features of width 7, but the interface in --weights reads width {D_MODEL}"),
    ):
        save_torch({"x": bad.contiguous()}, str(tmp_path / f"{name}.safetensors"))
        assert (
            main(
                [
                    "import",
                    *files[:2],
                    "--inputs",
                    str(tmp_path / f"{name}.safetensors"),
                    "--out",
                    str(tmp_path / "four.safetensors"),
                ]
            )
            == 2
        )
        assert f"{tmp_path / name}.safetensors: 'x' {said}" in capsys.readouterr().err
    save_torch({"w": torch.zeros(3)}, str(tmp_path / "other.safetensors"))  # not an interface's weights
    assert (
        main(
            [
                "import",
                "--weights",
                str(tmp_path / "other.safetensors"),
                *files[2:],
                "--out",
                str(tmp_path / "five.safetensors"),
            ]
        )
        == 2
    )
    assert f"{tmp_path / 'other.safetensors'}: " in capsys.readouterr().err


class Head(nn.Module):
    """A memory and a class head: logits (B, N, 5); ``twice`` runs the one memory twice per forward."""

    def __init__(self, partial_chunk: str = "pending", twice: bool = False) -> None:
        super().__init__()
        self.memory = TensorMemory(
            MemoryConfig(
                token_dim=8,
                channels=2,
                grid=(3, 3, 3),
                chunk_size=3,
                gate_init=0.0,
                public_code={"partial_chunk": partial_chunk},
            )
        )
        self.head, self.twice = nn.Linear(8, 5), twice

    def forward(self, x):
        y = self.memory(x)[0]
        return self.head(self.memory(y)[0] if self.twice else y)


def test_a_padded_last_chunk_is_scored_and_a_memory_run_twice_is_refused():
    torch.manual_seed(0)
    x, targets = torch.randn(1, 10, 8), torch.tensor([1, 2, 3, 4, 0, 1, 2, 3, 4, 0])
    padded = trace_model(Head("pad"), x, targets=targets)  # 10 positions, chunks of 3: the 4th padded and written
    assert padded.num_chunks == 4 and padded.chunks["target"].tolist() == [3, 1, 4, 0]
    assert trace_model(Head(), x, targets=targets).num_chunks == 3  # the 10th position waits for its chunk
    with pytest.raises(TraceError, match="more than once per forward"):
        trace_model(Head(twice=True), x)
    with pytest.raises(ValueError, match="a target is 7, but the model's output has 5 classes"):
        trace_model(Head(), x, targets=torch.full((10,), 7))


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda info, arrays: arrays.update({"chunk/scored": np.ones_like(arrays["chunk/scored"])}), "no predictions"),
        (lambda info, arrays: info.update(chunk_size=0), "whole numbers"),
        (lambda info, arrays: info.update(num_tokens=3_000_000_000), "do not make its"),
        (lambda info, arrays: info.update(outputs="values", output_width=4), "records outputs"),
    ],
)
def test_a_model_trace_whose_header_and_arrays_disagree_is_refused(tmp_path, change, problem):
    path = trace_model(Head(), torch.randn(1, 9, 8)).save(tmp_path / "t.safetensors")
    with safe_open(str(path), "np") as handle:
        header = json.loads(handle.metadata()["trace"])
    arrays = load_file(path)
    change(header["info"], arrays)
    if header["info"].get("outputs") == "values":
        arrays.update({"chunk/prediction": np.zeros((3, 4), np.float32), "chunk/target": np.zeros((3, 4), np.float32)})
    save_file(arrays, tmp_path / "bad.safetensors", metadata={"trace": json.dumps(header)})
    with pytest.raises(TraceError, match=problem):
        load_trace(tmp_path / "bad.safetensors")
