"""A task MiniLM cannot do alone, and the model that learns it with a memory: cross-window recall.

A document of the shipped corpus is cut into ``windows`` windows of ``window`` word pieces
(:func:`recall_batch`). In every window after the first, the pieces that already occurred in an
earlier window (and not elsewhere in this one) are replaced by ``[MASK]``, and the model must name
them. MiniLM alone sees only its window, so it can only guess from local context; the memory can
carry what earlier windows said. The head scores the 30,522 word pieces against MiniLM's own
(frozen) word embeddings.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import random
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn

from .. import limits as L
from ..backbone.attach import attach_memory
from ..config import ConfigBase, require_float, require_int
from ..memory import MemoryConfig, streaming
from ..tasks.data import corpus as C
from .minilm import CLOSED_GATE, load_minilm, word_pieces
from .minilm import LAYERS as MINILM_LAYERS


@dataclasses.dataclass
class RecallConfig(ConfigBase):
    window: int = 32  # word pieces per window (MiniLM's context in this task), [CLS] and [SEP] added
    windows: int = 4  # windows per document
    layers: list[int] = dataclasses.field(default_factory=lambda: [5])  # MiniLM layers followed by a memory
    channels: int = 16
    grid: list[int] = dataclasses.field(default_factory=lambda: [6, 6, 6])
    gate_init: float = CLOSED_GATE

    def __post_init__(self) -> None:  # every field checked: config.json is read into it
        owner = "RecallConfig"
        require_int(owner, "window", self.window, 4, 510)
        require_int(owner, "windows", self.windows, 2, 64)
        layers = range(MINILM_LAYERS)
        if (
            not isinstance(self.layers, list)
            or not self.layers
            or len(set(map(repr, self.layers))) != len(self.layers)
            or not all(type(layer) is int and layer in layers for layer in self.layers)
        ):
            raise ValueError(
                f"{owner}.layers must be a non-empty list of distinct MiniLM layers (0 to "
                f"{MINILM_LAYERS - 1}), got {self.layers!r}"
            )
        require_int(owner, "channels", self.channels, 1, L.MAX_CHANNELS)
        if not isinstance(self.grid, list) or len(self.grid) != 3:
            raise ValueError(f"{owner}.grid must be a list of three sides [D, H, W], got {self.grid!r}")
        for side in self.grid:
            require_int(owner, "grid[]", side, 2, L.MAX_GRID_SIDE)
        require_float(owner, "gate_init", self.gate_init)

    def memory(self) -> MemoryConfig:
        return MemoryConfig(
            token_dim=384,
            channels=self.channels,
            grid=tuple(self.grid),
            chunk_size=self.window + 2,
            gate_init=self.gate_init,
        )


def documents(split: str, length: int) -> list[list[int]]:
    """The split's text as word-piece documents of ``length`` pieces: consecutive paragraphs joined, cut."""
    tokenizer = word_pieces()
    stream: list[int] = []
    for encoding in tokenizer.encode_batch(list(C.split_lines("python-docs", "", split)), add_special_tokens=False):
        stream.extend(encoding.ids)
    return [stream[i : i + length] for i in range(0, len(stream) - length + 1, length)]


@functools.lru_cache(maxsize=4)
def _documents(split: str, length: int) -> tuple[tuple[int, ...], ...]:
    return tuple(map(tuple, documents(split, length)))


def recall_batch(config: RecallConfig, split: str, rows: Sequence[int]) -> dict[str, torch.Tensor]:
    """Documents ``rows`` of ``split`` as MiniLM windows with the repeated pieces masked.

    Returns ids (B, windows, window + 2), targets (B, windows, window + 2) with −100 where nothing
    is asked. A piece is asked when it is a whole word or word start of ≥ 3 letters that occurred
    in an earlier window and nowhere else in its own.
    """
    tokenizer = word_pieces()
    cls, sep, mask = (tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]", "[MASK]"))
    docs = _documents(split, config.window * config.windows)
    ids = torch.empty(len(rows), config.windows, config.window + 2, dtype=torch.long)
    targets = torch.full_like(ids, -100)
    for b, row in enumerate(rows):
        doc = docs[row % len(docs)]
        seen: set[int] = set()
        for k in range(config.windows):
            piece = list(doc[k * config.window : (k + 1) * config.window])
            asked = [
                i
                for i, t in enumerate(piece)
                if t in seen and piece.count(t) == 1 and _askable(tokenizer.id_to_token(t))
            ]
            ids[b, k] = torch.tensor([cls, *[mask if i in asked else t for i, t in enumerate(piece)], sep])
            for i in asked:
                targets[b, k, i + 1] = piece[i]
            seen.update(piece)
    return {"ids": ids, "targets": targets}


