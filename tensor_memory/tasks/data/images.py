"""Photographs for masked patch reconstruction: scikit-image's bundled ones, and CUB-200-2011 at a user path.

Two sources, one shape: a *pool* per split (``train``, ``valid``, ``test``) of grey or RGB images as
float32 arrays in [0, 1], at least ``size`` pixels on each side, from which the task cuts square crops.

- ``skimage`` ships with scikit-image (nothing downloads): its bundled photographs, each turned
  grey or kept RGB and scaled so its short side is :data:`PHOTO_SHORT_SIDE` pixels, and the 200
  25×25 grey ``lfw_subset`` images (100 faces, 100 non-faces). Photographs go whole to one split,
  by name (:data:`PHOTO_SPLITS`); the ``lfw_subset`` images by index (every tenth to test, the next
  to validation). Synthetic pictures (a checkerboard, a colour wheel, a phantom, blobs, a logo) and
  the data sets scikit-image has to download are never used.
- ``cub`` reads CUB-200-2011 in its standard folder: ``images.txt`` (``<id> <relative path>``),
  ``train_test_split.txt`` (``<id> <1 train | 0 test>``) and ``images/``. Test is the official test
  split; validation is one image in :data:`CUB_VALID_EVERY` of the official *train* split (chosen
  by a hash of its path), never test. Images are decoded with Pillow when first used, scaled so the
  short side is the crop size, and kept in memory.

Nothing here unpickles: the ``lfw_subset`` array is read with ``np.load(allow_pickle=False)``.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ...storage.files import FileFormatError
from ...storage.user_files import read_user_file, read_user_text

SPLITS = ("train", "valid", "test")
SOURCES = ("skimage", "cub")
PHOTO_SHORT_SIDE = 96  # photographs are scaled to this short side: a 24-pixel crop then holds a quarter of it
# Each bundled photograph belongs to one split, whole. Test and validation hold different kinds of scene
# (a portrait, an animal, objects, a texture, microscopy), so a held-out crop is never a neighbour of a trained one.
PHOTO_SPLITS = {
    "train": (
        "astronaut",
        "coffee",
        "rocket",
        "motorcycle",
        "hubble_deep_field",
        "immunohistochemistry",
        "retina",
        "moon",
        "clock",
        "page",
        "brick",
        "grass",
        "cell",
    ),
    "valid": ("text", "microaneurysms"),
    "test": ("camera", "chelsea", "coins", "gravel"),
}
FACES_TEST_EVERY = 10  # lfw_subset image i goes to test when i % 10 == 0, to valid when i % 10 == 1
CUB_VALID_EVERY = 10  # one official-train image in ten (by a hash of its path) is held out for validation
MAX_IMAGE_PIXELS = 50_000_000  # a decoded image larger than this is refused (a decompression bomb)
MAX_PIXELS_PER_BYTE = 10_000  # past a megapixel, more pixels a byte than a photograph compresses to: a crafted file
MAX_IMAGE_BYTES = 256 << 20  # an image file; CUB's largest is under 1 MB
MIN_IMAGE_SIDE = 8  # pixels: a smaller picture scaled up to a crop holds only a few values
MAX_ASPECT = 8  # its long side over its short side, at most (CUB's photographs are within 3)
CUB_CACHE_BYTES = 2 << 30  # decoded CUB images kept per split: 2 GiB
CUB_ASPECT = 1.5  # a CUB photograph is about 1.5 times as wide as it is high
MAX_LIST_BYTES = 16 << 20  # images.txt / train_test_split.txt of CUB are about 400 KB


@dataclasses.dataclass
class ImagePool:
    """One split of images: ``count`` of them, each fetched (and cached) by index as float32 in [0, 1],
    (H, W) grey or (H, W, 3) RGB, every side at least the crop size."""

    names: list[str]
    fetch: Callable[[int], np.ndarray]

    @property
    def count(self) -> int:
        return len(self.names)


# ---------------------------------------------------------------------------------------
# Pixels
# ---------------------------------------------------------------------------------------


def as_float(image: np.ndarray, channels: int) -> np.ndarray:
    """An image of any dtype (grey, RGB or RGBA) as float32 in [0, 1] with ``channels`` 1 (H, W) or 3 (H, W, 3)."""
    from skimage.color import gray2rgb, rgb2gray, rgba2rgb
    from skimage.util import img_as_float32

    image = img_as_float32(np.asarray(image))
    if image.ndim == 3 and image.shape[-1] == 4:
        image = rgba2rgb(image)
    if image.ndim == 3 and channels == 1:
        image = rgb2gray(image)
    elif image.ndim == 2 and channels == 3:
        image = gray2rgb(image)
    return np.clip(image, 0.0, 1.0).astype(np.float32)


def check_proportions(path: Path, shape: tuple[int, int]) -> None:
    """A FileFormatError naming ``path`` for a picture that no crop can use: a side under :data:`MIN_IMAGE_SIDE`
    pixels (scaled up, it is a blur of a few values), or sides more than :data:`MAX_ASPECT` apart (its short side
    scaled to the crop, the long one would grow past any memory: a 2,000,000 × 1 image to 24 × 48,000,000)."""
    h, w = shape
    if min(h, w) < MIN_IMAGE_SIDE:
        raise FileFormatError(
            f"{path}: {w}×{h} pixels, too small to crop (at least {MIN_IMAGE_SIDE} pixels a "
            f"side); remove it from the list or replace it"
        )
    if max(h, w) > MAX_ASPECT * min(h, w):
        raise FileFormatError(
            f"{path}: {w}×{h} pixels, sides {max(h, w) / min(h, w):,.0f} times apart (at most "
            f"{MAX_ASPECT}); not a photograph to crop: remove it from the list or replace it"
        )


def scale_short_side(image: np.ndarray, side: int) -> np.ndarray:
    """``image`` resized (anti-aliased) so that its shorter side is ``side`` pixels, aspect kept."""
    from skimage.transform import resize

    h, w = image.shape[:2]
    factor = side / min(h, w)
    shape = (max(side, round(h * factor)), max(side, round(w * factor)))
    if shape == (h, w):
        return image
    return resize(image, shape + image.shape[2:], anti_aliasing=factor < 1, preserve_range=True).astype(np.float32)


# ---------------------------------------------------------------------------------------
# scikit-image's bundled pictures
# ---------------------------------------------------------------------------------------


def _bundled(name: str) -> np.ndarray:
    """A bundled photograph by name (read from scikit-image's own data folder, never downloaded)."""
    from skimage import data

    if name == "motorcycle":  # the left view of the stereo pair
        return data.stereo_motorcycle()[0]
    return getattr(data, name)()


@functools.lru_cache(maxsize=4)
def _photos(split: str, channels: int) -> tuple[tuple[str, ...], tuple[np.ndarray, ...]]:
    names = PHOTO_SPLITS[split]
    return names, tuple(scale_short_side(as_float(_bundled(n), channels), PHOTO_SHORT_SIDE) for n in names)


@functools.lru_cache(maxsize=1)
def _faces() -> np.ndarray:
    """The 200 lfw_subset images (200, 25, 25) float32, read without unpickling."""
    from skimage import data

    path = Path(data.__file__).parent / "lfw_subset.npy"
    return np.load(path, allow_pickle=False).astype(np.float32)


def face_indices(split: str) -> list[int]:
    """Which of the 200 lfw_subset images belong to ``split``."""
    keep = {"test": lambda i: i % FACES_TEST_EVERY == 0, "valid": lambda i: i % FACES_TEST_EVERY == 1}
    rule = keep.get(split, lambda i: i % FACES_TEST_EVERY > 1)
    return [i for i in range(len(_faces())) if rule(i)]


def skimage_pools(split: str, channels: int) -> tuple[ImagePool, ImagePool]:
    """(photographs, faces) of ``split``: the two halves a shipped sample is drawn from."""
    names, photos = _photos(split, channels)
    faces = face_indices(split)
    return (
        ImagePool(list(names), lambda i: photos[i]),
        ImagePool([f"lfw_subset[{i}]" for i in faces], lambda i: as_float(_faces()[faces[i]], channels)),
    )


# ---------------------------------------------------------------------------------------
# CUB-200-2011 at a user path
# ---------------------------------------------------------------------------------------

CUB_HELP = (
    "a CUB-200-2011 folder holds images.txt, train_test_split.txt and images/ (pass --set task.params.path=FOLDER)"
)


def _read_list(path: Path) -> list[tuple[int, str]]:
    """The ``<id> <value>`` lines of a CUB list file, refused with the line named when malformed."""
    lines = read_user_text(path, MAX_LIST_BYTES, "a CUB list", CUB_HELP).splitlines()
    rows, seen = [], set()
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        key, _, value = line.strip().partition(" ")
        if not key.isdigit() or not value.strip():
            raise FileFormatError(f"{path}, line {number}: expected '<image id> <value>', got {line[:80]!r}")
        if int(key) in seen:  # a later line would silently replace the earlier one
            raise FileFormatError(f"{path}, line {number}: image id {int(key)} appears twice")
        seen.add(int(key))
        rows.append((int(key), value.strip()))
    return rows


def cub_split_paths(folder: Path) -> dict[str, list[Path]]:
    """The image files of each split of the CUB folder: test = official test, valid = 1 in 10 of official train."""
    folder = Path(folder).expanduser()
    paths = dict(_read_list(folder / "images.txt"))
    flags = dict(_read_list(folder / "train_test_split.txt"))
    missing = sorted(set(paths) - set(flags))[:3]
    if missing:
        raise FileFormatError(f"{folder / 'train_test_split.txt'}: no split for image id(s) {missing}; {CUB_HELP}")
    bad = [key for key, flag in flags.items() if flag not in ("0", "1")][:3]
    if bad:
        raise FileFormatError(
            f"{folder / 'train_test_split.txt'}: image id(s) {bad} are neither 1 (train) nor 0 (test)"
        )
    splits: dict[str, list[Path]] = {split: [] for split in SPLITS}
    try:
        root = (folder / "images").resolve()
    except (RuntimeError, OSError):
        raise FileFormatError(f"{folder / 'images'}: a loop of symbolic links, not the images folder") from None
    for key in sorted(paths):
        relative = paths[key]
        try:
            path = (root / relative).resolve()
        except (RuntimeError, OSError):  # a loop of symbolic links (Python 3.11 raises RuntimeError)
            raise FileFormatError(
                f"{root / relative}: image {key} of images.txt is a loop of symbolic links; "
                f"replace it with the picture itself"
            ) from None
        if root not in path.parents:  # '../../etc/passwd' in images.txt
            raise FileFormatError(f"{folder / 'images.txt'}: image {key} points outside images/ ({relative!r})")
        if flags[key] == "0":
            splits["test"].append(path)
        else:
            held = int(hashlib.sha256(relative.encode()).hexdigest(), 16) % CUB_VALID_EVERY == 0
            splits["valid" if held else "train"].append(path)
    for split, found in splits.items():
        if not found:
            raise FileFormatError(f"{folder}: the CUB {split} split is empty; {CUB_HELP}")
    return splits


def read_image(path: Path, channels: int, side: int = 0) -> np.ndarray:
    """A photograph file decoded with Pillow as float32 in [0, 1], refused clearly when missing, corrupt or huge;
    with ``side``, one far larger than needed is first reduced (box filter, by a whole factor) to at least eight
    times that short side, so that the anti-aliased scaling after it works on a small image (a photograph of a few
    hundred pixels, CUB's, is left whole)."""
    from PIL import Image

    try:
        raw = read_user_file(path, MAX_IMAGE_BYTES, "an image")  # never blocks
        with Image.open(io.BytesIO(raw)) as handle:
            pixels = handle.width * handle.height
            if pixels > MAX_IMAGE_PIXELS:
                raise FileFormatError(
                    f"{path}: {handle.width}×{handle.height} pixels, over the {MAX_IMAGE_PIXELS:,} an image may have"
                )
            if pixels > 1_000_000 and pixels > MAX_PIXELS_PER_BYTE * len(raw):
                raise FileFormatError(
                    f"{path}: claims {handle.width}×{handle.height} pixels in {len(raw):,} bytes, "
                    f"more than any photograph compresses to; a truncated or crafted file"
                )
            factor = min(handle.width, handle.height) // (8 * side) if side else 1
            if factor >= 2:
                handle.draft(handle.mode, (handle.width // factor, handle.height // factor))  # JPEG: decode smaller
                handle = handle.reduce(max(1, min(handle.width, handle.height) // (8 * side)))
            image = np.asarray(handle.convert("L" if channels == 1 else "RGB"))
    except FileNotFoundError:
        raise FileFormatError(f"{path}: listed in images.txt but missing; {CUB_HELP}") from None
    except (OSError, ValueError, Image.DecompressionBombError) as error:
        if isinstance(error, FileFormatError):
            raise
        raise FileFormatError(f"{path}: not a readable image ({error})") from None
    return as_float(image, channels)


@functools.lru_cache(maxsize=8)
def cub_pool(folder: str, split: str, channels: int, side: int) -> ImagePool:
    """The CUB images of ``split``, each decoded on first use and kept scaled to short side ``side`` — the most
    recently used ones, as many as :data:`CUB_CACHE_BYTES` holds (all of CUB at the default crop size)."""
    paths = cub_split_paths(Path(folder))[split]
    per_image = side * side * CUB_ASPECT * channels * 4  # float32 bytes of a typical scaled image

    @functools.lru_cache(maxsize=max(64, int(CUB_CACHE_BYTES // per_image)))
    def fetch(index: int) -> np.ndarray:
        image = read_image(paths[index], channels, side)
        check_proportions(paths[index], image.shape[:2])
        return scale_short_side(image, side)

    return ImagePool([p.name for p in paths], fetch)


def crop(image: np.ndarray, top: int, left: int, size: int) -> np.ndarray:
    """The ``size × size`` square of ``image`` at (top, left), channels last: (size, size, channels)."""
    piece = image[top : top + size, left : left + size]
    return piece[..., None] if piece.ndim == 2 else piece


def check_source(owner: str, source: str, path: str) -> None:
    """A ValueError unless ``source`` is known and, for ``cub``, ``path`` names a folder."""
    if source not in SOURCES:
        raise ValueError(f"{owner}.source must be one of {', '.join(SOURCES)}, got {source!r}")
    if not isinstance(path, str):
        raise ValueError(f"{owner}.path must be a folder path (a string), got {path!r}")
    if source == "cub" and not path:
        raise ValueError(f"{owner}.path is required for source 'cub': {CUB_HELP}")


__all__ = [
    "ImagePool",
    "SOURCES",
    "SPLITS",
    "PHOTO_SPLITS",
    "skimage_pools",
    "cub_pool",
    "cub_split_paths",
    "read_image",
    "crop",
    "as_float",
    "scale_short_side",
    "check_source",
]
