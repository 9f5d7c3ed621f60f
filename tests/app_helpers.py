"""What the AppTest-driven tests share: starting the app, reading its charts, uploading a checkpoint."""

from __future__ import annotations

import base64
import html
import io
import json
import re
import zipfile
from pathlib import Path

import numpy as np
from streamlit.testing.v1 import AppTest

from analysis.figures.escape import WORD_JOINER
from analysis.figures.stepped import patched

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


def shown(markdown: str) -> str:
    """Markdown the app wrote with ``analysis.figures.escape`` as its words read (its escapes undone; formatting
    such as ``**`` stays)."""
    return html.unescape(re.sub(r"\\([!-/:-@\[-`{-~])", r"\1", markdown)).replace(WORD_JOINER, "")


def ok(at: AppTest) -> AppTest:
    assert not at.exception, "\n".join(str(e.value) for e in at.exception)
    return at


def payload(at: AppTest) -> dict | None:
    """What the page sent its browser stepper (StepperPayload.to_json), or None on a page without one."""
    for element in at.get("component_instance"):
        return json.loads(element.proto.json_args)["payload"]
    return None


def counter(at: AppTest) -> str:
    """The "Chunk k / K" the browser's stepper opens on (the session's chunk)."""
    sent = payload(at)
    return f"Chunk {sent['start']} / {sent['total'] - 1}"


def report(at: AppTest, page: str, chunk: int, **changed) -> AppTest:
    """The browser's stepper of ``page`` (its key's prefix) showing ``chunk``: the value it sends back on a page that
    asks for reports (``changed`` replaces its sample or moves), and the run that follows."""
    sent = payload(at)
    at.session_state[f"{page}_stepper"] = {"chunk": chunk, "sample": sent["sample"], "moves": sent["moves"], **changed}
    return ok(at.run())


def figure(sent: dict, name: str, chunk: int) -> dict:
    """The figure JSON a stepper's payload ``sent`` draws for view ``name`` at the trace's ``chunk`` (as
    ``browser/stepper.js`` makes it: a view drawn once gets the chunk's leaves put in)."""
    held = sent["views"][name][chunk - sent["offset"]]
    return patched(sent["drawn"][name], held) if name in sent.get("drawn", {}) else held


def chart(at: AppTest, title: str, chunk: int | None = None) -> dict:
    """The spec of the Plotly chart whose title contains ``title``: drawn by the server, or sent to the
    in-browser stepper for ``chunk`` (default: the chunk it opens on)."""
    specs = [json.loads(element.proto.spec) for element in at.get("plotly_chart")]
    sent = payload(at)
    if sent is not None:
        at_chunk = sent["start"] if chunk is None else chunk
        specs += [figure(sent, name, at_chunk) for name in sent["views"] if sent["kinds"][name] == "figure"]
    for spec in specs:
        if title in (spec["layout"].get("title") or {}).get("text", ""):
            return spec
    raise AssertionError(f"no chart titled {title!r}")


def values(array) -> np.ndarray:
    """A Plotly JSON array: a list, or a typed array {"dtype", "bdata" (base64), "shape"}."""
    if isinstance(array, dict):
        flat = np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"])
        return flat.reshape([int(n) for n in str(array.get("shape", len(flat))).split(",")])
    return np.asarray(array)


def drawn_volume(spec: dict, shape: tuple[int, int, int]) -> np.ndarray:
    """The (D, H, W) values a 3D volume chart draws, NaN where it draws nothing (a point cloud's left-out voxels)."""
    trace = spec["data"][0]
    if trace["type"] != "scatter3d":
        return values(trace["value"]).reshape(shape)
    out = np.full(shape, np.nan, dtype=np.float32)
    z, y, x = (values(trace[axis]).astype(int) for axis in "zyx")
    out[z, y, x] = values(trace["customdata"])
    return out


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


def minilm_trace(path: Path) -> Path:
    """A trace of the real all-MiniLM-L6-v2 with the shipped minilm-tensor memory after its last layer, read
    the way the recall model reads (one MiniLM call per window, the memory carried): a Hugging Face model's trace."""
    from analysis.measures.pretrained import minilm_trace as trace_of
    from tensor_memory.pretrained.checkpoint import load_minilm_checkpoint

    model, _, _ = load_minilm_checkpoint(CHECKPOINTS / "minilm-tensor")
    return trace_of(model, 0, "all-MiniLM-L6-v2 + minilm-tensor memory").save(path)
