"""What a language model's memory does for each token: losses with and without it, and what a read draws on.

- :func:`token_losses` runs one sample twice — as trained, and with every memory layer's read gate
  σ(γ) set to 0 through its hook point (the memory still writes, nothing is read back) — and gives
  per token the loss of the true next token both ways, their difference (the memory's contribution;
  positive = the memory helps) and the top-5 next tokens with their probabilities.
- :func:`read_overlap` says which earlier chunks a read draws on: how much of chunk j's Gaussian
  write footprint lies at chunk k's read point, exp(−‖μ_read,k − μ_write,j‖² / 2σ_j²), for j < k
  (chunk k reads the state before its own write, so j ≥ k is 0); :func:`read_source` the one it
  draws on most.
- :func:`chunk_text` (a trace with tokens) and :func:`loss_rows` (a :func:`token_losses` sample) give one
  chunk's text and a row of numbers per position.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from analysis.measures.checks import check_index
from analysis.measures.interventions import intervention_hooks
from analysis.traces.trace import Trace
from tensor_memory import hooks, memory_layers
from tensor_memory.storage.checkpoint import Checkpoint

TOP = 5
READ_FLOOR = 0.05  # a write whose footprint at the read is below this is not what the read draws on
BEFORE = 48  # tokens of text shown before a chunk


@dataclasses.dataclass
class TokenLosses:
    tokens: list[str]  # the N input tokens as text
    next_tokens: list[str]  # the N tokens to predict (the targets) as text
    loss: np.ndarray  # (N,) nats, with the memory
    loss_without_memory: np.ndarray | None  # (N,) with every read gate at 0; None without memory layers
    top_tokens: list[list[str]]  # (N, 5) the model's five likeliest next tokens
    top_probs: np.ndarray  # (N, 5)
    chunk_size: int  # tokens per memory chunk (1 without memory layers)

    @property
    def contribution(self) -> np.ndarray | None:
        """Loss without the memory minus loss with it, per token (positive: the memory helps)."""
        return None if self.loss_without_memory is None else self.loss_without_memory - self.loss


def _losses(model, inputs, targets) -> tuple[torch.Tensor, torch.Tensor]:
    logits, _ = model(inputs)  # (1, N, V)
    logp = F.log_softmax(logits[0].float().cpu(), dim=-1)  # (N, V), beside the targets on the CPU
    return -logp.gather(1, targets[0][:, None])[:, 0], logp.exp()


def token_losses(ckpt: Checkpoint, seed: int = 0, index: int = 0) -> TokenLosses:
    """Per-token losses of sample ``index`` of the ``trace`` stream ``seed`` (the test text), with and
    without the memory. Raises ValueError for a checkpoint that is not a language model."""
    task, model = ckpt.task, ckpt.model
    if not hasattr(task, "decode"):
        raise ValueError(f"{ckpt.path}: a {task.name!r} checkpoint; the text view needs a language_modelling one")
    batch = task.draw("trace", 1, seed, index)
    memories = memory_layers(model)
    with torch.no_grad():
        loss, probs = _losses(model, batch.inputs, batch.targets)
        without = None
        if memories:
            with hooks(model, intervention_hooks("gate_off", list(memories))):
                without = _losses(model, batch.inputs, batch.targets)[0].numpy()
    top = probs.topk(TOP, dim=-1)
    chunk = next((m.config.chunk_size for m in memories.values()), 1)
    return TokenLosses(
        tokens=task.decode(batch.inputs["tokens"][0]),
        next_tokens=task.decode(batch.targets[0]),
        loss=loss.numpy(),
        loss_without_memory=without,
        top_tokens=[task.decode(row) for row in top.indices],
        top_probs=top.values.numpy(),
        chunk_size=chunk,
    )


def read_overlap(mu_read: np.ndarray, mu_write: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """(K, K): entry [k, j] = chunk j's write footprint at chunk k's read point, for j < k; 0 elsewhere.

    ``mu_read`` and ``mu_write`` (K, 3) in normalised coordinates, ``sigma`` (K,) the writes' spreads.
    """
    mu_read, mu_write = np.asarray(mu_read, dtype=np.float64), np.asarray(mu_write, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    if (
        mu_read.ndim != 2
        or mu_read.shape[1] != 3
        or mu_write.shape != mu_read.shape
        or sigma.shape != mu_read.shape[:1]
    ):
        raise ValueError(
            f"read_overlap expects mu_read, mu_write (K, 3) and sigma (K,), got {mu_read.shape}, "
            f"{mu_write.shape}, {sigma.shape}"
        )
    distance2 = ((mu_read[:, None, :] - mu_write[None, :, :]) ** 2).sum(-1)  # (K read, K write)
    footprint = np.exp(-distance2 / (2 * sigma[None, :] ** 2))
    return np.tril(footprint, k=-1)  # only earlier writes


def read_source(overlap: np.ndarray, chunk: int, floor: float = READ_FLOOR) -> tuple[int, float] | None:
    """(j, footprint): the earlier chunk whose write chunk ``chunk``'s read lands on most (a :func:`read_overlap`
    row), and its footprint at the read; None when no earlier write's footprint there is above ``floor``."""
    earlier = np.asarray(overlap)[chunk, :chunk]
    if not len(earlier) or earlier.max() <= floor:
        return None
    j = int(earlier.argmax())
    return j, float(earlier[j])


