"""Addressing diagnostics: is a memory layer reading and writing where it should?

``addressing_report(traces)`` measures, over one or many traces of the same checkpoint, how the
write mass spreads over the grid, how write coordinates vary across chunks and samples, whether
reads land on earlier writes, how much tanh pins coordinates at the boundary, σ against the voxel
spacing and the grid, how much of the memory is ever used, how saturated the gates are and σ(γ).
It returns ``{"verdict", "reasons", "layer", "measures", "thresholds"}``: ``healthy`` or the first
failure found, in the order of :data:`VERDICTS`, with reasons in plain words and the numbers.

Distances are in voxels (the spacing between voxel centres), so the numbers read the same for
every grid size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from analysis.traces import summaries
from analysis.traces.trace import LayerTrace, Trace
from tensor_memory.backbone.public_code import PublicBackbone
from tensor_memory.memory.geometry import in_voxels
from tensor_memory.memory.measures import (
    BOUNDARY_EPS,
    boundary_fraction,
    median,
    median_sigma_voxels,
    write_spread_voxels,
)
from tensor_memory.memory.public_code import PublicCodeMemory

VERDICTS = (
    "dead memory",
    "coordinate collapse",
    "sigma collapse",
    "sigma explosion",
    "boundary saturation",
    "unread writes",
    "gate saturation",
    "healthy",
)

# Thresholds. Each is a point past which the mechanism cannot do its job, not a tuned number.
COLLAPSE_SPREAD_VOXELS = 0.5  # all writes within half a voxel of their mean: one location for everything
SIGMA_COLLAPSE_VOXELS = 0.25  # a write midway between two voxel centres reaches them at < e^-2: a point write
SIGMA_EXPLOSION_EXTENT = 0.5  # σ over half the grid's extent: the write is nearly flat, location means little
BOUNDARY_FRACTION = 0.5  # over half the coordinates pinned at a face: tanh saturated, no gradient to move them
DEAD_READ_RATIO = 1e-3  # reads vary less than 0.1% of the read gate's scale: the path carries nothing
DEAD_GATE_SCALE = 1e-3  # σ(γ) below this: the read is multiplied away
UNREAD_FRACTION = 0.05  # under 1 read in 20 within 2σ of an earlier write: reads and writes live apart
GATE_SATURATION_FRACTION = 0.9  # over 90% of gate values within GATE_EPS of 0 or 1: gradients vanish
GATE_EPS = summaries.GATE_EPS  # what the summaries count saturated: within this of 0 or 1
ACTIVE_WEIGHT = np.exp(-2.0)  # a voxel is written when some write reaches it at ≥ e^-2 (within 2σ)

# For each failure, the switch that helped where it was measured, and the table of docs/trainability.md that measured
# it (or that nothing was measured).
TRAINABILITY = "docs/trainability.md"
REMEDIES = {
    "dead memory": f"Keep MemoryConfig.forget_bias at 4 (the default) so writes last until they are read, and markers "
    f"small beside the content ({TRAINABILITY}#table-m)",
    "coordinate collapse": f"Keep MemoryConfig.summary_norm on and anneal σ broad → narrow "
    f"(training.sigma_anneal_steps = 1000, sigma_anneal_from = 1.0) ({TRAINABILITY}#table-rb)",
    "sigma collapse": "Raise MemoryConfig.sigma_min, so each write reaches the voxel centres around it (not measured)",
    "sigma explosion": f"Pull σ toward sigma_init (training.sigma_pull = 0.1) ({TRAINABILITY}#table-rd)",
    "boundary saturation": f'Soft-argmax coordinates (MemoryConfig.addressing.coordinates = "soft_argmax") with '
    f"training.sigma_pull = 0.3 ({TRAINABILITY}#language-model-healthy)",
    "unread writes": f"Share one coordinate head (MemoryConfig.addressing.separate_heads off) and leave "
    f"training.occupancy_weight and recall_weight off ({TRAINABILITY}#table-rs)",
    "gate saturation": "Lower training.lr: saturated gates pass no gradient (not measured)",
}

# The same failures for a model trained with the paper's public code (github kswain98/tensor-memory), named by what
# its user can change there: its constructors' arguments, the toy scripts' options, the weights its code initialises.
UNMEASURED = "(not measured in the public code)"
PUBLIC_REMEDIES = {
    "dead memory": "Start the forget gate's bias at 4 (zero in FactorizedConv3d): "
    f"interface.gate_conv.pointwise.bias.data[C:2 * C].fill_(4.0), C = memory_channels {UNMEASURED}",
    "coordinate collapse": "Start σ broad: TensorMemoryInterface's sigma_scale above 1 (make_backbone's sigma_scale), "
    f"and a lower --lr {UNMEASURED}",
    "sigma collapse": "Raise TensorMemoryInterface's sigma_scale: σ's floor is the constant 1e-4 in "
    f"TensorMemoryEmbedder.forward {UNMEASURED}",
    "sigma explosion": "Lower TensorMemoryInterface's sigma_scale or TensorMemoryEmbedder's initial_sigma_bias "
    f"(1.0: σ starts near 1.3, most of the grid) {UNMEASURED}",
    "boundary saturation": "Coordinates are tanh(coord_net(x)): start interface.coord_net.weight smaller and lower the "
    f"script's --lr {UNMEASURED}",
    "unread writes": "Reads address with a chunk's first token, writes with write_proj's summary: lower "
    f"TensorMemoryInterface's chunk_size (1 in the toy scripts) {UNMEASURED}",
    "gate saturation": f"Lower the script's --lr: saturated gates pass no gradient {UNMEASURED}",
}
PUBLIC_CODE_MODELS = frozenset({PublicBackbone.__name__, PublicCodeMemory.__name__})  # info["model"] of an import

THRESHOLDS = {
    name: value
    for name, value in globals().items()
    if name.isupper() and isinstance(value, (int, float)) and name != "VERDICTS"
}


def write_mass(layer: LayerTrace) -> np.ndarray:
    """(K, D, H, W): the Gaussian weight of each chunk's write at every voxel (content left out)."""
    return summaries.write_weights(layer.mu_write, layer.sigma, layer.grid)


