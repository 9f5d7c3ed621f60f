"""Masked patch reconstruction on real photographs: fill in the patches a mask hides.

A sample is one ``image_size × image_size`` crop of a real photograph (``data/images.py``:
scikit-image's bundled photographs and ``lfw_subset`` images, or CUB-200-2011 at a user path), cut
into ``(image_size / patch)²`` patch tokens in raster order, the same for every sample and model. A
mask hides ``round(rate · N)`` of them; a hidden patch enters as zeros with a learned "masked"
marker, and only hidden patches are scored. Crop, mask and rate are functions of the seed alone;
training mixes the sweep's three rates, 25, 50 and 75 % (``mask_rate = -1``). Training reads the
train split, validation the valid split, evaluation and traces the test split (``split_of``). One
memory chunk per patch.

Each image is standardised with the mean and spread of its *visible* pixels (per channel): the model
reads visible patches and predicts hidden ones in those units, and :meth:`MaskedPatches.to_pixels`
turns predictions back into pixels with the same visible statistics, never the hidden ones (which
would leak the answer). A prediction of 0 is the visible mean: the ``mean_fill`` floor.

Metrics (``skimage.metrics``, per image, averaged; predictions clipped to [0, 1]): ``psnr`` over the
hidden pixels (dB, data range 1); ``ssim``, the SSIM map (7×7 windows) of the reconstruction (visible
pixels as given) against the truth, averaged over the hidden pixels; ``psnr_mean_fill`` /
``ssim_mean_fill``, the same for every hidden pixel filled with the visible mean; ``mse`` per hidden
pixel.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from .. import limits as L
from ..config import ConfigBase, require_float, require_int
from .base import Batch, Counts, Task, derive_seed, embedding, generator, split_of
from .data import images as I
from .map_building import PLANE_Z
from .patches import patchify, unpatchify

MASK_RATES = (0.25, 0.5, 0.75)  # the paper's three masking rates: the sweep, and the training mixture
MIXED = -1.0  # mask_rate: each sample draws one of MASK_RATES
FACE_SHARE = 0.5  # a shipped sample is an lfw_subset image with this probability, else a photograph crop
MAX_PSNR = 100.0  # dB: a reconstruction exact to float precision would otherwise score infinity
MIN_SPREAD = 0.02  # the visible spread a flat crop is standardised with (its own would be near 0)
SOURCE_CODES = {"photo": 0, "face": 1, "cub": 2}  # meta["origin"][0]


@dataclasses.dataclass
class MaskedPatchesConfig(ConfigBase):
    DATA_PATHS = ("path",)
    source: str = "skimage"  # "skimage" (shipped photographs and faces) | "cub" (CUB-200-2011 at `path`)
    path: str = ""  # cub: the CUB_200_2011 folder holding images.txt, train_test_split.txt and images/
    image_size: int = 24  # crops are image_size × image_size pixels
    patch: int = 4  # patch tokens are patch × patch pixels; must divide image_size
    channels: int = 1  # 1: grey; 3: RGB (grey pictures are repeated)
    mask_rate: float = MIXED  # the fraction of patches hidden, in (0, 1); −1: each sample draws one of 0.25/0.5/0.75

    def __post_init__(self) -> None:
        owner = "MaskedPatchesConfig"
        I.check_source(owner, self.source, self.path)
        require_int(owner, "image_size", self.image_size, 8, L.MAX_GRID_SIDE)  # SSIM's 7×7 window must fit
        if self.source == "skimage" and self.image_size > 25:
            raise ValueError(
                f"{owner}.image_size must be at most 25 for source 'skimage' (the lfw_subset images "
                f"are 25×25), got {self.image_size}"
            )
        require_int(owner, "patch", self.patch, 1, self.image_size)
        if self.image_size % self.patch:
            raise ValueError(f"{owner}.patch must divide {owner}.image_size={self.image_size}, got {self.patch}")
        if self.tokens_per_image < 2:
            raise ValueError(
                f"{owner}: a {self.image_size}-pixel image of {self.patch}-pixel patches is one patch; "
                f"a mask must leave something visible: use smaller patches"
            )
        if self.tokens_per_image > L.MAX_SEQUENCE:
            raise ValueError(
                f"{owner}: (image_size / patch)² = {self.tokens_per_image:,} tokens, over the "
                f"{L.MAX_SEQUENCE:,} a sample may have (tensor_memory/limits.py)"
            )
        if self.channels not in (1, 3):
            raise ValueError(f"{owner}.channels must be 1 (grey) or 3 (RGB), got {self.channels!r}")
        if self.mask_rate != MIXED:
            require_float(owner, "mask_rate", self.mask_rate, 0.0, 1.0, low_open=True)
            if self.mask_rate >= 1.0:
                raise ValueError(
                    f"{owner}.mask_rate must be below 1 (something must stay visible) or −1 "
                    f"(mixed), got {self.mask_rate}"
                )

    @property
    def tokens_per_image(self) -> int:
        return (self.image_size // self.patch) ** 2

    @property
    def patch_values(self) -> int:
        return self.patch * self.patch * self.channels


def visible_statistics(pictures: torch.Tensor, masked: torch.Tensor, patch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Per image and channel, the mean and spread (standard deviation, at least :data:`MIN_SPREAD`) of the
    visible pixels: pictures (B, S, S, C), masked (B, N) → two (B, C)."""
    B, S, _, C = pictures.shape
    values = patchify(pictures, patch).reshape(B, -1, patch * patch, C)  # (B, N, p², C)
    seen = (~masked).float()[:, :, None, None]  # (B, N, 1, 1)
    count = seen.sum(dim=(1, 2)) * patch * patch  # (B, 1)
    mean = (values * seen).sum(dim=(1, 2)) / count  # (B, C)
    variance = (((values - mean[:, None, None, :]) ** 2) * seen).sum(dim=(1, 2)) / count
    return mean, variance.sqrt().clamp(min=MIN_SPREAD)


