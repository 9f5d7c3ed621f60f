"""The app on a network: where it listens, what its errors show, and the server paths an upload may not make it read.

The browser test of the listening address is in test_app_browser.py; the upload refusal as a visitor sees it in
test_app_uploads.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app import cli
from app.__main__ import exposure_warning
from app.upload import UploadError, check_data_paths
from tensor_memory.tasks import data_paths

WARNING = "anyone who can reach this port can upload checkpoints and run them on this machine"


def test_data_paths_name_the_folders_a_task_would_read():
    assert data_paths("masked_patches", {"source": "skimage", "path": ""}) == {}
    assert data_paths("masked_patches", {"source": "cub", "path": "/data/CUB_200_2011"}) == {
        "path": "/data/CUB_200_2011"
    }
    assert data_paths("language_modelling", {"corpus": "wikitext", "path": "wt103"}) == {"path": "wt103"}
    assert data_paths("action_recognition", {"path": "/v", "lists": "/l"}) == {"path": "/v", "lists": "/l"}
    assert data_paths("occlusion", {"path": "/etc"}) == {}  # not a field that task reads
    assert data_paths("no such task", {"path": "/etc"}) == {} and data_paths("masked_patches", "/etc") == {}


def checkpoint_naming(folder: Path, **params) -> Path:
    """A folder whose config.json's task reads ``params`` (nothing else of a checkpoint is needed for the check)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(
        json.dumps({"schema_version": 2, "task": {"name": "masked_patches", "params": params}, "model": {}})
    )
    return folder


def test_an_upload_naming_a_server_folder_is_refused_without_saying_whether_it_exists(tmp_path):
    existing, missing = tmp_path / "CUB_200_2011", tmp_path / "nowhere"
    existing.mkdir()
    said = []
    for n, path in enumerate((existing, missing, "/etc")):
        folder = checkpoint_naming(tmp_path / f"upload{n}", source="cub", path=str(path))
        with pytest.raises(UploadError) as refused:
            check_data_paths(folder, None)
        said.append(str(refused.value))
    assert said[0] == said[1] == said[2]  # the same line whatever the path: it tells nothing of the server
    assert "task.params.path" in said[0] and "--data-root" in said[0]
    check_data_paths(checkpoint_naming(tmp_path / "shipped", source="skimage", path=""), None)  # reads no folder


def test_with_a_data_root_only_folders_under_it_are_read(tmp_path):
    root = tmp_path / "data"
    (root / "CUB_200_2011").mkdir(parents=True)
    outside = tmp_path / "private"
    outside.mkdir()
    (root / "escape").symlink_to(outside)  # a link inside the root to a folder outside it
    check_data_paths(checkpoint_naming(tmp_path / "a", source="cub", path=str(root / "CUB_200_2011")), root)
    for n, path in enumerate((outside, root / "escape", root / ".." / "private")):
        with pytest.raises(UploadError, match=f"outside the data root .* give a path under {root}"):
            check_data_paths(checkpoint_naming(tmp_path / f"b{n}", source="cub", path=str(path)), root)
    # a relative path is what the task would open from the server's folder: outside the root here
    with pytest.raises(UploadError, match="task.params.path names a folder outside the data root"):
        check_data_paths(checkpoint_naming(tmp_path / "c", source="cub", path="CUB_200_2011"), root)


def test_a_config_that_cannot_be_read_is_left_to_loading(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    check_data_paths(tmp_path, None)  # load_checkpoint refuses it with its own line


@pytest.mark.parametrize(
    "argv, where",
    [
        ([], None),
        (["--server.address", "127.0.0.1"], None),
        (["--server.address=localhost"], None),
        (["--server.address", "::1"], None),
        (["--server.address", "0.0.0.0", "--server.port", "9000"], "0.0.0.0:9000"),
        (["--server.address=192.168.1.5"], "192.168.1.5:8501"),
        (["--server.address", "lab.local"], "lab.local:8501"),
    ],
)
def test_serving_beyond_this_machine_is_said_in_one_line(argv, where):
    line = exposure_warning(argv)
    if where is None:
        assert line is None
    else:
        assert line == f"The explorer listens on {where}: {WARNING}."


def run_app(monkeypatch, argv: list[str]) -> tuple[list[str], dict]:
    """The command and environment ``tensor-memory app ARGV`` starts its server with (not started)."""
    from tensor_memory_cli import main

    seen = {}
    monkeypatch.setattr(cli, "serve", lambda command, env: seen.update(command=command, env=env) or 0)
    assert main(argv) == 0
    return seen["command"], seen["env"]


def test_the_app_listens_here_and_hides_error_details_unless_told(monkeypatch, tmp_path):
    command, env = run_app(monkeypatch, ["app", "--port", "8600"])
    assert command[command.index("--server.address") + 1] == "127.0.0.1"
    assert command[command.index("--client.showErrorDetails") + 1] == "none"
    assert cli.DATA_ROOT_ENV not in env or env[cli.DATA_ROOT_ENV] == os.environ.get(cli.DATA_ROOT_ENV)
    command, env = run_app(monkeypatch, ["--debug", "app", "--host", "0.0.0.0", "--data-root", str(tmp_path)])
    assert command[command.index("--server.address") + 1] == "0.0.0.0"
    assert command[command.index("--client.showErrorDetails") + 1] == "full"
    assert env[cli.DATA_ROOT_ENV] == str(tmp_path.resolve())


def test_a_data_root_that_is_not_a_folder_is_refused_before_the_server_starts(monkeypatch, tmp_path, capsys):
    from tensor_memory_cli import main

    monkeypatch.setattr(cli, "serve", lambda *a, **k: pytest.fail("the server started"))
    assert main(["app", "--data-root", str(tmp_path / "missing")]) == 2
    assert "--data-root" in capsys.readouterr().err


def test_the_shipped_streamlit_config_listens_here_and_hides_error_details():
    import tomllib

    config = tomllib.loads((Path(__file__).resolve().parents[1] / ".streamlit" / "config.toml").read_text())
    assert config["server"]["address"] == "127.0.0.1" and config["client"]["showErrorDetails"] == "none"


def test_stopping_tensor_memory_app_stops_its_server(tmp_path):
    """A SIGTERM to ``tensor-memory app`` (``kill``, a service manager) takes the Streamlit server it started down with
    it: before, the server outlived its command and kept answering on the port."""
    import signal
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    health = f"http://127.0.0.1:{port}/_stcore/health"

    def answers() -> bool:
        try:
            with urllib.request.urlopen(health, timeout=2) as reply:
                return reply.read().strip() == b"ok"
        except OSError:
            return False

    log = open(tmp_path / "app.log", "w")
    command = subprocess.Popen(
        [sys.executable, "-m", "tensor_memory_cli", "app", "--port", str(port)],
        cwd=cli.ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while not answers():
            assert command.poll() is None and time.monotonic() < deadline, (tmp_path / "app.log").read_text()
            time.sleep(0.5)
        command.send_signal(signal.SIGTERM)
        command.wait(timeout=30)  # it returns once its server has stopped (Streamlit closes cleanly on SIGTERM)
        deadline = time.monotonic() + 30
        while answers() and time.monotonic() < deadline:  # the server may take a moment to close its port
            time.sleep(0.5)
        assert not answers()
    finally:
        command.kill()
        log.close()
