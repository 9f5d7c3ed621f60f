"""capture, capture_many, prediction_trace and trace_model, on one segment recorder and one chunk scorer, give the
traces that the code of the last commit before that change gave, array for array and bit for bit: its
``analysis/traces`` is loaded from git history beside today's, as package ``traces_before``, and both run the same
models on the same inputs.

One array is allowed to differ, and no more: a language model's capture kept p(target) per position as
exp(score − logsumexp), where trace_model and every chunk's probabilities use the softmax. Both now use the
softmax, so there the new values are the chunk probabilities bit for bit and the old ones to float32 rounding.
What a language model's traces record since, its vocabulary (and a prediction trace its tokens), is set aside."""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from test_trace_model import Head
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging

from analysis.traces import capture as capture_now
from analysis.traces.chunk_scorer import chunk_positions
from analysis.traces.model import trace_model
from analysis.traces.predictions import prediction_trace
from analysis.traces.segment_recorder import memory_chunk_size
from tensor_memory import Backbone, BackboneConfig, MemoryConfig, attach_memory, load_checkpoint

logging.set_verbosity_error()
ROOT = Path(__file__).resolve().parents[1]
CHECKPOINTS = ROOT / "checkpoints"
BEFORE = "2ad59ac"  # the last commit in which capture and trace_model kept their own loops and scoring
TEXT_P_TARGET = "tokens/p_target"  # the one array a language model's capture now computes with the softmax


@pytest.fixture(scope="module")
def before(tmp_path_factory):
    """The ``analysis/traces`` modules of commit BEFORE, as package ``traces_before``."""
    folder = tmp_path_factory.mktemp("before")
    package = folder / "traces_before"
    package.mkdir()
    listed = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{BEFORE}:analysis/traces"], cwd=ROOT, capture_output=True, text=True
    )
    if listed.returncode:
        pytest.skip(f"this checkout has no commit {BEFORE} (a shallow clone?): {listed.stderr.strip()}")
    for name in listed.stdout.split():
        source = subprocess.run(
            ["git", "show", f"{BEFORE}:analysis/traces/{name}"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout
        (package / name).write_text(source.replace("analysis.traces.", "traces_before."))
    sys.path.insert(0, str(folder))
    try:
        yield {name: importlib.import_module(f"traces_before.{name}") for name in ("capture", "model", "predictions")}
    finally:
        sys.path.remove(str(folder))
        for name in [m for m in sys.modules if m.split(".")[0] == "traces_before"]:
            del sys.modules[name]


def as_before(settings: dict) -> dict:
    """The settings under the names the code before took: ``cell_state`` was ``cells``."""
    return {("cells" if key == "cell_state" else key): value for key, value in settings.items()}


def assert_same(old, new, allowed: tuple[str, ...] = ()) -> None:
    """Equal info and tokens, the same array names, and every array's dtype, shape and bytes the same (those in
    ``allowed`` to float32 rounding)."""
    assert old.info == new.info and old.tokens == new.tokens
    old_arrays, new_arrays = old.arrays(), new.arrays()
    assert list(old_arrays) == list(new_arrays)
    for name, value in old_arrays.items():
        ours = new_arrays[name]
        assert ours.dtype == value.dtype and ours.shape == value.shape, name
        if name in allowed:
            np.testing.assert_allclose(ours, value, rtol=1e-5, atol=1e-6, err_msg=name)
        else:
            assert ours.tobytes() == value.tobytes(), name


@pytest.fixture(scope="module")
def checkpoints():
    names = (
        "occlusion-tensor",
        "language_modelling-tensor",
        "language_modelling-tensor_shared_state",
        "masked_patches-tensor",
        "map_building-tensor",
        "occlusion-base",
        "language_modelling-base",
        "masked_patches-base",
    )
    return {name: load_checkpoint(CHECKPOINTS / name) for name in names}


CAPTURES = [
    ("occlusion-tensor", dict(seed=3, index=2)),
    ("occlusion-tensor", dict(seed=1, volumes="int8", gates=False)),
    ("occlusion-tensor", dict(seed=2, cell_state=False, frames=20)),
    ("language_modelling-tensor", dict(seed=1)),
    ("language_modelling-tensor_shared_state", dict(seed=2, volumes="int8")),
    ("masked_patches-tensor", dict(seed=2, mask_rate=0.5)),
    ("map_building-tensor", dict(seed=4, index=1, gates=False)),
]


@pytest.mark.parametrize("segment_chunks", [64, 3])
@pytest.mark.parametrize("name, settings", CAPTURES)
def test_capture_gives_the_traces_it_gave(before, checkpoints, monkeypatch, name, settings, segment_chunks):
    monkeypatch.setattr(before["capture"], "SEGMENT_CHUNKS", segment_chunks)  # 3: several segments a sample
    monkeypatch.setattr(capture_now, "SEGMENT_CHUNKS", segment_chunks)
    ckpt = checkpoints[name]
    old = before["capture"].capture(ckpt, progress=False, **as_before(settings))
    new = capture_now.capture(ckpt, progress=False, **settings)
    assert (new.vocabulary is not None) == (new.tokens is not None)  # a language model's: each class's text
    assert_same(old, dataclasses.replace(new, vocabulary=None), allowed=(TEXT_P_TARGET,) if new.tokens else ())
    if new.tokens is not None:  # p(target) per position is now, where a chunk is scored, its probability of its target
        at, scored = chunk_positions(new.per_token["target"] >= 0, new.info["chunk_size"], new.num_chunks)
        probs = new.chunks["probs"][np.arange(new.num_chunks), new.chunks["target"]]
        assert scored.any() and np.array_equal(new.per_token["p_target"][at][scored], probs[scored])


@pytest.mark.parametrize(
    "name, indices, settings",
    [
        ("occlusion-tensor", [0, 3, 5], dict(volumes="int8")),
        ("masked_patches-tensor", [1, 2], dict(gates=False)),
    ],
)
def test_capture_many_gives_the_traces_it_gave(before, checkpoints, name, indices, settings):
    olds = before["capture"].capture_many(checkpoints[name], seed=5, indices=indices, progress=False, **settings)
    news = capture_now.capture_many(checkpoints[name], seed=5, indices=indices, progress=False, **settings)
    for old, new in zip(olds, news, strict=True):
        assert_same(old, new)


@pytest.mark.parametrize("name", ["occlusion-base", "language_modelling-base", "masked_patches-base"])
def test_prediction_traces_are_what_they_were(before, checkpoints, name):
    new = prediction_trace(checkpoints[name], seed=2, index=1)
    assert (new.tokens is not None) == (new.vocabulary is not None) == name.startswith("language")  # its text, since
    assert_same(
        before["predictions"].prediction_trace(checkpoints[name], seed=2, index=1),
        dataclasses.replace(new, tokens=None, per_token={}, vocabulary=None),
    )


def backbone() -> nn.Module:
    memory = MemoryConfig(token_dim=16, channels=4, grid=(4, 4, 4), chunk_size=3, gate_init=0.0)
    return Backbone(BackboneConfig(kind="tensor", dim=16, layers=2, heads=2, causal=True, memory=memory)).eval()


def gpt2() -> nn.Module:
    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=61, bos_token_id=0, eos_token_id=0))
    memory = MemoryConfig(token_dim=32, channels=4, grid=(4, 4, 4), chunk_size=4, gate_init=0.0)
    return attach_memory(model.eval(), memory, layers=[0, 1])


