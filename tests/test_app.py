"""The Streamlit app, driven without a browser by Streamlit's AppTest, and its small helpers.

Every page and control is exercised — stepping, playing, sample changes, checkpoint switches, good
and bad uploads, interventions, the sandbox — and the content is checked against what the
``analysis`` functions give for the same checkpoint and sample, never against numbers of one
checkpoint (a retrained one must pass too). Caches are per process, so later tests reuse the
traces and figures earlier ones computed.
"""

from __future__ import annotations

import base64
import dataclasses
import io
import json
import shutil
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from analysis import capture
from analysis.annotations import key_chunk
from analysis.compare import checkpoint_summary
from analysis.interventions import intervene
from analysis.training_log import addressing_history, read_training_log
from analysis.volumes import state_series
from analysis.world import apply_linear, decoded_map, map_probe, write_position_fit
from app import cache
from app.figure_cache import FigureCache
from app.stepper import advance
from app.upload import MAX_UPLOAD_BYTES, UploadError, unpack_checkpoint
from tensor_memory import load_checkpoint
from tensor_memory.checkpoint import build_model, save_checkpoint

ROOT = Path(__file__).resolve().parents[1]
MAIN = str(ROOT / "app" / "main.py")
CHECKPOINTS = ROOT / "checkpoints"
DEFAULT = CHECKPOINTS / "occlusion-tensor"
DEFAULT_PARAMS = {"frames": 12, "occlusion_length": 4, "occlusion_start": -1}  # the sidebar's, from its config


def start(**state) -> AppTest:
    at = AppTest.from_file(MAIN, default_timeout=180)
    for key, value in state.items():
        at.session_state[key] = value
    return ok(at.run())


def ok(at: AppTest) -> AppTest:
    assert not at.exception, "\n".join(str(e.value) for e in at.exception)
    return at


def counter(at: AppTest) -> str:
    return next(m.value for m in at.markdown if m.value.startswith("#### Chunk"))


def chunk_slider(at: AppTest):
    return next(s for s in at.slider if s.label == "Chunk")


def chart(at: AppTest, title: str) -> dict:
    """The spec of the Plotly chart whose title contains ``title``."""
    for element in at.get("plotly_chart"):
        spec = json.loads(element.proto.spec)
        if title in (spec["layout"].get("title") or {}).get("text", ""):
            return spec
    raise AssertionError(f"no chart titled {title!r}")


def values(array) -> np.ndarray:
    """A Plotly JSON array: a list, or a typed array {"dtype", "bdata" (base64), "shape"}."""
    if isinstance(array, dict):
        flat = np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"])
        return flat.reshape([int(n) for n in str(array.get("shape", len(flat))).split(",")])
    return np.asarray(array)


def zipped(folder: Path, prefix: str = "") -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path in sorted(folder.iterdir()):
            if path.is_file():
                archive.write(path, f"{prefix}{path.name}")
    return buffer.getvalue()


def upload(at: AppTest, name: str, data: bytes) -> AppTest:
    at.file_uploader(key="checkpoint_upload").upload(name, data, "application/zip")
    return ok(at.run())


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
    assert counter(app) == f"#### Chunk {k} / {K - 1}"
    series = state_series(default_trace.layer(), "h", "norm")
    volume = chart(app, f"after chunk {k}")["data"][0]
    assert volume["type"] == "volume"
    np.testing.assert_allclose(values(volume["value"]), series.values[k].ravel(), rtol=1e-5)
    assert len(app.image) == 1  # the PyVista rendering
    titles = [json.loads(c.proto.spec)["layout"].get("title", {}).get("text", "") for c in app.get("plotly_chart")]
    assert any("read and write coordinates" in t for t in titles) and "gates" in titles and "write spread σ" in titles
    assert not app.error


def test_previous_next_and_slider_move_every_view():
    at = start()
    k = int(at.session_state["chunk"])
    ok(at.button(key="next").click().run())
    assert at.session_state["chunk"] == k + 1 and counter(at).startswith(f"#### Chunk {k + 1} /")
    chart(at, f"after chunk {k + 1}")
    chart(at, f"chunks 0–{k + 1}")  # the trajectories follow
    ok(at.button(key="previous").click().run())
    ok(at.button(key="previous").click().run())
    assert counter(at).startswith(f"#### Chunk {k - 1} /")
    ok(chunk_slider(at).set_value(0).run())
    assert counter(at).startswith("#### Chunk 0 /") and at.button(key="previous").disabled
    last = int(chunk_slider(at).max)
    ok(chunk_slider(at).set_value(last).run())
    assert counter(at) == f"#### Chunk {last} / {last}" and at.button(key="next").disabled


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
    assert any(m.value.startswith(f"**Slices of {series.label}** through this chunk's read") for m in at.markdown)
    ok(at.switch_page("views/teach.py").run())
    ok(at.switch_page("views/explore.py").run())
    assert at.button_group(key="explore.field").value == "c" and at.number_input(key="explore.index").value == 1


