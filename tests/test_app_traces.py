"""The app opening a trace file: `tensor-memory app --trace FILE` and "Open a trace" in the sidebar."""

from __future__ import annotations

import hashlib
import html
import json
import re

import pytest
import torch
from app_helpers import DEFAULT, DEFAULT_PARAMS, chart, counter, ok, payload, shown, start
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging

from analysis import capture, load_trace, trace_model
from app.cli import TRACE_ENV
from app.upload import MAX_UPLOAD_BYTES, UPLOAD_ROOT, UploadError, save_trace_upload
from tensor_memory import MemoryConfig, attach_memory

logging.set_verbosity_error()
N = 40


def gpt2_trace(path, targets: bool = True, tokens: bool = True):
    """A tiny GPT-2's trace with its tokens' text ("w" and the id) and, with ``tokens``, its vocabulary."""
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=61, bos_token_id=0, eos_token_id=0))
    attach_memory(
        model.eval(), MemoryConfig(token_dim=32, channels=4, grid=(5, 5, 5), chunk_size=4, gate_init=0.0), layers=[1]
    )
    ids = torch.randint(0, 61, (1, N), generator=torch.Generator().manual_seed(1))
    words = [f" w{int(i)}" for i in ids[0]] if tokens else None
    vocabulary = [f" w{i}" for i in range(61)] if tokens else None
    return trace_model(
        model,
        {"input_ids": ids},
        tokens=words,
        targets=ids[0, 1:] if targets else None,
        name="tiny-gpt2",
        vocabulary=vocabulary,
    ).save(path)


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    return gpt2_trace(tmp_path_factory.mktemp("traces") / "tiny-gpt2.trace.safetensors")


def badges(at) -> str:
    return json.dumps([str(element.proto) for element in at.get("badge")]) if at.get("badge") else str(at.main)


def test_a_hugging_face_trace_opens_on_every_page_that_reads_a_trace(traced, monkeypatch):
    monkeypatch.setenv(TRACE_ENV, str(traced))
    at = start()
    assert at.selectbox(key="checkpoint_choice").value == f"trace: {traced.name}"
    assert ":gray-badge[model: GPT2LMHeadModel]" in [shown(m.value) for m in at.markdown]
    assert counter(at) == "Chunk 9 / 9"  # opens on the last chunk
    recorded = load_trace(traced)
    predicted, truth = (int(recorded.chunks[name][9]) for name in ("prediction", "target"))
    card = html.unescape(re.sub(r"<[^>]+>", "", payload(at)["views"]["card"][9]))
    assert f"Predicted ' w{predicted}' · truth ' w{truth}'" in card  # the tokens' text, not their ids
    tokens = chart(at, "chunk 9: its tokens")  # the input drawn as tokens, coloured by p(target)
    cells = sorted((int(position), word) for part in tokens["data"] for position, word in part["customdata"])
    assert cells == list(enumerate(load_trace(traced).tokens))[36:40]  # chunk 9: positions 36–39, in order
    assert [len(part["text"]) for part in tokens["data"]] == [1, 3]  # position 39 has no target: grey
    assert chart(at, "tiny-gpt2: probability of the target") and chart(at, "‖h‖ over 4 channels after chunk 9")
    assert chart(at, "‖h‖ over 4 channels after chunk 8", 8)  # every chunk's views are in the browser
    ok(at.switch_page("views/diagnose.py").run())
    assert any("healthy" in s.value or "collapse" in s.value or "**" in s.value for s in [*at.success, *at.error])
    assert "the one sample this trace recorded" in " ".join(c.value for c in at.caption)
    ok(at.switch_page("views/text.py").run())
    assert "w" in " ".join(m.value for m in at.markdown) and at.dataframe
    rows = at.dataframe[0].value  # the chunk's positions: what each predicted, in words
    assert all(re.fullmatch(r"' w\d+'", word) for word in rows["prediction"]), rows["prediction"].tolist()
    ok(at.switch_page("views/export.py").run())
    assert at.get("download_button")
    for page, word in (("occlusion", "Occlusion"), ("teach", "Teach"), ("images", "Images"), ("audit", "Audit")):
        ok(at.switch_page(f"views/{page}.py").run())
        assert [i.value for i in at.info] and at.info[0].value.startswith(f"{word} is off for the trace file")


