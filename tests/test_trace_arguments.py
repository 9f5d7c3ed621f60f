"""Every wrong argument of trace_model and Trace is one line naming it and what to pass (a ValueError, the project's
kind of expected failure), and no trace holds what no memory or softmax gives: probabilities outside [0, 1], gate
values outside their sigmoid's or tanh's bounds, targets below −1 — neither built in memory nor loaded from a file or
a store."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest
import torch
import zarr
from safetensors_edits import rewrite_array
from test_trace_model import IDS, Head, family
from torch import nn

from analysis import load_trace, trace_model
from analysis.traces.trace import TraceError
from tensor_memory.memory import MemoryConfig, TensorMemory

X = torch.randn(1, 9, 8, generator=torch.Generator().manual_seed(0))  # Head: chunks of 3, 5 classes
TARGETS = torch.tensor([1, 2, 3, 4, 0, 1, 2, 3, 4])


class DictHead(Head):
    """A model returning a plain dict with logits, as some people's own models do."""

    def forward(self, x):
        return {"logits": super().forward(x)}


class Unused(nn.Module):
    """A memory that sits in the model but is never called on the forward path."""

    def __init__(self) -> None:
        super().__init__()
        self.memory = TensorMemory(MemoryConfig(token_dim=8, channels=2, grid=(3, 3, 3), chunk_size=3, gate_init=0.0))
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        return self.head(x)


def one_line(error: pytest.ExceptionInfo) -> str:
    message = str(error.value)
    assert "\n" not in message and isinstance(error.value, ValueError), message
    return message


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: trace_model(Unused(), X), "memory layer 'memory' never ran on this input"),
        (lambda: trace_model("gpt2", X), "model must be a torch nn.Module holding a TensorMemory, got 'gpt2'"),
        (lambda: trace_model(Head(), [X]), "inputs must be a torch tensor (1, N, …) or a dict of tensors"),
        (lambda: trace_model(Head(), X.numpy()), "got a numpy array (float32): pass torch.from_numpy(…)"),
        (lambda: trace_model(Head(), {}), "got an empty dict"),
        (lambda: trace_model(Head(), X[0]), "inputs must be of shape (1, N, …), got (9, 8)"),
        (
            lambda: trace_model(family("gpt2"), {"input_ids": IDS.numpy()}),
            "inputs['input_ids'] must be a tensor (inputs is passed as model(**inputs)), got a numpy array (int64)",
        ),
        (lambda: trace_model(family("gpt2"), {"input_ids": IDS, "use_cache": False}), "inputs['use_cache'] must be"),
        (
            lambda: trace_model(family("gpt2"), {"input_ids": IDS, "attention_mask": torch.ones(2, IDS.shape[1])}),
            "inputs['attention_mask'] has batch 2 (shape (2, 26)), inputs['input_ids'] batch 1",
        ),
        (lambda: trace_model(Head(), X, tokens="abcdefghi"), "tokens must be N = 9 strings, one per position"),
        (lambda: trace_model(Head(), X, tokens=5), "tokens must be N = 9 strings, one per position (a list), got 5"),
        (lambda: trace_model(Head(), X, tokens=list(range(9))), "tokens[0] must be a string (one token a position)"),
        (
            lambda: trace_model(Head(), X, tokens=["a\udc80"] + ["b"] * 8),
            "tokens[0] = 'a\\udc80' holds '\\udc80', a lone surrogate UTF-8 cannot store",
        ),
        (lambda: trace_model(Head(), X, targets="abcdefghi"), "integer classes, −1 or −100 where there is none"),
        (lambda: trace_model(Head(), X, targets=["a"] * 9), "got a list of str"),
        (lambda: trace_model(Head(), X, targets=[None] * 9), "got a list of NoneType"),
        (lambda: trace_model(Head(), X, targets=[2**70] * 9), "got a list of int beyond int64"),
        (lambda: trace_model(Head(), X, targets=torch.zeros(9)), "got (9,) of torch.float32"),
        (lambda: trace_model(Head(), X, targets=torch.zeros(3, 3, dtype=torch.long)), "got shape (3, 3)"),
        (lambda: trace_model(Head(), X, targets=torch.full((9,), -5)), "targets[0] is -5; a target is a class ≥ 0"),
        (lambda: trace_model(Head(), X, targets=torch.full((9,), 7)), "a target is 7, but the model's output has 5"),
        (lambda: trace_model(Head(), X, name=5), "name must be a string (the trace's label"),
        (lambda: trace_model(Head(), X, volumes="int4"), "volumes must be one of float16, int8, got 'int4'"),
        (lambda: trace_model(Head(), X, segment=6.0), "segment must be a positive multiple of the memory's chunk"),
        (lambda: trace_model(Head(), X, gates="no"), "gates must be True or False, got 'no'"),
        (lambda: trace_model(Head(), X, cell_state=None), "cell_state must be True or False, got None"),
        (lambda: trace_model(Head(), X, progress="yes"), "progress must be True, False or None"),
        (lambda: trace_model(Head(), X, device="tpu"), "device tpu: not a device; give auto, cpu, cuda or cuda:N"),
        (lambda: trace_model(Head(), X, out=5), "out must be a path (a str or pathlib.Path)"),
        (lambda: trace_model(Head(), X, out="/no/such/folder/t.safetensors"), "its folder /no/such/folder does not"),
    ],
)
def test_a_wrong_trace_model_argument_is_one_line_naming_it(call, words):
    with pytest.raises(ValueError) as error:
        call()
    assert words in one_line(error)