def test_play_steps_on_its_own_and_pause_stops():
    at = start()
    ok(chunk_slider(at).set_value(2).run())
    ok(at.button(key="play").click().run())
    assert at.button(key="play").label == "Pause" and at.session_state["playing"]
    assert at.session_state["chunk"] == 2  # the first step waits for the timer
    at.session_state["next_step_due"] = 0.0  # the timer has fired
    ok(at.run())
    assert at.session_state["chunk"] == 3 and counter(at).startswith("#### Chunk 3 /")
    ok(at.button(key="play").click().run())
    assert at.button(key="play").label == "Play" and not at.session_state["playing"]
    at.session_state["next_step_due"] = 0.0
    ok(at.run())
    assert at.session_state["chunk"] == 3


def test_advance_stops_at_the_last_chunk():
    assert advance(3, 12) == (4, True)
    assert advance(10, 12) == (11, False)
    assert advance(11, 12) == (11, False)


def test_sample_controls_recapture_and_restart_the_stepper():
    at = start()
    ok(at.number_input(key="seed").set_value(5).run())
    trace = capture(DEFAULT, seed=5, progress=False, **DEFAULT_PARAMS)
    assert counter(at) == f"#### Chunk {key_chunk(trace)} / 11"
    ok(at.slider(key="occlusion.frames").set_value(16).run())
    ok(at.slider(key="occlusion.occlusion_length").set_value(6).run())
    ok(at.checkbox(key="occlusion.random_start").uncheck().run())
    ok(at.slider(key="occlusion.occlusion_start").set_value(3).run())
    trace = capture(DEFAULT, seed=5, frames=16, occlusion_length=6, occlusion_start=3, progress=False)
    assert counter(at) == "#### Chunk 3 / 15"  # the first hidden frame of the new sample
    assert "frame 3, occluded" in [c.value for c in at.caption]
    np.testing.assert_array_equal(at.session_state["context"].trace.chunks["prediction"], trace.chunks["prediction"])
    ok(at.slider(key="occlusion.occlusion_length").set_value(0).run())
    assert counter(at) == "#### Chunk 15 / 15"  # nothing hidden: the last frame


# -- pages ---------------------------------------------------------------------------------------------

def test_every_page_renders_its_content(default_trace):
    at = start(**{"keep.diagnose.samples": 8})
    ok(at.switch_page("views/occlusion.py").run())
    assert any(m.value == "##### Belief frame by frame" for m in at.markdown)
    labels = {m.label: m.value for m in at.metric}
    hidden = default_trace.meta["occluded"].astype(bool)
    right = default_trace.chunks["prediction"] == default_trace.chunks["target"]
    assert labels["Right on hidden frames"] == f"{right[hidden].mean():.0%}"
    ok(at.switch_page("views/teach.py").run())
    assert [m.value for m in at.markdown if m.value.startswith("**Step")] == [
        "**Step 1 · Chunk summaries**", "**Step 2 · Addressing**", "**Step 3 · Read**", "**Step 4 · Soft write**",
        "**Step 5 · Recurrent update**"]
    ok(at.switch_page("views/export.py").run())
    assert {b.label for b in at.get("download_button")} >= {"Trace (.safetensors)", "Figures (HTML)",
                                                            "Figures (PNG, zip)", "Report (HTML)"}
    ok(at.switch_page("views/diagnose.py").run())
    expected = checkpoint_summary(load_checkpoint(DEFAULT), 0, 8, None, **DEFAULT_PARAMS)["addressing"]
    boxes = [e.value for e in (*at.error, *at.success)]
    assert any(f"**{expected['verdict']}**" in box for box in boxes)
    assert any(expected["reasons"][0] in m.value for m in at.markdown)
    table = at.dataframe[0].value
    assert list(table.columns)[:3] == ["measure", "occlusion-tensor", "occlusion-base"]
    history = addressing_history(read_training_log(DEFAULT))
    if history["layers"]:  # the addressing its training logged, against the step
        spec = chart(at, "Addressing during training")
        steps, spread = history["layers"][expected["layer"]]["write_spread_voxels"]
        assert values(spec["data"][0]["y"]).tolist() == spread.tolist() and values(spec["data"][0]["x"]).tolist() == steps.tolist()
    else:
        assert any("No addressing history" in i.value for i in at.info)
    fit = write_position_fit(load_checkpoint(DEFAULT))
    labels = {m.label: m.value for m in at.metric}
    assert labels["R², writes → ball (visible frames)"] == f"{fit['r2_visible']:.2f}"
    ok(at.switch_page("views/explore.py").run())
    assert counter(at).startswith("#### Chunk")


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
    np.testing.assert_allclose(values(spec["data"][0]["x"]), default_trace.meta["positions"][:, 1])


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
    ok(at.button(key="next").click().run())
    assert counter(at).startswith(f"#### Chunk {k + 1} / 11")
    for page in ("views/occlusion.py", "views/teach.py", "views/export.py", "views/diagnose.py"):
        ok(at.switch_page(page).run())
    assert any("no Tensor Memory layers" in i.value for i in at.info)
    assert at.dataframe[0].value.columns[2] == "occlusion-tensor"  # compared with its tensor counterpart


