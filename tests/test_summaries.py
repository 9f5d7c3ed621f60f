"""Per-chunk summaries: the overview and the addressing report read them instead of the volumes, and give what
the volumes give (checked against the formulas computed directly from the volumes, in numpy); built a segment at a
time they equal one build; a long trace is summarised without a K × K matrix."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import numpy as np
import pytest

from analysis import load_trace
from analysis.measures.addressing import ACTIVE_WEIGHT, GATE_EPS, measure
from analysis.measures.overview import chunk_overview
from analysis.traces import summaries as summaries_module
from analysis.traces.capture import capture_many
from analysis.traces.quantized import QuantizedVolumes, quantize
from analysis.traces.summaries import READ_BLOCK, SummaryBuilder, summarize
from analysis.traces.trace import LayerTrace, Trace
from tensor_memory import load_checkpoint

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_TRACE = ROOT / "tests" / "data" / "occlusion-tensor-seed7-before-hooks.trace.safetensors"
GATES = ("gate_i", "gate_f", "gate_o")


# -- the formulas, straight from the volumes -----------------------------------------------------------------


def _voxels(mu: np.ndarray, grid) -> np.ndarray:
    """(K, 3) (x, y, z) in [-1, 1] → voxel positions: (μ + 1)(n − 1)/2 along x (W), y (H), z (D)."""
    D, H, W = grid
    return (np.asarray(mu, np.float64) + 1.0) * (np.array([W, H, D]) - 1) / 2.0


def _nearest_earlier(lay: LayerTrace) -> tuple[np.ndarray, np.ndarray]:
    """Per read k ≥ 1: the distance (voxels) to the nearest write j < k, and whether some write j < k is within 2σ_j
    of it, σ counted in voxels per axis (the report's definition)."""
    r, w = _voxels(lay.mu_read, lay.grid), _voxels(lay.mu_write, lay.grid)
    D, H, W = lay.grid
    sig = np.asarray(lay.sigma, np.float64)[:, None] * (np.array([W, H, D]) - 1) / 2.0  # (K, 3)
    distance = [np.sqrt(((r[k] - w[:k]) ** 2).sum(-1)).min() for k in range(1, len(r))]
    within = [float((np.sqrt((((r[k] - w[:k]) / sig[:k]) ** 2).sum(-1)) <= 2.0).any()) for k in range(1, len(r))]
    return np.array(distance), np.array(within)


def _mass(lay: LayerTrace) -> np.ndarray:
    """(K, D, H, W): exp(−‖voxel centre − μ‖² / 2σ²) with the centres at linspace(−1, 1, n) along each axis."""
    D, H, W = lay.grid
    z, y, x = np.meshgrid(*(np.linspace(-1, 1, n) for n in (D, H, W)), indexing="ij")
    mu, sigma = np.asarray(lay.mu_write, np.float64), np.asarray(lay.sigma, np.float64)
    offsets = (x[None] - mu[:, 0, None, None, None]) ** 2 + (y[None] - mu[:, 1, None, None, None]) ** 2
    offsets = offsets + (z[None] - mu[:, 2, None, None, None]) ** 2
    return np.exp(-offsets / (2 * sigma[:, None, None, None] ** 2))


def _expected_measures(traces: list[Trace], name: str) -> dict:
    """What the report measured from the volumes: write mass, reads against earlier writes, the peak, the gates."""
    layers = [t.layer(name) for t in traces]
    mass = np.concatenate([_mass(lay) for lay in layers])  # (ΣK, D, H, W)
    p = mass.sum(0).ravel() / mass.sum()
    entropy = -(p[p > 0] * np.log(p[p > 0])).sum()
    nearest = [_nearest_earlier(lay) for lay in layers]
    distance, within = np.concatenate([d for d, _ in nearest]), np.concatenate([w for _, w in nearest])
    out = {
        "write_entropy": entropy,
        "effective_voxels": np.exp(entropy),
        "ever_active_fraction": (mass.max(0) >= ACTIVE_WEIGHT).mean(),
        "read_write_distance_voxels": np.median(distance),
        "reads_within_2sigma": within.mean(),
        "state_peak": max(np.abs(np.asarray(lay.h, np.float64)).max() for lay in layers),
        "gates": {},
    }
    if layers[0].has_gates:
        for field in GATES:
            values = np.concatenate([np.asarray(getattr(lay, field), np.float64).ravel() for lay in layers])
            saturated = ((values < GATE_EPS) | (values > 1 - GATE_EPS)).mean()
            out["gates"][field] = {"mean": values.mean(), "saturated": saturated}
    return out


def _check_report(traces: list[Trace], name: str) -> None:
    got, expected = measure(traces, name), _expected_measures(traces, name)
    for key, value in expected.items():
        if key != "gates":
            assert got[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert set(got["gates"]) == set(expected["gates"])
    for field, stats in expected["gates"].items():
        assert got["gates"][field]["mean"] == pytest.approx(stats["mean"], rel=1e-9)
        assert got["gates"][field]["saturated"] == pytest.approx(stats["saturated"], rel=1e-12, abs=1e-15)


def _check_overview(trace: Trace, name: str) -> None:
    lay = trace.layer(name)
    overview = chunk_overview(trace, name)
    h = np.asarray(lay.h, np.float64)
    np.testing.assert_allclose(overview["energy"], (h**2).sum(axis=(1, 2, 3, 4)), rtol=1e-12)
    distance, _ = _nearest_earlier(lay)
    assert np.isnan(overview["read_to_write_voxels"][0])
    np.testing.assert_allclose(overview["read_to_write_voxels"][1:], distance, rtol=1e-12, atol=1e-12)


# -- the overview and the report on real traces --------------------------------------------------------------


def test_the_shipped_trace_summarised_gives_what_its_volumes_give():
    trace = load_trace(SHIPPED_TRACE)
    for name in trace.layer_names:
        _check_overview(trace, name)
        _check_report([trace], name)
    assert set(trace.summaries) == set(trace.layer_names)


@pytest.mark.parametrize(
    "checkpoint, gates, volumes",
    [("coordinate_binding-tensor", True, "float16"), ("occlusion-tensor", False, "int8")],
)
def test_captured_samples_summarised_give_what_their_volumes_give(checkpoint, gates, volumes):
    ckpt = load_checkpoint(ROOT / "checkpoints" / checkpoint)
    traces = capture_many(ckpt, seed=0, indices=range(3), gates=gates, volumes=volumes, progress=False)
    assert isinstance(traces[0].layer().h, QuantizedVolumes) == (volumes == "int8")
    for name in traces[0].layer_names:
        _check_report(traces, name)  # three samples pooled
        _check_overview(traces[1], name)
    assert bool(measure(traces)["gates"]) == gates


def test_the_report_and_overview_read_only_the_summaries_when_a_trace_holds_them():
    trace = load_trace(SHIPPED_TRACE)
    name = trace.layer_names[-1]
    expected_overview, expected_report = chunk_overview(trace, name), measure([trace], name)
    lay = trace.layer(name)
    sealed = {f: _Unreadable(getattr(lay, f)) for f in ("h", "c", *GATES, "gate_g")}
    stored = Trace(
        info=trace.info,
        layers={name: dataclasses.replace(lay, **sealed)},
        chunks=trace.chunks,
        meta=trace.meta,
        summaries={name: trace.summary(name)},
    )
    overview = chunk_overview(stored, name)
    assert overview.keys() == expected_overview.keys()
    for key, values in expected_overview.items():
        np.testing.assert_array_equal(overview[key], values)
    assert measure([stored], name) == expected_report


class _Unreadable:
    """Volumes whose shape is known and whose values are not there: reading them fails the test."""

    def __init__(self, volumes):
        self.shape = volumes.shape

    def __array__(self, *args, **kwargs):
        raise AssertionError("the volumes were read")

    __getitem__ = astype = __array__


def test_a_trace_keeps_what_it_summarised():
    trace = load_trace(SHIPPED_TRACE)
    last = trace.summary()
    assert trace.summary(trace.layer_names[-1]) is last and list(trace.summaries) == [trace.layer_names[-1]]
    with pytest.raises(KeyError, match="no memory layer"):
        trace.summary("nowhere")


# -- segments, int8, a long layer ------------------------------------------------------------------------------


def _random_layer(K: int, grid=(3, 4, 5), C: int = 2, seed: int = 0, gates: bool = True) -> LayerTrace:
    rng = np.random.default_rng(seed)
    volume = (K, C, *grid)

    def gate():
        return rng.uniform(0, 1, volume).astype(np.float16) if gates else None

    return LayerTrace(
        mu_read=rng.uniform(-1, 1, (K, 3)).astype(np.float32),
        read=rng.standard_normal((K, C)).astype(np.float32),
        mu_write=rng.uniform(-1, 1, (K, 3)).astype(np.float32),
        sigma=rng.uniform(0.1, 0.6, K).astype(np.float32),
        content=rng.standard_normal((K, C)).astype(np.float32),
        h=rng.standard_normal(volume).astype(np.float16),
        c=None,
        gate_scale=0.2,
        gate_i=gate(),
        gate_f=gate(),
        gate_o=gate(),
    )


def _segments(lay: LayerTrace, bounds: list[int]) -> dict[str, np.ndarray]:
    builder = SummaryBuilder(lay.grid)
    fields = {f.name: getattr(lay, f.name) for f in dataclasses.fields(lay) if f.name != "gate_scale"}
    parts = [
        builder.add({k: (None if v is None else v[a:b]) for k, v in fields.items()})
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
    ]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]} | builder.totals()


