"""The run folder: written by `train` and by RunLog, followed by RunFollower (each record once, a cut last line
picked up when complete), hostile folders refused in one line, and the history the figure draws."""

from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest
import torch
from test_addressing_measures import config
from test_training import kill_run_at, tiny_config

from analysis import trace_model
from analysis.figures.training import addressing_history_figure
from analysis.measures.addressing import measure
from analysis.traces.run_log import MAX_LINE_BYTES, RunFollower, follow_run
from tensor_memory import MemoryConfig, TensorMemory, record
from tensor_memory.errors import FileFormatError
from tensor_memory.memory.measures import layer_measures, occupancy
from tensor_memory.training import train
from tensor_memory.training.log import read_training_log
from tensor_memory.training.run_log import HEADER_FILE, RECORDS_FILE, RunLog, layer_summary, snapshot_name

LAYER = "backbone.blocks.0.memory"


def tiny_memory() -> TensorMemory:
    torch.manual_seed(0)
    return TensorMemory(MemoryConfig(token_dim=8, channels=2, grid=(3, 4, 5), chunk_size=2))


def started(folder, model=None) -> RunLog:
    return RunLog(folder).start(model or tiny_memory(), every=1, snapshot_every=None, writer="test")


def test_train_writes_the_run_folder_beside_an_unchanged_training_log(tmp_path):
    train(config(), tmp_path, progress=False)
    header = json.loads((tmp_path / HEADER_FILE).read_text())
    assert header["layers"] == {LAYER: {"grid": [2, 3, 3], "channels": 2}} and header["every"] == 2
    assert header["writer"] == "tensor-memory train" and header["snapshot_every"] is None
    records = follow_run(tmp_path).records
    logged = [e for e in read_training_log(tmp_path) if "addressing" in e]
    assert [r["step"] for r in records] == [e["step"] for e in logged] == [2, 4]
    for record_, entry in zip(records, logged, strict=True):
        assert set(entry["addressing"][LAYER]) == set(record_["layers"][LAYER]) - {"occupancy"}  # the log as it was
        assert {k: record_["layers"][LAYER][k] for k in entry["addressing"][LAYER]} == entry["addressing"][LAYER]
        assert record_["metrics"] == {k[4:]: v for k, v in entry.items() if k.startswith("val_")}
        assert 0 < record_["layers"][LAYER]["occupancy"] <= 1
    history = follow_run(tmp_path).history()
    assert history["metric"] == "accuracy" and history["val_accuracy"][0].tolist() == [2, 4]
    assert addressing_history_figure(history).layout.annotations[-1].text == "validation accuracy"


def test_a_resumed_train_trims_the_records_it_redoes_and_keeps_its_header(tmp_path):
    out = tmp_path / "run"
    monkeypatch = pytest.MonkeyPatch()
    try:
        kill_run_at(monkeypatch, tiny_config(steps=12), out, call=10)  # resume file at step 8
    finally:
        monkeypatch.undo()
    header = (out / HEADER_FILE).read_text()
    assert [r["step"] for r in follow_run(out).records] == [4, 8]
    follower = follow_run(out)
    with (out / RECORDS_FILE).open("a") as records:  # killed after the record of step 12, before its resume file
        records.write(json.dumps({"step": 12, "layers": {}}) + "\n" + '{"step": 16, "la')
    assert [r["step"] for r in follower.poll()] == [12]
    train(tiny_config(steps=12), out, resume=True, progress=False)
    assert (out / HEADER_FILE).read_text() == header  # the run's start, as it was
    assert [r["step"] for r in follow_run(out).records] == [4, 8, 12]  # step 12 once: the resumed run's
    assert [r["step"] for r in follower.poll()] == [4, 8, 12] and follower.restarted  # the trim, seen as a restart
    assert follower.poll() == [] and not follower.restarted


