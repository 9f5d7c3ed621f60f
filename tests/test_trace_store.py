"""Trace stores (zarr v3 folders): written while capturing, equal to the in-memory trace, read lazily, hostile stores
refused in one line, a capture killed half way opened up to its last complete segment, memory flat in the input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr

from analysis import load_trace, trace_model
from analysis.traces.store_writer import write_store
from analysis.traces.summaries import summarize
from analysis.traces.trace import TraceError
from tensor_memory import Backbone, BackboneConfig, MemoryConfig
from tensor_memory_cli import main

ROOT = Path(__file__).resolve().parents[1]
OCCLUSION = ROOT / "checkpoints" / "occlusion-tensor"
N, WIDTH, CHUNK = 38, 16, 3  # 12 chunks; segments of 9 positions: the last (36..38) completes no chunk


def backbone() -> Backbone:
    torch.manual_seed(0)
    memory = MemoryConfig(token_dim=WIDTH, channels=4, grid=(4, 4, 4), chunk_size=CHUNK, gate_init=0.0)
    config = BackboneConfig(kind="tensor", dim=WIDTH, layers=2, heads=2, causal=True, memory=memory)
    return Backbone(config).eval()


X = torch.randn(1, N, WIDTH, generator=torch.Generator().manual_seed(1))
TARGETS = torch.randint(0, WIDTH, (N,), generator=torch.Generator().manual_seed(2))
TOKENS = [f"t{i}" + ("é" if i % 4 == 0 else "") for i in range(N)]
VOCABULARY = [f" v{i}" + ("\n" if i % 5 == 0 else "") for i in range(WIDTH)]  # each class's text


def assert_same(stored, memory) -> None:
    """Every array equal (exactly), the header the one a saved file has, the summaries those of the volumes."""
    a, b = stored.arrays(), memory.arrays()
    assert a.keys() == b.keys()
    for name in a:
        assert np.array_equal(np.asarray(a[name]), np.asarray(b[name])), name
        assert np.asarray(a[name]).dtype == np.asarray(b[name]).dtype, name
    assert stored.info == memory.text_info(b) and stored.tokens == memory.tokens and stored.incomplete is None
    assert stored.vocabulary == memory.vocabulary
    for layer in memory.layers:
        expected = summarize(memory.layers[layer])
        assert stored.summaries[layer].keys() == expected.keys()
        for key, value in expected.items():
            np.testing.assert_allclose(stored.summaries[layer][key], value, rtol=1e-12, atol=1e-12, err_msg=key)


@pytest.mark.parametrize(
    "volumes, gates, cell_state, text",
    [
        ("float16", True, True, True),
        ("int8", True, True, False),
        ("int8", False, False, True),
        ("float16", False, True, False),
    ],
)
def test_a_stored_trace_equals_the_one_captured_in_memory(tmp_path, volumes, gates, cell_state, text):
    keywords = dict(volumes=volumes, gates=gates, cell_state=cell_state, segment=9, progress=False)
    if text:
        keywords.update(tokens=TOKENS, targets=TARGETS, vocabulary=VOCABULARY)
    memory = trace_model(backbone(), X, **keywords)
    assert memory.vocabulary == (VOCABULARY if text else None)
    stored = trace_model(backbone(), X, **keywords, out=tmp_path / "t.trace.zarr")
    assert memory.num_chunks == stored.num_chunks == 12
    assert_same(stored, memory)
    assert_same(load_trace(tmp_path / "t.trace.zarr"), memory)  # load_trace: a folder is a store
    assert_same(load_trace(write_store(memory, tmp_path / "whole.zarr")), memory)  # an in-memory trace, written whole
    h = stored.layer().h  # indexing as the views do
    assert np.array_equal(np.asarray(h[3]), np.asarray(memory.layer().h[3]))
    assert np.array_equal(np.asarray(h[[7, 2, 7], 1]), np.asarray(memory.layer().h[[7, 2, 7], 1]))
    assert np.array_equal(np.asarray(h[10:4:-2, :, 0]), np.asarray(memory.layer().h[10:4:-2, :, 0]))


def test_out_safetensors_writes_the_one_file(tmp_path):
    trace = trace_model(backbone(), X, segment=9, out=tmp_path / "t.safetensors", progress=False)
    assert (tmp_path / "t.safetensors").is_file()
    assert np.array_equal(load_trace(tmp_path / "t.safetensors").layer().h, trace.layer().h)


def volume_chunks(store: Path) -> list[Path]:
    return sorted((store / "layer" / "blocks.0.memory" / "h").glob("c.*"))


@pytest.fixture
def store(tmp_path) -> Path:
    path = tmp_path / "t.trace.zarr"
    trace_model(backbone(), X, segment=9, volumes="int8", tokens=TOKENS, targets=TARGETS, out=path, progress=False)
    return path


def test_opening_reads_no_volume_and_indexing_reads_only_its_chunks(store):
    files = [p for p in volume_chunks(store) if p.is_file()]
    assert len(files) == 2  # 12 chunks, 8 a zarr chunk
    for path in files[1:]:
        path.write_bytes(path.read_bytes()[:-7])  # every volume chunk but the first damaged
    trace = load_trace(store)  # opens: volumes are not read
    assert trace.layers["blocks.0.memory"].h[0:8].shape == (8, 4, 4, 4, 4)  # the first zarr chunk alone
    with pytest.raises(TraceError, match=r"'layer/blocks.0.memory/h', chunk c.1.0.0.0.0 \(trace chunks 8..8\) cannot"):
        trace.layers["blocks.0.memory"].h[8]


def refused(store: Path, words: str) -> None:
    with pytest.raises(TraceError) as caught:
        load_trace(store)
    message = str(caught.value)
    assert "\n" not in message and str(store) in message and words in message, message


def edit_node(store: Path, name: str, change) -> None:
    path = store / name / "zarr.json"
    node = json.loads(path.read_text())
    change(node)
    path.write_text(json.dumps(node))


@pytest.mark.parametrize(
    "damage, words",
    [
        (
            lambda s: (s / "layer/blocks.0.memory/sigma/c.0").write_bytes(b"\x28\xb5\x2f\xfd\x00"),
            "'layer/blocks.0.memory/sigma', chunk 0",
        ),
        (lambda s: (s / "layer/blocks.0.memory/h/c.1.0.0.0.0").unlink(), "chunk 1 (c.1.0.0.0.0) is missing"),
        (lambda s: (s / "chunk/scored/c.0").unlink(), "'chunk/scored', chunk 0 (c.0) is missing"),
        (
            lambda s: edit_node(
                s,
                "layer/blocks.1.memory/read",
                lambda n: n.update(shape=[12, 5]) or n["chunk_grid"]["configuration"].update(chunk_shape=[9, 5]),
            ),
            "has shape [12, 5]",
        ),
        (
            lambda s: edit_node(s, "layer/blocks.1.memory/read", lambda n: n.update(data_type="string")),
            "of type 'string'",
        ),
        (
            lambda s: edit_node(s, "layer/blocks.1.memory/read", lambda n: n.update(data_type="object")),
            "of type 'object'",
        ),
        (
            lambda s: edit_node(s, "chunk/scored", lambda n: n["codecs"].append({"name": "numcodecs.pickle"})),
            "uses codecs bytes, zstd, numcodecs.pickle",
        ),
        (lambda s: edit_node(s, "chunk/scored", lambda n: n.update(fill_value="NaN")), "fill value 'NaN'"),
        (
            lambda s: edit_node(s, "chunk/scored", lambda n: n.update(storage_transformers=[{"name": "x"}])),
            "storage transformers",
        ),
        (
            lambda s: edit_node(
                s,
                "layer/blocks.0.memory/h",
                lambda n: n["chunk_grid"]["configuration"].update(chunk_shape=[3, 4, 2, 4, 4]),
            ),
            "not along its first axis alone",
        ),
        (lambda s: (s / "evil").symlink_to("/etc"), "symbolic link, 'evil'"),
        (
            lambda s: edit_node(
                s, "chunk/scored", lambda n: n["chunk_grid"]["configuration"].update(chunk_shape=[2**40])
            ),
            "over the 268,435,456 limit",
        ),
        (lambda s: os.system(f"cp -r {s}/chunk/scored {s}/chunk/extra"), "unexpected arrays: chunk/extra"),
        (lambda s: rewrite_info(s, lambda i: i["layers"]["blocks.0.memory"].update(channels=5)), "has shape"),
        (lambda s: rewrite_info(s, lambda i: i.update(num_chunks=13)), "counts other chunks"),
    ],
)
def test_a_hostile_store_is_refused_in_one_line(store, damage, words):
    damage(store)
    refused(store, words)


def rewrite_info(store: Path, change) -> None:
    record = json.loads((store / "trace.json").read_text())
    change(record["info"])
    (store / "trace.json").write_text(json.dumps(record))


def test_a_chunk_that_decompresses_beyond_its_size_or_holds_nan_is_refused_when_read(store):
    import numcodecs

    bomb = store / "layer/blocks.1.memory/h/c.1.0.0.0.0"
    bomb.write_bytes(numcodecs.Zstd(level=1).encode(np.zeros(50_000_000, np.uint8)))  # 50 MB from a few KB
    h = load_trace(store).layers["blocks.1.memory"].h
    with pytest.raises(TraceError, match=r"chunk 1 .* does not hold one chunk's 2048 bytes"):
        h[9]
    scale = zarr.open_array(str(store), path="layer/blocks.1.memory/h_scale", mode="r+")
    scale[0, 0] = np.nan  # scales are read whole when the store opens
    refused(store, "'layer/blocks.1.memory/h_scale' contains NaN")


KILLED = """
import os, signal, sys, torch
sys.path.insert(0, {tests!r})
from test_trace_store import X, TARGETS, TOKENS, backbone
from analysis import trace_model
from analysis.traces import store_writer
calls = []
real = store_writer.StoreWriter.progress
def progress(self, *args, **kwargs):  # killed after {after} segments are durable, the next one's arrays written
    if len(calls) == {after}:
        os.kill(os.getpid(), signal.SIGKILL)
    calls.append(1)
    real(self, *args, **kwargs)
