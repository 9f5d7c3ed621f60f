"""Traces: capture against the model's own state, determinism, the file format and hostile files."""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors_edits import rewrite_header

from analysis import Trace, TraceError, capture, load_trace
from analysis.traces.capture import capture_many, sample_batch
from analysis.traces.trace import TRACE_VERSION
from tensor_memory.backbone import BackboneConfig
from tensor_memory.memory import MemoryConfig
from tensor_memory.storage.checkpoint import Checkpoint
from tensor_memory.tasks import TaskModel, make_task
from tensor_memory_cli import main

ROOT = Path(__file__).resolve().parents[1]
OCCLUSION = ROOT / "checkpoints" / "occlusion-tensor"


@pytest.fixture(scope="module")
def trace(occlusion):
    return capture(occlusion, seed=3, index=2, progress=False)


def test_trace_matches_the_models_own_state_and_outputs(occlusion, trace):
    _, batch = sample_batch(occlusion, 3, [2])
    with torch.no_grad():
        logits, state = occlusion.model(batch.inputs)
    name = "backbone.blocks.1.memory"
    assert trace.layer_names == ["backbone.blocks.0.memory", name]  # a memory in both layers
    final = state.layers[1].memory
    layer = trace.layer(name)
    # The last recorded volumes are the state the model hands on (float16 in the trace).
    assert np.allclose(layer.h[-1].astype(np.float32), final.h[0].numpy(), atol=1e-3)
    assert np.allclose(
        layer.c[-1].astype(np.float32), final.c[0].numpy(), atol=2e-3 * max(1, np.abs(final.c.numpy()).max())
    )
    # Per chunk (one frame): the prediction and target at the frame's last token.
    K = trace.num_chunks
    assert K == occlusion.task.config.frames == 12
    last = torch.arange(K) * 16 + 15
    assert np.array_equal(trace.chunks["prediction"], logits[0, last].argmax(-1).numpy())
    assert np.array_equal(trace.chunks["target"], batch.targets[0, last].numpy())
    assert trace.chunks["scored"].all()
    assert np.allclose(trace.chunks["probs"].sum(-1), 1.0, atol=1e-5)
    assert np.array_equal(trace.meta["occluded"], batch.meta["occluded"][0].numpy())
    # Shapes of every field.
    C, grid = 16, (6, 6, 6)  # configs/occlusion.toml
    assert layer.h.shape == layer.c.shape == layer.gate_f.shape == (K, C, *grid)
    assert layer.h.dtype == np.float16
    assert layer.mu_read.shape == layer.mu_write.shape == (K, 3)
    assert layer.sigma.shape == (K,) and layer.content.shape == layer.read.shape == (K, C)
    assert abs(layer.gate_scale - float(torch.sigmoid(occlusion.model.backbone.blocks[1].memory.gate.detach()))) < 1e-7


def test_same_checkpoint_seed_and_index_give_equal_arrays(occlusion, trace):
    again = capture(OCCLUSION, seed=3, index=2, progress=False)
    a, b = trace.arrays(), again.arrays()
    assert a.keys() == b.keys()
    diff = [
        (k, float(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)).max()))
        for k in a
        if not np.array_equal(a[k], b[k])
    ]
    assert not diff, diff
    other = capture(occlusion, seed=3, index=5, progress=False)
    assert not np.array_equal(other.meta["positions"], trace.meta["positions"])


def test_batched_capture_draws_the_same_samples(occlusion, trace):
    many = capture_many(occlusion, seed=3, indices=[0, 2, 7], progress=False)
    assert [t.info["index"] for t in many] == [0, 2, 7]
    assert np.array_equal(many[1].meta["frames"], trace.meta["frames"])
    assert np.allclose(many[1].layer().h.astype(np.float32), trace.layer().h.astype(np.float32), atol=1e-3)


def test_task_parameters_and_optional_volumes(occlusion):
    t = capture(occlusion, seed=0, occlusion_length=6, occlusion_start=3, gates=False, cell_state=False, progress=False)
    assert t.meta["occluded"].tolist() == [False] * 3 + [True] * 6 + [False] * 3
    assert t.info["task_params"]["occlusion_length"] == 6
    layer = t.layer()
    assert layer.gate_i is None and layer.c is None and layer.h is not None
    with pytest.raises(ValueError, match="change the shapes"):
        capture(occlusion, size=8, progress=False)


