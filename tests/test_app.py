"""The Streamlit app, driven without a browser by Streamlit's AppTest, and its small helpers.

Every page and control is exercised — the stepper's payload, the chunk a browser reports back, sample changes,
checkpoint switches (good and bad uploads in test_app_uploads.py), interventions, the sandbox (stepping itself happens
in the browser: test_app_browser.py) — and the content is checked against what the
``analysis`` functions give for the same checkpoint and sample, never against numbers of one
checkpoint (a retrained one must pass too). Caches are per process, so later tests reuse the
traces and figures earlier ones computed.
"""

from __future__ import annotations

import base64
import dataclasses

import numpy as np
import pytest
from app_helpers import (
    CHECKPOINTS,
    DEFAULT,
    DEFAULT_PARAMS,
    ROOT,
    chart,
    counter,
    drawn_volume,
    figure,
    ok,
    payload,
    report,
    shown,
    start,
    upload,
    values,
    zipped,
)
from streamlit.testing.v1 import AppTest

from analysis import capture
from analysis.figures.annotations import key_chunk
from analysis.figures.chunk_input import chunk_input_figure, chunk_outcome, prediction_card
from analysis.figures.state import POINT_FLOOR
from analysis.figures.stepped import figure_json
from analysis.figures.views import slice_index
from analysis.measures.compare import checkpoint_summary
from analysis.measures.interventions import intervene
from analysis.measures.occlusion import belief, frames_around, memory_energy
from analysis.measures.volumes import state_series
from analysis.measures.world import apply_linear, decoded_map, map_probe, write_position_fit
from analysis.traces.predictions import prediction_trace
from analysis.traces.training_log import addressing_history
from app import cache, layout
from app.views.occlusion import BELIEF_FRAMES
from tensor_memory import load_checkpoint
from tensor_memory.training.log import read_training_log


@pytest.fixture(scope="module")
def default_trace():
    return capture(DEFAULT, seed=0, progress=False, **DEFAULT_PARAMS)


@pytest.fixture(scope="module")
def app() -> AppTest:
    """One session on the opening screen, shared by the read-only checks."""
    return start()


# -- the opening screen and stepping ------------------------------------------------------------------


def test_opens_on_occlusion_tensor_with_the_memory_at_work(app, default_trace):
    K = default_trace.num_chunks
    k = key_chunk(default_trace)
    assert app.selectbox(key="checkpoint_choice").value == "occlusion-tensor"
    assert counter(app) == f"Chunk {k} / {K - 1}"
    series = state_series(default_trace.layer(), "h", "norm")
    volume = chart(app, f"after chunk {k}")
    assert volume["data"][0]["type"] == "scatter3d"  # the point cloud: the lightest view to draw
    expected, (low, high) = series.values[k], series.value_range
    held = (expected - low) / (high - low) >= POINT_FLOOR  # the voxels that hold something
    shown = drawn_volume(volume, expected.shape)
    assert held.any() and np.array_equal(~np.isnan(shown), held)
    np.testing.assert_allclose(shown[held], expected[held], rtol=1e-5)
    sent = payload(app)
    assert "render" not in sent["views"]  # PyVista waits until asked for
    titles = [
        figure(sent, name, k)["layout"].get("title", {}).get("text", "")
        for name in sent["views"]
        if sent["kinds"][name] == "figure"
    ]
    assert any("read and write coordinates" in t for t in titles) and "gates" in titles and "write spread σ" in titles
    assert not app.error


def test_every_chunk_s_views_go_to_the_browser_at_once(app, default_trace):
    """The Explore page sends every chunk's views in one payload: the browser steps without the server."""
    sent, series = payload(app), state_series(default_trace.layer(), "h", "norm")
    assert sent["count"] == default_trace.num_chunks and all(len(c) == sent["count"] for c in sent["views"].values())
    for k in range(sent["count"]):
        shown = drawn_volume(chart(app, f"after chunk {k}", k), series.values[k].shape)
        held = ~np.isnan(shown)
        assert held.any()
        np.testing.assert_allclose(shown[held], series.values[k][held], rtol=1e-5)
        assert chart(app, f"chunks 0–{k}", k)  # the trajectories follow
        assert sent["events"][k] == chunk_outcome(default_trace, k)["event"]
        assert sent["views"]["card"][k] == prediction_card(chunk_outcome(default_trace, k), True)
    assert not app.button  # no server-side stepper on this page


