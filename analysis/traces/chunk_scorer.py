"""Score a model's outputs as a trace records them: per position, per chunk, and how many chunks were written.

Per position (:func:`score_positions`): the prediction, p(prediction) and p(target). Per chunk, the values at
the chunk's scored position: its last position with a target, or, where it has none, its last position with
target −1 (:func:`chunk_positions`). :func:`per_chunk` reads a task's chunks from the whole sequence's outputs
(every class's probability, or a values task's outputs); :func:`token_chunks` reads them from the per-position
scores, so a model traced a segment at a time never holds its outputs whole.
"""

from __future__ import annotations

import numpy as np
import torch

from analysis.traces.segment_recorder import LayerFields
from analysis.traces.trace import TraceError

POSITION_BLOCK = 4096  # positions normalised at a time: no (N, classes) probabilities held beside the scores
PER_TOKEN = ("target", "prediction", "p_target")  # what a trace keeps of each position's scores


def check_finite(logits: torch.Tensor, where: str) -> None:
    """A TraceError unless every output is finite: predictions of NaN scores would mean nothing."""
    if not torch.isfinite(logits).all():
        raise TraceError(f"the model produced NaN or infinite outputs on {where}")


def score_positions(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, np.ndarray]:
    """Per position of one sequence's scores (n, classes) and targets (n,), −1 where there is none, from each
    position's softmax: the target and the prediction (n,) int64, p(prediction) and p(target) (n,) float32, p(target)
    0 where there is no target."""
    targets = targets.to(logits.device)
    blocks = []
    for block, wanted in zip(logits.split(POSITION_BLOCK), targets.split(POSITION_BLOCK), strict=True):
        scores = block.float()  # (block, classes)
        probs = torch.softmax(scores, dim=-1)
        prediction = scores.argmax(-1)
        p_target = torch.where(wanted >= 0, probs.gather(1, wanted.clamp_min(0)[:, None])[:, 0], 0.0)
        blocks.append(
            {
                "target": wanted,
                "prediction": prediction,
                "p_target": p_target,
                "p_prediction": probs.gather(1, prediction[:, None])[:, 0],
            }
        )
    return {key: torch.cat([block[key] for block in blocks]).cpu().numpy() for key in blocks[0]}


def chunk_positions(scored: np.ndarray, chunk_size: int, num_chunks: int) -> tuple[np.ndarray, np.ndarray]:
    """For each of the first ``num_chunks`` chunks of a sequence whose scored positions are ``scored`` (N,): the
    position it is scored at (K,) int64 and whether that position has a target (K,) bool. A last chunk a memory
    padded (partial_chunk "pad") ends at the sequence's last position."""
    N = len(scored)
    rows = []
    for k in range(num_chunks):
        start, stop = k * chunk_size, min(N, (k + 1) * chunk_size)
        hits = np.flatnonzero(scored[start:stop])
        rows.append((start + int(hits[-1]), True) if len(hits) else (stop - 1, False))
    return np.array([at for at, _ in rows], dtype=np.int64), np.array([has for _, has in rows], dtype=bool)


def per_chunk(
    logits: torch.Tensor,
    targets: torch.Tensor,
    mask: torch.Tensor,
    chunk_size: int,
    num_chunks: int,
    outputs: str = "classes",
) -> dict[str, np.ndarray]:
    """For one sample — logits (N, classes), targets and mask (N,) — the prediction, target, scored flag
    and class probabilities at each chunk's scored position (target −1 where the chunk scores nothing).

    For a values task (``outputs="values"``: outputs and targets (N, width)) the prediction and target are the
    chunk's values (K, width) and there are no probabilities.
    """
    at, scored = chunk_positions(mask.numpy(), chunk_size, num_chunks)
    positions = torch.from_numpy(at)
    chosen = logits[positions].float()  # (K, classes) or (K, width)
    if outputs == "values":
        return {
            "prediction": chosen.numpy().astype(np.float32),
            "target": targets[positions].float().numpy().astype(np.float32),
            "scored": scored,
        }
    target = targets[positions].numpy().astype(np.int64)
    return {
        "prediction": chosen.argmax(-1).numpy().astype(np.int64),
        "target": np.where(scored, target, -1),
        "scored": scored,
        "probs": torch.softmax(chosen, dim=-1).numpy().astype(np.float32),
    }


def token_chunks(scores: dict[str, np.ndarray], chunk_size: int, num_chunks: int) -> dict[str, np.ndarray]:
    """Per chunk, the per-position ``scores`` (of :func:`score_positions`) at its scored position."""
    at, scored = chunk_positions(scores["target"] >= 0, chunk_size, num_chunks)
    return {
        "prediction": scores["prediction"][at],
        "target": scores["target"][at],
        "scored": scored,
        "p_target": scores["p_target"][at],
        "p_prediction": scores["p_prediction"][at],
    }


def written_chunks(layers: LayerFields, N: int, chunk_size: int) -> int:
    """The chunks every layer wrote for N positions: N // chunk_size (a trailing part waits for its tokens), or one
    more where a memory pads and writes it. More means a memory ran more than once per forward."""
    most = -(-N // chunk_size)  # ⌈N / chunk_size⌉
    for name, fields in layers.items():
        if fields["h"].shape[1] > most:
            raise TraceError(
                f"memory layer {name!r} wrote {fields['h'].shape[1]} chunks for {N} positions: it runs "
                f"more than once per forward (one memory shared by several layers); a trace records "
                f"memories that run once per forward"
            )
    return min(fields["h"].shape[1] for fields in layers.values())


__all__ = [
    "check_finite",
    "score_positions",
    "chunk_positions",
    "per_chunk",
    "token_chunks",
    "written_chunks",
    "POSITION_BLOCK",
    "PER_TOKEN",
]
