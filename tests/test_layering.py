"""The layering holds: tensor_memory → analysis → app, and the command line above all three.

Inside ``analysis`` the data flow one way too: traces → measures → figures, with Plotly and PyVista
in ``figures`` alone. Checked on the source (every import statement, at any depth, including those
inside functions) and on a fresh interpreter (what importing each package actually loads). No
module of the four packages imports itself back, however far round.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("tensor_memory", "analysis", "app", "tensor_memory_cli")
DRAWING = {"plotly", "pyvista"}
FORBIDDEN = {
    "tensor_memory": {"analysis", "app", "tensor_memory_cli", "streamlit", *DRAWING},
    "analysis": {"app", "tensor_memory_cli", "streamlit"},
    "app": {"tensor_memory_cli"},
}
# analysis's own parts, lowest first: each may import the ones before it, never the ones after.
ANALYSIS_PARTS = ("traces", "measures", "figures")


def imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every module ``path`` (under ``root``) imports, as absolute dotted names (relative imports resolved)."""
    package = ".".join(path.relative_to(root).with_suffix("").parts)
    if path.name != "__init__.py":
        package = package.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([node.module] if node.module else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}  # `from pkg import module`
    return found


def imported_roots(path: Path, root: Path = ROOT) -> set[str]:
    return {name.split(".")[0] for name in imports(path, root)}


def modules(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    """Every module of ``packages`` by dotted name (a package by its own name)."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_cycles(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> tuple[int, list[list[str]]]:
    """(modules, the groups of modules that import each other, however far round): Tarjan's components."""
    known = modules(root, packages)
    graph = {
        name: {target for target in imports(path, root) if target in known and target != name}
        for name, path in known.items()
    }
    cycles: list[list[str]] = []
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = stack[stack.index(node) :]
            del stack[stack.index(node) :]
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            connect(node)
    return len(graph), cycles


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_module_imports_a_layer_above_it(package):
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_roots(path) & FORBIDDEN[package])
        for path in sorted((ROOT / package).rglob("*.py"))
    }
    assert not {k: v for k, v in offenders.items() if v}


@pytest.mark.parametrize("part", ANALYSIS_PARTS)
def test_analysis_flows_from_traces_to_measures_to_figures(part):
    above = {f"analysis.{later}" for later in ANALYSIS_PARTS[ANALYSIS_PARTS.index(part) + 1 :]}
    drawing = set() if part == "figures" else DRAWING
    offenders = {}
    for path in sorted((ROOT / "analysis" / part).rglob("*.py")):
        names = imports(path)
        wrong = {n for n in names if any(n == a or n.startswith(a + ".") for a in above)}
        wrong |= {n for n in names if n.split(".")[0] in drawing}
        if wrong:
            offenders[str(path.relative_to(ROOT))] = sorted(wrong)
    assert not offenders


def test_the_app_cache_only_caches():
    """app/cache.py wraps analysis in Streamlit's caches: it imports no page, no layout, no stepper of the app."""
    ours = {name for name in imports(ROOT / "app" / "cache.py") if name.split(".")[0] == "app"}
    assert ours == {"app.cli", "app.cli.DEVICE_ENV"}


def test_no_import_cycle_in_the_packages():
    count, cycles = import_cycles()
    assert count > 100 and not cycles


@pytest.mark.parametrize("package", ["tensor_memory", "analysis"])
def test_importing_a_package_loads_nothing_above_it(package):
    code = f"import sys, {package}, {package}.cli; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT
        ).stdout.split()
    )
    assert package in loaded  # the check ran
    assert not loaded & FORBIDDEN[package]


def test_the_checker_sees_every_kind_of_import(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from analysis.cli import add_trace_parsers\n    import app.cli\n")
    assert imported_roots(module, tmp_path) == {"analysis", "app"}
    inner = ROOT / "analysis" / "measures" / "addressing.py"  # absolute, relative and nested imports as full names
    assert {"analysis.traces.trace", "tensor_memory.memory.geometry"} <= imports(inner)
    assert "tensor_memory.memory.config" in imports(ROOT / "tensor_memory" / "backbone" / "config.py")


def test_the_cycle_check_finds_a_cycle_through_an_import_inside_a_function(tmp_path):
    (tmp_path / "pkg").mkdir()
    for name, text in {
        "__init__.py": "",
        "a.py": "from pkg import b\n",
        "b.py": "def f():\n    from . import c\n",
        "c.py": "from .a import g\n",
        "d.py": "from . import a\n",
    }.items():
        (tmp_path / "pkg" / name).write_text(text)
    assert import_cycles(tmp_path, ("pkg",)) == (5, [["pkg.a", "pkg.b", "pkg.c"]])