def ids() -> torch.Tensor:
    return torch.randint(0, 61, (1, 26), generator=torch.Generator().manual_seed(3))


MODELS = {  # name: (model, inputs, trace_model's keywords); N is never a whole number of chunks
    "backbone": (backbone, lambda: torch.randn(1, 38, 16), {}),
    "backbone scored": (backbone, lambda: torch.randn(1, 38, 16), dict(targets=torch.arange(38) % 16)),
    "padded": (lambda: Head("pad"), lambda: torch.randn(1, 10, 8), dict(targets=torch.arange(10) % 5)),
    "pending": (lambda: Head("pending"), lambda: torch.randn(1, 10, 8), dict(targets=torch.arange(10) % 5 - 1)),
    "gpt2": (gpt2, lambda: {"input_ids": ids()}, dict(targets=ids()[0, 1:], tokens=[f"t{i}" for i in range(26)])),
    "gpt2 ignored": (gpt2, lambda: {"input_ids": ids()}, dict(targets=torch.where(ids()[0] % 3 == 0, -100, ids()[0]))),
}


@pytest.mark.parametrize("segment_chunks", [None, 1, 4])
@pytest.mark.parametrize("recording", [dict(), dict(volumes="int8", gates=False), dict(cell_state=False)])
@pytest.mark.parametrize("name", list(MODELS))
def test_trace_model_gives_the_traces_it_gave(before, name, recording, segment_chunks):
    make, inputs, keywords = MODELS[name]
    torch.manual_seed(0)
    model, x = make(), inputs()
    segment = None if segment_chunks is None else segment_chunks * memory_chunk_size(model)
    old = before["model"].trace_model(model, x, segment=segment, progress=False, **keywords, **as_before(recording))
    new = trace_model(model, x, segment=segment, progress=False, **keywords, **recording)
    assert_same(old, new)