store_writer.StoreWriter.progress = progress
trace_model(backbone(), X, segment=9, volumes="int8", tokens=TOKENS, targets=TARGETS, out={out!r}, progress=False)
"""


def run_killed(out: Path, after: int) -> None:
    script = KILLED.format(tests=str(ROOT / "tests"), after=after, out=str(out))
    threads = str(torch.get_num_threads())  # as this process computes the whole trace: the sums agree bit for bit
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": threads})
    assert done.returncode == -9


def test_a_capture_killed_half_way_opens_up_to_its_last_complete_segment(tmp_path):
    run_killed(tmp_path / "t.zarr", after=2)  # 2 segments durable (6 chunks), the 3rd's arrays written past them
    sigma = zarr.open_array(str(tmp_path / "t.zarr"), path="layer/blocks.0.memory/sigma", mode="r")[:]
    assert (sigma[6:9] > 0).all()  # the 3rd segment's chunks are there, past what trace.json says is durable
    trace = load_trace(tmp_path / "t.zarr")
    assert trace.incomplete == "cut short: 18 of 38 positions recorded" and trace.num_chunks == 6
    whole = trace_model(backbone(), X, segment=9, volumes="int8", tokens=TOKENS, targets=TARGETS, progress=False)
    assert trace.tokens == TOKENS[:18]
    expected = summarize(trace.layer("blocks.0.memory"))  # read as far as recorded, the totals from the writes
    assert trace.summaries["blocks.0.memory"].keys() == expected.keys()
    for key, value in expected.items():
        np.testing.assert_allclose(trace.summaries["blocks.0.memory"][key], value, rtol=1e-12, atol=1e-12, err_msg=key)
    for name, value in trace.arrays().items():
        full = np.asarray(whole.arrays()[name])
        assert np.array_equal(np.asarray(value), full if name.endswith("gate_scale") else full[: len(value)]), name
    run_killed(tmp_path / "none.zarr", after=0)
    refused(tmp_path / "none.zarr", "not a complete trace store")


MEMORY = """
import shutil, sys, torch
from torch import nn
from analysis import trace_model
from tensor_memory.memory import MemoryConfig, TensorMemory
class Own(nn.Module):
    def __init__(self):
        super().__init__()
        self.memory = TensorMemory(MemoryConfig(token_dim=8, channels=8, grid=(8, 8, 8), chunk_size=4, gate_init=0.0))
    def forward(self, x):
        return self.memory(x)[0]