def test_a_trace_uploaded_in_the_sidebar_opens_and_a_bad_one_is_refused(traced, tmp_path):
    at = start()
    at.file_uploader(key="trace_upload").upload("bad.safetensors", b"\x80\x04not a trace", "application/octet-stream")
    ok(at.run())
    assert any("Could not use bad.safetensors" in shown(e.value) for e in at.error)
    assert at.selectbox(key="checkpoint_choice").value == "occlusion-tensor"  # still showing the checkpoint
    at.file_uploader(key="trace_upload").upload("mine.safetensors", traced.read_bytes(), "application/octet-stream")
    ok(at.run())
    assert any("Opened trace: mine.safetensors" in shown(s.value) for s in at.success)
    assert at.selectbox(key="checkpoint_choice").value.startswith("trace: mine.safetensors")
    assert chart(at, "chunk 9: its tokens")


def test_a_trace_of_a_shipped_checkpoint_looks_as_capturing_it_does(tmp_path, monkeypatch):
    captured = start()
    path = capture(DEFAULT, seed=0, index=0, progress=False, **DEFAULT_PARAMS).save(tmp_path / "occ.safetensors")
    monkeypatch.setenv(TRACE_ENV, str(path))
    opened = start()
    for title in ("frame 7", "probability of the target", "‖h‖ over 16 channels after chunk 7", "read and write"):
        a, b = chart(captured, title), chart(opened, title)
        assert json.dumps(a["data"], sort_keys=True) == json.dumps(b["data"], sort_keys=True)
    assert payload(captured)["views"]["card"] == payload(opened)["views"]["card"]
    assert payload(captured)["events"] == payload(opened)["events"]


def test_truncated_oversized_and_empty_trace_uploads_are_refused_in_one_line(traced, tmp_path):
    with pytest.raises(UploadError, match="over the 64 MB upload limit"):
        save_trace_upload(b"\0" * (MAX_UPLOAD_BYTES + 1), root=tmp_path)
    with pytest.raises(UploadError, match="empty"):
        save_trace_upload(b"", root=tmp_path)
    at = start()
    data = traced.read_bytes()
    at.file_uploader(key="trace_upload").upload("cut.safetensors", data[: len(data) // 2], "application/octet-stream")
    ok(at.run())
    refused = [shown(e.value) for e in at.error if "Could not use cut.safetensors" in shown(e.value)]
    assert (
        refused
        and "\n" not in refused[0]
        and ("truncated" in refused[0] or "shorter" in refused[0] or "corrupt" in refused[0])
    )
    kept = UPLOAD_ROOT / "traces" / f"{hashlib.sha256(data[: len(data) // 2]).hexdigest()[:24]}.safetensors"
    assert not kept.exists()  # a refused upload leaves nothing on disk


def test_a_trace_without_tokens_or_targets_still_explores(tmp_path, monkeypatch):
    monkeypatch.setenv(TRACE_ENV, str(gpt2_trace(tmp_path / "bare.safetensors", targets=False, tokens=False)))
    at = start()
    assert chart(at, "chunk 9: its tokens (positions; no tokens recorded)")
    assert chart(at, "tiny-gpt2: chunks")  # the timeline says there is nothing predicted
    assert "Chunk 9, positions 36–39. This trace was recorded without targets" in payload(at)["views"]["card"][9]
    ok(at.switch_page("views/text.py").run())
    assert at.info[0].value.startswith("Text is off for the trace file") and "without tokens" in at.info[0].value
    ok(at.switch_page("views/diagnose.py").run())
    assert "the one sample this trace recorded" in " ".join(c.value for c in at.caption)