def _layers(traces: Sequence[Trace], name: str | None) -> tuple[str, list[LayerTrace]]:
    first = traces[0]
    name = name or first.layer_names[-1]
    layers = [t.layer(name) for t in traces]
    grids = {layer.grid for layer in layers}
    if len(grids) > 1:
        raise ValueError(f"traces of different grids {sorted(grids)} cannot share one report")
    return name, layers


def measure(traces: Sequence[Trace], layer: str | None = None) -> dict[str, Any]:
    """Every addressing measure over ``traces`` for one memory layer (the last by default)."""
    name, layers = _layers(traces, layer)
    summed = [t.summary(name) for t in traces]  # per chunk and totals, measured once a segment at a time
    grid = layers[0].grid
    D, H, W = grid
    frozen = [part for part in traces[0].info.get("training_frozen", []) if "coord_head" in part]
    return {
        "layer": name,
        "samples": len(layers),
        "coordinates_frozen": bool(frozen),
        "chunks": int(sum(len(lay.mu_write) for lay in layers)),
        "grid": list(grid),
        "voxels": int(D * H * W),
        **_where_writes_go(layers, summed, grid),
        **_reads_against_writes(layers, summed, grid),
        **_spreads(layers, grid),
        **_read_path(layers, summed),
        "gates": _gate_statistics(layers, summed),
    }


def _coordinates(layers: Sequence[LayerTrace], field: str) -> list[torch.Tensor]:
    """Each layer's ``mu_read`` or ``mu_write`` (K, 3) as float64 tensors (what the shared measures take)."""
    return [torch.from_numpy(getattr(lay, field).astype(np.float64)) for lay in layers]


