"""Language modelling: the shipped corpus, WikiText's word-level loader, the task, tokenizers in checkpoints."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from tensor_memory import load_checkpoint, save_checkpoint
from tensor_memory.backbone import BackboneConfig
from tensor_memory.storage.checkpoint import CheckpointError
from tensor_memory.tasks import TaskModel, make_task
from tensor_memory.tasks.data import corpus as C
from tensor_memory.tasks.language_modelling import TOKENIZER_FILE
from tensor_memory.training.evaluation import evaluate

SMALL = {"seq_len": 32, "vocab_size": 4096, "chunk": 8}


@pytest.fixture(scope="module")
def task():
    return make_task("language_modelling", SMALL)


def tiny_model(task, kind="base"):
    torch.manual_seed(0)
    memory = {"token_dim": 16, "channels": 2, "grid": [2, 2, 2], "chunk_size": task.chunk_size}
    return TaskModel(
        task, BackboneConfig(kind=kind, dim=16, layers=1, heads=2, memory=memory if kind == "tensor" else None)
    ).eval()


def test_shipped_splits_are_separate_documents():
    train, test = set(C.split_lines("python-docs", "", "train")), C.split_lines("python-docs", "", "test")
    assert len(train) > 30_000 and len(test) > 1_000
    shared = [line for line in test if line in train]
    assert len(shared) / len(test) < 0.05  # measured 2.5 %: stock sentences that recur across documents
    assert sum(map(len, shared)) / sum(map(len, test)) < 0.03  # …and short ones (measured 1.6 % of the text)


def test_subword_tokenizer_round_trips_text(task):
    tokenizer = task.tokenizer
    assert tokenizer.get_vocab_size() == 4096 and tokenizer.token_to_id(C.EOS) is not None
    for line in C.split_lines("python-docs", "", "test")[:50]:
        assert tokenizer.decode(tokenizer.encode(line).ids) == line


def test_samples_predict_the_next_token_and_splits_differ(task):
    batch = task.sample(4, seed=1)
    assert torch.equal(batch.inputs["tokens"][:, 1:], batch.targets[:, :-1])
    assert batch.mask.all() and batch.targets.shape == (4, 32)
    stream = task.stream("train")
    for row, start in zip(batch.inputs["tokens"], batch.meta["start"], strict=True):
        assert torch.equal(row, stream[start : start + 32])
    val = task.draw("val", 4, 1, 0)
    valid = task.stream("valid")
    assert torch.equal(val.inputs["tokens"][0], valid[val.meta["start"][0] : val.meta["start"][0] + 32])


def test_evaluation_walks_the_test_split_once(task):
    stream = task.stream("test")
    windows = (stream.numel() - 1) // 32
    assert task.split_batches("eval", 500) == math.ceil(windows / 500)
    rows = torch.cat([task.draw("eval", 500, 0, i).inputs["tokens"] for i in range(task.split_batches("eval", 500))])
    assert rows.shape[0] == windows
    assert torch.equal(rows.reshape(-1), stream[: windows * 32])  # every test token once, in order
    assert torch.equal(task.draw("eval", 8, 0, 1).inputs["tokens"], task.draw("eval", 8, 5, 1).inputs["tokens"])
    with pytest.raises(ValueError, match="past the end of the test split"):
        task.draw("eval", 500, 0, task.split_batches("eval", 500))


def test_perplexity_is_exp_of_the_mean_cross_entropy(task):
    model = tiny_model(task)
    metrics = evaluate(model, task, batches=2, batch_size=8)
    nll, count = 0.0, 0
    with torch.no_grad():
        for i in range(2):
            batch = task.draw("eval", 8, 0, i)
            logits, _ = model(batch.inputs)
            nll += F.cross_entropy(logits.reshape(-1, 4096), batch.targets.reshape(-1), reduction="sum").item()
            count += batch.targets.numel()
    assert metrics["cross_entropy"] == pytest.approx(nll / count, rel=1e-5)
    assert metrics["perplexity"] == pytest.approx(math.exp(nll / count), rel=1e-5)
    one = evaluate(model, task, batches=1, batch_size=8)
    task.split_batches = lambda purpose, batch_size: 1  # a test split of one batch: asking for more gets it once
    try:
        assert evaluate(model, task, batches=10_000, batch_size=8) == one
    finally:
        del task.split_batches


def wikitext(tmp_path, lines=("= Title =", "the cat sat on the mat", "", "a <unk> dog")):
    for split in C.SPLITS:
        (tmp_path / f"wiki.{split}.tokens").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_wikitext_is_word_level_with_eos_at_line_ends(tmp_path):
    folder = wikitext(tmp_path)
    with pytest.raises(ValueError, match="vocab_size=11"):  # says the number to set
        _ = make_task(
            "language_modelling", {"corpus": "wikitext", "path": str(folder), "seq_len": 4, "chunk": 2}
        ).tokenizer_text
    task = make_task(
        "language_modelling", {"corpus": "wikitext", "path": str(folder), "seq_len": 4, "vocab_size": 11, "chunk": 2}
    )
    words = task.decode(task.stream("train"))
    expected = "= Title = <eos> the cat sat on the mat <eos> <eos> a <unk> dog <eos>".split()
    assert words == expected


def test_wikitext_folder_errors(tmp_path):
    with pytest.raises(ValueError, match="path is required"):
        make_task("language_modelling", {"corpus": "wikitext"})
    task = make_task("language_modelling", {"corpus": "wikitext", "path": str(tmp_path / "none"), "vocab_size": 300})
    with pytest.raises(ValueError, match="wiki.train.tokens"):
        _ = task.tokenizer_text


def test_checkpoint_keeps_its_tokenizer(task, tmp_path):
    model = tiny_model(task)
    config = {"task": {"name": task.name, "params": task.config.to_dict()}, "model": model.backbone.config.to_dict()}
    save_checkpoint(tmp_path, model, config, task=task)
    assert (tmp_path / TOKENIZER_FILE).read_text() == task.tokenizer_text
    loaded = load_checkpoint(tmp_path)
    assert loaded.task.tokenizer_text == task.tokenizer_text
    (tmp_path / TOKENIZER_FILE).write_text("{not json")
    with pytest.raises(CheckpointError, match="is not the tokenizer.json these weights were saved with"):
        load_checkpoint(tmp_path)  # the weights record its digest (test_checkpoint_integrity.py)
    with pytest.raises(CheckpointError, match="not a tokenizers JSON file"):
        load_checkpoint(tmp_path, require_record=False)  # what migrating an older checkpoint still checks
    other = C.train_subword_tokenizer(C.split_lines("python-docs", "", "test")[:200], 300).to_str()
    (tmp_path / TOKENIZER_FILE).write_text(other)
    with pytest.raises(CheckpointError, match="300 types but the task's vocab_size is 4,096"):
        load_checkpoint(tmp_path, require_record=False)
    (tmp_path / TOKENIZER_FILE).unlink()
    with pytest.raises(CheckpointError, match="missing tokenizer.json"):
        load_checkpoint(tmp_path)


def test_config_refuses_bad_values():
    for params, message in (
        ({"corpus": "books"}, "corpus must be one of"),
        ({"seq_len": 1}, "seq_len"),
        ({"vocab_size": 100}, "vocab_size"),
        ({"chunk": 0}, "chunk"),
    ):
        with pytest.raises(ValueError, match=message):
            make_task("language_modelling", params)
    assert json.loads(json.dumps(make_task("language_modelling").config.to_dict()))["corpus"] == "python-docs"
