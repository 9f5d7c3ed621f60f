"""The offline report: self-contained HTML, the numbers behind it, and the CLI."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from analysis import capture
from analysis.figures.report import report_html, report_numbers
from tensor_memory_cli import main

ROOT = Path(__file__).resolve().parents[1]
OCCLUSION = ROOT / "checkpoints" / "occlusion-tensor"


@pytest.fixture(scope="module")
def trace_file(tmp_path_factory):
    trace = capture(OCCLUSION, seed=0, index=1, occlusion_start=4, progress=False)
    return trace, trace.save(tmp_path_factory.mktemp("report") / "trace.safetensors")


def test_numbers_agree_with_the_trace(trace_file):
    trace, _ = trace_file
    numbers = report_numbers(trace)
    assert set(numbers) == {"trace", "addressing", "gates", "predictions", "occlusion"}
    correct = trace.chunks["prediction"] == trace.chunks["target"]
    hidden = trace.meta["occluded"]
    assert numbers["predictions"]["accuracy"] == pytest.approx(correct.mean())
    assert numbers["predictions"]["occluded_accuracy"] == pytest.approx(correct[hidden].mean())
    layer = trace.layer()
    gates = numbers["gates"]["backbone.blocks.1.memory"]
    assert gates["gate_scale"] == layer.gate_scale
    assert gates["gate_f_mean"][2] == pytest.approx(float(layer.gate_f[2].astype("float32").mean()), rel=1e-5)
    assert numbers["occlusion"]["memory"]["last_visible"] == 3
    json.dumps(numbers)  # everything is JSON


def test_html_is_self_contained_and_carries_the_verdict(trace_file):
    trace, _ = trace_file
    page = report_html(trace)
    assert page.startswith("<!DOCTYPE html>")
    assert "plotly" in page.lower() and len(page) > 3_000_000  # Plotly's JavaScript is inlined
    assert not re.search(r"<script[^>]+src=", page)  # nothing fetched from a network
    assert not re.search(r"<link[^>]+href=\"?https?:", page)
    verdict = report_numbers(trace)["addressing"]["verdict"]
    assert f"<b>{verdict}</b>" in page
    assert "Occlusion: belief frame by frame" in page
    assert page.count("Plotly.newPlot") >= 7


def test_report_cli(trace_file, tmp_path, capsys):
    _, path = trace_file
    out = tmp_path / "r.html"
    assert main(["report", "--trace", str(path), "--out", str(out)]) == 0
    assert out.stat().st_size > 3_000_000 and "offline" in capsys.readouterr().out
    assert main(["report", "--trace", str(path), "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["addressing"]["verdict"] in ("healthy", "coordinate collapse", "sigma collapse")
    assert "gates" in printed and "occlusion" in printed
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a trace at all")
    assert main(["report", "--trace", str(bad), "--out", str(tmp_path / "new.html")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bad) in err[0]
    assert main(["report", "--trace", str(path)]) == 2
    assert "nothing to do" in capsys.readouterr().err
    # Nothing is written over without asking: the report already there, the trace itself, a checkpoint's file.
    before = out.read_bytes()
    for target, words in (
        (out, "exists already; pass --overwrite"),
        (path, "own input"),
        (ROOT / "checkpoints" / "occlusion-tensor" / "config.json", "a file of the checkpoint"),
    ):
        assert (
            main(["report", "--trace", str(path), "--out", str(target), "--overwrite" if target == path else "--json"])
            == 2
        )
        assert words in capsys.readouterr().err
    assert out.read_bytes() == before
