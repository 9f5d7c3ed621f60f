"""The package as its users install it: a wheel built from this checkout (once per module), installed with ``pip
install --no-deps --target`` into a temporary folder and run from another folder, with neither the clone nor its
editable install in reach. ``tensor-memory`` answers; ``train --task occlusion`` trains with the shipped
``configs/occlusion.toml``, not the defaults; ``eval`` opens a shipped checkpoint by name; ``tensor-memory app``
serves the explorer with its own Streamlit settings, Explore's stepper draws, and the browser asks nothing of any
host but the app's own 127.0.0.1 port (where Chromium is missing, only the browser part skips).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tensor_memory import shipped

try:
    from test_app_browser import browser, drawn, serve, view  # noqa: F401 - browser: a fixture
    from test_app_hostile_browser import context, open_page, settled_frames  # noqa: F401 - context: a fixture

    NO_BROWSER = None
except pytest.skip.Exception as skipped:  # no Chromium or no Playwright: the command-line tests still run
    NO_BROWSER = str(skipped)

ROOT = Path(__file__).resolve().parents[1]
OCCLUSION = ROOT / "configs" / "occlusion.toml"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the folder the wheel was installed into, a folder outside the clone to run from, the environment to run
    with). The build writes nothing into the clone: its build and egg-info folders go to a temporary folder."""
    tmp = tmp_path_factory.mktemp("wheel")
    (tmp / "setup.cfg").write_text(f"[build]\nbuild_base = {tmp / 'build'}\n[egg_info]\negg_base = {tmp}\n")
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    build = {**os.environ, "DIST_EXTRA_CONFIG": str(tmp / "setup.cfg"), "PIP_NO_INDEX": "1"}
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", tmp / "dist", ROOT], env=build, check=True
    )
    (wheel,) = (tmp / "dist").glob("*.whl")
    site = tmp / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", site, wheel], env=build, check=True)
    outside = tmp_path_factory.mktemp("elsewhere")
    # The pure-PyTorch scan: the fused one would compile this copy's source into the build folder the clone's
    # environment shares (tensor_memory/memory/fused_scan.py), for half a minute, and again for the clone.
    env = {**os.environ, "PYTHONPATH": str(site), "OMP_NUM_THREADS": "1", "TENSOR_MEMORY_FUSED_SCAN": "0"}
    return site, outside, env


def run(installed, *args: str) -> subprocess.CompletedProcess:
    """The installed ``tensor-memory`` console script with ``args``, run from the folder outside the clone."""
    site, outside, env = installed
    done = subprocess.run(
        [site / "bin" / "tensor-memory", *args], cwd=outside, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    return done


def test_the_installed_packages_and_their_files_come_from_the_wheel(installed):
    site, outside, env = installed
    code = (
        "import json, analysis, app, tensor_memory, tensor_memory_cli; from tensor_memory import shipped; "
        "print(json.dumps([m.__file__ for m in (analysis, app, tensor_memory, tensor_memory_cli)] + "
        "[str(shipped.root()), sorted(shipped.checkpoints())]))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=outside, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    *files, root, names = json.loads(done.stdout)
    assert all(Path(f).is_relative_to(site) for f in [*files, root]), files + [root]
    assert names == sorted(shipped.checkpoints(ROOT))  # every checkpoint the app's picker lists in the clone ships
    for part in ("app/browser/index.html", "app/browser/stepper.js", "app/favicon.svg"):
        assert (site / part).read_bytes() == (ROOT / part).read_bytes()
    settings = shipped.STREAMLIT_CONFIG
    assert (Path(root) / settings).read_bytes() == (ROOT / settings).read_bytes()
    assert not list(Path(root).rglob("*.py"))  # checkpoint files only: no training scripts
    assert "usage: tensor-memory" in run(installed, "--help").stdout


def _within(expected, actual, where: str = "") -> None:
    """Every setting in ``expected`` has the same value in ``actual`` (which may hold more)."""
    if isinstance(expected, dict):
        for key, value in expected.items():
            assert isinstance(actual, dict) and key in actual, f"{where}.{key} missing"
            _within(value, actual[key], f"{where}.{key}")
    else:
        assert actual == expected, f"{where}: {actual!r}, configs/occlusion.toml says {expected!r}"


def test_train_reads_the_shipped_run_config_from_any_folder(installed, tmp_path):
    overrides = {"batch_size": 4, "eval_batches": 1, "steps": 2}
    sets = [f"--set=training.{key}={value}" for key, value in overrides.items() if key != "steps"]
    out = tmp_path / "run"
    run(installed, "train", "--task", "occlusion", "--backbone", "tensor", "--steps", "2", *sets, "--out", str(out))
    config = json.loads((out / "config.json").read_text())
    toml = tomllib.loads(OCCLUSION.read_text())
    _within(
        {
            "task": toml["task"],
            "model": {**toml["model"], **toml["backbone"]["tensor"]},
            "training": {**toml["training"], **overrides},
        },
        config,
    )


def test_eval_opens_a_shipped_checkpoint_by_name(installed, capsys):
    for name in ("occlusion-tensor", "checkpoints/occlusion-tensor"):
        done = run(installed, "eval", "--checkpoint", name, "--batches", "1", "--batch-size", "4", "--json")
        result = json.loads(done.stdout)
        assert result["task"] == "occlusion" and 0 <= result["metrics"]["accuracy"] <= 1
    from tensor_memory_cli import main  # a name that neither exists nor ships: the names that do, in one line

    assert main(["eval", "--checkpoint", "occlusion-nothing"]) == 2
    said = capsys.readouterr().err
    assert "no such checkpoint directory" in said and "occlusion-tensor" in said and said.count("\n") == 1


def test_the_installed_app_draws_explore_and_fetches_nothing_off_host(installed, request):
    """``tensor-memory app`` from a folder with no ``.streamlit/``: the shipped settings apply (no Deploy button,
    no usage statistics asked for by the page), Explore's stepper draws its 3D views, and every request of the
    page and its frames goes to the app's own port."""
    if NO_BROWSER:
        pytest.skip(NO_BROWSER)
    site, outside, env = installed
    context = request.getfixturevalue("context")
    served = serve(env, "streamlit-wheel.log", [str(site / "bin" / "tensor-memory"), "app"], cwd=outside)
    url = next(served)
    try:
        page = open_page(context, context.requests, url)
        settled_frames(page)
        stepper = view(page)
        assert stepper.locator(".js-plotly-plot .gl-container canvas").count() >= 2  # as the first-page test checks
        assert drawn(stepper.locator(".js-plotly-plot").filter(has_text="after chunk").first) > 10
        assert page.locator('[data-testid="stAppDeployButton"]').count() == 0  # toolbarMode "minimal"
        off = context.requests.off_host(url)
        page.close()
    finally:
        served.close()
    assert not off, f"requests off 127.0.0.1: {off}"