def _askable(token: str) -> bool:
    return not token.startswith("##") and len(token) >= 3 and token.isalpha()


class RecallModel(nn.Module):
    """Frozen MiniLM (+ memories after ``config.layers``) and a head tied to MiniLM's word embeddings."""

    def __init__(self, config: RecallConfig, memory: bool = True) -> None:
        super().__init__()
        self.config = config
        self.encoder = load_minilm()
        if memory:
            attach_memory(self.encoder, config.memory(), config.layers)
        self.memories = (
            nn.ModuleList(self.encoder.encoder.layer[i].memory for i in config.layers) if memory else nn.ModuleList()
        )
        self.head = nn.Sequential(nn.Linear(384, 384), nn.GELU(), nn.LayerNorm(384))
        self.bias = nn.Parameter(torch.zeros(self.encoder.config.vocab_size))

    def train(self, mode: bool = True) -> RecallModel:
        """Train the memories and head; MiniLM stays in eval mode (no dropout: it is frozen, as shipped)."""
        super().train(mode)
        self.encoder.eval()
        return self

    def trained_state(self) -> dict[str, torch.Tensor]:
        """What training changes (memories and head): all a checkpoint stores; MiniLM is referenced."""
        return {name: value for name, value in self.state_dict().items() if not name.startswith("encoder.")}

    def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (B, windows, L), the windows fed in order with the memory carried → (logits (A, vocab), the A
        asked pieces' targets). Only asked positions are scored: the head costs a 30,522-way product each."""
        with streaming(self.encoder) if len(self.memories) else contextlib.nullcontext():  # one document
            hidden = torch.stack(
                [
                    self.encoder(input_ids=ids[:, k]).last_hidden_state  # (B, L, 384) per window
                    for k in range(ids.shape[1])
                ],
                dim=1,
            )  # (B, windows, L, 384)
        asked = targets != -100
        embeddings = self.encoder.embeddings.word_embeddings.weight  # (V, 384), frozen
        return self.head(hidden[asked]) @ embeddings.T + self.bias, targets[asked]


def recall_counts(logits: torch.Tensor, truth: torch.Tensor) -> tuple[float, float, float]:
    """(correct, asked, summed cross-entropy) over the asked pieces."""
    return (
        float((logits.argmax(-1) == truth).sum()),
        float(truth.numel()),
        float(F.cross_entropy(logits.float(), truth, reduction="sum")),
    )


def evaluate_recall(model: RecallModel, config: RecallConfig, docs: int = 128, batch: int = 16) -> dict:
    """Accuracy and cross-entropy on the asked pieces of the first ``docs`` test documents."""
    was_training = model.training
    model.eval()
    correct = asked = nll = 0.0
    with torch.no_grad():
        for start in range(0, docs, batch):
            data = recall_batch(config, "test", range(start, min(start + batch, docs)))
            c, a, n = recall_counts(*model(data["ids"], data["targets"]))
            correct, asked, nll = correct + c, asked + a, nll + n
    model.train(was_training)
    return {"accuracy": correct / asked, "cross_entropy": nll / asked, "asked": int(asked), "documents": docs}


def test_documents(config: RecallConfig) -> int:
    """How many documents the test split holds at ``config``'s length."""
    return len(_documents("test", config.window * config.windows))


def sample_rows(split: str, config: RecallConfig, batch: int, seed: int) -> list[int]:
    count = len(_documents(split, config.window * config.windows))
    return random.Random(seed).sample(range(count), batch)


__all__ = [
    "RecallConfig",
    "RecallModel",
    "documents",
    "recall_batch",
    "recall_counts",
    "evaluate_recall",
    "sample_rows",
]
