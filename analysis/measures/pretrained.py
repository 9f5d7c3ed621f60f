"""What a memory trained on frozen MiniLM recalls: each asked piece, with the memory and with its read off."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import torch

from analysis.measures.interventions import intervention_hooks
from tensor_memory import hooks, memory_layers
from tensor_memory.pretrained.minilm import CLOSED_GATE, word_pieces
from tensor_memory.pretrained.recall import RecallModel, recall_batch


def minilm_trace(model: RecallModel, document: int, name: str, **recording):
    """A trace of test document ``document`` through the real MiniLM with the checkpoint's memory, read the way
    the recall model reads it (one MiniLM call per window, the memory carried from window to window): a Hugging
    Face model's trace, with the word pieces as its tokens."""
    from analysis.traces.model import trace_model

    ids = recall_batch(model.config, "test", [document])["ids"]  # (1, windows, L)
    flat = ids.reshape(1, -1)  # (1, windows·L): one window per segment, as the recall model feeds them
    pieces = [word_pieces().id_to_token(int(i)) for i in flat[0]]
    tokens = [p[2:] if p.startswith("##") else f" {p}" for p in pieces]  # as text: "##" continues a word
    return trace_model(
        model.encoder, {"input_ids": flat}, tokens=tokens, segment=ids.shape[-1], name=name, **recording
    )  # volumes, gates, cells, progress as trace_model takes them


def recall_examples(model: RecallModel, document: int, top: int = 5) -> list[dict[str, Any]]:
    """Every asked piece of test document ``document``: its window, the truth, the top guesses with the
    memory and with every memory's read gate σ(γ) set to 0 (hooks; nothing edits the weights)."""
    data = recall_batch(model.config, "test", [document])
    tokenizer = word_pieces()
    with torch.no_grad():
        logits, truth = model(data["ids"], data["targets"])
        with hooks(model, intervention_hooks("gate_off", list(memory_layers(model)))):
            logits_off, _ = model(data["ids"], data["targets"])
    where = (data["targets"][0] != -100).nonzero().tolist()  # (window, position) of each asked piece
    rows = []
    for i, (k, pos) in enumerate(where):
        guesses = logits[i].softmax(-1).topk(top)
        guesses_off = logits_off[i].softmax(-1).topk(top)
        rows.append(
            {
                "window": k,
                "position": pos,
                "truth": tokenizer.id_to_token(int(truth[i])),
                "with_memory": [(tokenizer.id_to_token(int(t)), float(p)) for p, t in zip(*guesses, strict=True)],
                "memory_off": [(tokenizer.id_to_token(int(t)), float(p)) for p, t in zip(*guesses_off, strict=True)],
            }
        )
    return rows


def window_text(model: RecallModel, document: int) -> list[str]:
    """The document's windows as text, asked pieces shown as [MASK]."""
    data = recall_batch(model.config, "test", [document])
    tokenizer = word_pieces()
    return [tokenizer.decode(row.tolist()) for row in data["ids"][0]]


def gate_history(folder: Path) -> dict[str, list]:
    """Step, σ(γ) of each memory and validation accuracy from a MiniLM run's train_log.jsonl."""
    steps, gates, val_steps, accuracy = [], [], [], []
    path = Path(folder) / "train_log.jsonl"
    if not path.exists():
        return {"steps": [], "gates": [], "val_steps": [], "val_accuracy": []}
    for line in path.read_text().splitlines()[:100_000]:
        entry = json.loads(line)
        steps.append(entry["step"])
        gates.append(entry.get("gate_scale", []))
        if "val_accuracy" in entry:
            val_steps.append(entry["step"])
            accuracy.append(entry["val_accuracy"])
    return {"steps": steps, "gates": gates, "val_steps": val_steps, "val_accuracy": accuracy}


def closed_gate_scale() -> float:
    """σ(γ) of a memory attached closed (γ at ``CLOSED_GATE``): how little its reads count before training."""
    return 1.0 / (1.0 + math.exp(-CLOSED_GATE))
