"""The memory budget counts what grows with the data: the embedding of a vocabulary, the head onto it and its logits,
and refuses before anything is allocated, naming the field to lower."""

from __future__ import annotations

import time

import pytest

from tensor_memory.backbone import BackboneConfig
from tensor_memory.backbone.budget import FLOAT_BYTES, check_budget, estimated_parts
from tensor_memory.tasks import make_task
from tensor_memory.training import train

BACKBONE = BackboneConfig(kind="base", dim=128, layers=4, heads=4, causal=True)


def test_the_vocabulary_counts_in_the_weights_and_the_logits():
    small = estimated_parts(BACKBONE, 128, 16, True, outputs=4096, vocabulary=4096)
    large = estimated_parts(BACKBONE, 128, 16, True, outputs=400_002, vocabulary=400_002)
    # AdamW keeps a gradient and two moments beside each weight: 4 numbers per embedding and head row entry
    assert large["weights"] - small["weights"] == 2 * (400_002 - 4096) * 128 * 4 * FLOAT_BYTES
    assert large["logits"] == 16 * 128 * 400_002 * 4 * FLOAT_BYTES  # four copies of the logits when training
    assert estimated_parts(BACKBONE, 128, 16, False, outputs=10)["logits"] == 16 * 128 * 10 * 2 * FLOAT_BYTES
    assert large["activations"] == small["activations"]  # the rest does not grow with the vocabulary


def test_a_vocabulary_too_large_to_train_is_refused_naming_the_field():
    task = make_task("language_modelling", {"vocab_size": 1_000_000})
    with pytest.raises(ValueError) as refused:
        check_budget(BACKBONE, task.tokens, 16, True, "the training config", task=task)
    said = str(refused.value)
    assert said.startswith("the training config: a batch of 16 × 128 tokens") and "logits 30.5" in said
    assert said.endswith("lower task.params.vocab_size or the batch (training.batch_size)")
    check_budget(BACKBONE, task.tokens, 1, False, "a checkpoint", task=task)  # one sequence at inference fits
    check_budget(BACKBONE, task.tokens, 16, True, "x", task=make_task("language_modelling", {}))  # the shipped size


def test_train_refuses_it_before_anything_is_built(tmp_path):
    config = {
        "task": {"name": "language_modelling", "params": {"vocab_size": 1_000_000}},
        "model": {"kind": "base", "dim": 128, "layers": 4, "heads": 4, "causal": True},
        "training": {"steps": 10, "batch_size": 16},
    }
    start = time.perf_counter()
    with pytest.raises(ValueError, match="lower task.params.vocab_size"):
        train(config, tmp_path / "run", progress=False)
    assert time.perf_counter() - start < 2  # no tokenizer trained, no model built
    assert not (tmp_path / "run").exists()


ENCODE_PEAK = """
import resource, sys
from tensor_memory.tasks.data import corpus as C
folder = sys.argv[1]
tokenizer = C.build_tokenizer("wikitext", folder, 0)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
ids = C.encode_split("wikitext", folder, "train", tokenizer)
print(ids.numel(), (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)
"""


def test_a_large_corpus_is_encoded_in_about_8_bytes_a_token(tmp_path):
    """Encoding every line at once held the tokenizer's objects for every token (~250 bytes each: WikiText-103's train
    split needed over 20 GB and ran out of memory); in batches of lines, the ids (8 bytes a token) are most of it."""
    import random
    import subprocess
    import sys

    from tensor_memory.tasks.data import corpus as C

    generator = random.Random(0)
    words = [f"w{k}" for k in range(20_000)]
    lines = [" ".join(generator.choices(words, k=20)) for _ in range(100_000)]  # 2,000,000 words
    (tmp_path / "wiki.train.tokens").write_text("\n".join(lines) + "\n")
    for split in ("valid", "test"):
        (tmp_path / f"wiki.{split}.tokens").write_text(lines[0] + "\n")
    done = subprocess.run(
        [sys.executable, "-c", ENCODE_PEAK, str(tmp_path)], capture_output=True, text=True, check=True
    )
    count, growth = map(int, done.stdout.split())
    assert count == 2_100_000  # the words and an <eos> a line
    assert growth < 40 * count, f"{growth / count:.0f} bytes a token"  # the ids twice (8 + 8), with room to spare
    tokenizer = C.cached_tokenizer(C.build_tokenizer("wikitext", str(tmp_path), 0))
    ids = C.encode_split("wikitext", str(tmp_path), "train", C.build_tokenizer("wikitext", str(tmp_path), 0))
    eos = tokenizer.token_to_id(C.EOS)
    for line in (0, 9_999, 10_000, 99_999):  # across a batch boundary: the same ids as encoding the line alone
        start = line * 21
        assert ids[start : start + 21].tolist() == tokenizer.encode(lines[line]).ids + [eos]