def test_a_page_drawn_on_the_server_follows_the_chunk_the_browser_reports(default_trace):
    """Export draws the chunk's figures on the server: its stepper (the annotation track alone) reports the chunk the
    browser shows, which becomes the session's; a report from before the server's last move, or about another
    sample, is left alone."""
    at = start()
    ok(at.switch_page("views/export.py").run())
    sent, k = payload(at), int(at.session_state["chunk"])
    assert sent["reports"] and list(sent["views"]) == ["track"] and sent["rows"] == []
    assert not any(b.key in ("previous", "next", "play") for b in at.button)  # one stepper: the browser's
    for to in (k + 1, 0, default_trace.num_chunks - 1):
        report(at, "export", to)
        assert at.session_state["chunk"] == to and counter(at) == f"Chunk {to} / {default_trace.num_chunks - 1}"
        assert any(m.value == f"**Figures of chunk {to}**" for m in at.markdown)
        chart(at, f"after chunk {to}")  # the preview of the figures exported
        chart(at, f"chunks 0–{to}")
    assert payload(at)["moves"] == sent["moves"] and payload(at)["id"] == sent["id"]  # followed, not moved: no redraw
    report(at, "export", 2, moves=sent["moves"] - 1)  # chosen before the server last moved the chunk
    report(at, "export", 3, sample="another sample")
    assert at.session_state["chunk"] == default_trace.num_chunks - 1
    ok(at.switch_page("views/explore.py").run())
    assert counter(at) == f"Chunk {default_trace.num_chunks - 1} / {default_trace.num_chunks - 1}"  # shared by pages


def test_volume_controls_redraw_and_are_remembered(default_trace):
    at = start()
    k = int(at.session_state["chunk"])
    ok(at.button_group(key="explore.field").set_value("c").run())
    ok(at.button_group(key="explore.mode").set_value("pca").run())
    ok(at.number_input(key="explore.index").set_value(1).run())
    ok(at.button_group(key="explore.kind").set_value("isosurface").run())
    ok(at.selectbox(key="explore.anchor").set_value("read").run())
    series = state_series(default_trace.layer(), "c", "pca", 1)
    volume = chart(at, f"{series.label} after chunk {k}")["data"][0]
    assert volume["type"] == "isosurface"
    np.testing.assert_allclose(values(volume["value"]), series.values[k].ravel(), rtol=1e-4, atol=1e-5)
    assert payload(at)["labels"]["slices"] == f"Slices of {series.label} through this chunk's read"
    ok(at.switch_page("views/teach.py").run())
    ok(at.switch_page("views/explore.py").run())
    assert at.button_group(key="explore.field").value == "c" and at.number_input(key="explore.index").value == 1


def test_pyvista_renders_every_chunk_when_asked(default_trace):
    at = start()
    assert "render" not in payload(at)["views"]
    ok(at.toggle(key="explore.rendered").set_value(True).run())
    sent = payload(at)
    renders = sent["views"]["render"]
    assert len(renders) == default_trace.num_chunks and len(set(renders)) > 1  # one image a chunk, not one for all
    first = base64.b64decode(renders[0].removeprefix("data:image/png;base64,"))
    assert first.startswith(b"\x89PNG") and sent["labels"]["render"].endswith("PyVista volume rendering")
    assert sent["rows"][0]["columns"] == [["input", "card"], ["volume"], ["render"]]