@pytest.mark.parametrize("name", ["coordinate_binding-tensor", "no_harm-tensor"])
def test_other_tasks_and_a_second_memory_layer(name):
    at = start()
    ok(at.selectbox(key="checkpoint_choice").set_value(name).run())
    trace = capture(CHECKPOINTS / name, seed=0, progress=False)
    assert counter(at) == f"#### Chunk {key_chunk(trace)} / {trace.num_chunks - 1}"
    if len(trace.layer_names) > 1:  # the layer picker switches every memory view
        ok(at.selectbox(key="layer_choice").set_value(trace.layer_names[0]).run())
        series = state_series(trace.layer(trace.layer_names[0]), "h", "norm")
        k = key_chunk(trace)
        np.testing.assert_allclose(values(chart(at, f"after chunk {k}")["data"][0]["value"]),
                                   series.values[k].ravel(), rtol=1e-5)
    for page in ("views/occlusion.py", "views/teach.py", "views/export.py"):
        ok(at.switch_page(page).run())
    assert not at.error


def test_good_upload_is_validated_and_shown():
    at = start()
    at = upload(at, "map_building-tensor.zip", zipped(CHECKPOINTS / "map_building-tensor", "map_building-tensor/"))
    label = at.selectbox(key="checkpoint_choice").value
    assert label.startswith("map_building-tensor (upload")
    assert any("task map_building" in s.value for s in at.success)
    assert at.session_state["context"].task == "map_building"
    ok(at.switch_page("views/occlusion.py").run())
    assert any("need an occlusion checkpoint" in i.value for i in at.info)
    ok(at.selectbox(key="checkpoint_choice").set_value("occlusion-tensor").run())
    assert at.session_state["context"].task == "occlusion" and not at.error


def bad_uploads(tmp: Path) -> dict[str, tuple[bytes, str]]:
    """name → (file, words the error must contain)."""
    good = CHECKPOINTS / "no_harm-tensor"
    pickled = tmp / "pickled"
    shutil.copytree(good, pickled)
    (pickled / "model.safetensors").write_bytes(b"\x80\x04\x95" + b"\x00" * 64)
    truncated = tmp / "truncated"
    shutil.copytree(good, truncated)
    (truncated / "model.safetensors").write_bytes((good / "model.safetensors").read_bytes()[:1000])
    other_task = tmp / "other_task"
    shutil.copytree(good, other_task)
    config = json.loads((good / "config.json").read_text())
    config["task"]["name"] = "video_classification"
    (other_task / "config.json").write_text(json.dumps(config))
    slip = io.BytesIO()
    with zipfile.ZipFile(slip, "w") as archive:
        archive.writestr("../config.json", "{}")
    return {"not-a-zip.zip": (b"this is not a zip file", "not a zip"),
            "empty.zip": (zipped(tmp / "nothing"), "no config.json"),
            "pickled.zip": (zipped(pickled), "pickle"),
            "truncated.zip": (zipped(truncated), "truncated"),
            "other-task.zip": (zipped(other_task), "unknown task"),
            "slip.zip": (slip.getvalue(), "unsafe path")}


