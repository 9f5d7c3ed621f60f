"""checkpoints/ablate.py: each ablation row is the shipped config with exactly its one change, and the table shows
each run beside the shipped model."""

import importlib.util
from pathlib import Path

import pytest

from tensor_memory.training import load_run_config, resolve
from tensor_memory.training.config import apply_overrides

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("ablate", ROOT / "checkpoints" / "ablate.py")
ablate = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ablate)


def configs(task: str, name: str):
    shipped = load_run_config(ROOT / "configs" / f"{task}.toml", "tensor")
    path = ROOT / "configs" / f"{task}.toml"
    changed = apply_overrides(load_run_config(path, "tensor"), ablate.overrides(task, name))
    return resolve(shipped), resolve(changed)


@pytest.mark.parametrize("task", list(ablate.KEY_METRIC))
def test_each_row_changes_exactly_its_one_setting(task):
    expected = {
        "hard_writes": {"write": {"profile": "nearest", "mode": "dense", "window_k": 3.0}},
        "separate_heads": {"addressing": {"coordinates": "tanh", "separate_heads": True, "write_path": "free"}},
        "update_1x1x1": {"update": {"taps": 1}},
        "grid_smaller": {"grid": (2, 6, 6) if task == "map_building" else (4, 4, 4)},
        "grid_larger": {"grid": (2, 10, 10) if task == "map_building" else (8, 8, 8)},
    }
    for name in ablate.ABLATIONS:
        (_, before, train_before), (task_obj, after, train_after) = configs(task, name)
        memory_changes = {k: v for k, v in after.memory.to_dict().items() if before.memory.to_dict()[k] != v}
        if name == "chunk_x2":
            assert memory_changes == {"chunk_size": 2 * task_obj.chunk_size}
        elif name == "sigma_fixed":
            assert memory_changes == {} and train_after.frozen == ["spread"] and train_before.frozen == []
        else:
            assert {k: tuple(v) if isinstance(v, list) else v for k, v in memory_changes.items()} == expected[name]
        assert after.to_dict() | {"memory": None} == before.to_dict() | {"memory": None}  # nothing else moves


def test_the_table_puts_each_run_beside_the_shipped_model():
    shipped = ablate.json.loads((ROOT / "checkpoints" / "coordinate_binding-tensor" / "metrics.json").read_text())
    row = {
        "task": "coordinate_binding",
        "backbone": "update_1x1x1",
        "command": "tensor-memory train …",
        "addressing_verdicts": {"a": "healthy", "b": "sigma explosion"},
        "eval": {"mean": {"accuracy": 0.5}, "std": {"accuracy": 0.01}},
    }
    lines = ablate.table({"rows": [row]})
    assert lines[0] == ablate.BEGIN and lines[-1] == ablate.END
    mean = shipped["trained"]["mean"]["accuracy"]
    assert any(line.startswith("| shipped `tensor` | ") and f"{mean:.3f}" in line for line in lines)
    assert "| a 1×1×1 update (no neighbourhood in the ConvLSTM) | 0.500 ± 0.010 (sigma explosion) |" in lines
    assert not any(line.startswith("| hard writes") for line in lines)  # a row not run is left out