def test_sample_controls_recapture_and_restart_the_stepper():
    at = start()
    ok(at.number_input(key="seed").set_value(5).run())
    trace = capture(DEFAULT, seed=5, progress=False, **DEFAULT_PARAMS)
    assert counter(at) == f"Chunk {key_chunk(trace)} / 11"
    ok(at.slider(key="occlusion.frames").set_value(16).run())
    ok(at.slider(key="occlusion.occlusion_length").set_value(6).run())
    ok(at.checkbox(key="occlusion.random_start").uncheck().run())
    ok(at.slider(key="occlusion.occlusion_start").set_value(3).run())
    trace = capture(DEFAULT, seed=5, frames=16, occlusion_length=6, occlusion_start=3, progress=False)
    assert counter(at) == "Chunk 3 / 15"  # the first hidden frame of the new sample
    assert payload(at)["events"][3] == "frame 3, occluded"
    np.testing.assert_array_equal(at.session_state["context"].trace.chunks["prediction"], trace.chunks["prediction"])
    assert at.session_state["context"].sample == cache.Sample(
        5, (("frames", 16), ("occlusion_length", 6), ("occlusion_start", 3))
    )
    ok(at.slider(key="occlusion.occlusion_length").set_value(0).run())
    assert counter(at) == "Chunk 15 / 15"  # nothing hidden: the last frame


def test_a_sample_is_one_hashable_order_free_value():
    """Seed and task parameters travel together as a Sample: the caches' key, and the functions' arguments."""
    sample = cache.Sample.of(3, {"occlusion_start": 2, "frames": 12})
    assert sample == cache.Sample.of(3, {"frames": 12, "occlusion_start": 2}) and hash(sample) == hash(
        cache.Sample.of(3, {"frames": 12, "occlusion_start": 2})
    )
    assert sample.params == {"frames": 12, "occlusion_start": 2} and sample.seed == 3
    assert sample.with_task_defaults() == cache.Sample(3) and cache.Sample(3).params == {}

    @dataclasses.dataclass
    class Own:
        frames: int = 12
        occlusion_length: int = 4

    @dataclasses.dataclass
    class Other:
        frames: int = 20
        occlusion_length: int = 4

    chosen = cache.Sample.of(3, {"frames": 12, "occlusion_length": 6}, Own())  # the task's own settings left out
    assert chosen == cache.Sample(3, (("occlusion_length", 6),))
    assert chosen.carried_to(Own(), Own()) == chosen  # another checkpoint of the same config: the same sample
    assert chosen.carried_to(Own(), Other()) == cache.Sample(3, (("frames", 12), ("occlusion_length", 6)))
    ref = cache.CheckpointRef.of(DEFAULT, "occlusion-tensor")
    trace = cache.sample_trace(ref, cache.Sample.of(4, DEFAULT_PARAMS))
    expected = capture(DEFAULT, seed=4, progress=False, **DEFAULT_PARAMS)
    np.testing.assert_array_equal(trace.layer().mu_write, expected.layer().mu_write)


# -- pages ---------------------------------------------------------------------------------------------


def test_every_page_renders_its_content(default_trace):
    at = start(**{"keep.diagnose.samples": 8})
    ok(at.switch_page("views/occlusion.py").run())
    sent, K, b = payload(at), default_trace.num_chunks, belief(default_trace)
    energy = memory_energy(default_trace.layer())  # (K, D, H, W)
    assert {"heading": "Belief frame by frame"} in sent["rows"]  # the frames step in the browser
    assert not any(b.key in ("previous", "next", "play") for b in at.button)
    for k in range(K):  # every frame's belief window, its numbers and the memory's energy go at once
        titles = " ".join(a["text"] for a in figure(sent, "belief", k)["layout"]["annotations"])
        assert all(f"frame {j}" in titles for j in frames_around(k, BELIEF_FRAMES, K)) and f"frame {k}" in titles
        assert f"{b['truth_probability'][k]:.1%}" in sent["views"]["belief_card"][k]
        z = slice_index(default_trace, None, k, "write")[0]  # the slices go through the chunk's write
        np.testing.assert_allclose(values(figure(sent, "energy_slices", k)["data"][0]["z"]), energy[k][z], rtol=1e-5)
    labels = {m.label: m.value for m in at.metric}
    hidden = default_trace.meta["occluded"].astype(bool)
    right = default_trace.chunks["prediction"] == default_trace.chunks["target"]
    assert labels["Right on hidden frames"] == f"{right[hidden].mean():.0%}"
    ok(at.switch_page("views/teach.py").run())
    assert [m.value for m in at.markdown if m.value.startswith("**Step")] == [
        "**Step 1 · Chunk summaries**",
        "**Step 2 · Addressing**",
        "**Step 3 · Read**",
        "**Step 4 · Soft write**",
        "**Step 5 · Recurrent update**",
    ]
    ok(at.switch_page("views/export.py").run())
    assert {b.label for b in at.get("download_button")} >= {
        "Trace (.safetensors)",
        "Figures (HTML)",
        "Figures (PNG, zip)",
        "Report (HTML)",
    }
    ok(at.switch_page("views/diagnose.py").run())
    expected = checkpoint_summary(load_checkpoint(DEFAULT), 0, 8, None, **DEFAULT_PARAMS)["addressing"]
    boxes = [e.value for e in (*at.error, *at.success)]
    assert any(f"**{expected['verdict']}**" in box for box in boxes)
    assert any(expected["reasons"][0] in shown(m.value) for m in at.markdown)
    table = at.dataframe[0].value
    assert list(table.columns)[:3] == ["measure", "occlusion-tensor", "occlusion-base"]
    history = addressing_history(read_training_log(DEFAULT))
    if history["layers"]:  # the addressing its training logged, against the step
        spec = chart(at, "Addressing during training")
        steps, spread = history["layers"][expected["layer"]]["write_spread_voxels"]
        assert (
            values(spec["data"][0]["y"]).tolist() == spread.tolist()
            and values(spec["data"][0]["x"]).tolist() == steps.tolist()
        )
    else:
        assert any("No addressing history" in i.value for i in at.info)
    fit = write_position_fit(load_checkpoint(DEFAULT))
    labels = {m.label: m.value for m in at.metric}
    assert labels["R², writes → ball (visible frames)"] == f"{fit['r2_visible']:.2f}"
    ok(at.switch_page("views/explore.py").run())
    assert counter(at).startswith("Chunk")


