"""Action recognition on UCF-101: name the action of a short clip, read one frame per memory chunk.

The data are UCF-101 at a user path (``data/ucf101.py`` reads the official lists, ``data/video.py``
the ``.avi`` files or frame folders; nothing downloads). Splits of ``fold``: train is the fold's
trainlist less validation, validation its clips of the three lowest groups gXX (a group's clips share
actor and background, so a group goes whole to one side), test the fold's testlist, never trained or
validated on. Labels are classInd's, 0-based.

A sample is ``frames`` frames of one video, each centre-cropped to a square and resized to
``size × size`` (``channels`` 3: RGB, 1: grey), cut into ``(size / patch)²`` patch tokens in raster
order, one memory chunk per frame (``pixels`` (B, N, patch²·channels) in [0, 1], ``patch_index`` the
patch's place in its frame). Training and validation take ``stride`` frames between sampled frames
from a random start (seeded); evaluation (``eval``) walks the test list once, in order, one clip per
video, its frames evenly spread over the whole video, the same for every seed; traces (``trace``) show
random test clips. A video shorter than the clip repeats its last frame. The action class is scored
on the last token of the last frame only. Metrics: ``accuracy`` (top-1) and ``top5_accuracy``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from torch import nn

from .. import limits as L
from ..config import ConfigBase, require_int
from ..storage.files import FileFormatError
from .base import Batch, Counts, FrameTask, derive_seed, generator, masked_accuracy, split_of
from .data import ucf101 as U
from .data import video as V
from .occlusion import PatchEncoder
from .patches import clip_patches

TOP_K = 5  # top5_accuracy


@dataclasses.dataclass
class ActionRecognitionConfig(ConfigBase):
    DATA_PATHS = ("path", "lists")
    path: str = ""  # required: the UCF-101 folder holding <ClassName>/v_<Class>_gXX_cYY.avi (or frame folders)
    lists: str = ""  # the folder of classInd.txt, trainlist0N.txt, testlist0N.txt; "": looked for beside `path`
    fold: int = 1  # which trainlist0N / testlist0N (1, 2 or 3)
    classes: int = 101  # must equal the number of classes in classInd.txt
    frames: int = 8  # T, frames per clip
    stride: int = 4  # frames between sampled frames (training and validation clips)
    size: int = 32  # frames are centre-cropped to a square and resized to size × size
    patch: int = 8  # patch tokens are patch × patch pixels; must divide size
    channels: int = 3  # 3: RGB, 1: grey

    def __post_init__(self) -> None:
        owner = "ActionRecognitionConfig"
        for name in ("path", "lists"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"{owner}.{name} must be a folder path (a string), got {getattr(self, name)!r}")
        if not self.path:
            raise ValueError(
                f"{owner}.path is required: the UCF-101 folder holding <ClassName>/v_<Class>_gXX_cYY.avi "
                f"(or frame folders); pass --set task.params.path=FOLDER"
            )
        if isinstance(self.fold, bool) or not isinstance(self.fold, int) or self.fold not in U.FOLDS:
            raise ValueError(f"{owner}.fold must be 1, 2 or 3 (trainlist0N / testlist0N), got {self.fold!r}")
        require_int(owner, "classes", self.classes, 2, L.MAX_TASK_ITEMS)
        require_int(owner, "frames", self.frames, 1, L.MAX_TASK_ITEMS)
        require_int(owner, "stride", self.stride, 1, L.MAX_TASK_ITEMS)
        require_int(owner, "size", self.size, 2, L.MAX_GRID_SIDE)
        require_int(owner, "patch", self.patch, 1, self.size)
        if self.size % self.patch:
            raise ValueError(f"{owner}.patch must divide {owner}.size={self.size}, got {self.patch}")
        if self.channels not in (1, 3) or isinstance(self.channels, bool):
            raise ValueError(f"{owner}.channels must be 1 (grey) or 3 (RGB), got {self.channels!r}")
        tokens = self.frames * self.tokens_per_frame
        if tokens > L.MAX_SEQUENCE:
            raise ValueError(
                f"{owner}: frames × (size / patch)² = {tokens:,} tokens, over the {L.MAX_SEQUENCE:,} "
                f"a sample may have (tensor_memory/limits.py); use fewer frames or larger patches"
            )

    @property
    def tokens_per_frame(self) -> int:
        return (self.size // self.patch) ** 2

    @property
    def patch_values(self) -> int:
        return self.patch * self.patch * self.channels


class ActionRecognition(FrameTask):
    name = "action_recognition"
    Config = ActionRecognitionConfig
    sweep_field = "frames"
    sweep_values = ()  # one setting: the trained one

    # -- data ---------------------------------------------------------------------------------

    @property
    def splits(self) -> U.UCFSplits:
        """The fold's train, valid and test clips (read once per folder); classInd must match ``classes``."""
        cfg = self.config
        splits = U.ucf_splits(cfg.path, cfg.lists, cfg.fold)
        if len(splits.classes) != cfg.classes:
            raise FileFormatError(
                f"{splits.lists / U.CLASS_FILE}: lists {len(splits.classes)} classes but the "
                f"task's classes is {cfg.classes}; set task.params.classes={len(splits.classes)}"
            )
        return splits

    def clips(self, split: str) -> tuple[U.Clip, ...]:
        """The clips of ``split`` (train, valid or test), in list order."""
        return self.splits.split(split)

    def video(self, clip: U.Clip) -> np.ndarray:
        """The clip's whole video, (F, size, size, channels) uint8 (cached)."""
        return V.read_video(clip.source, self.config.size, self.config.channels)

    def _batch(self, split: str, rows: list[int], pick) -> Batch:
        """The batch of the ``split`` videos ``rows``, ``pick(b, length)`` choosing row b's T frame indices."""
        cfg = self.config
        B, T, P = len(rows), cfg.frames, cfg.tokens_per_frame
        clips = self.clips(split)
        chosen, indices, labels = [], [], []
        for b, row in enumerate(rows):
            whole = self.video(clips[row])  # (F, S, S, C) uint8
            index = pick(b, len(whole))  # (T,)
            chosen.append(whole[index])  # (T, S, S, C)
            indices.append(index)
            labels.append(clips[row].label)
        frames = torch.from_numpy(np.stack(chosen)).float() / 255.0  # (B, T, S, S, C) in [0, 1]
        pixels = clip_patches(frames, cfg.patch)  # (B, N, p²·C), N = T·P
        patch_index = torch.arange(P).repeat(T).expand(B, T * P).contiguous()  # (B, N): place within the frame
        label = torch.tensor(labels, dtype=torch.long)  # (B,)
        targets = torch.zeros(B, T * P, dtype=torch.long)
        targets[:, -1] = label  # the action, on the last token of the last frame
        mask = torch.zeros(B, T * P, dtype=torch.bool)
        mask[:, -1] = True
        meta = {
            "frames": frames,
            "label": label,
            "video_index": torch.tensor(rows, dtype=torch.long),
            "frame_index": torch.from_numpy(np.stack(indices)).long(),
        }  # (B, T): frames taken from the video
        return Batch({"pixels": pixels, "patch_index": patch_index}, targets, mask, meta)

    def _random(self, split: str, batch_size: int, seed: int) -> Batch:
        """Random clips of ``split``: a video each, ``frames`` frames ``stride`` apart from a random start."""
        cfg = self.config
        count = len(self.clips(split))
        g = generator(seed)
        rows = torch.randint(count, (batch_size,), generator=g).tolist()  # every draw before any decoding
        place = torch.rand(batch_size, generator=g, dtype=torch.float64).tolist()  # start, as a fraction of the room

        def pick(b: int, length: int) -> np.ndarray:
            room = V.start_room(length, cfg.frames, cfg.stride)
            start = min(int(place[b] * (room + 1)), room)
            return V.strided_indices(length, cfg.frames, cfg.stride, start)

        return self._batch(split, rows, pick)

    def sample(self, batch_size: int, seed: int) -> Batch:
        return self._random("train", batch_size, seed)

    def draw(self, purpose: str, batch_size: int, seed: int, index: int) -> Batch:
        if purpose != "eval":
            return self._random(split_of(purpose), batch_size, derive_seed(purpose, seed, index))
        count = len(self.clips("test"))
        first = index * batch_size
        if first >= count:
            raise ValueError(f"evaluation batch {index} is past the end of the test split ({count:,} videos)")
        rows = list(range(first, min(first + batch_size, count)))
        return self._batch("test", rows, lambda b, length: V.spread_indices(length, self.config.frames))

    def split_batches(self, purpose: str, batch_size: int) -> int | None:
        """Evaluation covers the test list once: at most this many batches."""
        return math.ceil(len(self.clips("test")) / batch_size) if purpose == "eval" else None

    # -- the Task interface -----------------------------------------------------------------------

    @property
    def num_classes(self) -> int:
        return self.config.classes

    def encoder(self, dim: int) -> nn.Module:
        cfg = self.config
        return PatchEncoder(cfg.patch, cfg.tokens_per_frame, dim, cfg.channels)

    def counts(self, logits: torch.Tensor, batch: Batch) -> Counts:
        where = batch.mask
        k = min(TOP_K, logits.shape[-1])
        best = logits.topk(k, dim=-1).indices  # (B, N, k)
        hit = (best == batch.targets[..., None]).any(-1) & where  # (B, N)
        return {
            "accuracy": masked_accuracy(logits, batch, where),
            "top5_accuracy": (float(hit.sum()), float(where.sum())),
        }