def _where_writes_go(
    layers: Sequence[LayerTrace], summed: Sequence[dict[str, np.ndarray]], grid: tuple[int, int, int]
) -> dict[str, Any]:
    """How the write mass fills the grid, and how the write coordinates spread over chunks and samples."""
    total = np.sum([s["write_mass_sum"] for s in summed], axis=0).ravel()  # (D·H·W,) pooled over every chunk
    peak = np.max([s["write_mass_max"] for s in summed], axis=0)  # (D, H, W)
    p = total / max(total.sum(), 1e-30)
    entropy = float(-(p[p > 0] * np.log(p[p > 0])).sum())
    mu_writes = _coordinates(layers, "mu_write")
    writes = [in_voxels(mu.numpy(), grid) for mu in mu_writes]  # each (K, 3) in voxels
    spread_all = write_spread_voxels(torch.cat(mu_writes), grid)
    K = min(len(w) for w in writes)
    stacked = np.stack([w[:K] for w in writes])  # (S, K, 3)
    across = float(np.sqrt(stacked.var(0).sum(-1)).mean()) if len(writes) > 1 else None
    # Input dependence: the share of the coordinates' variance that is not explained by the chunk
    # index alone (1: coordinates follow the input; 0: every sample writes the same path).
    dependence = None
    if len(writes) > 1 and spread_all > 0:
        dependence = float(stacked.var(0).sum(-1).mean() / max(stacked.reshape(-1, 3).var(0).sum(), 1e-30))
    return {
        "write_entropy": entropy,
        "effective_voxels": float(np.exp(entropy)),
        "effective_fraction": float(np.exp(entropy) / p.size),
        "ever_active_fraction": float((peak >= ACTIVE_WEIGHT).mean()),
        "write_spread_voxels": spread_all,
        "write_spread_within_sample": float(np.mean([write_spread_voxels(w, grid) for w in mu_writes])),
        "write_spread_across_samples": across,
        "input_dependence": dependence,
    }


def _reads_against_writes(
    layers: Sequence[LayerTrace], summed: Sequence[dict[str, np.ndarray]], grid: tuple[int, int, int]
) -> dict[str, Any]:
    """Each read's distance to the nearest earlier write, the share within 2σ of one, and the pinned coordinates."""
    mu_reads, mu_writes = _coordinates(layers, "mu_read"), _coordinates(layers, "mu_write")
    distances = np.concatenate([s["read_to_write_voxels"][1:] for s in summed])  # chunk 0 has no earlier write
    within_reach = np.concatenate([s["reads_within_2sigma"][1:] for s in summed])
    return {
        "read_write_distance_voxels": median(torch.from_numpy(distances)) if len(distances) else None,
        "reads_within_2sigma": float(np.mean(within_reach)) if len(within_reach) else None,
        "boundary_fraction": boundary_fraction(*mu_reads, *mu_writes, grid=grid),
    }


def _spreads(layers: Sequence[LayerTrace], grid: tuple[int, int, int]) -> dict[str, Any]:
    """The writes' σ: its median in normalised units, in voxels and as a share of the grid's extent."""
    sigma = np.concatenate([lay.sigma for lay in layers]).astype(np.float64)
    return {
        "sigma_median": float(np.median(sigma)),
        "sigma_voxels": median_sigma_voxels(torch.from_numpy(sigma), grid),
        "sigma_extent": float(np.median(sigma) / 2.0),
    }  # the grid's extent is 2 in normalised units


def _read_path(layers: Sequence[LayerTrace], summed: Sequence[dict[str, np.ndarray]]) -> dict[str, Any]:
    """What the read carries: σ(γ), how much the read vectors vary, the largest |h|."""
    reads = np.concatenate([lay.read for lay in layers]).astype(np.float64)
    return {
        "gate_scale": float(np.mean([lay.gate_scale for lay in layers])),
        "read_variation": float(reads.std(0).mean()),
        "state_peak": float(max(s["state_peak"].max() for s in summed)),
    }