def loss_rows(losses: TokenLosses, chunk: int, before: int = BEFORE) -> dict[str, Any]:
    """Chunk ``chunk`` of a :func:`token_losses` sample (a chunk past the text: its last), as :func:`chunk_text`
    gives a trace's: ``chunk``, ``start``, ``stop``, the ``before`` tokens leading up to it, its ``text``, and per
    position a row: the position, the token, the true next token, the loss (nats, 3 decimals) with the memory and
    without it, and the five likeliest next tokens with their probabilities."""
    chunk = min(max(int(chunk), 0), (len(losses.tokens) - 1) // losses.chunk_size)
    start, stop = chunk * losses.chunk_size, min((chunk + 1) * losses.chunk_size, len(losses.tokens))
    rows = [
        {
            "position": i,
            "token": losses.tokens[i],
            "next (true)": losses.next_tokens[i],
            "loss": round(float(losses.loss[i]), 3),
            **(
                {"loss, memory off": round(float(losses.loss_without_memory[i]), 3)}
                if losses.loss_without_memory is not None
                else {}
            ),
            **{f"top {r + 1}": f"{losses.top_tokens[i][r]!r} {losses.top_probs[i][r]:.0%}" for r in range(TOP)},
        }
        for i in range(start, stop)
    ]
    return {
        "chunk": chunk,
        "start": start,
        "stop": stop,
        "before": "".join(losses.tokens[max(0, start - before) : start]),
        "text": "".join(losses.tokens[start:stop]),
        "rows": rows,
    }


def chunk_text(trace: Trace, chunk: int, before: int = BEFORE) -> dict[str, Any]:
    """A trace with tokens: the chunk's text, the ``before`` tokens leading up to it, and one row per position
    (position, token, and with targets the target and predicted class, as text where the trace holds its
    vocabulary (:meth:`Trace.class_text`), and p(target))."""
    if trace.tokens is None:
        raise ValueError("this trace has no tokens: pass tokens=[...] to trace_model to record them")
    chunk = check_index(chunk, trace.num_chunks, "chunk")
    positions = trace.chunk_positions(chunk)
    start, stop = positions.start, positions.stop
    rows = []
    for i in range(start, stop):
        row: dict[str, Any] = {"position": i, "token": trace.tokens[i]}
        if trace.per_token:
            target = int(trace.per_token["target"][i])
            row.update(
                {
                    "target": None if target < 0 else trace.class_text(target),
                    "prediction": trace.class_text(trace.per_token["prediction"][i]),
                    "p(target)": None if target < 0 else round(float(trace.per_token["p_target"][i]), 4),
                }
            )
        rows.append(row)
    return {
        "start": start,
        "stop": stop,
        "before": "".join(trace.tokens[max(0, start - before) : start]),
        "text": "".join(trace.tokens[start:stop]),
        "rows": rows,
    }
