"""The chunk stepper's payload: one typed structure, documented where it is built (StepperPayload's docstring) and
where it is read (the comment block at the top of app/browser/stepper.js), and the reports a browser sends back."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import plotly.graph_objects as go
import pytest

from analysis import capture
from analysis.figures.base import TEMPLATE
from analysis.figures.chunk_input import chunk_outcome
from app.browser_stepper import Heading, Row, StepperPayload, digest, reported_chunk, stepper_payload

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = (ROOT / "app" / "browser" / "stepper.js").read_text()
FIELDS = [field.name for field in dataclasses.fields(StepperPayload)]


@pytest.fixture(scope="module")
def trace():
    return capture(ROOT / "checkpoints" / "occlusion-tensor", seed=0, progress=False)


def test_every_field_is_documented_where_it_is_built_and_where_it_is_read():
    block = SCRIPT[SCRIPT.index("// The payload (") : SCRIPT.index('"use strict"')]
    documented = re.findall(r"^//   (\w+) ", block, flags=re.M)
    assert documented == FIELDS  # the same fields, in the same order
    assert all(f"``{name}``" in StepperPayload.__doc__ for name in FIELDS)
    read = set(re.findall(r"\bpayload\.(\w+)", SCRIPT.replace(block, "")))
    assert read == set(FIELDS)  # the browser reads every field and nothing else


def test_a_payload_holds_every_chunk_of_its_span_as_the_browser_reads_it(trace):
    def views(k, outcome):
        return {
            "figure": go.Figure(go.Scatter(x=[k], y=[k]), layout=dict(template=TEMPLATE)),
            "card": f"<b>{outcome['event']}</b>",
            "picture": b"\x89PNG" + bytes([k]),
        }

    rows = (Row((("figure",), ("card", "picture")), (1, 2)), Heading("Below"))
    sent = stepper_payload(
        trace, "sample", "settings", views, rows, {"card": "A card"}, {"figure": 300}, (3, 6), reports=True
    )
    shown = json.loads(json.dumps(sent.to_json()))  # what the component receives
    assert list(shown) == FIELDS
    assert (shown["offset"], shown["count"], shown["total"]) == (3, 4, trace.num_chunks)
    assert shown["kinds"] == {"track": "figure", "figure": "figure", "card": "html", "picture": "image"}
    assert all(len(cells) == 4 for cells in shown["views"].values())
    assert shown["views"]["figure"][2]["data"][0]["x"] in ([5], {"dtype": "i1", "bdata": "BQ=="})  # chunk 5
    assert shown["views"]["card"][0] == f"<b>{chunk_outcome(trace, 3)['event']}</b>"
    assert shown["views"]["picture"][1] == "data:image/png;base64,iVBORwQ="  # b"\x89PNG\x04"
    assert shown["events"] == [chunk_outcome(trace, k)["event"] for k in range(3, 7)]
    assert shown["rows"] == [{"widths": [1, 2], "columns": [["figure"], ["card", "picture"]]}, {"heading": "Below"}]
    assert shown["labels"] == {"card": "A card"} and shown["heights"] == {
        "track": None,
        "figure": 300,
        "card": None,
        "picture": None,
    }
    assert shown["reports"] and (shown["start"], shown["moves"]) == (0, 0)  # the page sets them when it draws
    assert "template" not in shown["views"]["figure"][0]["layout"] and shown["template"]  # the app's: sent once
    again = stepper_payload(trace, "sample", "other settings", views, rows, span=(3, 6))
    assert again.id != sent.id and again.sample == sent.sample == digest("sample")


def test_a_report_counts_for_its_sample_after_the_servers_last_move_only():
    value = {"chunk": 4, "sample": digest(("ref", "sample")), "moves": 2}
    assert reported_chunk(value, ("ref", "sample"), 2, 12) == 4
    assert reported_chunk(value, ("ref", "sample"), 3, 12) is None  # the server moved since the browser chose
    assert reported_chunk(value, ("ref", "another sample"), 2, 12) is None
    assert reported_chunk({**value, "chunk": 12}, ("ref", "sample"), 2, 12) is None  # not a chunk of the trace
    assert reported_chunk(None, ("ref", "sample"), 2, 12) is None  # nothing reported yet