@pytest.mark.parametrize("gates", [True, False])
def test_segment_by_segment_equals_at_once(gates):
    lay = _random_layer(60, gates=gates)
    whole = summarize(lay, block=1000)
    names = {"energy", "state_peak", "read_to_write_voxels", "reads_within_2sigma", "write_mass_sum", "write_mass_max"}
    gate_names = {f"{g}_{s}" for g in GATES for s in ("mean", "saturated")}
    assert set(whole) == names | (gate_names if gates else set())
    for bounds in ([0, 60], [0, 1, 2, 2, 17, 59, 60], list(range(61))):  # one, uneven (one empty), one chunk each
        pieces = _segments(lay, bounds)
        assert pieces.keys() == whole.keys()
        for name, values in whole.items():
            np.testing.assert_allclose(pieces[name], values, rtol=1e-13, atol=0, err_msg=name)
        for name in ("read_to_write_voxels", "reads_within_2sigma", "state_peak", "write_mass_max"):
            np.testing.assert_array_equal(pieces[name], whole[name])  # no sum in them: identical to the bit
    assert np.isnan(whole["read_to_write_voxels"][0]) and np.isnan(whole["reads_within_2sigma"][0])
    distance, within = _nearest_earlier(lay)
    np.testing.assert_allclose(whole["read_to_write_voxels"][1:], distance, rtol=1e-12)
    np.testing.assert_array_equal(whole["reads_within_2sigma"][1:], within)
    mass = _mass(lay)
    np.testing.assert_allclose(whole["write_mass_sum"], mass.sum(0), rtol=1e-12)
    np.testing.assert_allclose(whole["write_mass_max"], mass.max(0), rtol=1e-12)