def test_diagnose_steps_two_checkpoints_through_one_sample_together(default_trace):
    at = start(**{"keep.diagnose.samples": 8})
    ok(at.switch_page("views/diagnose.py").run())
    sent, K = payload(at), default_trace.num_chunks  # occlusion-tensor beside its counterpart, occlusion-base
    base = prediction_trace(load_checkpoint(CHECKPOINTS / "occlusion-base"), seed=0, index=0, **DEFAULT_PARAMS)
    assert sent["count"] == K and sent["labels"]["a_input"] == "occlusion-tensor"
    assert sent["labels"]["b_input"] == "occlusion-base"
    assert sent["rows"][0]["columns"] == [
        ["a_input", "a_card", "a_volume", "a_timeline"],
        ["b_input", "b_card", "b_timeline"],
    ]  # base: no memory to draw
    series = state_series(default_trace.layer(), "h", "norm")
    for k in range(K):
        assert sent["views"]["a_card"][k] == prediction_card(chunk_outcome(default_trace, k), True)
        assert sent["views"]["b_card"][k] == prediction_card(chunk_outcome(base, k), True)
        for side, run in (("a", default_trace), ("b", base)):  # drawn once, each chunk's values put in
            expected = figure_json(chunk_input_figure(run, k))
            expected["layout"].pop("template", None)  # the payload sends it once
            assert figure(sent, f"{side}_input", k) == expected, (side, k)
        shown = drawn_volume(figure(sent, "a_volume", k), series.values[k].shape)
        held = ~np.isnan(shown)
        np.testing.assert_allclose(shown[held], series.values[k][held], rtol=1e-5)
    assert any(c != sent["views"]["b_card"][0] for c in sent["views"]["b_card"])  # the sides step, not stand still
    first_layer = default_trace.layer_names[0]  # another memory layer: a new payload, which the browser redraws
    ok(at.selectbox(key="layer_choice").set_value(first_layer).run())
    other = state_series(default_trace.layer(first_layer), "h", "norm")
    assert payload(at)["id"] != sent["id"]
    shown = drawn_volume(figure(payload(at), "a_volume", 0), other.values[0].shape)
    np.testing.assert_allclose(shown[~np.isnan(shown)], other.values[0][~np.isnan(shown)], rtol=1e-5)
    ok(at.selectbox(key="diagnose.other.occlusion-tensor").set_value("coordinate_binding-tensor").run())
    assert payload(at) is None and any("another task" in i.value for i in at.info)


