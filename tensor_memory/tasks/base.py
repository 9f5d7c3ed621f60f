"""What every diagnostic task provides: a seeded generator, an encoder, a head and metrics.

A task turns a seed into a :class:`Batch` — inputs for its encoder, a class target per
position, a mask saying which positions are scored, and the metadata a viewer needs — and
scores logits as *counts* (correct, total) so that metrics add up exactly over batches.
Generation is deterministic: the same seed gives the same batch on every machine.
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from ..config import CONTENT_STD, MARKER_STD, ConfigBase

Counts = dict[str, tuple[float, float]]  # metric name → (correct, total)

# The split of a real data set each stream reads: evaluation, traces and the app's belief-survival measure
# the test split, the trainer's validation the valid split, everything else (training) the train split.
SPLIT_OF_PURPOSE = {"eval": "test", "trace": "test", "survival": "test", "val": "valid", "val-addressing": "valid"}


def split_of(purpose: str) -> str:
    """The split a stream named ``purpose`` reads from a task on real data."""
    return SPLIT_OF_PURPOSE.get(purpose, "train")


def embedding(count: int, dim: int, std: float = MARKER_STD) -> nn.Embedding:
    """A learned embedding table (count, dim) started at N(0, std²): a marker unless told otherwise."""
    table = nn.Embedding(count, dim)
    nn.init.normal_(table.weight, std=std)
    return table


class TokenEncoder(nn.Module):
    """Token ids (B, N) → their learned embeddings (B, N, dim), started as content (N(0, 1))."""

    def __init__(self, count: int, dim: int) -> None:
        super().__init__()
        self.embed = embedding(count, dim, CONTENT_STD)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.embed(tokens)  # (B, N) → (B, N, dim)


@dataclasses.dataclass
class Batch:
    inputs: dict[str, torch.Tensor]  # what the task's encoder reads, each (B, N, …)
    targets: torch.Tensor  # (B, N) long: the class to predict at each position; a values task: (B, N, width) float
    mask: torch.Tensor  # (B, N) bool: the positions the loss and the metrics score
    meta: dict[str, torch.Tensor]  # for viewers: frames, occlusion flags, keys, maps, …

    @property
    def batch_size(self) -> int:
        return self.targets.shape[0]

    def rows(self, start: int, stop: int) -> Batch:
        """Rows start:stop of every tensor (a data-parallel shard of the batch)."""
        cut = lambda d: {k: v[start:stop] for k, v in d.items()}  # noqa: E731
        return Batch(cut(self.inputs), self.targets[start:stop], self.mask[start:stop], cut(self.meta))

    def to(self, device: torch.device) -> Batch:
        """Inputs, targets and mask on ``device`` (where the model computes); meta, for viewers, stays where it is."""
        return Batch(
            {k: v.to(device) for k, v in self.inputs.items()}, self.targets.to(device), self.mask.to(device), self.meta
        )

    def columns(self, start: int, stop: int) -> Batch:
        """Positions start:stop of the inputs, targets and mask (a segment of a streamed sample); meta kept whole."""
        cut = {k: v[:, start:stop] for k, v in self.inputs.items()}
        return Batch(cut, self.targets[:, start:stop], self.mask[:, start:stop], self.meta)


def derive_seed(purpose: str, seed: int, index: int) -> int:
    """A 63-bit seed for batch ``index`` of a stream: training and evaluation streams never overlap."""
    digest = hashlib.sha256(f"{purpose}:{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class Task:
    """Base class. Subclasses set ``name``, ``Config``, ``num_classes``, ``chunk_size`` and implement
    :meth:`sample`, :meth:`encoder` and :meth:`counts`.

    Most tasks predict a class per scored position (``outputs = "classes"``: logits, cross-entropy,
    accuracy). A task with ``outputs = "values"`` predicts ``output_width`` numbers per position
    instead (masked patch reconstruction: the pixels), sets its own :meth:`loss` and scores by its
    ``headline`` metric.
    """

    name: ClassVar[str]
    Config: ClassVar[type[ConfigBase]]
    side_files: ClassVar[tuple[str, ...]] = ()  # the names of what files_to_save writes beside the weights
    sweep_field: ClassVar[str]  # the parameter the paper's sweep varies
    sweep_values: ClassVar[tuple]
    outputs: ClassVar[str] = "classes"  # "classes" | "values"
    headline: ClassVar[str] = "accuracy"  # the metric a model is judged and chosen by (higher is better)
    distance_unit: ClassVar[str | None] = None  # what :meth:`distances` counts ("frames", "tokens"), if it can
    # The integer parameter that sets how long a sample is without changing the model's shapes (observations, writes,
    # frames), if there is one: what a curriculum over horizon (training/curriculum.py) grows.
    horizon: ClassVar[str | None] = None

    def __init__(self, config: ConfigBase) -> None:
        self.config = config

    @property
    def num_classes(self) -> int:
        raise NotImplementedError

    @property
    def input_vocabulary(self) -> int:
        """Token types the encoder embeds (a language model's vocabulary); 0 for tasks that embed none that grows."""
        return 0

    @property
    def output_width(self) -> int:
        """Numbers the head gives per position: the classes, or a values task's width."""
        return self.num_classes

    @property
    def tokens(self) -> int:
        """Tokens in one sample (what :meth:`sample` gives along N), known without sampling."""
        raise NotImplementedError

    @property
    def chunk_size(self) -> int:
        """Tokens per memory chunk the task is built around (occlusion: one frame)."""
        return 1

    def sample(self, batch_size: int, seed: int) -> Batch:
        raise NotImplementedError

    def draw(self, purpose: str, batch_size: int, seed: int, index: int) -> Batch:
        """Batch ``index`` of the ``purpose`` stream ("train", "val", "eval", …) of run seed ``seed``.

        The synthetic tasks draw every stream from one generator, seeded apart by
        :func:`derive_seed`; a task on real data also picks the split a stream reads.
        """
        return self.sample(batch_size, derive_seed(purpose, seed, index))

    def split_batches(self, purpose: str, batch_size: int) -> int | None:
        """How many batches the ``purpose`` stream holds, for a finite one (a test split); else None."""
        return None

    def derived_metrics(self, metrics: dict[str, float | None]) -> dict[str, float | None]:
        """Metrics computed from the summed ones (a perplexity from a mean cross-entropy)."""
        return {}

    def files_to_save(self) -> dict[str, str]:
        """Text files a checkpoint keeps beside the weights ({file name: text}), e.g. a tokenizer."""
        return {}

    def restore(self, directory: Path) -> None:
        """Read back what :meth:`files_to_save` wrote into checkpoint ``directory``."""

    def encoder(self, dim: int) -> nn.Module:
        """A module mapping ``batch.inputs`` (as keyword arguments) to tokens (B, N, dim)."""
        raise NotImplementedError

    def head(self, dim: int) -> nn.Module:
        return nn.Linear(dim, self.num_classes)

    def loss(self, outputs: torch.Tensor, batch: Batch) -> torch.Tensor:
        """The training loss: cross-entropy over the scored positions."""
        return F.cross_entropy(outputs[batch.mask], batch.targets[batch.mask])

    def counts(self, logits: torch.Tensor, batch: Batch) -> Counts:
        """(correct, total) per metric; ``accuracy`` is always present."""
        raise NotImplementedError

    def true_places(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor | None:
        """Where each token's item lives in the task's own space, (B, N, 3) as (x, y, z) in [-1, 1], for a
        task that has such a space (the address scaffold of training steers the memory there); else None."""
        return None

    @property
    def tokens_per_distance(self) -> int:
        """Tokens in one step of ``distance_unit``."""
        return 1

    def distances(self, batch: Batch) -> torch.Tensor:
        """(B, N) long: for each scored position, how many ``distance_unit`` steps back the last input holding its
        answer was shown (−1 where nothing is scored or it never was); for tasks that set ``distance_unit``."""
        raise NotImplementedError

    def sweep(self) -> list[dict[str, Any]]:
        """The parameter settings of the task's sweep, as config dicts."""
        base = self.config.to_dict()
        return [{**base, self.sweep_field: value} for value in self.sweep_values]


class FrameTask(Task):
    """A task whose samples are ``config.frames`` frames of ``config.tokens_per_frame`` patch tokens each, read
    one memory chunk per frame (occlusion, moving digits, action recognition)."""

    @property
    def tokens(self) -> int:
        return self.config.frames * self.chunk_size

    @property
    def chunk_size(self) -> int:
        return self.config.tokens_per_frame  # one memory chunk per frame

    @property
    def tokens_per_distance(self) -> int:
        return self.chunk_size  # distances count frames


def masked_accuracy(logits: torch.Tensor, batch: Batch, where: torch.Tensor) -> tuple[float, float]:
    """(correct, total) of the argmax prediction over positions where ``where`` (B, N) is true."""
    hit = (logits.argmax(-1) == batch.targets) & where
    return float(hit.sum()), float(where.sum())