def test_what_was_refused_with_a_raw_error_is_now_taken():
    plain = trace_model(DictHead(), X, targets=TARGETS)  # a dict output's logits, as a ModelOutput's
    assert plain.chunks["scored"].all() and plain.chunks["target"].tolist() == [3, 1, 4]
    tokens = trace_model(Head(), X, tokens=(f"t{i}" for i in range(9)))  # any iterable of strings
    assert tokens.tokens == [f"t{i}" for i in range(9)]
    none = trace_model(Head(), X, targets=np.array([-100, -1] * 4 + [-100]))  # numpy targets, both marks of none
    assert not none.chunks["scored"].any() and (none.per_token["target"] == -1).all()


@pytest.fixture(scope="module")
def trace():
    torch.manual_seed(0)
    return trace_model(Head(), X, targets=TARGETS, tokens=[f"t{i}" for i in range(9)])


def _chunks(trace, **changes):
    return {**trace.chunks, **changes}


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda t: dict(info=5), "Trace: info must be a dict"),
        (lambda t: dict(layers={"m": 5}), "Trace: layers must be a dict of LayerTrace by memory path"),
        (lambda t: dict(chunks={**t.chunks, "extra": np.zeros(3)}), "Trace: chunks['extra'] is not one of"),
        (lambda t: dict(chunks={**t.chunks, "scored": [True] * 3}), "Trace: chunks['scored'] must be a numpy array"),
        (
            lambda t: dict(chunks={**t.chunks, "p_target": np.array([0.5, 7.5, 0.1], np.float32)}),
            "Trace: chunks['p_target'] holds probabilities outside [0, 1] (7.5 at index 1)",
        ),
        (
            lambda t: dict(chunks={**t.chunks, "p_prediction": np.array([0.5, -3.0, 0.1], np.float32)}),
            "chunks['p_prediction'] holds probabilities outside [0, 1] (-3 at index 1)",
        ),
        (lambda t: dict(chunks={**t.chunks, "target": np.array([1, -5, 0])}), "chunks['target'] holds -5"),
        (lambda t: dict(per_token={"target": np.full(9, -5)}), "Trace: per_token['target'] holds -5"),
        (lambda t: dict(tokens="abc"), "Trace: tokens must be a list of strings"),
        (lambda t: dict(tokens=["\udcff"] * 9), "Trace: tokens[0] = '\\udcff' holds '\\udcff', a lone surrogate"),
        (lambda t: dict(summaries=[]), "Trace: summaries must be a dict by layer"),
    ],
)
def test_a_wrong_trace_argument_is_one_line_naming_it(trace, change, words):
    with pytest.raises(ValueError) as error:
        dataclasses.replace(trace, **change(trace))
    assert words in one_line(error)


@pytest.mark.parametrize(
    "change, words",
    [
        (dict(gate_scale=1e30), "gate_scale must be σ(γ), a sigmoid: a number in [0, 1], got 1e+30"),
        (dict(gate_scale=-0.5), "a number in [0, 1], got -0.5"),
        (dict(gate_scale="high"), "a number in [0, 1], got 'high'"),
        (dict(h=np.zeros((3, 2))), "LayerTrace: h must be the hidden volumes (K, C, D, H, W), got shape (3, 2)"),
        (dict(c=np.zeros((3, 2, 3, 3, 1))), "LayerTrace: c must be None or volumes of h's shape"),
        (dict(sigma=np.zeros(4, np.float32)), "LayerTrace: sigma must be a numpy array of shape (3,) (K), got (4,)"),
        (dict(mu_read=[[0, 0, 0]] * 3), "LayerTrace: mu_read must be a numpy array of shape (3, 3) (K, 3), got list"),
    ],
)
def test_a_wrong_layer_trace_argument_is_one_line_naming_it(trace, change, words):
    with pytest.raises(ValueError) as error:
        dataclasses.replace(trace.layer(), **change)
    assert words in one_line(error)