def test_explore_shows_where_the_writes_put_the_ball_on_request(default_trace):
    at = start()
    with pytest.raises(AssertionError):
        chart(at, "Do the writes follow the ball?")  # off by default: the first page stays fast
    at.session_state["explore.world"] = True
    ok(at.run())
    fit = write_position_fit(load_checkpoint(DEFAULT))
    spec = chart(at, "Do the writes follow the ball?")
    predicted = apply_linear(fit["weights"], default_trace.layer(fit["layer"]).mu_write.astype(np.float64))
    np.testing.assert_allclose(values(spec["data"][1]["x"]), predicted[:, 1], rtol=1e-6)
    path = [x for x in values(spec["data"][0]["x"]) if x is not None]  # broken (None) where the ball wraps
    np.testing.assert_allclose(path, default_trace.meta["positions"][:, 1])


def test_map_building_pages_decode_the_map_from_the_memory():
    at = start(**{"keep.diagnose.samples": 8})
    ok(at.selectbox(key="checkpoint_choice").set_value("map_building-tensor").run())
    at.session_state["explore.world"] = True
    ok(at.run())
    ckpt = load_checkpoint(CHECKPOINTS / "map_building-tensor")
    decoded = decoded_map(ckpt, map_probe(ckpt), 0, 0)
    spec = chart(at, "Map decoded from the memory")
    np.testing.assert_allclose(values(spec["data"][1]["z"]), decoded["decoded"], rtol=1e-6)
    ok(at.switch_page("views/diagnose.py").run())
    labels = {m.label: m.value for m in at.metric}
    assert labels["map decoded from memory (observed cells)"] == f"{map_probe(ckpt)['accuracy_observed']:.1%}"


def test_interventions_match_the_analysis():
    at = start()
    ok(at.switch_page("views/occlusion.py").run())
    at.radio(key="intervention.kind").set_value("gate_off")
    chunk_slider = next(s for s in at.slider if s.label == "Before chunk")
    chunk_slider.set_value(5)
    ok(next(b for b in at.button if b.label == "Run the intervention").click().run())
    numbers = intervene(DEFAULT, "gate_off", 5, seed=0, **DEFAULT_PARAMS).summary()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Predictions changed"] == f"{numbers['chunks_changed']} of {numbers['chunks_after']}"
    assert any("σ(γ) forced to 0" in m.value for m in at.markdown)  # the intervened belief is shown
    at.radio(key="intervention.kind").set_value("zero_region")
    ok(next(b for b in at.button if b.label == "Run the intervention").click().run())
    assert not at.error
    # Moving the chunk's write to the grid's corner voxel (0, 0, 0): the same figures as the analysis gives.
    at.radio(key="intervention.kind").set_value("move_write")
    for axis in "xyz":
        next(s for s in at.slider if s.label == f"Write to voxel {axis}").set_value(0.0)
    ok(next(b for b in at.button if b.label == "Run the intervention").click().run())
    moved = intervene(DEFAULT, "move_write", 5, seed=0, to=(-1.0, -1.0, -1.0), **DEFAULT_PARAMS).summary()
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Predictions changed"] == f"{moved['chunks_changed']} of {moved['chunks_after']}"
    assert any("write moved" in m.value for m in at.markdown)


def test_teach_walks_through_the_chunk_the_browser_reports(default_trace):
    at = start()
    ok(at.switch_page("views/teach.py").run())
    assert payload(at)["reports"]
    for k in (3, 0):
        report(at, "teach", k)
        positions = default_trace.chunk_positions(k)
        assert any(f"Chunk {k} holds tokens {positions[0]}–{positions[-1]}." in m.value for m in at.markdown)
        assert any(b.label == f"Take chunk {k}'s addressing" for b in at.button)
    first = payload(at)["sample"]
    ok(at.number_input(key="seed").set_value(3).run())  # a new sample: the server moves to its key chunk
    other = capture(DEFAULT, seed=3, progress=False, **DEFAULT_PARAMS)
    assert payload(at)["sample"] != first and at.session_state["chunk"] == key_chunk(other)
    report(at, "teach", 1, sample=first)  # the old sample's report, arriving late
    assert at.session_state["chunk"] == key_chunk(other)