def test_occupancy_is_the_share_of_voxels_the_verdict_counts_as_ever_written():
    memory = tiny_memory()
    x = torch.randn(1, 12, 8)
    with torch.no_grad(), record(memory) as rec:
        memory(x)
    trace = trace_model(memory, x)
    expected = measure([trace])["ever_active_fraction"]  # analysis's own computation, from the write mass
    layer = rec.layers[""]
    assert occupancy(layer.mu_write, layer.sigma, (3, 4, 5)) == pytest.approx(expected, abs=1e-12)
    summary = layer_summary(layer, (3, 4, 5))
    assert summary == {**layer_measures(layer, (3, 4, 5)), "occupancy": summary["occupancy"]}
    far = torch.tensor([[[-1.0, -1.0, -1.0]]])  # one narrow write in a corner reaches that voxel alone
    assert occupancy(far, torch.tensor([[0.01]]), (3, 4, 5)) == pytest.approx(1 / 60)


def test_a_follower_sees_each_record_once_while_a_writer_appends(tmp_path):
    log = started(tmp_path)
    follower = follow_run(tmp_path)
    seen, done = [], threading.Event()

    def write():
        for step in range(200):
            log.append(step, {"": {"sigma_voxels": step / 10, "occupancy": None}}, loss=1.0 / (step + 1))
        done.set()

    writer = threading.Thread(target=write)
    writer.start()
    while not done.is_set():
        seen += follower.poll()
    writer.join()
    seen += follower.poll()
    assert [r["step"] for r in seen] == list(range(200)) and follower.records == seen
    assert seen[7]["layers"][""] == {"sigma_voxels": 0.7, "occupancy": None} and seen[7]["loss"] == 1 / 8


def test_a_cut_last_line_waits_for_its_end_and_only_new_bytes_are_read(tmp_path, monkeypatch):
    log = started(tmp_path)
    log.append(0, {"": {"gate_scale": 0.5}})
    follower = follow_run(tmp_path)
    line = json.dumps({"step": 1, "layers": {"": {"gate_scale": 0.25}}}) + "\n"
    with (tmp_path / RECORDS_FILE).open("a") as records:
        records.write(line[:20])
    assert follower.poll() == []  # cut: not yet a record, and not an error
    reads = []
    original = os.pread
    monkeypatch.setattr(os, "pread", lambda fd, n, at: reads.append((n, at)) or original(fd, n, at))
    with (tmp_path / RECORDS_FILE).open("a") as records:
        records.write(line[20:])
    assert [r["step"] for r in follower.poll()] == [1] and follower.poll() == []
    size = (tmp_path / RECORDS_FILE).stat().st_size
    assert reads == [(len(line) - 20, size - len(line) + 20)]  # only the bytes appended since


def test_loss_and_measures_that_are_not_finite_are_written_as_null(tmp_path):
    entry = started(tmp_path).append(3, {"": {"sigma_voxels": None}}, loss=torch.tensor(float("nan")))
    assert entry["loss"] is None and follow_run(tmp_path).records[0]["loss"] is None


def write_run(folder, lines: list[str]) -> None:
    started(folder)
    (folder / RECORDS_FILE).write_text("".join(line + "\n" for line in lines))


GOOD = json.dumps({"step": 0, "layers": {"": {"gate_scale": 0.5}}})


@pytest.mark.parametrize(
    "lines, problem",
    [
        (["[1, 2]"], "line 1: not a JSON object"),
        ([GOOD, "not json"], "line 2: not JSON"),
        (['{"step": 1, "layers": {"": {"gate_scale": 1e999}}}'], "finite numbers"),
        (['{"step": 1, "layers": {"": {"gate_scale": NaN}}}'], "not JSON"),
        (['{"step": "1", "layers": {}}'], "'step' must be a whole number"),
        (['{"step": true, "layers": {}}'], "'step' must be a whole number"),
        (['{"step": 1, "loss": "low", "layers": {}}'], "'loss' must be finite"),
        (['{"step": 1, "layers": {"other.memory": {}}}'], "not one of the header's layers"),
        (['{"step": 1, "layers": {"": {"gate_scale": [1]}}}'], "finite numbers"),
        (['{"step": 1, "layers": {}, "extra": 1}'], "unexpected keys"),
        (['{"step": 1, "step": 2, "layers": {}}'], "duplicate key"),
        (['{"step": 1, "layers": {"": {"x": "' + "a" * MAX_LINE_BYTES + '"}}}'], "longer than"),
    ],
)
def test_records_that_are_not_a_runs_are_refused_in_one_line(tmp_path, lines, problem):
    write_run(tmp_path, lines)
    with pytest.raises(FileFormatError) as info:
        follow_run(tmp_path)
    assert problem in str(info.value) and str(tmp_path / RECORDS_FILE) in str(info.value)
    assert "\n" not in str(info.value)


