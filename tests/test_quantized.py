"""int8 volumes: the quantisation bound, decoding on access, and int8 traces end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors_edits import rewrite_array, rewrite_header

from analysis import TraceError, addressing_report, capture, load_trace
from analysis.traces.quantized import INT8_LEVELS, QuantizedVolumes, dequantize, quantize
from tensor_memory_cli import main

ROOT = Path(__file__).resolve().parents[1]
OCCLUSION = ROOT / "checkpoints" / "occlusion-tensor"


def _volumes(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(5, 3, 4, 5, 6)).astype(np.float32)  # (K, C, D, H, W)
    x[:, 1] *= 1e-3  # a quiet channel keeps its own resolution
    x[2, 2] = 0.0  # an all-zero volume
    return x


def test_quantize_is_within_half_a_step_of_each_volume_and_keeps_its_peak():
    x = _volumes()
    codes, scale = quantize(x)
    assert codes.dtype == np.int8 and codes.shape == x.shape and scale.shape == (5, 3)
    # Independent computation of the scale: the largest magnitude of each (chunk, channel) over 127.
    for k in range(5):
        for ch in range(3):
            peak = max(abs(float(v)) for v in x[k, ch].ravel())
            assert scale[k, ch] == pytest.approx(peak / 127, rel=1e-6)
    decoded = dequantize(codes, scale)
    error = np.abs(decoded - x)
    assert (error <= scale[..., None, None, None] / 2 * (1 + 1e-5) + 1e-12).all()
    # The quiet channel keeps its relative precision: a shared scale would round it all to zero.
    assert np.abs(decoded[:, 1]).max() > 0 and (error[:, 1].max() / np.abs(x[:, 1]).max()) < 1 / 250
    # The peak is exactly ±127 codes, and an all-zero volume decodes to exact zeros.
    assert all(
        np.abs(codes[k, ch]).max() == (0 if (k, ch) == (2, 2) else INT8_LEVELS) for k in range(5) for ch in range(3)
    )
    assert scale[2, 2] == 0 and (decoded[2, 2] == 0).all()


def test_quantize_marks_a_non_finite_volume_with_a_nan_scale():
    x = _volumes()
    x[1, 0, 0, 0, 0] = np.nan
    x[3, 2, 1, 1, 1] = np.inf
    _, scale = quantize(x)
    bad = ~np.isfinite(scale)
    assert bad.sum() == 2 and bad[1, 0] and bad[3, 2]


def test_quantized_volumes_decode_like_the_float_array():
    x = _volumes()
    q = QuantizedVolumes(*quantize(x))
    full = dequantize(q.codes, q.scale)
    assert q.shape == x.shape and len(q) == 5 and q.ndim == 5 and q.dtype == np.float32
    assert q.nbytes == x.size + 5 * 3 * 4  # one byte per value plus a float32 scale per (chunk, channel)
    for key in (
        2,
        -1,
        (1, 2),
        (3, slice(None), 1),
        slice(1, 4),
        (slice(None), 0),
        np.array([0, 4]),
        (slice(0, 2), 1, Ellipsis, 2),
        Ellipsis,
    ):
        assert np.array_equal(q[key], full[key]), key
    assert np.array_equal(np.asarray(q), full) and np.array_equal(q.astype(np.float64), full.astype(np.float64))
    with pytest.raises(ValueError, match="int8 codes"):
        QuantizedVolumes(q.codes.astype(np.int16), q.scale)
    with pytest.raises(ValueError, match="scales"):
        QuantizedVolumes(q.codes, q.scale[:, :2])


@pytest.fixture(scope="module")
def pair(occlusion):
    """The same sample captured with float16 and with int8 volumes."""
    return (
        capture(occlusion, seed=3, index=2, progress=False),
        capture(occlusion, seed=3, index=2, progress=False, volumes="int8"),
    )


def test_an_int8_trace_holds_the_same_state_within_the_bound(pair):
    f16, q8 = pair
    a, b = f16.layer(), q8.layer()
    assert isinstance(b.h, QuantizedVolumes) and a.h.dtype == np.float16
    for field in ("h", "c", "gate_i", "gate_f", "gate_o", "gate_g"):
        exact, coded = getattr(a, field).astype(np.float32), getattr(b, field)
        assert isinstance(coded, QuantizedVolumes)
        step = coded.scale[..., None, None, None]
        # float16 rounds too (relative 2⁻¹¹), so the bound is half an int8 step plus that.
        assert (np.abs(np.asarray(coded) - exact) <= step / 2 + np.abs(exact) * 2**-10 + 1e-7).all(), field
    # Everything that is not a volume is identical.
    for field in ("mu_read", "read", "mu_write", "sigma", "content"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    assert all(np.array_equal(f16.chunks[k], q8.chunks[k]) for k in f16.chunks)
    # Half the float16 volumes' bytes, plus the scales.
    K, C, grid, L = f16.num_chunks, a.channels, a.grid, len(f16.layer_names)  # both layers alike
    voxels, volumes = int(np.prod(grid)), 6  # h, c and the four gates
    assert q8.nbytes() - (f16.nbytes() - L * volumes * K * C * voxels * 2) == L * volumes * K * C * (voxels + 4)
    # The analysis reads it the same way.
    assert addressing_report(q8)["verdict"] == addressing_report(f16)["verdict"]


def test_an_int8_trace_saves_and_loads_exactly(pair, tmp_path):
    _, q8 = pair
    path = q8.save(tmp_path / "q.safetensors")
    loaded = load_trace(path)
    a, b = q8.arrays(), loaded.arrays()
    assert a.keys() == b.keys() and "layer/backbone.blocks.1.memory/h_scale" in a
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k
    assert isinstance(loaded.layer().c, QuantizedVolumes)
    assert capture(OCCLUSION, seed=3, index=2, progress=False, volumes="int8").arrays().keys() == a.keys()


def test_broken_int8_traces_are_refused(pair, tmp_path):
    _, q8 = pair
    saved = q8.save(tmp_path / "q.safetensors")
    name = "layer/backbone.blocks.1.memory/h_scale"
    scale = q8.layer().h.scale
    negative = rewrite_array(saved, tmp_path / "neg", name, -scale)
    nan = rewrite_array(saved, tmp_path / "nan", name, np.full_like(scale, np.nan))
    for path, pattern in ((negative, "negative scales"), (nan, "NaN")):
        with pytest.raises(TraceError, match=pattern) as error:
            load_trace(path)
        assert str(path) in str(error.value)
    # A float16 trace whose header claims int8 volumes (the scales are missing), or an unknown type.
    f16 = pair[0].save(tmp_path / "f.safetensors")
    for volumes, pattern in (("int8", "missing arrays"), ("int4", "float16 or int8")):

        def claim(header, volumes=volumes):
            trace = json.loads(header["__metadata__"]["trace"])
            for layer in trace["info"]["layers"].values():
                layer["volumes"] = volumes
            header["__metadata__"]["trace"] = json.dumps(trace)

        with pytest.raises(TraceError, match=pattern):
            load_trace(rewrite_header(f16, tmp_path / f"claims-{volumes}", claim))


def test_trace_cli_writes_int8_volumes(tmp_path, capsys):
    out = tmp_path / "cli.safetensors"
    assert main(["trace", "--checkpoint", str(OCCLUSION), "--out", str(out), "--volumes", "int8", "--no-progress"]) == 0
    assert isinstance(load_trace(out).layer().h, QuantizedVolumes)
    with pytest.raises(SystemExit):
        main(["trace", "--checkpoint", str(OCCLUSION), "--out", str(out), "--volumes", "int4"])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(ValueError, match="volumes must be one of"):
        capture(OCCLUSION, volumes="int4", progress=False)
