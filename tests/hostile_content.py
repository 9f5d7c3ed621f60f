"""Hostile strings for the app's browser tests, a trace and a run folder made only of them, and the checks that find
what they made in a page.

Every hostile string is built from atoms (a Markdown image, a link, maths, HTML, …), each holding a marker unique to
the place it was put and the atom (``hzT36a03``: token 36, atom 3), so an element it made names its source. Shown as
text, an atom keeps its markup characters verbatim beside its marker: its *witness* (the atom up to and including
its marker, ``**hzT36a03``) stands in the same text node. Rendered as markup, the marker stands alone (``<strong>``
holds ``hzT36a03``), in an attribute (``href``, ``src``), or in a Plotly string that Plotly will render.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import torch
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging

from analysis import load_trace, trace_model
from tensor_memory import MemoryConfig, attach_memory
from tensor_memory.training.run_log import HEADER_FILE, RunLog, snapshot_name

logging.set_verbosity_error()
N, VOCAB = 40, 61
MARKER = re.compile(r"hz[A-Z0-9]+a\d\d")
ATOMS = (  # "{m}": the marker
    "![{m}](http://127.0.0.1:9/img-{m}.png)",
    "[{m}](http://example.invalid/{m})",
    "**{m}**",
    "`{m}`",
    "```{m}```",
    "${m}^2$",
    ":red[{m}]",
    ":material/home: {m}",
    '<a href="http://example.invalid/{m}">{m}</a>',
    "<svg><a href=\"javascript:alert('{m}')\">{m}</a></svg>",
    "[{m}](javascript:alert('{m}'))",
    "[{m}](data:text/html,<b>{m}</b>)",
    '<img src="http://127.0.0.1:9/htmlimg-{m}.png">',
    "{m}%{x}",
    "<b>{m}</b>",
    "http://example.invalid/bare-{m}",
)
LINES = ("{m} first line", "# {m}", "- {m}", "> {m}", "1. {m}", "```{m}", "```", "| {m} | b |", "|---|---|")
FILE_ATOMS = (0, 1, 2, 3, 5, 6, 8, 14)  # what a file name holds ("/" written "⁄"), within 255 bytes
WITNESSES: dict[str, str] = {}


def atom(template: str, marker: str) -> str:
    """One atom with its marker; its witness recorded."""
    text = template.replace("{m}", marker)
    end = text.index(marker) + len(marker)
    WITNESSES[marker] = text.split(" ")[0] if text.startswith(marker) else text[:end]  # "{m}%{x}": all of it
    return text


def hostile(place: str, atoms: tuple[int, ...] = tuple(range(len(ATOMS)))) -> str:
    """Every atom (or those numbered ``atoms``), marked for ``place``, on one line."""
    return " ".join(atom(ATOMS[k], f"hz{place}a{k:02d}") for k in atoms)


def multiline(place: str) -> str:
    """Lines that Markdown would make a heading, a list, a quote, a fenced block and a table."""
    return "\n".join(atom(line, f"hz{place}a{50 + k:02d}") if "{m}" in line else line for k, line in enumerate(LINES))


def long(place: str) -> str:
    """A 500-character string: every atom, then padding."""
    text = hostile(place)[:500]
    return text + " " + "w" * (499 - len(text)) if len(text) < 499 else text


def file_name(place: str, written: dict[str, str] = {"/": "⁄"}) -> str:  # noqa: B006 - never changed
    """A trace file's name made of atoms, each character of ``written`` written as it says: a file on disk holds no
    "/"; a browser sends a file's name with '"' as "%22" (the HTML standard's form encoding)."""
    text = hostile(place, FILE_ATOMS)
    for char, instead in written.items():
        text = text.replace(char, instead)
        for marker in MARKER.findall(text):
            WITNESSES[marker] = WITNESSES[marker].replace(char, instead)
    return text + ".trace.safetensors"


def tokens() -> list[str]:
    """N tokens, each hostile: every chunk of 4 holds the one-line, the multi-line and the long kind."""
    kinds = (hostile, multiline, long)
    return [kinds[i % 3](f"T{i:02d}") for i in range(N)]


def hostile_trace(folder: Path) -> Path:
    """A real trace (a tiny GPT-2 with two memory layers, tokens and next-token targets) whose every string is
    hostile: its name, model, backbone, layer paths and tokens, and its file's name."""
    torch.manual_seed(0)
    config = GPT2Config(n_embd=32, n_layer=2, n_head=4, vocab_size=VOCAB, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)
    memory = MemoryConfig(token_dim=32, channels=4, grid=(5, 5, 5), chunk_size=4, gate_init=0.0)
    attach_memory(model.eval(), memory, layers=[0, 1])
    ids = torch.randint(0, VOCAB, (1, N), generator=torch.Generator().manual_seed(1))
    trace = trace_model(model, {"input_ids": ids}, tokens=tokens(), targets=ids[0, 1:], name=hostile("N"))
    trace.info.update(model=hostile("M"), backbone=hostile("B"))
    names = dict(zip(trace.layers, (hostile("L0"), multiline("L1") + " " + long("L1")), strict=True))
    trace.layers = {names[old]: layer for old, layer in trace.layers.items()}
    trace.info["layers"] = {names[old]: entry for old, entry in trace.info["layers"].items()}
    trace.summaries = {}  # derived from the layers: computed again under their new names
    path = trace.save(folder / file_name("F"))
    assert load_trace(path).tokens == trace.tokens  # the format keeps every hostile string
    return path


def hostile_run(folder: Path, snapshot: Path) -> Path:
    """A run folder (plain name) whose model, writer, layer paths and metric names are hostile; its snapshot is
    ``snapshot``."""
    from run_helpers import measures, model

    log = RunLog(folder).start(model(), every=250, snapshot_every=250, writer=hostile("W"))
    header = json.loads((folder / HEADER_FILE).read_text())
    layout = next(iter(header["layers"].values()))
    names = (hostile("R0"), multiline("R1"))
    header.update(model=hostile("RM"), layers=dict.fromkeys(names, layout))
    (folder / HEADER_FILE).write_text(json.dumps(header))
    for step in range(0, 2001, 250):
        measured = next(iter(measures(step).values()))
        log.append(step, dict.fromkeys(names, measured), loss=1 / (1 + step), metrics={hostile("RX"): 0.5})
    shutil.copy(snapshot, log.snapshot_path(2000))
    assert log.snapshot_path(2000).name == snapshot_name(2000)
    return folder