def test_teach_sandbox_is_computed_by_the_module():
    at = start()
    ok(at.switch_page("views/teach.py").run())
    ok(at.radio(key="sandbox.memory").set_value("empty").run())
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["‖r‖"] == "0.000"  # an empty memory reads nothing
    ok(at.radio(key="sandbox.content").set_value("one channel").run())
    ok(at.slider(key="sandbox.sigma").set_value(0.8).run())
    assert "σ = 0.80" in " ".join(c.value for c in at.caption)


# -- checkpoints: switching and uploads ----------------------------------------------------------------


def test_base_checkpoint_shows_predictions_and_says_why_no_memory():
    at = start(**{"keep.diagnose.samples": 8})
    ok(at.selectbox(key="checkpoint_choice").set_value("occlusion-base").run())
    assert any("no Tensor Memory layers" in i.value for i in at.info)
    assert not at.image
    k = int(at.session_state["chunk"])
    assert payload(at)["start"] == k and "volume" not in payload(at)["views"]  # predictions only
    ok(at.switch_page("views/export.py").run())
    report(at, "export", k + 1)
    assert counter(at) == f"Chunk {k + 1} / 11" and any(m.value == f"**Figures of chunk {k + 1}**" for m in at.markdown)
    for page in ("views/occlusion.py", "views/teach.py", "views/export.py", "views/diagnose.py"):
        ok(at.switch_page(page).run())
    assert any("no Tensor Memory layers" in i.value for i in at.info)
    assert at.dataframe[0].value.columns[2] == "occlusion-tensor"  # compared with its tensor counterpart


@pytest.mark.parametrize("name", ["coordinate_binding-tensor", "no_harm-tensor"])
def test_other_tasks_and_a_second_memory_layer(name):
    at = start()
    ok(at.selectbox(key="checkpoint_choice").set_value(name).run())
    trace = capture(CHECKPOINTS / name, seed=0, progress=False)
    assert counter(at) == f"Chunk {key_chunk(trace)} / {trace.num_chunks - 1}"
    if len(trace.layer_names) > 1:  # the layer picker switches every memory view
        ok(at.selectbox(key="layer_choice").set_value(trace.layer_names[0]).run())
        series = state_series(trace.layer(trace.layer_names[0]), "h", "norm")
        k = key_chunk(trace)
        shown = drawn_volume(chart(at, f"after chunk {k}"), series.values[k].shape)
        held = ~np.isnan(shown)
        assert held.any()
        np.testing.assert_allclose(shown[held], series.values[k][held], rtol=1e-5)
    for page in ("views/occlusion.py", "views/teach.py", "views/export.py"):
        ok(at.switch_page(page).run())
    assert not at.error


def test_nan_in_a_trace_turns_the_memory_views_off_with_the_reason(monkeypatch):
    real = cache.capture

    def broken(*args, **kwargs):
        trace = real(*args, **kwargs)
        name = trace.layer_names[-1]
        h = trace.layers[name].h.copy()
        h[3, 0, 0, 0, 0] = np.nan
        return dataclasses.replace(trace, layers={name: dataclasses.replace(trace.layers[name], h=h)})

    monkeypatch.setattr(cache, "capture", broken)
    try:
        at = start(seed=4242)
        notes = [i.value for i in at.info]
        assert any("NaN" in n and "h at chunks 3" in n for n in notes), notes
        assert not at.image
        for page in ("views/occlusion.py", "views/teach.py", "views/export.py"):
            ok(at.switch_page(page).run())
    finally:
        cache.sample_trace.clear()


# -- sessions and helpers ------------------------------------------------------------------------------


def test_sessions_do_not_see_each_other():
    first, second = start(), start()
    before = counter(second)
    ok(first.switch_page("views/export.py").run())
    report(first, "export", 0)
    upload(first, "map_building-tensor.zip", zipped(CHECKPOINTS / "map_building-tensor"))
    ok(second.run())
    assert counter(second) == before
    assert second.selectbox(key="checkpoint_choice").value == "occlusion-tensor"
    assert not any("upload" in option for option in second.selectbox(key="checkpoint_choice").options)