def test_a_sigmoid_rounding_to_exactly_zero_or_one_is_kept(trace, tmp_path):
    layer = trace.layer()
    ends = np.zeros_like(layer.gate_f)
    ends[1] = 1.0  # float16 rounds σ(x) to exactly 0 or 1 for |x| large: the bounds are closed
    edge = dataclasses.replace(trace, layers={"memory": dataclasses.replace(layer, gate_f=ends, gate_scale=1.0)})
    loaded = load_trace(edge.save(tmp_path / "edge.safetensors"))
    assert np.array_equal(loaded.layer().gate_f, ends) and loaded.layer().gate_scale == 1.0


def _edited(trace, tmp_path, name: str, values) -> str:
    saved = trace.save(tmp_path / "good.safetensors")
    return rewrite_array(saved, tmp_path / "bad.safetensors", name, np.asarray(values))


@pytest.mark.parametrize(
    "name, edit, words",
    [
        ("chunk/p_target", lambda a: a + 7.5, "holds probabilities outside [0, 1]"),
        ("chunk/p_prediction", lambda a: a - 3.0, "holds probabilities outside [0, 1]"),
        ("tokens/p_target", lambda a: np.full_like(a, 2.0), "holds probabilities outside [0, 1] (2 at index 0)"),
        ("layer/memory/gate_scale", lambda a: np.full_like(a, 1e30), "holds a read gate σ(γ) (a sigmoid) outside"),
        ("layer/memory/gate_i", lambda a: a - np.float16(2), "holds input gate values (a sigmoid's) outside [0, 1]"),
        ("layer/memory/gate_o", lambda a: a + np.float16(1.5), "holds output gate values (a sigmoid's) outside"),
        ("layer/memory/gate_g", lambda a: a * np.float16(0) + np.float16(3), "holds candidate values (a tanh's)"),
        ("chunk/target", lambda a: np.where(np.arange(len(a)) == 1, -5, a), "holds -5, a class outside [0, 5)"),
        ("tokens/target", lambda a: np.full_like(a, -5), "holds -5, a class outside [0, 5) (a target of none is −1)"),
    ],
)
def test_a_file_holding_what_no_memory_or_softmax_gives_is_refused_in_one_line(trace, tmp_path, name, edit, words):
    path = _edited(trace, tmp_path, name, edit(trace.arrays()[name].copy()))
    with pytest.raises(TraceError) as error:
        load_trace(path)
    message = one_line(error)
    assert message.startswith(f"{path}: array {name!r} ") and words in message, message


def test_an_unscored_chunks_target_other_than_minus_one_is_refused(tmp_path):
    torch.manual_seed(0)
    trace = trace_model(Head(), X, targets=torch.tensor([1, 2, -1, 4, 0, 1, 2, 3, 4]))
    trace.chunks["scored"][0] = False  # the first chunk (scored at its position 1, target 2) marked unscored
    path = trace.save(tmp_path / "t.safetensors")
    with pytest.raises(TraceError, match=re.escape("'chunk/target' holds 2 for a chunk not scored; an unscored")):
        load_trace(path)


def test_an_int8_trace_with_gate_codes_or_scales_out_of_bounds_is_refused(tmp_path):
    torch.manual_seed(0)
    trace = trace_model(Head(), X, volumes="int8")
    saved = trace.save(tmp_path / "t.safetensors")
    codes, scale = trace.arrays()["layer/memory/gate_f"], trace.arrays()["layer/memory/gate_f_scale"]
    negative = rewrite_array(saved, tmp_path / "codes.safetensors", "layer/memory/gate_f", np.full_like(codes, -9))
    with pytest.raises(TraceError, match=re.escape("holds int8 codes of forget gate values (a sigmoid's) outside")):
        load_trace(negative)
    large = rewrite_array(saved, tmp_path / "scale.safetensors", "layer/memory/gate_f_scale", np.full_like(scale, 0.5))
    with pytest.raises(TraceError, match=re.escape("holds int8 scales of forget gate values (a sigmoid's) outside")):
        load_trace(large)


def test_a_store_holding_what_no_memory_or_softmax_gives_is_refused_in_one_line(tmp_path):
    torch.manual_seed(0)
    store = tmp_path / "t.trace.zarr"
    trace_model(Head(), X, targets=TARGETS, segment=3, out=store, progress=False)
    gate = zarr.open_array(str(store), path="layer/memory/gate_i", mode="r+")
    gate[1, 0, 0, 0, 0] = -0.25  # volumes are checked as they are read
    trace = load_trace(store)
    with pytest.raises(TraceError) as error:
        trace.layer().gate_i[1]
    assert "'layer/memory/gate_i', read in chunks 1..1, holds input gate values (a sigmoid's) outside" in one_line(
        error
    )
    p_target = zarr.open_array(str(store), path="chunk/p_target", mode="r+")
    p_target[2] = 7.5  # small arrays are read and checked when the store opens
    with pytest.raises(TraceError) as error:
        load_trace(store)
    assert f"{store}: array 'chunk/p_target' holds probabilities outside [0, 1] (7.5 at index 2)" in one_line(error)
