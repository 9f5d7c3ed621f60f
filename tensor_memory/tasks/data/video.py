"""Videos decoded small and kept in memory, and which frames a clip takes.

A video is an ``.avi`` file (decoded with PyAV) or a folder of jpg/jpeg/png frames (read with
Pillow, in name order with digit runs compared as numbers). Every frame is centre-cropped to a
square, resized to ``size × size`` and kept as uint8 in a cache of at most :data:`MAX_CACHE_BYTES`
(least recently used first out); at most :data:`MAX_FRAMES` frames of a video are decoded. A
missing, corrupt or empty video or an unreadable image raises one
:class:`~tensor_memory.storage.files.FileFormatError` naming the file.
"""

from __future__ import annotations

import collections
import io
import re
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ...optional import require
from ...storage.files import FileFormatError
from ...storage.user_files import read_user_file
from .images import MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS
from .ucf101 import UCF_HELP

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
MAX_FRAMES = 2048  # frames decoded per video at most (UCF-101's longest clip has 1,776); the rest are ignored
MAX_VIDEO_BYTES = 1 << 30  # a video file; UCF-101's largest is about 30 MB
MAX_CACHE_BYTES = 2 << 30  # decoded small videos kept in memory (UCF-101 at 32×32 RGB is ~7.6 GB in all)


# ---------------------------------------------------------------------------------------
# Frames
# ---------------------------------------------------------------------------------------


def shrink(image, size: int, channels: int) -> np.ndarray:
    """A PIL image centre-cropped to a square and resized (anti-aliased) to (size, size, channels) uint8."""
    from PIL import Image

    width, height = image.size
    side = min(width, height)
    left, top = (width - side) // 2, (height - side) // 2
    square = image.convert("RGB" if channels == 3 else "L").crop((left, top, left + side, top + side))
    small = square.resize((size, size), Image.Resampling.BILINEAR)  # (resize's box= would blend pixels outside)
    array = np.asarray(small, dtype=np.uint8)
    return array[..., None] if array.ndim == 2 else array  # (size, size, channels)


def _natural(name: str) -> list:
    """A sort key comparing digit runs as numbers: frame2.jpg before frame10.jpg."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def frame_files(folder: Path) -> list[Path]:
    """The image files of a frame folder, in name order."""
    try:
        names = [p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()]
    except OSError as error:
        raise FileFormatError(f"{folder}: cannot list the frame folder ({error.strerror or error})") from None
    return sorted(names, key=lambda p: _natural(p.name))


def read_frame_folder(folder: Path, size: int, channels: int, max_frames: int = MAX_FRAMES) -> np.ndarray:
    """A frame folder's first ``max_frames`` images as (F, size, size, channels) uint8."""
    from PIL import Image

    files = frame_files(folder)
    if not files:
        raise FileFormatError(f"{folder}: a frame folder with no frames (no {'/'.join(IMAGE_SUFFIXES)} files)")
    frames = []
    for file in files[:max_frames]:
        try:
            with Image.open(io.BytesIO(read_user_file(file, MAX_IMAGE_BYTES, "an image"))) as handle:  # never blocks
                if handle.width * handle.height > MAX_IMAGE_PIXELS:
                    raise FileFormatError(
                        f"{file}: {handle.width}×{handle.height} pixels, over the {MAX_IMAGE_PIXELS:,} a frame may have"
                    )
                frames.append(shrink(handle, size, channels))
        except FileFormatError:
            raise
        except (OSError, ValueError, Image.DecompressionBombError) as error:
            raise FileFormatError(f"{file}: not a readable image ({error})") from None
    return np.stack(frames)