def hidden_pixels(masked: np.ndarray, size: int, patch: int) -> np.ndarray:
    """(S, S) bool: the pixels of the hidden patches, from ``masked`` (N,) in raster order."""
    n = size // patch
    return np.kron(np.asarray(masked, dtype=bool).reshape(n, n), np.ones((patch, patch), dtype=bool))


def image_scores(truth: np.ndarray, prediction: np.ndarray, hidden: np.ndarray) -> tuple[float, float]:
    """(PSNR in dB, SSIM) of one reconstruction over its hidden pixels, by ``skimage.metrics``.

    ``truth`` and ``prediction`` (S, S, C) in [0, 1]; ``hidden`` (S, S) bool. The SSIM map compares the
    reconstruction — visible pixels as given, hidden ones as predicted — with the truth, and is averaged
    over the hidden pixels; the PSNR is over the hidden pixels alone (capped at :data:`MAX_PSNR`).
    """
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    prediction = np.clip(prediction, 0.0, 1.0).astype(np.float64)
    truth = truth.astype(np.float64)
    if not np.any(truth[hidden] != prediction[hidden]):
        psnr = MAX_PSNR
    else:
        psnr = min(MAX_PSNR, float(peak_signal_noise_ratio(truth[hidden], prediction[hidden], data_range=1.0)))
    composite = np.where(hidden[..., None], prediction, truth)
    _, ssim_map = structural_similarity(truth, composite, data_range=1.0, channel_axis=-1, full=True)
    return psnr, float(ssim_map[hidden].mean())


IMAGE_METRICS = ("psnr", "ssim", "psnr_mean_fill", "ssim_mean_fill")


