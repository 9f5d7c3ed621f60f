"""The app following a training run folder: `tensor-memory app --run DIR`, "Training run" in the sidebar, the Run
page (the addressing film, where a collapse began, the newest snapshot opened in Explore) and Diagnose naming the
collapse of the run it follows."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from app_helpers import ok, payload, shown, start, values
from run_helpers import EVERY, LAYER, ONSET, measures, start_run
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging

from analysis import monitor
from analysis.figures.escape import markdown_code
from analysis.measures.addressing import COLLAPSE_SPREAD_VOXELS
from app import cli
from app.runs import LIVE_KEY, RUN_KEY
from tensor_memory import MemoryConfig, attach_memory
from tensor_memory.training.run_log import RECORDS_FILE

logging.set_verbosity_error()
RUN_PAGE = "views/run.py"


def on_run_page(**state):
    return ok(start(**state).switch_page(RUN_PAGE).run())


def metrics(at) -> dict[str, str]:
    return {metric.label: metric.value for metric in at.metric}


def film(at) -> dict:
    """The spec of the Run page's addressing film."""
    for element in at.get("plotly_chart"):
        spec = json.loads(element.proto.spec)
        if "Addressing during training" in spec["layout"]["title"]["text"]:
            return spec
    raise AssertionError("no addressing film on the page")