def test_app_command_runs_streamlit_on_the_chosen_checkpoint(monkeypatch):
    import argparse

    from app import cli

    parser = argparse.ArgumentParser()
    cli.add_app_parser(parser.add_subparsers(dest="command"))
    calls = []
    monkeypatch.setattr(cli, "serve", lambda command, env: calls.append((command, env)) or 0)
    args = parser.parse_args(["app", "--checkpoint", str(CHECKPOINTS / "map_building-tensor"), "--port", "8765"])
    assert args.func(args) == 0
    ((command, env),) = calls
    assert command[1:3] == ["-m", "app"]  # app/__main__.py: streamlit run app/main.py, the opening page prepared
    assert command[3:5] == ["--server.port", "8765"]
    assert env[cli.CHECKPOINT_ENV] == str(CHECKPOINTS / "map_building-tensor")
    args = parser.parse_args(["app", "--checkpoint", str(ROOT / "tests")])
    with pytest.raises(ValueError, match="config.json"):
        args.func(args)  # refused before any server starts: `tensor-memory app` prints the reason
    with pytest.raises(SystemExit):
        parser.parse_args(["app", "--port", "0"])


def test_python_m_app_prepares_what_the_opening_page_asks_for(monkeypatch):
    """The server's head start is only worth it if the page then finds it: the same calls, the same arguments."""
    from app.__main__ import opening_page_work

    asked = {"ahead": [], "page": []}
    who = ["ahead"]  # who is asking: the server's head start, then the page

    def spy(name: str):
        real = getattr(cache, name)

        def call(*args):
            asked[who[0]].append((name, args))
            return real(*args)

        return call

    for name in ("sample_trace", "stepper_payload"):
        monkeypatch.setattr(cache, name, spy(name))
    opening_page_work()
    who[0] = "page"
    start()  # a new session on the opening page
    for name in ("sample_trace", "stepper_payload"):  # the page's first call of each is the one prepared
        ahead, page = ([args for n, args in asked[when] if n == name] for when in ("ahead", "page"))
        if name == "stepper_payload":  # (page, its builder, what the payload depends on): the builders are the
            ahead, page = ([(a[0], a[1].__name__, *a[2:]) for a in calls] for calls in (ahead, page))  # same code
        assert ahead and page and ahead[0] == page[0], name
    name, _, ref, sample, layer, view, span = next(args for n, args in asked["ahead"] if n == "stepper_payload")
    assert name == "explore" and sample == cache.Sample(0) and view == layout.VolumeView()
    assert layer.endswith("blocks.1.memory")
    assert span is None  # twelve frames: the whole sample goes to the browser
    assert "run: $(STAMP)\n\t$(PY) -m app --server.address $(HOST)\n" in (ROOT / "Makefile").read_text()  # make run


PREPARED_AHEAD = (
    "sample_trace",
    "stepper_payload",
    "summary",
    "intervention",
    "volume_series",
    "world_readout",
    "training_history",
    "causality",
    "chunk_figures",
    "trace_file",
)


def test_python_m_app_prepares_what_the_other_pages_ask_for_on_their_first_visit(monkeypatch):
    """Every cached call of Occlusion, Diagnose, Audit and Export on the opening checkpoint was made ahead, with the
    same arguments: a first visit then finds its measures (Diagnose's summaries of both checkpoints, the Audit)
    cached instead of computing them."""
    from app.__main__ import opening_page_work, other_pages_work

    asked = {"ahead": set(), "page": set()}
    who = ["ahead"]

    def spy(name: str):
        real = getattr(cache, name)

        def call(*args):  # a payload's builder stands for its code: by name
            asked[who[0]].add((name, *(a.__name__ if callable(a) else a for a in args)))
            return real(*args)

        return call

    for name in PREPARED_AHEAD:
        monkeypatch.setattr(cache, name, spy(name))
    opened = opening_page_work()
    other_pages_work(opened)
    who[0] = "page"
    at = start()
    for page in ("occlusion", "diagnose", "audit", "export"):
        ok(at.switch_page(f"views/{page}.py").run())
    asked_by = {name for name, *_ in asked["page"]}
    assert {"summary", "intervention", "world_readout", "causality", "chunk_figures"} <= asked_by
    assert asked["page"] <= asked["ahead"], sorted(asked["page"] - asked["ahead"], key=str)
