"""A page's figures drawn once and patched per chunk are the figures the builders draw at each chunk; a page of a
long trace reads no volume outside it; a long trace opens on its first chunk."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from app_helpers import CHECKPOINTS, figure

from analysis import capture
from analysis.figures.annotations import annotation_figure, key_chunk
from analysis.figures.chunk_input import chunk_input_figure
from analysis.figures.escape import plotly_text
from analysis.figures.occlusion_views import energy_figure
from analysis.figures.state import VOLUME_KINDS, slices_figure
from analysis.figures.stepped import figure_json
from analysis.figures.timeline import belief_figure
from analysis.figures.video import filmstrip_figure, identity_belief_figure
from analysis.figures.views import explore_figures, slice_index
from analysis.measures.occlusion import belief, frames_around, memory_energy
from analysis.measures.volumes import MODES, state_series
from app.browser_stepper import shared_template
from app.paging import opening_chunk, stepping_span
from app.views.explore import explore_payload
from app.views.occlusion import BELIEF_FRAMES, FILM_FRAMES, occlusion_payload

FRAMES = 150  # three pages
SPAN = (64, 127)
CHUNKS = (64, 65, 100, 127)  # the page's first (where its figures are drawn), others, its last


@pytest.fixture(scope="module")
def long_trace():
    return capture(CHECKPOINTS / "occlusion-tensor", seed=3, frames=FRAMES, progress=False)


def alone(fig) -> dict:
    """A figure as the old payload sent it: its JSON, less the template the payload sends once."""
    plain = figure_json(fig)
    if plain["layout"].get("template") == shared_template():
        del plain["layout"]["template"]
    return plain


@pytest.mark.parametrize("kind", list(VOLUME_KINDS))
@pytest.mark.parametrize("mode", list(MODES))
def test_explore_sends_the_figures_the_builders_draw_at_each_chunk(long_trace, kind, mode):
    name = long_trace.layer_names[-1]
    series = state_series(long_trace.layer(name), "h", mode, 1, SPAN)
    sent = explore_payload(long_trace, "s", name, series, kind, "read", span=SPAN).to_json()
    assert set(sent["drawn"]) == {"track", "input", "timeline", "volume", "slices", "trajectory", "sigma", "gates"}
    for k in CHUNKS:
        expected = {n: alone(f) for n, f in explore_figures(long_trace, k, name, series, kind, "read", SPAN).items()}
        expected["track"] = alone(annotation_figure(long_trace, k, SPAN))
        for view, fig in expected.items():
            assert figure(sent, view, k) == fig, (view, k)


def test_occlusion_sends_the_figures_the_builders_draw_at_each_chunk(long_trace):
    """(Diagnose's comparison runs its page on import: tests/test_app.py drives it, its volumes against the series.)"""
    name = long_trace.layer_names[-1]
    sent = occlusion_payload(long_trace, "s", name, True, SPAN).to_json()
    b = belief(long_trace)
    occluded = b["occluded"]
    energy = memory_energy(long_trace.layer(name))  # (K, D, H, W)
    for k in CHUNKS:
        assert figure(sent, "energy", k) == alone(energy_figure(long_trace.layer(name), k, occluded, SPAN))
        through = slice_index(long_trace, name, k, "write")
        assert figure(sent, "energy_slices", k) == alone(slices_figure(energy[k], through)), k
        frames = frames_around(k, BELIEF_FRAMES, FRAMES)
        beliefs = (b["probs"].reshape(FRAMES, -1), b["truth"], b["occluded"], b["probs"].shape[1])
        assert figure(sent, "belief", k) == alone(belief_figure(*beliefs, frames=frames)), k


def test_the_moving_digits_film_and_identity_are_sent_as_the_builders_draw_them():
    trace = capture(CHECKPOINTS / "moving_digits-tensor", seed=1, progress=False)
    count = trace.num_chunks
    sent = occlusion_payload(trace, "s", trace.layer_names[-1], False).to_json()
    b = belief(trace)
    assert {"film", "identity", "belief"} <= set(sent["drawn"])
    for k in (0, 1, count // 2, count - 1):
        film = alone(filmstrip_figure(trace, frames_around(k, FILM_FRAMES, count)))
        assert figure(sent, "film", k) == film, k
        assert figure(sent, "identity", k) == alone(identity_belief_figure(b, k)), k
        titles = [a["text"] for a in film["layout"]["annotations"]]
        shown = frames_around(k, 12, count)
        assert titles == [f"{b['identity_truth'][t]} → {b['identity_predicted'][t]}" for t in shown]


def test_a_language_traces_tokens_are_sent_as_the_builder_draws_them():
    """Tokens with a target and without one (here every other token of chunk 65 loses its target): two traces,
    one hidden where it has no tokens, so that every chunk's figure has the drawn one's structure."""
    recorded = capture(CHECKPOINTS / "language_modelling-tensor", seq_len=1280, progress=False)  # 80 chunks
    targets = recorded.per_token["target"].copy()
    targets[recorded.chunk_positions(65)[::2]] = -1
    trace = dataclasses.replace(recorded, per_token={**recorded.per_token, "target": targets})
    span = (64, 79)
    sent = explore_payload(trace, "s", trace.layer_names[-1], None, "volume", "write", span=span).to_json()
    assert "input" in sent["drawn"]
    for k in (64, 65, 66, 79):
        expected = alone(chunk_input_figure(trace, k))
        assert figure(sent, "input", k) == expected, k
        words = sorted((int(p), w) for d in expected["data"] if d["visible"] for p, w in d["customdata"])
        assert words == [(p, plotly_text(trace.tokens[p])) for p in trace.chunk_positions(k)]  # every token once
    assert [d["visible"] for d in figure(sent, "input", 64)["data"]] == [False, True]
    assert [d["visible"] for d in figure(sent, "input", 65)["data"]] == [True, True]


class PageOnly:
    """A layer's volumes that raise on any read outside ``span``, as a trace read lazily from disk would read."""

    def __init__(self, volumes, span):
        self.volumes, self.span = volumes, span
        self.shape, self.ndim, self.dtype = volumes.shape, volumes.ndim, volumes.dtype

    def __len__(self):
        return len(self.volumes)

    def __getitem__(self, key):
        first = key[0] if isinstance(key, tuple) else key
        low, high = (first.start, first.stop - 1) if isinstance(first, slice) else (first, first)
        if low is None or high is None or not self.span[0] <= low <= high <= self.span[1]:
            raise AssertionError(f"read chunks {key} outside the page {self.span}")
        return self.volumes[key]

    def __array__(self, *args, **kwargs):
        raise AssertionError("read every chunk")


def test_a_page_reads_no_volume_outside_it(long_trace):
    name = long_trace.layer_names[-1]
    layer = long_trace.layer(name)
    guarded = dataclasses.replace(
        layer, **{f: PageOnly(getattr(layer, f), SPAN) for f in ("h", "c", "gate_i", "gate_f", "gate_o", "gate_g")}
    )
    trace = dataclasses.replace(long_trace, layers={**long_trace.layers, name: guarded})
    with pytest.raises(AssertionError, match="outside the page"):
        guarded.h[SPAN[0] - 1]
    for mode in MODES:
        series = state_series(guarded, "c", mode, 0, SPAN)
        explore_payload(trace, "s", name, series, "volume", "write", span=SPAN)
    occlusion_payload(trace, "s", name, True, SPAN)
    expected = state_series(layer, "c", "pca", 0, SPAN)  # over the page: its basis and colour range
    np.testing.assert_array_equal(series.values, expected.values)
    assert series.first == 64 and len(series.values) == 64


def test_a_long_trace_opens_on_its_first_chunk(long_trace):
    assert key_chunk(long_trace) > 0  # its first occluded frame: a short trace would open there
    assert opening_chunk(long_trace) == 0 and stepping_span(0, FRAMES) == (0, 63)
    short = capture(CHECKPOINTS / "occlusion-tensor", seed=3, progress=False)
    assert opening_chunk(short) == key_chunk(short)