def drawn(spec: dict, name: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of the film's series ``name``."""
    series = next(trace for trace in spec["data"] if trace.get("name") == name)
    return values(series["x"]), values(series["y"])


def written(folder) -> list[dict]:
    """The run's records as its file holds them, read here independently of the app's follower."""
    return [json.loads(line) for line in (folder / RECORDS_FILE).read_text().splitlines()]


def test_a_run_opens_with_its_film_and_where_its_collapse_began_and_grows_without_rereading(tmp_path, monkeypatch):
    folder = tmp_path / "run"
    log = start_run(folder)
    monkeypatch.setenv(cli.RUN_ENV, str(folder))
    at = on_run_page()
    assert metrics(at) == {"Latest step": "2,000", "Records": "9", "Loss": "0.04762"}
    steps, spread = drawn(film(at), "write spread")
    records = written(folder)
    assert steps.tolist() == [r["step"] for r in records]
    assert spread.tolist() == [r["layers"][LAYER]["write_spread_voxels"] for r in records]
    # the onset, counted here: the first step from which every record's writes stay under the collapse threshold
    collapsed = [r["step"] for r in records if r["layers"][LAYER]["write_spread_voxels"] < COLLAPSE_SPREAD_VOXELS]
    assert collapsed == list(range(ONSET, 2001, EVERY))
    onset = f"{markdown_code(LAYER)}: the writes collapsed to one place from step {ONSET:,}"
    assert [e.value for e in at.error] == [onset]
    assert [(s["x0"], s["line"]["dash"]) for s in film(at)["layout"]["shapes"]] == [(ONSET, "dot")] * 5  # each panel
    follower = at.session_state[LIVE_KEY][str(folder)].follower
    for step in (2250, 2500):
        log.append(step, measures(step))
    read = []
    real = follower._read_new
    follower._read_new = lambda: read.append(real()) or read[-1]  # what each poll reads of the file
    ok(at.run())
    assert at.session_state[LIVE_KEY][str(folder)].follower is follower  # the session's follower, kept
    assert b"".join(read) == (folder / RECORDS_FILE).read_bytes()[-len(b"".join(read)) :]
    assert [json.loads(line)["step"] for line in b"".join(read).splitlines()] == [2250, 2500]  # only the new ones
    assert metrics(at)["Latest step"] == "2,500" and metrics(at)["Records"] == "11"
    assert drawn(film(at), "write spread")[0].tolist()[-2:] == [2250, 2500]
    ok(at.switch_page("views/diagnose.py").run())
    assert onset in [e.value for e in at.error]
    log.append(2750, measures(2750, collapsed=False))  # recovered: no collapse holds now
    ok(at.switch_page(RUN_PAGE).run())
    assert not at.error and [s.value for s in at.success] == [
        "No memory layer has collapsed so far (12 records, up to step 2,750)."
    ]


def test_the_sidebar_opens_run_folders_under_the_data_root_and_nothing_else(tmp_path, monkeypatch):
    root, outside = tmp_path / "root", tmp_path / "outside"
    start_run(root / "runs" / "a", last=500)
    start_run(outside, last=500)
    (root / "runs" / "empty").mkdir()
    (root / "runs" / "link").symlink_to(outside)
    monkeypatch.setenv(cli.DATA_ROOT_ENV, str(root))
    at = on_run_page()
    assert at.info[0].value.startswith("No training run is open")
    at.text_input(key="run_path").set_value("runs/a")
    ok(at.run())
    assert at.session_state[RUN_KEY] == str((root / "runs" / "a").resolve())
    assert metrics(at)["Latest step"] == "500" and not at.error
    for typed, words in (
        (str(outside), "outside what this explorer may open (folders under the data root"),
        ("runs/link", "outside what this explorer may open"),  # a link out of the root is followed, then refused
        ("runs/empty", "not a run folder (no run.json)"),
        ("runs/missing", "is not a folder"),
    ):
        at.text_input(key="run_path").set_value(typed)
        ok(at.run())
        errors = [shown(e.value) for e in at.sidebar.error]
        assert len(errors) == 1 and words in errors[0] and errors[0].endswith("Still following a."), errors
        assert at.session_state[RUN_KEY] == str((root / "runs" / "a").resolve())  # still the good one


def test_without_a_run_or_a_data_root_the_sidebar_says_how_to_open_one(monkeypatch):
    monkeypatch.delenv(cli.DATA_ROOT_ENV, raising=False)
    monkeypatch.delenv(cli.RUN_ENV, raising=False)
    at = on_run_page()
    assert not at.text_input and any("--run DIR" in c.value for c in at.sidebar.caption)
    assert at.info[0].value.startswith("No training run is open")


def test_app_run_refuses_a_folder_that_holds_no_run_before_the_server_starts(tmp_path, monkeypatch, capsys):
    from tensor_memory_cli import main

    monkeypatch.setattr(cli, "serve", lambda *a, **k: pytest.fail("the server started"))
    (tmp_path / "empty").mkdir()
    for folder, words in ((tmp_path / "missing", "is not a folder"), (tmp_path / "empty", "no run.json")):
        assert main(["app", "--run", str(folder)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and f"{folder}: " in err[0] and words in err[0], err
    start_run(tmp_path / "good", last=0)
    seen = {}
    monkeypatch.setattr(cli, "serve", lambda command, env: seen.update(env=env) or 0)
    assert main(["app", "--run", str(tmp_path / "good")]) == 0
    assert seen["env"][cli.RUN_ENV] == str((tmp_path / "good").resolve())


def test_the_newest_snapshot_opens_in_explore(tmp_path, monkeypatch):
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64))
    attach_memory(model, MemoryConfig(token_dim=32, channels=4, grid=(4, 4, 4), chunk_size=4, gate_init=0.0), [1])
    ids = torch.randint(0, 64, (2, 32), generator=torch.Generator().manual_seed(1))
    with monitor(model.eval(), tmp_path / "mine", every=1, snapshot_every=2, probe={"input_ids": ids}) as mon:
        for step in range(4):
            mon.step(step)
    monkeypatch.setenv(cli.RUN_ENV, str(tmp_path / "mine"))
    at = on_run_page()
    assert "Newest snapshot of the probe: step 2" in " ".join(c.value for c in at.caption)
    ok(at.button[0].click().run())
    assert at.session_state["checkpoint_choice"] == "trace: mine step 2"
    sent = payload(at)  # Explore's stepper, on the snapshot: 32 tokens in chunks of 4
    assert sent is not None and sent["total"] == 8