def test_bad_uploads_say_what_is_wrong_and_keep_the_checkpoint(tmp_path):
    (tmp_path / "nothing").mkdir()
    at = start()
    for name, (data, words) in bad_uploads(tmp_path).items():
        at = upload(at, name, data)
        errors = [e.value for e in at.error]
        assert any(name in e and words in e for e in errors), (name, errors)
        assert at.selectbox(key="checkpoint_choice").value == "occlusion-tensor"
        assert counter(at).startswith("#### Chunk")  # still usable
        at.file_uploader(key="checkpoint_upload").clear()
        ok(at.run())
    assert not any(e for e in at.error)


def test_upload_limits_and_zip_bombs(tmp_path):
    with pytest.raises(UploadError, match="upload limit"):
        unpack_checkpoint(b"0" * (MAX_UPLOAD_BYTES + 1), tmp_path)
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("config.json", "{}")
        with archive.open("model.safetensors", "w", force_zip64=True) as member:  # 700 MB of zeros, ~0.7 MB zipped
            for _ in range(700):
                member.write(bytes(1 << 20))
    with pytest.raises(UploadError, match="unpacks to"):
        unpack_checkpoint(bomb.getvalue(), tmp_path)
    link = io.BytesIO()
    with zipfile.ZipFile(link, "w") as archive:
        entry = zipfile.ZipInfo("config.json")
        entry.external_attr = (0o120777 << 16)  # a symbolic link
        archive.writestr(entry, "/etc/passwd")
    with pytest.raises(UploadError, match="link"):
        unpack_checkpoint(link.getvalue(), tmp_path)
    folder = unpack_checkpoint(zipped(CHECKPOINTS / "no_harm-tensor", "deep/"), tmp_path)
    assert load_checkpoint(folder).task.name == "no_harm"
    assert unpack_checkpoint(zipped(CHECKPOINTS / "no_harm-tensor", "deep/"), tmp_path) == folder  # same file, same folder


def test_a_sample_shorter_than_one_chunk_says_so_and_a_longer_one_works(tmp_path):
    config = json.loads((CHECKPOINTS / "no_harm-tensor" / "config.json").read_text())
    config["model"]["memory"]["chunk_size"] = 64  # longer than the task's 32 tokens
    model, _ = build_model(config)
    save_checkpoint(tmp_path / "long-chunks", model, config)
    at = upload(start(**{"keep.diagnose.samples": 8}), "long-chunks.zip", zipped(tmp_path / "long-chunks"))
    assert any("fewer than one memory chunk" in e.value for e in at.error)
    for page in ("views/occlusion.py", "views/teach.py", "views/export.py", "views/diagnose.py", "views/explore.py"):
        ok(at.switch_page(page).run())
        assert any("fewer than one memory chunk" in e.value for e in at.error), page
    ok(at.slider(key="no_harm.length").set_value(128).run())
    assert not at.error and counter(at) == "#### Chunk 1 / 1"


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
    ok(first.button(key="next").click().run())
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
    monkeypatch.setattr(cli.subprocess, "call", lambda command, cwd, env: calls.append((command, cwd, env)) or 0)
    args = parser.parse_args(["app", "--checkpoint", str(CHECKPOINTS / "map_building-tensor"), "--port", "8765"])
    assert args.func(args) == 0
    (command, cwd, env), = calls
    assert command[1:4] == ["-m", "streamlit", "run"] and command[4].endswith("app/main.py")
    assert command[-2:] == ["--server.port", "8765"] and cwd == ROOT
    assert env[cli.CHECKPOINT_ENV] == str(CHECKPOINTS / "map_building-tensor")
    args = parser.parse_args(["app", "--checkpoint", str(ROOT / "tests")])
    with pytest.raises(ValueError, match="config.json"):
        args.func(args)  # refused before any server starts: `tensor-memory app` prints the reason
    with pytest.raises(SystemExit):
        parser.parse_args(["app", "--port", "0"])


def test_figure_cache_builds_once_and_ahead():
    figures = FigureCache(capacity=2)
    calls = []

    def build(value):
        def run():
            calls.append(value)
            time.sleep(0.05)
            return value
        return run

    assert figures.get("a", build(1)) == 1 and figures.get("a", build(2)) == 1
    figures.ahead([("b", build(3))])
    assert figures.get("b", build(4)) == 3  # waited for, not built twice
    figures.get("c", build(5))
    assert figures.get("a", build(6)) == 6  # the oldest was dropped at capacity 2
    assert calls == [1, 3, 5, 6]
