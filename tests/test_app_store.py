"""The app opening a trace store (a zarr folder read lazily): `tensor-memory app --trace FOLDER`, the stores under the
data root, every page that reads a trace reading only the page of chunks it shows, a store cut short saying so."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import torch
import zarr
from app_helpers import chart, counter, drawn_volume, ok, payload, shown, start

from analysis import load_trace, trace_model
from analysis.traces.store_reader import LazyVolumes
from analysis.traces.summaries import summarize
from app import cli
from app.cli import DATA_ROOT_ENV, TRACE_ENV
from app.state import data_root_traces
from tensor_memory import Backbone, BackboneConfig, MemoryConfig

CHUNKS, CHUNK, WIDTH = 300, 2, 16
PAGE = 64  # app.paging.STEPPING_WINDOW


def capture_store(path, gates: bool = True):
    """A 300-chunk store of a small causal backbone: float16 volumes and gates, tokens and targets."""
    torch.manual_seed(0)
    memory = MemoryConfig(token_dim=WIDTH, channels=4, grid=(4, 4, 4), chunk_size=CHUNK, gate_init=0.0)
    model = Backbone(BackboneConfig(kind="tensor", dim=WIDTH, layers=1, heads=2, causal=True, memory=memory)).eval()
    n = CHUNKS * CHUNK
    x = torch.randn(1, n, WIDTH, generator=torch.Generator().manual_seed(1))
    targets = torch.randint(0, WIDTH, (n,), generator=torch.Generator().manual_seed(2))
    words = [f" w{i % 13}" for i in range(n)]
    trace_model(model, x, tokens=words, targets=targets, gates=gates, segment=128, progress=False, out=path)
    return path


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    return capture_store(tmp_path_factory.mktemp("stores") / "long.trace.zarr")


@pytest.fixture(scope="module")
def cut_short(store, tmp_path_factory):
    """The store as a capture killed after 150 chunks leaves it: its progress record says so (the arrays hold more)."""
    path = tmp_path_factory.mktemp("stores") / "short.trace.zarr"
    shutil.copytree(store, path)
    record = json.loads((path / "trace.json").read_text())
    record.update(complete=False, chunks=150, positions=150 * CHUNK)
    (path / "trace.json").write_text(json.dumps(record))
    return path


@pytest.fixture
def guard(monkeypatch):
    """Every read of a store's volumes checked against the page shown (``guard["page"]``, (first, last)): a read of
    any chunk outside it fails the test. ``guard["read"]`` collects the chunks read."""
    held = {"page": (0, PAGE - 1), "read": set()}
    real = LazyVolumes._read

    def read(self, rows):
        first, last = held["page"]
        outside = [int(r) for r in np.asarray(rows).ravel() if not first <= r <= last]
        assert not outside, f"{self.name}: chunks {outside[:5]}… read, outside the page {first}–{last} shown"
        held["read"].update(int(r) for r in np.asarray(rows).ravel())
        return real(self, rows)

    monkeypatch.setattr(LazyVolumes, "_read", read)
    return held


def notes(at) -> str:
    return " ".join(shown(c.value) for c in at.caption) + " ".join(shown(w.value) for w in at.warning)


def test_a_store_opens_on_every_page_and_reads_only_the_page_shown(store, guard, monkeypatch):
    monkeypatch.setenv(TRACE_ENV, str(store))
    at = start()
    assert at.selectbox(key="checkpoint_choice").value == "trace: long.trace.zarr"
    assert counter(at) == f"Chunk 0 / {CHUNKS - 1}"  # a long trace opens on its first page
    assert "A trace store of 300 chunks, read a page at a time" in notes(at) and not at.warning
    assert chart(at, "‖h‖ over 4 channels after chunk 0") and chart(at, "after chunk 63", 63)
    expected = np.sqrt(np.square(np.asarray(load_trace(store).layer().h[63], dtype=np.float32)).sum(0))  # (D, H, W)
    shown = drawn_volume(chart(at, "after chunk 63", 63), expected.shape)
    assert np.isfinite(shown).any()
    np.testing.assert_allclose(shown[np.isfinite(shown)], expected[np.isfinite(shown)], rtol=1e-3, atol=1e-4)
    assert guard["read"] <= set(range(PAGE))

    guard["page"] = (PAGE, 2 * PAGE - 1)
    ok(at.button(key="explore.later").click().run())  # the next page: only its chunks are read
    assert counter(at) == f"Chunk {PAGE} / {CHUNKS - 1}" and payload(at)["offset"] == PAGE
    assert chart(at, f"after chunk {PAGE}") and chart(at, "after chunk 127", 127)

    guard["page"] = (4 * PAGE, CHUNKS - 1)
    ok(at.number_input(key=f"explore.go.{PAGE}").set_value(290).run())  # Go to chunk: its page, the last one
    assert counter(at) == f"Chunk 290 / {CHUNKS - 1}" and payload(at)["offset"] == 4 * PAGE
    assert chart(at, "after chunk 290") and chart(at, f"after chunk {CHUNKS - 1}", CHUNKS - 1)

    ok(at.switch_page("views/diagnose.py").run())  # the addressing report: from the stored summaries
    assert "the one sample this trace recorded" in notes(at) and "A trace store of 300" in notes(at)
    ok(at.switch_page("views/text.py").run())
    assert "Chunk 290: tokens 580–581" in " ".join(m.value for m in at.markdown) and at.dataframe
    ok(at.switch_page("views/export.py").run())  # the chunk's figures from its page; the store is not downloaded
    (button,) = [b for b in at.get("download_button") if b.proto.id.endswith("download_trace")]
    assert "copy the folder to take it away" in notes(at) and "not made here of a trace store" in notes(at)
    assert button.proto.disabled
    assert "Figures of chunk 290" in " ".join(m.value for m in at.markdown)
    for name in ("occlusion", "teach", "images", "audit"):
        ok(at.switch_page(f"views/{name}.py").run())
        assert at.info[0].value.endswith("Open a checkpoint in the sidebar for this page.")
        assert "A trace store of 300 chunks" in notes(at)
    assert guard["read"] <= set(range(2 * PAGE)) | set(range(4 * PAGE, CHUNKS))  # three pages, nothing else


def test_a_store_cut_short_opens_up_to_its_last_segment_and_says_so(cut_short, guard, monkeypatch):
    monkeypatch.setenv(TRACE_ENV, str(cut_short))
    trace = load_trace(cut_short)
    assert trace.num_chunks == 150 and trace.incomplete == "cut short: 300 of 600 positions recorded"
    guard["page"] = (0, 149)
    expected = summarize(trace.layer())  # its volumes read here, to compare: the app reads only its page's
    for key, value in expected.items():  # the stored per-chunk summaries, the totals made from the writes
        np.testing.assert_allclose(trace.summary()[key], value, rtol=1e-9, atol=1e-12, err_msg=key)
    guard["page"], guard["read"] = (0, PAGE - 1), set()
    at = start()
    assert counter(at) == "Chunk 0 / 149"
    line = "short.trace.zarr is incomplete: cut short: 300 of 600 positions recorded"
    for name in ("explore", "diagnose", "text", "export", "teach"):
        ok(at.switch_page(f"views/{name}.py").run())
        assert line in notes(at), name
    assert guard["read"] <= set(range(PAGE))


def test_the_data_root_offers_its_trace_files_and_stores_never_through_a_link(store, tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "runs" / "deeper").mkdir(parents=True)
    shutil.copytree(store, root / "mine.trace.zarr")
    (root / "runs" / "a.trace.safetensors").write_bytes(b"x")
    (root / "runs" / "deeper" / "far.trace.safetensors").write_bytes(b"x")  # deeper than the listing looks
    (root / "model.safetensors").write_bytes(b"x")  # not named as a trace
    (root / "folder").mkdir()  # a folder without trace.json
    os.symlink(store, root / "linked.trace.zarr")
    os.symlink(root / "runs" / "a.trace.safetensors", root / "linked.trace.safetensors")
    found = data_root_traces(root)
    assert found == {
        "trace: mine.trace.zarr": root / "mine.trace.zarr",
        "trace: runs/a.trace.safetensors": root / "runs" / "a.trace.safetensors",
    }
    monkeypatch.setenv(DATA_ROOT_ENV, str(root))
    at = start()
    options = at.selectbox(key="checkpoint_choice").options
    assert "trace: mine.trace.zarr" in options and not any("linked" in o for o in options)
    ok(at.selectbox(key="checkpoint_choice").select("trace: mine.trace.zarr").run())
    assert counter(at) == f"Chunk 0 / {CHUNKS - 1}"
    ok(at.selectbox(key="checkpoint_choice").select("trace: runs/a.trace.safetensors").run())
    assert any("Could not open the trace trace: runs/a.trace.safetensors" in shown(e.value) for e in at.error)


def test_tensor_memory_app_takes_a_store_and_refuses_a_broken_one_before_the_server_starts(
    store, tmp_path, monkeypatch, capsys
):
    from tensor_memory_cli import main

    started = []
    monkeypatch.setattr(cli, "serve", lambda command, env: started.append(env) or 0)
    assert main(["app", "--trace", str(store)]) == 0
    assert started[0][TRACE_ENV] == str(store.resolve())
    broken = tmp_path / "broken.trace.zarr"
    shutil.copytree(store, broken)
    (broken / "trace.json").write_text("{")
    assert main(["app", "--trace", str(broken)]) == 2 and len(started) == 1
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(broken) in err and "not a complete trace store" in err


def test_a_damaged_page_of_a_store_says_so_when_turned_to(store, tmp_path, monkeypatch):
    path = tmp_path / "nan.trace.zarr"
    shutil.copytree(store, path)
    zarr.open_array(str(path), path="layer/blocks.0.memory/h", mode="r+")[70, 0, 0, 0, 0] = np.nan  # page 2
    monkeypatch.setenv(TRACE_ENV, str(path))
    at = start()  # the first page reads its own chunks only: nothing is wrong there
    assert counter(at) == f"Chunk 0 / {CHUNKS - 1}" and not at.error
    ok(at.button(key="explore.later").click().run())
    (error,) = [shown(e.value) for e in at.error]
    assert error.startswith("Could not read chunks of the trace trace: nan.trace.zarr") and "NaN" in error
