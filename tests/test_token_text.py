"""Predictions read as words wherever a trace knows its tokens' text: a trace's vocabulary (each class's text)
recorded by a capture of a language checkpoint and by ``trace_model(..., vocabulary=...)``, kept through a file, and
shown in the card, the Text page's rows and the input panel; a trace without it shows ids as before."""

from __future__ import annotations

import html
import re

import numpy as np
import pytest
import torch
from app_helpers import CHECKPOINTS

from analysis import load_trace, trace_model
from analysis.figures.chunk_input import chunk_input_figure, chunk_outcome, prediction_card
from analysis.figures.tokens import row_length, tokens_figure
from analysis.measures.language import chunk_text
from analysis.traces.predictions import prediction_trace
from tensor_memory import Backbone, BackboneConfig, MemoryConfig
from tensor_memory.storage.checkpoint import load_checkpoint

WIDTH, N = 16, 24


def backbone(chunk: int = 4) -> Backbone:
    torch.manual_seed(0)
    memory = MemoryConfig(token_dim=WIDTH, channels=4, grid=(4, 4, 4), chunk_size=chunk, gate_init=0.0)
    return Backbone(BackboneConfig(kind="tensor", dim=WIDTH, layers=1, heads=2, causal=True, memory=memory)).eval()


X = torch.randn(1, N, WIDTH, generator=torch.Generator().manual_seed(1))
TARGETS = torch.randint(0, WIDTH, (N,), generator=torch.Generator().manual_seed(2))
VOCABULARY = [f" v{i}" + ("\n" if i % 3 == 0 else "") for i in range(WIDTH)]


def card_text(outcome: dict) -> str:
    """The card's words as the browser shows them."""
    return html.unescape(re.sub(r"<[^>]+>", "", prediction_card(outcome, True)))


@pytest.fixture(scope="module")
def language():
    return prediction_trace(load_checkpoint(CHECKPOINTS / "language_modelling-base"), seed=0)


def test_a_language_checkpoints_predictions_read_as_its_tokenizers_words(language):
    assert language.vocabulary is not None and len(language.vocabulary) == language.info["num_classes"]
    k = language.num_chunks - 1
    outcome = chunk_outcome(language, k)
    predicted, truth = int(language.chunks["prediction"][k]), int(language.chunks["target"][k])
    words = repr(language.vocabulary[predicted]), repr(language.vocabulary[truth])
    assert (outcome["prediction"], outcome["truth"]) == words  # quoted: a leading space shows
    assert f"Predicted {words[0]} · truth {words[1]}" in card_text(outcome)
    assert f"Predicted {predicted} " not in card_text(outcome)
    row = chunk_text(language, k)["rows"][-1]  # the Text page's rows of a recorded trace
    position = row["position"]
    assert row["prediction"] == repr(language.vocabulary[int(language.per_token["prediction"][position])])


def test_a_language_model_without_memory_shows_its_chunks_tokens_as_input(language):
    fig = chunk_input_figure(language, 2)
    assert fig.layout.title.text == "chunk 2: its tokens"  # not "no picture of the input"
    shown = [word for part in fig.data for _, word in part.customdata]
    assert sorted(shown) == sorted(language.tokens[i] for i in language.chunk_positions(2))


def test_a_vocabulary_given_to_trace_model_is_kept_in_the_file_and_shown(tmp_path):
    trace = trace_model(backbone(), X, targets=TARGETS, vocabulary=VOCABULARY, progress=False)
    loaded = load_trace(trace.save(tmp_path / "t.safetensors"))
    assert loaded.vocabulary == VOCABULARY
    k = loaded.num_chunks - 1
    predicted = int(loaded.chunks["prediction"][k])
    assert chunk_outcome(loaded, k)["prediction"] == repr(VOCABULARY[predicted])  # "' v3\\n'": the newline shows
    plain = load_trace(trace_model(backbone(), X, targets=TARGETS, progress=False).save(tmp_path / "old.safetensors"))
    assert plain.vocabulary is None and "vocabulary_bytes" not in plain.info
    assert chunk_outcome(plain, k)["prediction"] == str(predicted)  # no text known: the id


@pytest.mark.parametrize(
    "vocabulary, message",
    [
        ("abc", "vocabulary must be each class's text, a list of strings"),
        ({0: "a"}, "vocabulary must be each class's text, a list of strings"),
        (["a", 3], "vocabulary[1] must be a string (one a class)"),
    ],
)
def test_a_wrong_vocabulary_is_refused_in_one_line(vocabulary, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        trace_model(backbone(), X, vocabulary=vocabulary, progress=False)


@pytest.mark.parametrize("chunk, rows", [(8, [8]), (16, [8, 8]), (12, [6, 6]), (20, [7, 7, 6]), (4, [4])])
def test_a_chunks_tokens_lie_in_rows_as_even_as_they_can_be(chunk, rows):
    trace = trace_model(backbone(chunk), X, progress=False)  # N = 24: chunk 0 is whole for every size
    assert row_length(trace) == rows[0]
    fig = tokens_figure(trace, 0)
    ys = np.concatenate([np.asarray(part.y, dtype=int) for part in fig.data if part.visible is not False])
    assert np.bincount(ys).tolist() == rows
