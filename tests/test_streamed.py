"""Language modelling as a stream (tensor_memory.training.streamed, ``eval --stream``): a stream cut into segments of
any length gives the losses of one pass for every backbone that carries state; reset every segment, it gives the
windowed evaluation's loss; positions, thresholds and the log-binned curve are computed as defined."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from tensor_memory import load_checkpoint
from tensor_memory.training import evaluate
from tensor_memory.training.streamed import StreamedLoss, attention_reach, stream_evaluation, streamed_loss
from tensor_memory_cli import main

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"
LANGUAGE = ["tensor", "tensor_shared_state", "base", "local", "xl", "linear"]


@pytest.fixture(scope="module")
def models():
    return {kind: load_checkpoint(CHECKPOINTS / f"language_modelling-{kind}") for kind in LANGUAGE}


@pytest.mark.parametrize("kind", [kind for kind in LANGUAGE if kind != "tensor_shared_state"])
def test_a_stream_cut_at_any_segment_length_gives_one_pass(models, kind):
    ckpt = models[kind]
    ids = ckpt.task.stream("test")[: 2 * 301]
    whole = streamed_loss(ckpt.model, ids, 300, rows=2, progress=False)  # each row in one call
    assert whole.nll.shape == (2, 300) and whole.position[1].tolist() == list(range(300))
    for segment in (1, 7, 16, 128):
        cut = streamed_loss(ckpt.model, ids, segment, rows=2, progress=False)
        assert torch.allclose(cut.nll, whole.nll, atol=1e-4, rtol=0), (segment, (cut.nll - whole.nll).abs().max())
    reset = streamed_loss(ckpt.model, ids, 16, rows=2, carry=False, progress=False)
    assert reset.position[0, :20].tolist() == list(range(16)) + [0, 1, 2, 3]
    assert torch.allclose(reset.nll[:, :16], whole.nll[:, :16], atol=1e-4, rtol=0)  # the first segment is the same
    assert not torch.allclose(reset.nll[:, 16:], whole.nll[:, 16:], atol=1e-3)  # later ones lost the context


def test_a_shared_state_depends_on_where_the_stream_is_cut(models):
    """share_state hands a memory layer's state at the end of a call to the next memory layer (the public code's
    threading, which the causality audit flags), so its segments are part of the model: --stream feeds it the length
    it was trained on unless told otherwise."""
    ckpt = models["tensor_shared_state"]
    ids = ckpt.task.stream("test")[: 2 * 301]
    whole, cut = (streamed_loss(ckpt.model, ids, segment, rows=2, progress=False) for segment in (300, 16))
    assert float((cut.nll - whole.nll).abs().max()) > 0.1


def test_reset_every_segment_is_the_windowed_evaluation(models):
    ckpt = models["tensor"]
    windows, length = 5, ckpt.task.tokens
    ids = ckpt.task.stream("test")[: windows * length + 1]
    reset = streamed_loss(ckpt.model, ids, length, rows=1, carry=False, progress=False)
    windowed = evaluate(ckpt.model, ckpt.task, batches=1, batch_size=windows, progress=False)
    assert reset.mean_nll() == pytest.approx(windowed["cross_entropy"], abs=1e-5)
    assert reset.perplexity() == pytest.approx(windowed["perplexity"], rel=1e-5)


def test_thresholds_and_the_log_binned_curve():
    nll = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]], dtype=torch.float64)
    loss = StreamedLoss(nll, torch.arange(6)[None])
    assert loss.mean_nll() == pytest.approx(3.5) and loss.mean_nll(4) == pytest.approx(5.5)
    assert loss.mean_nll(6) is None and loss.perplexity(5) == pytest.approx(math.exp(6.0))
    assert loss.curve() == [
        {"from": 0, "to": 1, "tokens": 1, "nll": 1.0},
        {"from": 1, "to": 2, "tokens": 1, "nll": 2.0},
        {"from": 2, "to": 4, "tokens": 2, "nll": 3.5},
        {"from": 4, "to": 8, "tokens": 2, "nll": 5.5},
    ]


def test_attention_reach_is_the_window_the_segment_or_the_trained_length(models):
    reach = {kind: attention_reach(ckpt.model.backbone.config, ckpt.task.tokens) for kind, ckpt in models.items()}
    assert reach == {"tensor": 16, "tensor_shared_state": 16, "base": 128, "local": 29, "xl": 16, "linear": 128}


def test_stream_evaluation_holds_the_reads_off_control_for_memory_models_only(models):
    tensor = stream_evaluation(models["tensor"], tokens=1_000, rows=2, progress=False)
    assert set(tensor) >= {"carried", "reset", "reads off, carried"} and tensor["tokens"] == 1_000
    assert tensor["reads off, carried"]["perplexity"] != tensor["carried"]["perplexity"]  # the hooks took effect
    assert "reads off, carried" not in stream_evaluation(models["base"], tokens=1_000, rows=2, progress=False)


def test_eval_stream_on_the_command_line(capsys):
    folder = CHECKPOINTS / "language_modelling-local"
    assert main(["eval", "--checkpoint", str(folder), "--stream", "--tokens", "600", "--rows", "2", "--json"]) == 0
    stream = json.loads(capsys.readouterr().out)["stream"]
    assert stream["W"] == 29 and stream["carried"]["curve"][-1]["to"] == 512 and stream["reset"]["nll_t>=4W"] > 0
    assert main(["eval", "--checkpoint", str(folder), "--stream", "--tokens", "600", "--rows", "2", "--sweep"]) == 0
    shown = capsys.readouterr().out
    assert "NLL (nats), t >= 4W = 116" in shown and "\n256-511 " in shown
    for other, said in (
        (CHECKPOINTS / "occlusion-tensor", "holds a model of task occlusion"),
        (CHECKPOINTS / "minilm-tensor", "run eval without --sweep, --param, --stream and --distance"),
    ):
        assert main(["eval", "--checkpoint", str(other), "--stream"]) == 2
        refusal = capsys.readouterr().err.strip()
        assert "\n" not in refusal and said in refusal
