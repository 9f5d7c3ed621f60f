"""The README's Python examples run as written, and the hook example changes what it says it changes."""

from __future__ import annotations

import re
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def test_the_readme_examples_run():
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    assert len(blocks) >= 2
    namespace: dict = {}
    torch.manual_seed(0)
    for block in blocks[:2]:  # "Using it": the memory, a backbone, a recording, then a hook
        exec(compile(block, "README.md", "exec"), namespace)
    rec, moved, out = namespace["rec"], namespace["moved"], namespace["out"]
    assert rec.layers["blocks.0.memory"].mu_write.shape == (2, 24, 3)
    assert moved.shape == out.shape and not torch.allclose(moved, out)  # the moved writes reach the outputs


def test_the_your_own_model_example_runs_and_its_trace_opens(tmp_path, monkeypatch):
    from analysis import load_trace

    section = (ROOT / "README.md").read_text().split("## Your own model", 1)[1]
    block = re.findall(r"```python\n(.*?)```", section, re.S)[0]
    assert len(block.strip().splitlines()) <= 14  # a short example
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    exec(compile(block, "README.md", "exec"), {})
    trace = load_trace(tmp_path / "my-model.trace.safetensors")
    assert list(trace.layers) == ["transformer.h.1.memory"] and trace.num_chunks == 8 and len(trace.tokens) == 64
    assert len(trace.vocabulary) == 100 and trace.class_text(7) == "' t7'"  # predictions read as the tokens' text
    assert trace.chunks["scored"].all()  # the last chunk is scored at position 62: 63 has no next token


def test_the_long_input_example_writes_a_store_that_opens_lazily(tmp_path, monkeypatch):
    from analysis import load_trace
    from analysis.traces.store_reader import LazyVolumes

    section = (ROOT / "README.md").read_text().split("## Your own model", 1)[1]
    blocks = re.findall(r"```python\n(.*?)```", section, re.S)
    first, store = blocks[0], next(block for block in blocks if ".trace.zarr" in block)
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    namespace: dict = {}
    for block in (first, store):
        exec(compile(block, "README.md", "exec"), namespace)
    opened = load_trace(tmp_path / "my-model.trace.zarr")
    assert (tmp_path / "my-model.trace.zarr").is_dir() and opened.num_chunks == 8 and opened.incomplete is None
    layer = opened.layer("transformer.h.1.memory")
    assert isinstance(layer.h, LazyVolumes) or isinstance(layer.h.codes, LazyVolumes)  # volumes read on demand
    assert namespace["trace"].num_chunks == 8
