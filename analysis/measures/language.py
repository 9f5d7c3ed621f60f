"""What a language model's memory does for each token: losses with and without it, and what a read draws on.

- :func:`token_losses` runs one sample twice — as trained, and with every memory layer's read gate
  σ(γ) set to 0 through its hook point (the memory still writes, nothing is read back) — and gives
  per token the loss of the true next token both ways, their difference (the memory's contribution;
  positive = the memory helps) and the top-5 next tokens with their probabilities.
- :func:`read_overlap` says which earlier chunks a read draws on: how much of chunk j's Gaussian
  write footprint lies at chunk k's read point, exp(−‖μ_read,k − μ_write,j‖² / 2σ_j²), for j < k
  (chunk k reads the state before its own write, so j ≥ k is 0).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np
import torch
import torch.nn.functional as F

from tensor_memory import hooks, memory_layers
from tensor_memory.storage.checkpoint import Checkpoint

from analysis.measures.checks import check_index
from analysis.measures.interventions import intervention_hooks
from analysis.traces.trace import Trace

TOP = 5


@dataclasses.dataclass
class TokenLosses:
    tokens: list[str]  # the N input tokens as text
    next_tokens: list[str]  # the N tokens to predict (the targets) as text
    loss: np.ndarray  # (N,) nats, with the memory
    loss_without_memory: Optional[np.ndarray]  # (N,) with every read gate at 0; None without memory layers
    top_tokens: list[list[str]]  # (N, 5) the model's five likeliest next tokens
    top_probs: np.ndarray  # (N, 5)
    chunk_size: int  # tokens per memory chunk (1 without memory layers)

    @property
    def contribution(self) -> Optional[np.ndarray]:
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
    return TokenLosses(tokens=task.decode(batch.inputs["tokens"][0]), next_tokens=task.decode(batch.targets[0]),
                       loss=loss.numpy(), loss_without_memory=without,
                       top_tokens=[task.decode(row) for row in top.indices], top_probs=top.values.numpy(),
                       chunk_size=chunk)


def read_overlap(mu_read: np.ndarray, mu_write: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """(K, K): entry [k, j] = chunk j's write footprint at chunk k's read point, for j < k; 0 elsewhere.

    ``mu_read`` and ``mu_write`` (K, 3) in normalised coordinates, ``sigma`` (K,) the writes' spreads.
    """
    mu_read, mu_write = np.asarray(mu_read, dtype=np.float64), np.asarray(mu_write, dtype=np.float64)
    sigma = np.asarray(sigma, dtype=np.float64)
    if mu_read.ndim != 2 or mu_read.shape[1] != 3 or mu_write.shape != mu_read.shape or sigma.shape != mu_read.shape[:1]:
        raise ValueError(f"read_overlap expects mu_read, mu_write (K, 3) and sigma (K,), got {mu_read.shape}, "
                         f"{mu_write.shape}, {sigma.shape}")
    distance2 = ((mu_read[:, None, :] - mu_write[None, :, :]) ** 2).sum(-1)  # (K read, K write)
    footprint = np.exp(-distance2 / (2 * sigma[None, :] ** 2))
    return np.tril(footprint, k=-1)  # only earlier writes


def chunk_text(trace: Trace, chunk: int, before: int = 48) -> dict[str, Any]:
    """A trace with tokens: the chunk's text, the ``before`` tokens leading up to it, and one row per position
    (position, token, and with targets the target and predicted class and p(target))."""
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
            row.update({"target": None if target < 0 else target, "prediction": int(trace.per_token["prediction"][i]),
                        "p(target)": None if target < 0 else round(float(trace.per_token["p_target"][i]), 4)})
        rows.append(row)
    return {"start": start, "stop": stop, "before": "".join(trace.tokens[max(0, start - before):start]),
            "text": "".join(trace.tokens[start:stop]), "rows": rows}