def test_a_huge_line_still_being_written_is_refused(tmp_path):
    started(tmp_path)
    (tmp_path / RECORDS_FILE).write_text('{"step": 1, "layers": {"": {"x": "' + "a" * (MAX_LINE_BYTES + 1))
    with pytest.raises(FileFormatError, match="a line longer than"):
        follow_run(tmp_path)


def rewrite_header(folder, **changes):
    header = json.loads((folder / HEADER_FILE).read_text())
    (folder / HEADER_FILE).write_text(json.dumps({**header, **changes}))


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda f: (f / HEADER_FILE).unlink(), "not a run folder (no run.json)"),
        (lambda f: (f / HEADER_FILE).write_text("{not json"), "not JSON"),
        (lambda f: (f / HEADER_FILE).write_text("[]"), "not a run header"),
        (lambda f: rewrite_header(f, format="tensor-memory-trace"), "not a run header"),
        (lambda f: rewrite_header(f, version=2), "version 2"),
        (lambda f: rewrite_header(f, every=0), "a run header needs"),
        (lambda f: rewrite_header(f, layers={"m": {"grid": [3, 3], "channels": 2}}), "a run header needs"),
        (lambda f: rewrite_header(f, layers={"m": {"grid": [3, 3, 3], "channels": True}}), "a run header needs"),
        (lambda f: (f / HEADER_FILE).write_text(" " * (65 * 1024)), "over the"),
        (lambda f: (f / RECORDS_FILE).unlink(), "no run_log.jsonl"),
        (
            lambda f: os.replace(f / RECORDS_FILE, f / "elsewhere") or (f / RECORDS_FILE).symlink_to(f / "elsewhere"),
            "cannot read the run's records",
        ),
        (
            lambda f: os.replace(f / HEADER_FILE, f / "elsewhere") or (f / HEADER_FILE).symlink_to(f / "elsewhere"),
            "is a symbolic link",
        ),
    ],
)
def test_a_folder_that_is_not_a_run_is_refused_in_one_line(tmp_path, damage, problem):
    folder = tmp_path / "run"
    started(folder)
    damage(folder)
    with pytest.raises(FileFormatError) as info:
        follow_run(folder)
    assert problem in str(info.value) and str(folder) in str(info.value) and "\n" not in str(info.value)


def test_a_file_or_a_link_in_place_of_the_folder_is_refused(tmp_path):
    started(tmp_path / "run")
    (tmp_path / "file").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "run")
    with pytest.raises(FileFormatError, match="is not a folder"):
        RunFollower(tmp_path / "file")
    with pytest.raises(FileFormatError, match="is a symbolic link"):
        RunFollower(tmp_path / "link")


def test_the_newest_snapshot_is_the_latest_steps_regular_file(tmp_path):
    log = started(tmp_path)
    follower = RunFollower(tmp_path)
    assert follower.newest_snapshot() is None
    for step in (5, 40, 300):
        log.snapshot_path(step).write_bytes(b"x")
    (tmp_path / "snapshots" / snapshot_name(9000)).symlink_to(tmp_path / HEADER_FILE)  # a link: not ours
    (tmp_path / "snapshots" / "step-99999999999.trace.safetensors").write_bytes(b"x")  # not a name we write
    assert follower.newest_snapshot() == tmp_path / "snapshots" / snapshot_name(300)


def test_a_monitor_history_follows_the_training_loss_and_draws(tmp_path):
    log = started(tmp_path)
    for step, loss in ((0, 3.0), (10, 2.0), (20, None)):
        log.append(step, {"": {"sigma_voxels": 1.0 + step, "occupancy": 0.5}}, loss=loss)
    history = follow_run(tmp_path).history()
    assert history["val_loss"][0].tolist() == [0, 10] and history["val_loss"][1].tolist() == [3.0, 2.0]
    assert np.array_equal(history["layers"][""]["sigma_voxels"][1], [1.0, 11.0, 21.0])
    fig = addressing_history_figure(history)
    assert fig.layout.annotations[-1].text == "training loss"
    assert any(trace.name == "voxels written (≥ e⁻²)" for trace in fig.data)