def test_save_load_round_trip_is_exact(trace, tmp_path):
    path = trace.save(tmp_path / "t.safetensors")
    loaded = load_trace(path)
    a, b = trace.arrays(), loaded.arrays()
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and np.array_equal(a[k], b[k]), k
    assert loaded.info == json.loads(json.dumps(trace.info))
    small = capture(OCCLUSION, gates=False, cell_state=False, progress=False)
    assert load_trace(small.save(tmp_path / "s.safetensors")).layer().c is None


def test_size_is_bounded_by_the_float16_volumes():
    """A large grid: the file is the volumes' bytes plus a small fixed part, so 1,000 chunks at C = 32 and
    16³ are predictable from a short capture."""
    task = make_task("occlusion", {"frames": 6, "occlusion_length": 2})
    memory = MemoryConfig(token_dim=32, channels=32, grid=(16, 16, 16), chunk_size=16)
    config = BackboneConfig(kind="tensor", dim=32, layers=1, heads=2, window=16, memory=memory)
    torch.manual_seed(0)
    ckpt = Checkpoint(model=TaskModel(task, config).eval(), config={}, task=task, path=Path("synthetic"))
    t = capture(ckpt, gates=False, progress=False)
    volumes = 2 * 6 * 32 * 4096 * 2  # h and c, 6 chunks, C = 32, 16³ voxels, 2 bytes each
    rest = t.nbytes() - volumes
    assert 0 < rest < 20_000  # coordinates, vectors, probabilities and the sample's frames


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def saved(trace, tmp_path_factory):
    return trace.save(tmp_path_factory.mktemp("trace") / "good.safetensors")