torch.manual_seed(0)
model, peaks = Own().eval(), []
trace_model(model, torch.randn(1, 64, 8), progress=False)  # warm: the first call loads what any call needs
def kb(field):
    return int(next(line for line in open("/proc/self/status") if line.startswith(field)).split()[1])
for n, out in ((1024, {out!r} + "/a.zarr"), (5120, {out!r} + "/b.zarr")):  # 256 and 1,280 chunks
    inputs = torch.randn(1, n, 8)
    open("/proc/self/clear_refs", "w").write("5")  # the peak (VmHWM) starts again from what is held now
    before = kb("VmRSS:")
    trace = trace_model(model, inputs, segment=256, progress=False, out=None if {memory} else out)
    peaks.append(kb("VmHWM:") - before)  # this capture's peak above what was held before it
    del trace
print(peaks[1] - peaks[0])
"""


def rss_growth(tmp_path: Path, memory: bool) -> float:
    """MB more peak memory for 1,280 chunks than for 256: 1,024 chunks × 49 KB of volumes (h, c, four gates)."""
    script = MEMORY.format(out=str(tmp_path), memory=memory)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2"}  # fewer arenas: less allocator noise
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return int(done.stdout.split()[-1]) / 1024  # KB → MB


@pytest.mark.skipif(sys.platform != "linux", reason="reads and resets the peak in /proc/self")
def test_a_stores_capture_memory_stays_flat_as_the_input_grows(tmp_path):
    in_memory, stored = rss_growth(tmp_path, True), rss_growth(tmp_path, False)
    assert in_memory > 60, in_memory  # 50 MB of volumes more, held whole and copied once to join them
    assert stored < 20, stored  # one segment at a time: what grows is the allocator's noise


def test_the_trace_command_writes_a_store_for_a_folder(tmp_path, capsys):
    out = tmp_path / "occ.trace.zarr"
    assert main(["trace", "--checkpoint", str(OCCLUSION), "--out", str(out), "--no-progress", "--volumes", "int8"]) == 0
    assert str(out) in capsys.readouterr().out
    stored, file = (
        load_trace(out),
        load_trace(
            main(
                [
                    "trace",
                    "--checkpoint",
                    str(OCCLUSION),
                    "--out",
                    str(tmp_path / "f.safetensors"),
                    "--no-progress",
                    "--volumes",
                    "int8",
                ]
            )
            or tmp_path / "f.safetensors"
        ),
    )
    assert_same(stored, file)
    assert main(["trace", "--checkpoint", str(OCCLUSION), "--out", str(out)]) == 2  # never written over
    assert "is a folder that exists already" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["trace", "--help"])
    assert "x.trace.zarr (a trace store" in " ".join(capsys.readouterr().out.split())
