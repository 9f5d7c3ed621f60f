"""Language modelling as a stream: a split fed in order, in fixed segments, each backbone carrying its own state.

Transformer-XL evaluates this way: the split's token stream is cut into ``rows`` contiguous rows (row r holds tokens
r·T … (r+1)·T − 1), and each row is fed ``segment`` tokens at a time. With the state **carried**, every segment
continues from the state the previous one left (the memory's volumes, XL's cache, the linear attention's sums,
``local``'s window, ``base``'s whole cache), so a token at distance t from the row's start has t tokens of context
behind it; with the state **reset**, each segment starts empty, as the models were trained. The loss of every
predicted token is kept with its **position**: how many tokens of context the model had been given since its state
last started. Mean NLL over positions t ≥ W and t ≥ 4W (W the attention window) and a curve over positions binned
on a log scale show what carried state is worth where attention cannot reach (as the paper's authors' follow-up
work reports it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import sys
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from tqdm.auto import tqdm

from ..backbone import BackboneConfig
from ..memory import memory_layers
from ..memory.hooking import hooks, reads_off
from ..storage.checkpoint import Checkpoint


@dataclasses.dataclass
class StreamedLoss:
    """The NLL (nats) of every predicted token of a stream, and its position (context tokens behind it, from 0)."""

    nll: torch.Tensor  # (rows, T − 1) float64
    position: torch.Tensor  # (rows, T − 1) int64

    def mean_nll(self, at_least: int = 0) -> float | None:
        """Mean NLL of the tokens at position ≥ ``at_least``; None when there are none."""
        chosen = self.nll[self.position >= at_least]
        return float(chosen.mean()) if chosen.numel() else None

    def perplexity(self, at_least: int = 0) -> float | None:
        nll = self.mean_nll(at_least)
        return None if nll is None else math.exp(nll)

    def curve(self) -> list[dict[str, float]]:
        """Mean NLL over positions binned on a log scale: [0, 1), [1, 2), [2, 4), [4, 8), … up to the longest."""
        rows, top = [], int(self.position.max()) + 1
        low, high = 0, 1
        while low < top:
            chosen = self.nll[(self.position >= low) & (self.position < high)]
            if chosen.numel():
                rows.append({"from": low, "to": high, "tokens": int(chosen.numel()), "nll": float(chosen.mean())})
            low, high = high, high * 2
        return rows


def stream_rows(ids: torch.Tensor, rows: int) -> torch.Tensor:
    """A token stream ``ids`` (T,) cut into ``rows`` contiguous rows (rows, T // rows); the remainder is dropped."""
    length = ids.numel() // rows
    if length < 2:
        raise ValueError(
            f"a stream of {ids.numel():,} tokens cannot fill {rows} rows of 2 tokens or more; use fewer rows"
        )
    return ids[: rows * length].view(rows, length)  # (rows, T)


@torch.no_grad()
def streamed_loss(
    model: nn.Module, ids: torch.Tensor, segment: int, rows: int = 8, carry: bool = True, progress: bool | None = None
) -> StreamedLoss:
    """The loss of ``model`` (a causal language model: ``logits, state = model({"tokens": x}, state)``) on token
    stream ``ids`` fed ``segment`` tokens at a time in ``rows`` rows, its state carried between segments (``carry``)
    or started afresh for each. The model runs in eval mode (its mode is restored afterwards)."""
    if segment < 1:
        raise ValueError(f"segment must be at least 1 token, got {segment}")
    stream = stream_rows(ids, rows)  # (rows, T)
    inputs, targets = stream[:, :-1], stream[:, 1:]  # (rows, T − 1): token t predicts token t + 1
    was_training = model.training
    model.eval()
    nll, state = [], None
    starts = range(0, inputs.shape[1], segment)
    device = next(model.parameters()).device
    if progress is None:
        progress = sys.stderr.isatty()
    try:
        for start in tqdm(
            starts, desc="streaming" if carry else "segments", unit="segment", disable=not progress, leave=False
        ):
            piece = inputs[:, start : start + segment].to(device)
            logits, state = model({"tokens": piece}, state if carry else None)  # (rows, n, vocab)
            nll.append(
                F.cross_entropy(
                    logits.double().transpose(1, 2), targets[:, start : start + segment].to(device), reduction="none"
                ).cpu()
            )  # (rows, n)
    finally:
        model.train(was_training)
    offsets = torch.arange(inputs.shape[1])
    position = offsets if carry else offsets % segment  # context behind each token since its state started
    return StreamedLoss(torch.cat(nll, dim=1), position.expand(rows, -1).clone())


def attention_reach(backbone: BackboneConfig, trained_length: int) -> int:
    """W: how many tokens back attention sees — the window, XL's segment, or (full or linear attention) the length
    the model was trained on."""
    return backbone.window or (backbone.xl_segment if backbone.kind == "xl" else None) or trained_length


def stream_evaluation(
    ckpt: Checkpoint, segment: int | None = None, rows: int = 8, tokens: int | None = None, progress: bool | None = None
) -> dict[str, Any]:
    """A language-model checkpoint on its test split as a stream: the loss with its state carried, reset every
    segment, and (with memory layers) carried with the memory's reads off; each as the perplexity, the mean NLL at
    positions t ≥ W and t ≥ 4W and the log-binned curve. ``segment``: tokens a call (default the trained
    ``seq_len``); ``tokens``: the first this many tokens of the split (default all)."""
    if ckpt.task.name != "language_modelling":
        raise ValueError(
            f"--stream applies to language models (language_modelling checkpoints); {ckpt.path} holds "
            f"a model of task {ckpt.task.name}"
        )
    segment = segment or ckpt.task.tokens
    ids = ckpt.task.stream("test")
    ids = ids if tokens is None else ids[:tokens]
    reach = attention_reach(ckpt.model.backbone.config, ckpt.task.tokens)
    runs = {"carried": {"carry": True}, "reset": {"carry": False}}
    layers = list(memory_layers(ckpt.model))
    if layers:
        runs["reads off, carried"] = {"carry": True, "hooks": reads_off(layers)}
    out: dict[str, Any] = {"segment": segment, "rows": rows, "tokens": int(ids.numel()), "W": reach}
    for name, run in runs.items():
        with hooks(ckpt.model, run["hooks"]) if "hooks" in run else contextlib.nullcontext():
            loss = streamed_loss(ckpt.model, ids, segment, rows, run["carry"], progress)
        out[name] = {
            "perplexity": loss.perplexity(),
            "nll_t>=W": loss.mean_nll(reach),
            "nll_t>=4W": loss.mean_nll(4 * reach),
            "curve": loss.curve(),
        }
    return out


__all__ = ["StreamedLoss", "stream_rows", "streamed_loss", "attention_reach", "stream_evaluation"]