def test_hostile_and_broken_trace_files_are_refused_with_one_clear_error(saved, tmp_path):
    data = saved.read_bytes()

    def meta(header, key, value):
        info = json.loads(header["__metadata__"]["trace"])
        info[key] = value
        header["__metadata__"]["trace"] = json.dumps(info)

    def info(header, key, value):
        text = json.loads(header["__metadata__"]["trace"])
        text["info"][key] = value
        header["__metadata__"]["trace"] = json.dumps(text)

    cases = {
        "missing": (tmp_path / "nope.safetensors", "cannot read"),
        "empty": (_write(tmp_path / "e", b""), "empty"),
        "truncated": (_write(tmp_path / "t", data[: len(data) // 2]), "truncated"),
        "garbage": (_write(tmp_path / "g", b"\x07" * 64), "corrupt|truncated"),
        "pickle": (_write(tmp_path / "p", pickle.dumps({"h": [1, 2]})), "pickle"),
        "checkpoint weights": (OCCLUSION / "model.safetensors", "not a trace file"),
        "version": (rewrite_header(saved, tmp_path / "v", lambda h: meta(h, "version", TRACE_VERSION + 1)), "version"),
        "bad header json": (
            rewrite_header(saved, tmp_path / "j", lambda h: h["__metadata__"].update(trace="{")),
            "not valid JSON",
        ),
        "inconsistent shapes": (rewrite_header(saved, tmp_path / "s", lambda h: info(h, "num_chunks", 13)), "shape"),
        "missing array": (
            rewrite_header(
                saved,
                tmp_path / "m",
                lambda h: info(
                    h,
                    "layers",
                    {
                        **json.loads(h["__metadata__"]["trace"])["info"]["layers"],
                        "backbone.blocks.7.memory": {"channels": 16, "grid": [4, 4, 4], "gates": False},
                    },
                ),
            ),
            "missing arrays",
        ),
    }
    for name, (path, pattern) in cases.items():
        with pytest.raises(TraceError, match=pattern) as error:
            load_trace(path)
        assert str(path) in str(error.value), name


def test_nan_in_a_trace_is_refused(trace, tmp_path):
    broken = Trace(info=trace.info, layers=dict(trace.layers), chunks=dict(trace.chunks), meta=trace.meta)
    probs = broken.chunks["probs"].copy()
    probs[3, 5] = np.nan
    broken.chunks["probs"] = probs
    path = broken.save(tmp_path / "nan.safetensors")
    with pytest.raises(TraceError, match="NaN"):
        load_trace(path)


@pytest.mark.parametrize(
    "field, value, words",
    [
        ("mu_read", 1e6, "coordinates outside the grid's [-1, 1]"),
        ("mu_write", -1.5, "coordinates outside the grid's [-1, 1]"),
        ("sigma", 0.0, "a write spread σ ≤ 0"),
    ],
)
def test_a_trace_holding_what_no_memory_produces_is_refused(trace, tmp_path, field, value, words):
    name = next(iter(trace.layers))
    layer = trace.layers[name]
    array = getattr(layer, field).copy()
    array[2] = value
    broken = Trace(
        info=trace.info,
        layers={**trace.layers, name: dataclasses.replace(layer, **{field: array})},
        chunks=dict(trace.chunks),
        meta=trace.meta,
    )
    path = broken.save(tmp_path / f"{field}.safetensors")
    with pytest.raises(TraceError, match=f"array 'layer/{name}/{field}' holds {re.escape(words)}"):
        load_trace(path)


def test_trace_cli_writes_a_loadable_trace_and_fails_cleanly(tmp_path, capsys):
    out = tmp_path / "cli.safetensors"
    assert (
        main(
            [
                "trace",
                "--checkpoint",
                str(OCCLUSION),
                "--seed",
                "3",
                "--index",
                "2",
                "--out",
                str(out),
                "--param",
                "occlusion_length=2",
                "--no-progress",
            ]
        )
        == 0
    )
    loaded = load_trace(out)
    assert loaded.info["seed"] == 3 and loaded.info["index"] == 2
    assert loaded.meta["occluded"].sum() == 2
    assert "12 chunks" in capsys.readouterr().out
    before = out.read_bytes()
    assert main(["trace", "--checkpoint", str(OCCLUSION), "--out", str(out)]) == 2  # an existing file: kept
    assert "exists already; pass --overwrite" in capsys.readouterr().err and out.read_bytes() == before
    assert main(["trace", "--checkpoint", str(OCCLUSION), "--out", str(out), "--overwrite", "--no-progress"]) == 0
    assert load_trace(out).info["seed"] == 0  # replaced, as asked
    fresh = tmp_path / "fresh.safetensors"
    assert main(["trace", "--checkpoint", str(ROOT / "checkpoints" / "occlusion-base"), "--out", str(fresh)]) == 2
    refusal = capsys.readouterr().err.strip()  # one line that says which commands do work on it
    assert refusal.count("\n") == 0 and "a 'base' checkpoint has no memory layer to trace" in refusal
    assert "`tensor-memory eval` and `audit` work on it" in refusal and "checkpoints/occlusion-tensor" in refusal
    assert main(["trace", "--checkpoint", str(tmp_path / "missing"), "--out", str(fresh)]) == 2
    assert "no such checkpoint" in capsys.readouterr().err


def test_a_trace_whose_metadata_disagrees_with_its_arrays_is_refused(tmp_path):
    import dataclasses

    good = capture(OCCLUSION, seed=0, index=0, gates=False, progress=False)

    def saved(name, **changes):
        info = {**good.info, **changes.pop("info", {})}
        meta = {**good.meta, **changes.pop("meta", {})}
        return dataclasses.replace(good, info=info, meta=meta).save(tmp_path / f"{name}.safetensors")

    cases = {
        "out-of-frame": (dict(meta={"positions": good.meta["positions"] + 100}), "outside [0, size = 16)"),
        "no-name": (dict(info={"checkpoint_name": ""}), "lacks the checkpoint name"),
        "short-meta": (dict(meta={"positions": good.meta["positions"][:3]}), "'positions' is of shape [3, 2]"),
        "no-task": (dict(info={"task": "video"}), "names a task it cannot be"),
        "classes": (dict(info={"num_classes": 3}), None),
    }
    for name, (change, words) in cases.items():
        with pytest.raises(TraceError) as info:
            load_trace(saved(name, **change))
        assert words is None or words in str(info.value), (name, str(info.value))


def test_a_trace_of_no_chunks_is_refused(tmp_path):
    import dataclasses

    good = capture(OCCLUSION, seed=0, index=0, gates=False, progress=False)
    empty_layers = {
        name: dataclasses.replace(
            lay,
            **{
                f.name: getattr(lay, f.name)[:0]
                for f in dataclasses.fields(lay)
                if f.name != "gate_scale" and getattr(lay, f.name) is not None
            },
        )
        for name, lay in good.layers.items()
    }
    empty = dataclasses.replace(
        good,
        info={**good.info, "num_chunks": 0},
        layers=empty_layers,
        chunks={k: v[:0] for k, v in good.chunks.items()},
    )
    with pytest.raises(TraceError, match="holds no chunks"):
        load_trace(empty.save(tmp_path / "empty.safetensors"))