def image_metrics(truth: np.ndarray, prediction: np.ndarray, hidden: np.ndarray) -> dict[str, float]:
    """:func:`image_scores` of one reconstruction and of its floor, the hidden pixels filled with the mean colour
    of the visible ones: ``{"psnr", "ssim", "psnr_mean_fill", "ssim_mean_fill"}``."""
    fill = np.broadcast_to(truth[~hidden].mean(axis=0), truth.shape)  # the visible pixels' mean colour
    return dict(
        zip(IMAGE_METRICS, (*image_scores(truth, prediction, hidden), *image_scores(truth, fill, hidden)), strict=True)
    )


class MaskedPatchEncoder(nn.Module):
    """pixels (B, N, patch²·C) → Linear, plus learned markers of the patch's place and of whether it is hidden."""

    def __init__(self, patch_values: int, tokens: int, dim: int) -> None:
        super().__init__()
        self.pixels = nn.Linear(patch_values, dim)
        self.place = embedding(tokens, dim)
        self.hidden = embedding(2, dim)  # 0: visible, 1: hidden (its pixels arrive as zeros)

    def forward(self, pixels: torch.Tensor, masked: torch.Tensor, patch_index: torch.Tensor) -> torch.Tensor:
        return self.pixels(pixels) + self.place(patch_index) + self.hidden(masked)


