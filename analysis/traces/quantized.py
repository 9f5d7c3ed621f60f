"""Volumes stored as int8 codes with one float32 scale per chunk and channel.

A long trace on a large grid is almost all volumes: 1,000 chunks of ``h`` and ``c`` at C = 32 on
16³ are 524 MB in float16. Stored as int8 they take half that. Each (chunk, channel) volume gets
its own symmetric scale, ``scale = max|x| / 127``, so every channel keeps 255 levels whatever
its range, and the decoded value ``code · scale`` is within ``scale / 2`` of the original (1/254
of that channel's largest magnitude in that chunk).

:class:`QuantizedVolumes` keeps the codes and decodes on access: indexing one chunk decodes only
that chunk, so stepping through a long trace never materialises the whole float array. It
behaves like the float array for what analysis code does with volumes (indexing, ``astype``,
``np.asarray``, ``shape``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

INT8_LEVELS = 127  # codes span -127..127 (symmetric: -128 is never used, so x and -x round alike)


def quantize(volumes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(…, C, D, H, W) float → int8 codes of the same shape and float32 scales (…, C).

    A volume that is all zeros gets scale 0 (and decodes to exact zeros). A volume holding NaN
    or infinity gets a NaN scale, so it decodes to NaN and validation names it.
    """
    x = np.asarray(volumes, dtype=np.float32)
    peak = np.abs(x).max(axis=(-3, -2, -1))  # (…, C) largest magnitude per volume
    scale = np.where(np.isfinite(peak), peak / INT8_LEVELS, np.nan).astype(np.float32)  # (…, C)
    divisor = np.where(scale > 0, scale, 1.0)[..., None, None, None]  # all-zero volumes: codes stay 0
    with np.errstate(invalid="ignore"):  # a non-finite volume's codes are meaningless; its NaN scale says so
        codes = np.rint(np.nan_to_num(x / divisor, nan=0.0, posinf=0.0, neginf=0.0))
    return np.clip(codes, -INT8_LEVELS, INT8_LEVELS).astype(np.int8), scale


def dequantize(codes: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """int8 codes (…, C, D, H, W) and scales (…, C) → float32 values."""
    return codes.astype(np.float32) * scale[..., None, None, None]


class QuantizedVolumes:
    """(K, C, D, H, W) volumes kept as int8 ``codes`` with float32 ``scale`` (K, C); decoded on access."""

    def __init__(self, codes: np.ndarray, scale: np.ndarray) -> None:
        if codes.dtype != np.int8 or codes.ndim != 5 or scale.shape != codes.shape[:2]:
            raise ValueError(
                f"QuantizedVolumes needs int8 codes (K, C, D, H, W) and scales (K, C); got "
                f"{codes.dtype} {tuple(codes.shape)} and {tuple(scale.shape)}"
            )
        self.codes = codes
        self.scale = scale.astype(np.float32, copy=False)

    dtype = np.dtype(np.float32)  # what decoding gives
    ndim = 5

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.codes.shape)

    @property
    def nbytes(self) -> int:
        return self.codes.nbytes + self.scale.nbytes

    def __len__(self) -> int:
        return self.codes.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        """Decode only the chunks the first index selects, then apply the rest of the index."""
        key = key if isinstance(key, tuple) else (key,)
        first, rest = key[0], key[1:]
        if first is Ellipsis or first is None:
            return np.asarray(self)[key]
        chunks = dequantize(self.codes[first], self.scale[first])
        if np.ndim(first) == 0 and not isinstance(first, slice):  # an integer: the chunk axis is gone
            return chunks[rest]
        return chunks[(slice(None), *rest)]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        values = dequantize(self.codes, self.scale)
        return values if dtype is None else values.astype(dtype)

    def astype(self, dtype: Any, copy: bool = True) -> np.ndarray:
        return np.asarray(self, dtype=dtype)


__all__ = ["QuantizedVolumes", "quantize", "dequantize", "INT8_LEVELS"]