def _gate_statistics(layers: Sequence[LayerTrace], summed: Sequence[dict[str, np.ndarray]]) -> dict[str, Any]:
    """Mean and saturated share of the i, f and o gates (sigmoids; g is a tanh), when the traces hold them: each
    chunk's share weighted by its count of values (its channels: the grid is shared)."""
    if not all(lay.has_gates for lay in layers):
        return {}
    weights = np.concatenate([np.full(len(lay.sigma), lay.channels) for lay in layers])  # (ΣK,)
    return {
        field: {
            stat: float(np.average(np.concatenate([s[f"{field}_{stat}"] for s in summed]), weights=weights))
            for stat in ("mean", "saturated")
        }
        for field in summaries.SUMMARY_GATES
    }


def _findings(m: dict[str, Any]) -> list[tuple[str, str]]:
    """(verdict, reason) for every failure the measures show, in the order of VERDICTS."""
    return _dead_memory(m) + _where_findings(m) + _unread_and_gate_findings(m)


def _dead_memory(m: dict[str, Any]) -> list[tuple[str, str]]:
    """A read scaled to nothing, or reads and a state that carry nothing."""
    found = []
    if m["gate_scale"] < DEAD_GATE_SCALE:
        found.append(
            (
                "dead memory",
                f"σ(γ) = {m['gate_scale']:.2g}: the read is scaled to nothing before it reaches "
                f"the tokens (threshold {DEAD_GATE_SCALE:g})",
            )
        )
    elif m["read_variation"] < DEAD_READ_RATIO or m["state_peak"] < DEAD_READ_RATIO:
        found.append(
            (
                "dead memory",
                f"reads vary by {m['read_variation']:.2g} across chunks and samples and the "
                f"state peaks at {m['state_peak']:.2g}: the memory holds nothing the model "
                f"could use (threshold {DEAD_READ_RATIO:g})",
            )
        )
    return found


def _where_findings(m: dict[str, Any]) -> list[tuple[str, str]]:
    """Writes in one place, σ too narrow or too wide, coordinates pinned at a face."""
    found = []
    if m["write_spread_voxels"] < COLLAPSE_SPREAD_VOXELS:
        why = (
            " — by design: this checkpoint was trained with its coordinate head frozen (training.frozen), "
            "so the memory is used as one location"
            if m["coordinates_frozen"]
            else ""
        )
        found.append(
            (
                "coordinate collapse",
                f"all {m['chunks']} writes land within {m['write_spread_voxels']:.2f} "
                f"voxels of one point (threshold {COLLAPSE_SPREAD_VOXELS} voxel); "
                f"they fill {m['effective_voxels']:.1f} of {m['voxels']} voxels{why}",
            )
        )
    if m["sigma_voxels"] < SIGMA_COLLAPSE_VOXELS:
        found.append(
            (
                "sigma collapse",
                f"median σ = {m['sigma_median']:.3f} = {m['sigma_voxels']:.2f} voxel "
                f"spacings (threshold {SIGMA_COLLAPSE_VOXELS}): writes are points that "
                f"miss voxel centres and give reads no gradient",
            )
        )
    if m["sigma_extent"] > SIGMA_EXPLOSION_EXTENT:
        found.append(
            (
                "sigma explosion",
                f"median σ = {m['sigma_median']:.2f} = {m['sigma_extent']:.0%} of the "
                f"grid's extent (threshold {SIGMA_EXPLOSION_EXTENT:.0%}): every write "
                f"covers the whole grid, so its location carries nothing",
            )
        )
    if m["boundary_fraction"] > BOUNDARY_FRACTION:
        found.append(
            (
                "boundary saturation",
                f"{m['boundary_fraction']:.0%} of read/write coordinates are pinned at "
                f"a face of the grid (|μ| > {BOUNDARY_EPS}; threshold "
                f"{BOUNDARY_FRACTION:.0%}): tanh is saturated there",
            )
        )
    return found


