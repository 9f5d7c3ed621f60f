"""``tensor_memory.shipped``: where the configs, data and checkpoints that ship are, and how the command line names a
shipped checkpoint (the installed wheel itself: test_wheel.py)."""

from __future__ import annotations

from pathlib import Path

from tensor_memory import shipped
from tensor_memory_cli import main

ROOT = Path(__file__).resolve().parents[1]


def test_in_a_clone_the_shipped_files_are_the_repositorys():
    assert shipped.root() == ROOT
    assert shipped.run_config("occlusion") == ROOT / "configs" / "occlusion.toml"
    assert shipped.run_config("no_such_task") is None
    names = shipped.checkpoints()
    assert names["occlusion-tensor"] == ROOT / "checkpoints" / "occlusion-tensor"
    assert names["long_range/occlusion-tensor"] == ROOT / "checkpoints" / "long_range" / "occlusion-tensor"
    assert all((folder / "config.json").is_file() for folder in names.values())


def test_a_checkpoint_flag_takes_a_folder_first_then_a_shipped_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    shipped_folder = ROOT / "checkpoints" / "occlusion-tensor"
    for name in ("occlusion-tensor", "checkpoints/occlusion-tensor", "./occlusion-tensor/"):
        assert shipped.checkpoint_folder(name) == shipped_folder
    assert shipped.checkpoint_folder("long_range/map_building-xl") == ROOT / "checkpoints/long_range/map_building-xl"
    (tmp_path / "occlusion-tensor").mkdir()  # a folder of that name where the command runs is the one meant
    assert shipped.checkpoint_folder("occlusion-tensor") == Path("occlusion-tensor")
    assert shipped.checkpoint_folder("nowhere/occlusion-tensor") == Path("nowhere/occlusion-tensor")


def test_every_file_a_wheel_ships_is_data_and_every_listed_checkpoint_ships_whole():
    files = shipped.package_files(ROOT)
    assert all(not name.suffix == ".py" and (ROOT / name).is_file() for name in files)
    assert shipped.STREAMLIT_CONFIG in files and Path("configs/long_range/occlusion.toml") in files
    for folder in shipped.checkpoints(ROOT).values():
        kept = {path for path in folder.iterdir() if path.is_file()}
        assert {ROOT / name for name in files if (ROOT / name).parent == folder} == kept


def test_train_says_in_one_line_when_a_task_ships_no_config(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(shipped, "root", lambda: tmp_path)  # an installation that lost its configs
    out = str(tmp_path / "run")
    assert main(["train", "--task", "occlusion", "--backbone", "tensor", "--set", "nothing", "--out", out]) == 2
    said = capsys.readouterr().err.splitlines()
    assert said[0].startswith("tensor-memory train: no configs/occlusion.toml ships with this package")
    assert said[1].startswith("tensor-memory train: error: --set 'nothing'")  # the settings were then checked as usual