class MaskedPatches(Task):
    name = "masked_patches"
    Config = MaskedPatchesConfig
    sweep_field = "mask_rate"
    sweep_values = MASK_RATES
    outputs = "values"
    headline = "psnr"

    @property
    def num_classes(self) -> int:
        return 0  # no classes: the head gives pixel values

    @property
    def output_width(self) -> int:
        return self.config.patch_values

    @property
    def tokens(self) -> int:
        return self.config.tokens_per_image

    # -- data ---------------------------------------------------------------------------------

    def _pools(self, split: str) -> list[tuple[str, I.ImagePool]]:
        cfg = self.config
        if cfg.source == "cub":
            return [("cub", I.cub_pool(cfg.path, split, cfg.channels, cfg.image_size))]
        photos, faces = I.skimage_pools(split, cfg.channels)
        return [("photo", photos), ("face", faces)]

    def _sample(self, split: str, batch_size: int, seed: int) -> Batch:
        cfg = self.config
        B, S, N = batch_size, cfg.image_size, cfg.tokens_per_image
        g = generator(seed)
        # Every draw comes first, in one order, whatever the pools hold: the same seed, the same choices.
        face = torch.rand(B, generator=g) < FACE_SHARE
        pick, down, across = (torch.rand(B, generator=g, dtype=torch.float64) for _ in range(3))
        rates = torch.tensor(MASK_RATES, dtype=torch.float64)[torch.randint(len(MASK_RATES), (B,), generator=g)]
        if cfg.mask_rate != MIXED:
            rates = torch.full((B,), float(cfg.mask_rate), dtype=torch.float64)
        order = torch.rand(B, N, generator=g).argsort(dim=1)  # (B, N) patches in the order they get hidden
        hidden_count = (rates * N).round().long().clamp(1, N - 1)  # (B,)
        masked = torch.zeros(B, N, dtype=torch.bool)
        masked.scatter_(1, order, torch.arange(N)[None, :] < hidden_count[:, None])  # the first k of the order

        pools = self._pools(split)
        crops, origin = [], []
        for b in range(B):
            kind, pool = pools[int(face[b]) if len(pools) > 1 else 0]
            index = min(int(pick[b] * pool.count), pool.count - 1)
            image = pool.fetch(index)
            top = int(down[b] * (image.shape[0] - S + 1))
            left = int(across[b] * (image.shape[1] - S + 1))
            crops.append(I.crop(image, top, left, S))
            origin.append((SOURCE_CODES[kind], index, top, left))
        pictures = torch.from_numpy(np.stack(crops)).float()  # (B, S, S, C): the pools hold C channels already
        mean, spread = visible_statistics(pictures, masked, cfg.patch)  # (B, C) each, from visible pixels only
        standard = patchify((pictures - mean[:, None, None, :]) / spread[:, None, None, :], cfg.patch)  # (B, N, p²·C)
        inputs = {
            "pixels": standard.masked_fill(masked[:, :, None], 0.0),  # a hidden patch shows nothing
            "masked": masked.long(),
            "patch_index": torch.arange(N).expand(B, N).contiguous(),
        }
        meta = {
            "image": pictures,
            "masked": masked,
            "mask_rate": rates.float(),
            "visible_mean": mean,
            "visible_spread": spread,
            "origin": torch.tensor(origin, dtype=torch.long),
        }  # (B, 4): source, image index, top, left
        return Batch(inputs, standard, masked.clone(), meta)

    def sample(self, batch_size: int, seed: int) -> Batch:
        return self._sample("train", batch_size, seed)

    def draw(self, purpose: str, batch_size: int, seed: int, index: int) -> Batch:
        return self._sample(split_of(purpose), batch_size, derive_seed(purpose, seed, index))

    def true_places(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        """Each patch's place in the image as (x, y, z) in [-1, 1]: column and row spread over the grid's W and
        H axes (an H × W = rows × columns grid puts patch (r, c) on voxel (r, c)), z on the plane near the
        −1 face that every grid has voxel centres on (map building's :data:`PLANE_Z`)."""
        n = self.config.image_size // self.config.patch
        row, col = inputs["patch_index"] // n, inputs["patch_index"] % n  # (B, N) each
        scale = lambda i: (2.0 * i / (n - 1) - 1.0).float()  # noqa: E731  (index 0 … n−1 → −1 … 1)
        return torch.stack([scale(col), scale(row), torch.full_like(scale(row), PLANE_Z)], dim=-1)  # (B, N, 3)

    # -- model and scores -----------------------------------------------------------------------

    def encoder(self, dim: int) -> nn.Module:
        cfg = self.config
        return MaskedPatchEncoder(cfg.patch_values, cfg.tokens_per_image, dim)

    def head(self, dim: int) -> nn.Module:
        return nn.Linear(dim, self.config.patch_values)

    def loss(self, outputs: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Mean squared error over the hidden patches' pixels."""
        return F.mse_loss(outputs[batch.mask], batch.targets[batch.mask])

    def to_pixels(self, outputs: torch.Tensor, meta: dict[str, torch.Tensor]) -> torch.Tensor:
        """The model's outputs (B, N, patch²·C), in each image's visible standard units, as images (B, S, S, C)."""
        cfg = self.config
        standard = unpatchify(outputs.detach().float().cpu(), cfg.patch, cfg.channels)  # (B, S, S, C)
        mean, spread = meta["visible_mean"], meta["visible_spread"]  # (B, C): visible pixels' own
        return standard * spread[:, None, None, :] + mean[:, None, None, :]

    def counts(self, outputs: torch.Tensor, batch: Batch) -> Counts:
        cfg = self.config
        predicted = self.to_pixels(outputs, batch.meta).numpy()  # (B, S, S, C)
        pictures = batch.meta["image"].numpy()
        masked = batch.mask.cpu().numpy()
        sums = dict.fromkeys(IMAGE_METRICS, 0.0)
        squared, hidden_total = 0.0, 0.0
        for b in range(len(pictures)):
            hidden = hidden_pixels(masked[b], cfg.image_size, cfg.patch)
            truth = pictures[b]
            for key, value in image_metrics(truth, predicted[b], hidden).items():
                sums[key] += value
            error = np.clip(predicted[b], 0.0, 1.0)[hidden] - truth[hidden]
            squared += float(np.square(error.astype(np.float64)).sum())
            hidden_total += float(error.size)
        images = float(len(pictures))
        return {**{key: (value, images) for key, value in sums.items()}, "mse": (squared, hidden_total)}
