"""Per-chunk summaries of a memory layer, built a segment of chunks at a time: what the overview and the addressing
report need of a trace without reading its volumes again.

Per chunk (each (K,) float64): ``energy`` Σh², ``state_peak`` max |h|, ``read_to_write_voxels`` the read's distance
to the nearest write of an earlier chunk and ``reads_within_2sigma`` 1 when some earlier write's σ reaches it
within 2σ (both NaN for chunk 0, which has no earlier write); when gates are recorded, ``gate_i_mean`` and
``gate_i_saturated`` (the share within :data:`GATE_EPS` of 0 or 1), and the same for f and o. Over the whole layer:
``write_mass_sum`` and ``write_mass_max`` (D, H, W), each chunk's Gaussian write weights summed and maxed.

:class:`SummaryBuilder` keeps only the earlier writes' coordinates and σ across segments (K × 4 numbers), so a
trace captured in segments is summarised as it is captured, and a read is measured against at most
:data:`READ_BLOCK` × K distances at a time: no K × K matrix.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from analysis.traces.quantized import QuantizedVolumes
from tensor_memory.memory.geometry import gaussian_profiles, in_voxels

GATE_EPS = 0.01  # a gate value within this of 0 or 1 counts as saturated: its sigmoid passes almost no gradient
SUMMARY_GATES = ("gate_i", "gate_f", "gate_o")  # the sigmoid gates (g is a tanh)
READ_BLOCK = 256  # reads measured at a time: a (256, K) distance matrix at most
VOLUME_VALUES = 1 << 22  # volume values decoded at a time (32 MB as float64): a segment is never decoded whole
FIELDS = ("mu_read", "mu_write", "sigma", "h", *SUMMARY_GATES)  # what the summaries read of a layer
TOTALS = ("write_mass_sum", "write_mass_max")


def write_weights(mu_write: np.ndarray, sigma: np.ndarray, grid: tuple[int, int, int]) -> np.ndarray:
    """(k, D, H, W) float64: the Gaussian weight of each write (μ (k, 3), σ (k,)) at every voxel, content left out."""
    gz, gy, gx = (
        g.numpy()
        for g in gaussian_profiles(
            torch.from_numpy(np.asarray(mu_write, dtype=np.float64)),
            torch.from_numpy(np.asarray(sigma, dtype=np.float64)),
            grid,
        )
    )  # (k, D), (k, H), (k, W)
    return gz[:, :, None, None] * gy[:, None, :, None] * gx[:, None, None, :]


def chunk_slice(value: Any, chunks: slice) -> Any:
    """``value``'s chunks ``chunks``: an array's view, or int8 volumes still as codes (decoded only when used)."""
    if value is None:  # a field not recorded (gates)
        return None
    if isinstance(value, QuantizedVolumes):
        return QuantizedVolumes(value.codes[chunks], value.scale[chunks])
    return value[chunks]


class SummaryBuilder:
    """Summaries of one memory layer on ``grid`` (D, H, W), a segment of its chunks at a time, in order."""

    def __init__(self, grid: tuple[int, int, int]) -> None:
        self.grid = tuple(int(n) for n in grid)
        self._mu_write = np.zeros((0, 3))  # (n, 3) every earlier chunk's write, normalised units
        self._sigma = np.zeros(0)  # (n,)
        self._mass_sum = np.zeros(self.grid)
        self._mass_max = np.zeros(self.grid)

    def add(self, fields: dict[str, Any]) -> dict[str, np.ndarray]:
        """The next k chunks (``mu_read``, ``mu_write`` (k, 3), ``sigma`` (k,), ``h`` and, when recorded,
        ``gate_i``/``gate_f``/``gate_o`` (k, C, D, H, W), float arrays or int8 volumes; other fields, ``read`` among
        them, are ignored) → their summaries ``{name: (k,) float64}``. Volumes are decoded a block at a time."""
        k = len(fields["sigma"])
        per_chunk = int(np.prod(fields["h"].shape[1:]))  # C·D·H·W values a volume
        step = max(1, min(READ_BLOCK, VOLUME_VALUES // max(per_chunk, 1)))
        return _joined(
            self._add_block({name: chunk_slice(fields.get(name), slice(first, first + step)) for name in FIELDS})
            for first in range(0, max(k, 1), step)
        )  # an empty segment still gives every name

    def totals(self) -> dict[str, np.ndarray]:
        """The write mass over every chunk added so far: ``write_mass_sum`` and ``write_mass_max`` (D, H, W)."""
        return {"write_mass_sum": self._mass_sum.copy(), "write_mass_max": self._mass_max.copy()}

    def _add_block(self, fields: dict[str, Any]) -> dict[str, np.ndarray]:
        h = np.asarray(fields["h"], dtype=np.float32)  # (k, C, D, H, W) decoded; float16 and int8 exactly
        k, axes = len(h), (1, 2, 3, 4)
        out = {
            "energy": (h.astype(np.float64) ** 2).sum(axis=axes),
            "state_peak": np.abs(h).max(axis=axes).astype(np.float64),
        }
        for name in SUMMARY_GATES:
            if fields[name] is not None:
                values = np.asarray(fields[name], dtype=np.float32)
                values = values.reshape(k, int(np.prod(values.shape[1:])))  # (k, C·D·H·W)
                out[f"{name}_mean"] = values.mean(axis=1, dtype=np.float64)
                out[f"{name}_saturated"] = ((values < GATE_EPS) | (values > 1 - GATE_EPS)).mean(axis=1)
        mu_write = np.asarray(fields["mu_write"], dtype=np.float64)
        sigma = np.asarray(fields["sigma"], dtype=np.float64)
        distance, within = self._reach(np.asarray(fields["mu_read"], dtype=np.float64), mu_write, sigma)
        out.update(read_to_write_voxels=distance, reads_within_2sigma=within)
        self.add_mass(mu_write, sigma)
        return out

    def add_mass(self, mu_write: np.ndarray, sigma: np.ndarray) -> None:
        """The write mass of k more chunks (μ_write (k, 3), σ (k,)) into the totals."""
        if len(sigma):
            mass = write_weights(mu_write, sigma, self.grid)  # (k, D, H, W)
            self._mass_sum += mass.sum(axis=0)
            np.maximum(self._mass_max, mass.max(axis=0), out=self._mass_max)

    def _reach(self, mu_read: np.ndarray, mu_write: np.ndarray, sigma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Each read's distance (voxels) to the nearest earlier write, and whether one reaches it within 2σ.

        Chunk i of the block (the trace's chunk n + i) sees the writes of chunks 0 … n + i − 1. 2σ is tested in
        normalised units, where a write's Gaussian is round: ‖μ_read − μ_write‖ ≤ 2σ.
        """
        n, k = len(self._sigma), len(mu_read)
        self._mu_write = np.concatenate([self._mu_write, mu_write])  # (n + k, 3)
        self._sigma = np.concatenate([self._sigma, sigma])  # (n + k,)
        distance, within = np.full(k, np.nan), np.full(k, np.nan)
        seen = n + np.arange(k) > 0  # reads with an earlier write
        if not seen.any():
            return distance, within
        earlier = np.arange(n + k)[None, :] < (n + np.arange(k))[:, None]  # (k, n + k): write j before read n + i
        apart = self._distances(mu_read, self._mu_write)  # (k, n + k) normalised units
        voxels = self._distances(in_voxels(mu_read, self.grid), in_voxels(self._mu_write, self.grid))
        distance[seen] = np.where(earlier, voxels, np.inf).min(axis=1)[seen]
        within[seen] = (earlier & (apart <= 2.0 * self._sigma[None, :])).any(axis=1)[seen]
        return distance, within

    @staticmethod
    def _distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(m, 3), (n, 3) → (m, n) Euclidean distances, from the differences themselves (no ‖a‖² + ‖b‖² − 2ab)."""
        return torch.cdist(
            torch.from_numpy(a), torch.from_numpy(b), compute_mode="donot_use_mm_for_euclid_dist"
        ).numpy()


def summarize(layer: Any, block: int = READ_BLOCK) -> dict[str, np.ndarray]:
    """The per-chunk summaries (each (K,)) and the totals of an in-memory layer (a
    :class:`~analysis.traces.trace.LayerTrace`), built ``block`` chunks at a time by one :class:`SummaryBuilder`."""
    builder = SummaryBuilder(layer.grid)
    per_chunk = _joined(
        builder.add({name: chunk_slice(getattr(layer, name), slice(first, first + block)) for name in FIELDS})
        for first in range(0, max(len(layer.sigma), 1), block)
    )
    return {**per_chunk, **builder.totals()}


def write_totals(mu_write: np.ndarray, sigma: np.ndarray, grid: tuple[int, int, int]) -> dict[str, np.ndarray]:
    """The totals (:data:`TOTALS`) of the writes ``mu_write`` (K, 3), ``sigma`` (K,) alone, :data:`READ_BLOCK` chunks
    at a time: what a store cut short lacks, made without reading its volumes."""
    builder = SummaryBuilder(grid)
    for first in range(0, len(sigma), READ_BLOCK):
        block = slice(first, first + READ_BLOCK)
        builder.add_mass(np.asarray(mu_write[block], dtype=np.float64), np.asarray(sigma[block], dtype=np.float64))
    return builder.totals()


def _joined(parts: Any) -> dict[str, np.ndarray]:
    """Blocks' summaries ``{name: (k,)}``, in order → one ``{name: (Σk,)}``."""
    parts = list(parts)
    return {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}


__all__ = [
    "SummaryBuilder",
    "summarize",
    "write_totals",
    "write_weights",
    "chunk_slice",
    "GATE_EPS",
    "SUMMARY_GATES",
    "FIELDS",
    "TOTALS",
]
