"""The mechanism one chunk at a time, computed by a checkpoint's own memory layer, for teaching.

:func:`mechanism_step` takes a memory layer's state before a chunk and the chunk's addressing
(read and write coordinates, σ, write content) — recorded in a trace, or set by hand — and runs
the layer's real forward on that chunk, with hooks setting those values: the trilinear read and
what it adds to the tokens, the ConvLSTM gates and the new state all come from the forward.
Fed a trace's recorded values it reproduces the recorded state (to the float16 the trace stores
volumes in), which :func:`walkthrough` reports.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from analysis.traces.trace import LayerTrace, Trace
from tensor_memory import hooks, memory_layers, record
from tensor_memory.memory import MemoryState, TensorMemory, gaussian_write
from tensor_memory.memory.geometry import in_voxels, sigma_voxels_per_axis

GATES = ("i", "f", "o", "g")


@dataclasses.dataclass
class MechanismStep:
    """Every number of one chunk through one memory layer. Volumes are (C, D, H, W) float32."""

    mu_read: np.ndarray  # (3,) (x, y, z) in [-1, 1]
    mu_write: np.ndarray  # (3,)
    sigma: float  # write spread, normalised units
    content: np.ndarray  # (C,) what the chunk writes
    corners: list[tuple[tuple[int, int, int], float]]  # the voxels (z, y, x) the read mixes, with their weights
    read: np.ndarray  # (C,) r = trilinear read of h_prev at mu_read
    added_norm: float  # ‖σ(γ)·out_proj(r)‖: how far the read moves every token of the chunk
    gate_scale: float  # σ(γ)
    write: np.ndarray  # V: the Gaussian write volume
    gates: dict[str, np.ndarray]  # i, f, o (sigmoids) and g (tanh)
    h_prev: np.ndarray
    c_prev: np.ndarray
    h_new: np.ndarray
    c_new: np.ndarray

    @property
    def grid(self) -> tuple[int, int, int]:
        return tuple(self.h_prev.shape[1:])  # type: ignore[return-value]


def memory_module(model: torch.nn.Module, layer: str) -> TensorMemory:
    """The Tensor Memory layer at module path ``layer`` (as named in traces) of a task model."""
    layers = memory_layers(model)
    if layer not in layers:
        raise ValueError(f"no memory layer {layer!r}; the model has {', '.join(layers) or 'none'}")
    return layers[layer]


def read_corners(mu_read: np.ndarray, grid: tuple[int, int, int]) -> list[tuple[tuple[int, int, int], float]]:
    """The voxels (z, y, x) a trilinear read at ``mu_read`` mixes, with their weights (zero weights left out).

    Border padding as in the mechanism: coordinates are clamped to the grid.
    """
    axes = []
    positions = in_voxels(np.clip(np.asarray(mu_read, dtype=np.float64), -1.0, 1.0), grid)  # x, y, z
    for position, n in zip(positions, grid[::-1], strict=True):
        left = min(int(np.floor(position)), n - 2)
        frac = position - left
        axes.append(((left, 1.0 - frac), (left + 1, frac)))
    out = []
    for z, wz in axes[2]:
        for y, wy in axes[1]:
            for x, wx in axes[0]:
                if wz * wy * wx > 0:
                    out.append(((z, y, x), float(wz * wy * wx)))
    return out


def mechanism_step(
    memory: TensorMemory,
    h_prev: np.ndarray,
    c_prev: np.ndarray,
    mu_read: np.ndarray,
    mu_write: np.ndarray,
    sigma: float,
    content: np.ndarray,
) -> MechanismStep:
    """Steps 3–5 of one chunk with ``memory``'s weights, from the state (h_prev, c_prev) before it.

    h_prev, c_prev (C, D, H, W); mu_read, mu_write (3,) as (x, y, z) in [-1, 1]; sigma > 0; content (C,).
    The layer's own forward runs on one chunk, from that state, with hooks setting the addressing and
    the content; everything shown is what that forward computed (recorded at its hook points).
    """
    cfg = memory.config
    C, grid = cfg.channels, tuple(cfg.grid)
    h0 = torch.as_tensor(np.asarray(h_prev, dtype=np.float32))
    c0 = torch.as_tensor(np.asarray(c_prev, dtype=np.float32))
    if h0.shape != (C, *grid) or c0.shape != (C, *grid):
        raise ValueError(f"h_prev and c_prev must be {(C, *grid)}, got {tuple(h0.shape)} and {tuple(c0.shape)}")
    if not float(sigma) > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    given = {
        "mu_read": torch.as_tensor(np.asarray(mu_read, dtype=np.float32)).view(1, 1, 3),
        "mu_write": torch.as_tensor(np.asarray(mu_write, dtype=np.float32)).view(1, 1, 3),
        "sigma": torch.tensor([[float(sigma)]], dtype=torch.float32),
        "content": torch.as_tensor(np.asarray(content, dtype=np.float32)).view(1, 1, C),
    }
    tokens = torch.zeros(1, cfg.chunk_size, cfg.token_dim)  # every value they would give is set by the hooks
    state = MemoryState(h0[None], c0[None], torch.zeros(1, 0, cfg.token_dim))
    with torch.no_grad(), hooks(memory, {name: (lambda _, v=v: v) for name, v in given.items()}), record(memory) as rec:
        out, _ = memory(tokens, state)
    got = rec[""]
    with torch.no_grad():  # the write volume, for the picture: the forward only ever holds its factors
        write = gaussian_write(given["content"][0], given["mu_write"][0], given["sigma"][0], grid, cfg.write.window)
    first = lambda t: t[0, 0].numpy().copy()  # noqa: E731  (1, 1, …) → (…)
    xyz_read = first(got.mu_read)
    return MechanismStep(
        mu_read=xyz_read,
        mu_write=first(got.mu_write),
        sigma=float(got.sigma[0, 0]),
        content=first(got.content),
        corners=read_corners(xyz_read, grid),
        read=first(got.read),
        added_norm=float((out - tokens)[0, 0].norm()),  # σ(γ)·out_proj(r), as the forward added it
        gate_scale=float(got.gate_scale),
        write=write[0].numpy().copy(),
        gates={g: first(getattr(got, f"gate_{g}")) for g in GATES},
        h_prev=h0.numpy().copy(),
        c_prev=c0.numpy().copy(),
        h_new=first(got.h),
        c_new=first(got.c),
    )


def state_before(layer: LayerTrace, chunk: int) -> tuple[np.ndarray, np.ndarray]:
    """(h, c) a chunk reads and updates: the state after the previous chunk, zeros before the first."""
    if layer.c is None:
        raise ValueError(
            "the trace holds no cell state c (captured with cell_state=False); capture it with cell_state=True"
        )
    if not 0 <= chunk < layer.h.shape[0]:
        raise ValueError(f"chunk must be in 0..{layer.h.shape[0] - 1}, got {chunk}")
    if chunk == 0:
        zeros = np.zeros(layer.h.shape[1:], dtype=np.float32)
        return zeros, zeros.copy()
    return layer.h[chunk - 1].astype(np.float32), layer.c[chunk - 1].astype(np.float32)


def walkthrough(trace: Trace, memory: TensorMemory, layer: str | None, chunk: int) -> tuple[MechanismStep, float]:
    """The recorded chunk recomputed by ``memory``, and the largest |difference| from the recorded new h."""
    lay = trace.layer(layer)
    h_prev, c_prev = state_before(lay, chunk)
    step = mechanism_step(
        memory, h_prev, c_prev, lay.mu_read[chunk], lay.mu_write[chunk], float(lay.sigma[chunk]), lay.content[chunk]
    )
    return step, float(np.abs(step.h_new - lay.h[chunk].astype(np.float32)).max())


def voxel_units(step: MechanismStep) -> dict[str, np.ndarray]:
    """The read and write coordinates (x, y, z) and σ per axis, in voxels."""
    return {
        "read": in_voxels(step.mu_read, step.grid),
        "write": in_voxels(step.mu_write, step.grid),
        "sigma": sigma_voxels_per_axis(step.sigma, step.grid),
    }


def step_sizes(step: MechanismStep) -> dict[str, float]:
    """The sizes a walkthrough shows of one step: ‖r‖ (``read``), ‖content‖ (``content``), the largest ‖V‖ over
    channels at a voxel (``write_peak``), ‖h‖ before and after the update and its change (``h_before``,
    ``h_after``, ``h_change``)."""
    norm = lambda values: float(np.linalg.norm(values))  # noqa: E731  (over every element)
    before, after = norm(step.h_prev), norm(step.h_new)
    return {
        "read": norm(step.read),
        "content": norm(step.content),
        "write_peak": float(np.sqrt((step.write.astype(np.float64) ** 2).sum(axis=0)).max()),
        "h_before": before,
        "h_after": after,
        "h_change": after - before,
    }


__all__ = [
    "MechanismStep",
    "mechanism_step",
    "memory_module",
    "read_corners",
    "state_before",
    "walkthrough",
    "voxel_units",
    "step_sizes",
]