def read_avi(path: Path, size: int, channels: int, max_frames: int = MAX_FRAMES) -> np.ndarray:
    """A video file's first ``max_frames`` frames, decoded with PyAV, as (F, size, size, channels) uint8."""
    av = require("av", "video", "reading video files (UCF-101)")

    frames = []
    try:
        with av.open(io.BytesIO(read_user_file(path, MAX_VIDEO_BYTES, "a video"))) as container:  # never blocks
            if not container.streams.video:
                raise FileFormatError(f"{path}: not a readable video: it holds no video stream; re-download it")
            stream = container.streams.video[0]
            width, height = stream.codec_context.width, stream.codec_context.height
            if width * height > MAX_IMAGE_PIXELS:
                raise FileFormatError(
                    f"{path}: {width}×{height} frames, over the {MAX_IMAGE_PIXELS:,} pixels a frame may have"
                )
            for frame in container.decode(stream):
                if frame.width * frame.height > MAX_IMAGE_PIXELS:
                    raise FileFormatError(
                        f"{path}: a {frame.width}×{frame.height} frame, over the "
                        f"{MAX_IMAGE_PIXELS:,} pixels a frame may have"
                    )
                frames.append(shrink(frame.to_image(), size, channels))
                if len(frames) >= max_frames:
                    break
    except FileFormatError:
        raise
    except (av.FFmpegError, OSError, ValueError, EOFError) as error:
        raise FileFormatError(f"{path}: not a readable video ({error}); re-download or re-extract it") from None
    if not frames:
        raise FileFormatError(f"{path}: a video with no frames (empty or truncated); re-download it")
    return np.stack(frames)


class FrameCache:
    """Decoded videos by key, at most ``max_bytes`` in all; the least recently used go first."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self._items: collections.OrderedDict[tuple, np.ndarray] = collections.OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: tuple, load: Callable[[], np.ndarray]) -> np.ndarray:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = load()
        value.setflags(write=False)  # shared by every batch that uses it
        with self._lock:
            if value.nbytes <= self.max_bytes and key not in self._items:
                self._items[key] = value
                self.bytes += value.nbytes
                while self.bytes > self.max_bytes:
                    _, old = self._items.popitem(last=False)
                    self.bytes -= old.nbytes
        return value

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0


CACHE = FrameCache(MAX_CACHE_BYTES)


def read_video(source: Path, size: int, channels: int, cache: FrameCache | None = None) -> np.ndarray:
    """The frames of ``source`` (an .avi file or a frame folder) as (F, size, size, channels) uint8, cached
    (by path, size, channels and the file's modification time and size)."""
    try:
        info = source.stat()
    except OSError:
        raise FileFormatError(f"{source}: missing video; {UCF_HELP}") from None
    key = (str(source), size, channels, info.st_mtime_ns, info.st_size)
    cache = CACHE if cache is None else cache
    if stat.S_ISDIR(info.st_mode):
        return cache.get(key, lambda: read_frame_folder(source, size, channels))
    return cache.get(key, lambda: read_avi(source, size, channels))


# ---------------------------------------------------------------------------------------
# Which frames a clip takes
# ---------------------------------------------------------------------------------------


def strided_indices(length: int, frames: int, stride: int, start: int) -> np.ndarray:
    """``frames`` indices from ``start``, ``stride`` apart; past the video's end the last frame repeats."""
    return np.minimum(start + stride * np.arange(frames), length - 1)


def start_room(length: int, frames: int, stride: int) -> int:
    """The last start a strided clip can have inside a video of ``length`` frames (0 when it is too short)."""
    return max(0, length - ((frames - 1) * stride + 1))


def spread_indices(length: int, frames: int) -> np.ndarray:
    """``frames`` indices evenly spread over a video of ``length`` frames: ⌊i·(length − 1)/(frames − 1)⌋,
    the first and the last frame included (one frame: the middle one); a short video repeats frames."""
    if frames == 1:
        return np.array([(length - 1) // 2])
    return (np.arange(frames) * (length - 1)) // (frames - 1)


__all__ = [
    "FrameCache",
    "CACHE",
    "read_video",
    "read_avi",
    "read_frame_folder",
    "shrink",
    "strided_indices",
    "start_room",
    "spread_indices",
    "MAX_FRAMES",
    "MAX_CACHE_BYTES",
]
