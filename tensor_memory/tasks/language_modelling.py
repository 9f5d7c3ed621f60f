"""Language modelling: causal next-token prediction on real English text.

A sample is ``seq_len + 1`` consecutive tokens of one split; the model reads the first
``seq_len`` and predicts each next one (every position scored). Which split a batch comes from
depends on what it is for (:meth:`LanguageModelling.draw`):

- training draws windows at random positions of the train split;
- validation (the trainer's ``val`` stream) draws them from the valid split;
- evaluation (``eval``) walks the test split in order, cut into non-overlapping windows, so
  every test token is scored once; its batches do not depend on the seed;
- traces (``trace``) show random windows of the test split.

Metrics: ``accuracy`` (top-1 next token), ``cross_entropy`` (mean nats per token) and
``perplexity`` = exp(cross_entropy). The corpus and its tokenizer: ``data/corpus.py``.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from .. import limits as L
from ..config import ConfigBase, require_int
from ..storage.user_files import read_user_file
from .base import Batch, Counts, Task, TokenEncoder, derive_seed, generator, masked_accuracy, split_of
from .data import corpus as C

TOKENIZER_FILE = "tokenizer.json"  # beside model.safetensors in a checkpoint


@dataclasses.dataclass
class LanguageModellingConfig(ConfigBase):
    DATA_PATHS = ("path",)
    corpus: str = "python-docs"  # "python-docs" (shipped, subword) | "kjv" (installed, subword) | "wikitext"
    # (word-level, at `path`)
    path: str = ""  # wikitext: the folder holding wiki.{train,valid,test}.tokens
    seq_len: int = 128  # tokens a sample feeds the model
    vocab_size: int = 4096  # python-docs, kjv: BPE types; wikitext: must equal the files' vocabulary (with <eos>)
    chunk: int = 16  # tokens per memory chunk (the memory reads once and writes once per chunk)

    def __post_init__(self) -> None:
        owner = "LanguageModellingConfig"
        if self.corpus not in C.CORPORA:
            raise ValueError(f"{owner}.corpus must be one of {', '.join(C.CORPORA)}, got {self.corpus!r}")
        if not isinstance(self.path, str):
            raise ValueError(f"{owner}.path must be a folder path (a string), got {self.path!r}")
        if self.corpus == "wikitext" and not self.path:
            raise ValueError(
                f"{owner}.path is required for corpus 'wikitext': the folder holding "
                f"wiki.train.tokens, wiki.valid.tokens and wiki.test.tokens"
            )
        require_int(owner, "seq_len", self.seq_len, 2, L.MAX_SEQUENCE)
        smallest = 2 if self.corpus == "wikitext" else 258  # a byte-level BPE holds the 256 bytes and <eos>
        require_int(owner, "vocab_size", self.vocab_size, smallest, L.MAX_VOCAB)
        require_int(owner, "chunk", self.chunk, 1, self.seq_len)


class LanguageModelling(Task):
    name = "language_modelling"
    side_files = (TOKENIZER_FILE,)
    Config = LanguageModellingConfig
    sweep_field = "seq_len"
    sweep_values = ()  # one setting: the trained one

    def __init__(self, config: LanguageModellingConfig) -> None:
        super().__init__(config)
        self._tokenizer_text: str | None = None  # set by a checkpoint, else trained on first use

    # -- the tokenizer ------------------------------------------------------------------------

    @property
    def tokenizer_text(self) -> str:
        """The tokenizer's JSON: the checkpoint's, or the one a fresh run trains on the train split."""
        if self._tokenizer_text is None:
            cfg = self.config
            self.use_tokenizer(C.build_tokenizer(cfg.corpus, cfg.path, cfg.vocab_size), "the trained tokenizer")
        return self._tokenizer_text  # type: ignore[return-value]

    @property
    def tokenizer(self):
        return C.cached_tokenizer(self.tokenizer_text)

    def use_tokenizer(self, text: str, source: str) -> None:
        """Take ``text`` (tokenizers JSON) as this task's tokenizer; its size must be ``vocab_size``."""
        size = C.parse_tokenizer(text, source).get_vocab_size()
        if size != self.config.vocab_size:
            fix = (
                f"set task.params.vocab_size={size} (the number of word types in the train file, with {C.EOS})"
                if self.config.corpus == "wikitext"
                else "it does not belong to this checkpoint"
            )
            raise C.FileFormatError(
                f"{source}: the tokenizer has {size:,} types but the task's vocab_size is "
                f"{self.config.vocab_size:,}; {fix}"
            )
        self._tokenizer_text = text

    def files_to_save(self) -> dict[str, str]:
        return {TOKENIZER_FILE: self.tokenizer_text}

    def restore(self, directory: Path) -> None:
        path = Path(directory) / TOKENIZER_FILE
        try:
            text = read_user_file(path, C.MAX_TOKENIZER_BYTES, "a tokenizer file").decode("utf-8")  # never blocks
        except FileNotFoundError:
            raise C.FileFormatError(
                f"{path}: missing {TOKENIZER_FILE}; a language-model checkpoint keeps its "
                f"tokenizer beside the weights (copy the whole directory)"
            ) from None
        except (OSError, UnicodeDecodeError) as error:
            raise C.FileFormatError(f"{path}: cannot read the tokenizer ({error})") from None
        self.use_tokenizer(text, str(path))

    def stream(self, split: str) -> torch.Tensor:
        """Split ``split`` as one stream of token ids (B-independent, cached)."""
        cfg = self.config
        return C.encode_split(cfg.corpus, cfg.path, split, self.tokenizer_text)

    def decode(self, ids) -> list[str]:
        """Each id's text (byte-level pieces decoded; a piece that splits a character shows as �)."""
        tokenizer = self.tokenizer
        return [tokenizer.decode([int(i)]) for i in ids]

    # -- the Task interface -----------------------------------------------------------------------

    @property
    def num_classes(self) -> int:
        return self.config.vocab_size

    @property
    def input_vocabulary(self) -> int:
        return self.config.vocab_size

    @property
    def tokens(self) -> int:
        return self.config.seq_len

    @property
    def chunk_size(self) -> int:
        return self.config.chunk

    def _windows(self, stream: torch.Tensor, starts: torch.Tensor) -> Batch:
        N = self.config.seq_len
        sequence = stream[starts[:, None] + torch.arange(N + 1)]  # (B, N+1)
        tokens, targets = sequence[:, :-1], sequence[:, 1:]
        return Batch({"tokens": tokens}, targets, torch.ones_like(tokens, dtype=torch.bool), {"start": starts})

    def _random(self, split: str, batch_size: int, seed: int) -> Batch:
        stream = self.stream(split)
        room = stream.numel() - self.config.seq_len - 1
        if room <= 0:
            raise ValueError(
                f"the {split} split holds {stream.numel():,} tokens, fewer than seq_len + 1 = "
                f"{self.config.seq_len + 1}; lower task.params.seq_len"
            )
        return self._windows(stream, torch.randint(room + 1, (batch_size,), generator=generator(seed)))

    def sample(self, batch_size: int, seed: int) -> Batch:
        return self._random("train", batch_size, seed)

    def draw(self, purpose: str, batch_size: int, seed: int, index: int) -> Batch:
        split = split_of(purpose)
        if purpose != "eval":
            return self._random(split, batch_size, derive_seed(purpose, seed, index))
        count = self._eval_windows()
        first = index * batch_size
        if first >= count:
            raise ValueError(
                f"evaluation batch {index} is past the end of the test split "
                f"({count:,} windows of {self.config.seq_len} tokens)"
            )
        rows = torch.arange(first, min(first + batch_size, count))
        return self._windows(self.stream("test"), rows * self.config.seq_len)

    def _eval_windows(self) -> int:
        return (self.stream("test").numel() - 1) // self.config.seq_len

    def split_batches(self, purpose: str, batch_size: int) -> int | None:
        """Evaluation covers the test split once: at most this many batches."""
        return math.ceil(self._eval_windows() / batch_size) if purpose == "eval" else None

    def encoder(self, dim: int) -> nn.Module:
        return TokenEncoder(self.config.vocab_size, dim)

    def counts(self, logits: torch.Tensor, batch: Batch) -> Counts:
        where = batch.mask
        nll = F.cross_entropy(logits[where].float(), batch.targets[where], reduction="sum")
        return {"accuracy": masked_accuracy(logits, batch, where), "cross_entropy": (float(nll), float(where.sum()))}

    def derived_metrics(self, metrics: dict[str, float | None]) -> dict[str, float | None]:
        ce = metrics.get("cross_entropy")
        return {"perplexity": None if ce is None else math.exp(ce)}