def _unread_and_gate_findings(m: dict[str, Any]) -> list[tuple[str, str]]:
    """Reads that land where nothing was written; gates saturated."""
    found = []
    if m["reads_within_2sigma"] is not None and m["reads_within_2sigma"] < UNREAD_FRACTION:
        found.append(
            (
                "unread writes",
                f"{m['reads_within_2sigma']:.0%} of reads land within 2σ of an earlier write "
                f"(threshold {UNREAD_FRACTION:.0%}): the reads look where nothing was written, "
                f"so however the writes spread, the memory is not read back",
            )
        )
    saturated = {k: v["saturated"] for k, v in m["gates"].items() if v["saturated"] > GATE_SATURATION_FRACTION}
    if saturated:
        listed = ", ".join(f"{k[-1]} {v:.0%}" for k, v in saturated.items())
        found.append(
            (
                "gate saturation",
                f"gate values within {GATE_EPS} of 0 or 1: {listed} (threshold "
                f"{GATE_SATURATION_FRACTION:.0%}): the update no longer learns",
            )
        )
    return found


def _summary(m: dict[str, Any]) -> list[str]:
    """The plain-words numbers every report carries, whatever the verdict."""
    lines = [
        f"writes spread {m['write_spread_voxels']:.2f} voxels overall"
        + (
            f", {m['write_spread_across_samples']:.2f} across samples at the same chunk"
            if m["write_spread_across_samples"] is not None
            else ""
        )
        + f"; write mass fills {m['effective_voxels']:.1f} of {m['voxels']} voxels "
        f"({m['ever_active_fraction']:.0%} ever written)",
        f"median σ = {m['sigma_median']:.3f} ({m['sigma_voxels']:.2f} voxels, {m['sigma_extent']:.0%} of the grid)",
    ]
    if m["read_write_distance_voxels"] is not None:
        lines.append(
            f"reads land a median {m['read_write_distance_voxels']:.2f} voxels from the nearest earlier "
            f"write; {m['reads_within_2sigma']:.0%} within 2σ of one"
        )
    if m["input_dependence"] is not None:
        lines.append(
            f"{m['input_dependence']:.0%} of the write coordinates' variance depends on the input "
            f"(the rest follows the chunk index)"
        )
    lines.append(f"σ(γ) = {m['gate_scale']:.3f}; {m['boundary_fraction']:.0%} of coordinates at the boundary")
    if m["gates"]:
        lines.append(
            "gates (mean, saturated): "
            + ", ".join(f"{k[-1]} {v['mean']:.2f}/{v['saturated']:.0%}" for k, v in m["gates"].items())
        )
    return lines


def addressing_report(traces: Trace | Sequence[Trace], layer: str | None = None) -> dict[str, Any]:
    """``{"verdict", "reasons", "failures", "remedies", "layer", "measures", "thresholds"}`` for one or many traces.

    ``remedies`` maps each failure found to what usually helps (:data:`REMEDIES`, or :data:`PUBLIC_REMEDIES` for traces
    of a model imported from the paper's public code: its trace's ``info["model"]``); a failure that is by design
    (coordinates frozen in training) gets none.
    """
    traces = [traces] if isinstance(traces, Trace) else list(traces)
    if not traces:
        raise ValueError("addressing_report needs at least one trace")
    m = measure(traces, layer)
    found = _findings(m)
    verdict = found[0][0] if found else "healthy"
    public = all(t.info.get("model") in PUBLIC_CODE_MODELS for t in traces)
    remedies = PUBLIC_REMEDIES if public else REMEDIES
    return {
        "verdict": verdict,
        "reasons": [r for _, r in found] + _summary(m),
        "failures": [v for v, _ in found],
        "layer": m["layer"],
        "measures": m,
        "thresholds": dict(THRESHOLDS),
        "remedies": {v: remedies[v] for v, _ in found if not (v == "coordinate collapse" and m["coordinates_frozen"])},
    }