def test_int8_volumes_are_summarised_as_decoded_whatever_the_block(monkeypatch):
    lay = _random_layer(40)
    quantized = dataclasses.replace(
        lay, **{f: QuantizedVolumes(*quantize(getattr(lay, f))) for f in ("h", *GATES)}
    )  # int8 volumes
    decoded = dataclasses.replace(quantized, **{f: np.asarray(getattr(quantized, f)) for f in ("h", *GATES)})
    monkeypatch.setattr(summaries_module, "VOLUME_VALUES", 2 * 2 * 3 * 4 * 5)  # two chunks decoded at a time
    ours, theirs = summarize(quantized, block=7), summarize(decoded)
    for name, values in theirs.items():
        np.testing.assert_allclose(ours[name], values, rtol=1e-13, err_msg=name)
    assert summarize(lay)["state_peak"] == pytest.approx(np.abs(lay.h.astype(np.float64)).max(axis=(1, 2, 3, 4)))


def test_an_empty_layer_gives_empty_summaries():
    summary = summarize(_random_layer(0))
    assert all(summary[name].shape == (0,) for name in summary if not name.startswith("write_mass"))
    assert summary["write_mass_sum"].shape == (3, 4, 5) and not summary["write_mass_sum"].any()


def test_a_long_layer_is_summarised_without_a_k_by_k_matrix(monkeypatch):
    K = 8192
    lay = _random_layer(K, grid=(2, 2, 2), C=1, seed=3)
    shapes = []
    measured = SummaryBuilder._distances

    def recorded(a, b):
        shapes.append((len(a), len(b)))
        return measured(a, b)

    monkeypatch.setattr(SummaryBuilder, "_distances", staticmethod(recorded))
    start = time.perf_counter()
    summary = summarize(lay)
    elapsed = time.perf_counter() - start
    assert max(rows for rows, _ in shapes) == READ_BLOCK and max(cols for _, cols in shapes) == K
    assert elapsed < 5.0, elapsed  # 0.4 s on one thread of the development machine
    checked = [1, 255, 256, 4000, K - 1]  # against every earlier write, across block boundaries
    r, w = (np.asarray(a, np.float64) for a in (lay.mu_read, lay.mu_write))
    for k in checked:
        nearest = np.sqrt((((r[k] - w[:k]) / 2.0) ** 2).sum(-1)).min()  # a 2-voxel axis: 1 voxel = 2 units
        assert summary["read_to_write_voxels"][k] == pytest.approx(nearest, rel=1e-12)
        within = (np.sqrt(((r[k] - w[:k]) ** 2).sum(-1)) <= 2 * lay.sigma[:k].astype(np.float64)).any()
        assert summary["reads_within_2sigma"][k] == float(within)
