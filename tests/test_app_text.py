"""The Text and Audit pages, driven by AppTest on the shipped language model."""

from __future__ import annotations

import numpy as np
import pytest
from app_helpers import CHECKPOINTS, chart, ok, payload, report, shown, start, values

from analysis.figures.language import audit_heatmap_figure, contribution_figure, token_loss_figure
from analysis.measures.causality import audit_checkpoint
from analysis.measures.language import loss_rows, read_overlap, read_source, token_losses
from tensor_memory import load_checkpoint

LM = "language_modelling-tensor"


@pytest.fixture(scope="module")
def lm():
    return load_checkpoint(CHECKPOINTS / LM)


def test_text_page_shows_each_tokens_losses_and_top_five(lm):
    at = start()
    ok(at.selectbox(key="checkpoint_choice").set_value(LM).run())
    ok(at.switch_page("views/text.py").run())
    losses = token_losses(lm, seed=0)
    chunk = int(at.session_state["chunk"])
    size = losses.chunk_size
    table = at.dataframe[0].value
    assert list(table["position"]) == list(range(chunk * size, (chunk + 1) * size))
    np.testing.assert_allclose(table["loss"], np.round(losses.loss[chunk * size : (chunk + 1) * size], 3))
    assert table["top 1"].iloc[0].startswith(repr(losses.top_tokens[chunk * size][0]))
    spec = chart(at, "loss of each next token")
    np.testing.assert_allclose(
        values(spec["data"][1]["y"]), losses.loss_without_memory[chunk * size : (chunk + 1) * size], rtol=1e-6
    )
    assert chart(at, "what each read draws on")
    assert chunk == 7  # a text opens on its last chunk, the one with the most memory behind it
    assert payload(at)["reports"]  # the browser's stepper tells the server the chunk it shows
    report(at, "text", chunk - 1)
    assert int(at.dataframe[0].value["position"].iloc[0]) == (chunk - 1) * size
    assert any(
        m.value == f"##### Chunk {chunk - 1}: tokens {(chunk - 1) * size}–{chunk * size - 1}" for m in at.markdown
    )


def test_text_page_explains_itself_on_other_tasks():
    at = start()
    ok(at.switch_page("views/text.py").run())
    assert any("language models" in i.value for i in at.info)
    assert any("occlusion-tensor is an ` occlusion ` checkpoint" in shown(i.value) for i in at.info)  # a/an


def test_audit_page_shows_the_verdict_and_heatmap(lm):
    at = start()
    ok(at.selectbox(key="checkpoint_choice").set_value(LM).run())
    ok(at.switch_page("views/audit.py").run())
    assert any("**causal**" in s.value for s in at.success)
    expected = audit_checkpoint(lm)
    spec = chart(at, "change of each output when one input moves")
    np.testing.assert_allclose(values(spec["data"][0]["customdata"]), np.asarray(expected["heatmap"]["change"]))


def test_token_losses_with_the_memory_off_differ_only_through_the_memory(lm):
    losses = token_losses(lm, seed=3)
    assert losses.loss.shape == (128,) and losses.top_probs.shape == (128, 5)
    assert (np.diff(losses.top_probs, axis=1) <= 0).all()  # ordered
    # The first chunk reads the empty memory (zeros through out_proj: only its bias), so memory on/off
    # differ there by that constant alone; from chunk 1 on the memory holds writes and the losses differ.
    assert np.abs(losses.contribution[16:]).max() > 1e-4
    fig = token_loss_figure(losses, 2)
    assert list(fig.data[0].y) == pytest.approx(losses.loss[32:48].tolist())
    assert contribution_figure(losses, 0).data[0].y.shape == (128,)
    with pytest.raises(ValueError, match="chunk must be in"):
        token_loss_figure(losses, 8)


def test_loss_rows_are_the_chunks_positions_with_their_numbers(lm):
    losses = token_losses(lm, seed=0)
    shown = loss_rows(losses, 2)
    assert (shown["chunk"], shown["start"], shown["stop"]) == (2, 32, 48)
    assert shown["text"] == "".join(losses.tokens[32:48]) and shown["before"] == "".join(losses.tokens[0:32])
    row = shown["rows"][5]  # position 37
    assert (row["position"], row["token"], row["next (true)"]) == (37, losses.tokens[37], losses.next_tokens[37])
    assert row["loss"] == round(float(losses.loss[37]), 3)
    assert row["loss, memory off"] == round(float(losses.loss_without_memory[37]), 3)
    assert row["top 1"] == f"{losses.top_tokens[37][0]!r} {losses.top_probs[37][0]:.0%}"
    assert loss_rows(losses, 99)["chunk"] == 7  # past the text: its last chunk


def test_read_source_is_the_earlier_write_the_read_lands_on_most():
    overlap = np.array([[0.0, 0, 0, 0], [0.3, 0, 0, 0], [0.2, 0.6, 0, 0], [0.01, 0.04, 0.02, 0]])
    assert read_source(overlap, 0) is None  # the first chunk reads the empty memory
    assert read_source(overlap, 1) == (0, 0.3) and read_source(overlap, 2) == (1, 0.6)
    assert read_source(overlap, 3) is None  # every earlier footprint below the floor
    assert read_source(overlap, 3, floor=0.03) == (1, 0.04)


def test_read_overlap_is_each_earlier_writes_footprint_at_the_read():
    mu_write = np.array([[0.0, 0, 0], [1, 0, 0], [0, 1, 0]])
    mu_read = np.array([[0.5, 0, 0], [0.0, 0, 0], [1, 0, 0]])
    sigma = np.array([0.5, 1.0, 0.25])
    overlap = read_overlap(mu_read, mu_write, sigma)
    assert overlap[0].tolist() == [0, 0, 0] and overlap[1, 1] == 0 and overlap[2, 2] == 0  # only earlier writes
    assert overlap[1, 0] == pytest.approx(1.0)  # read exactly at write 0
    assert overlap[2, 0] == pytest.approx(np.exp(-1 / (2 * 0.25)))
    assert overlap[2, 1] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="expects"):
        read_overlap(mu_read[:, :2], mu_write, sigma)


def test_audit_heatmap_marks_exact_zeros_at_the_floor():
    result = {
        "heatmap": {
            "name": "logits",
            "perturbed": [0, 1],
            "output": [0, 1, 2],
            "change": [[1.0, 0.5, 0.0], [0.0, 0.1, 0.2]],
        }
    }
    fig = audit_heatmap_figure(result)
    assert np.asarray(fig.data[0].z)[1, 0] == -12 and np.asarray(fig.data[0].z)[0, 0] == 0
