"""The layering holds: tensor_memory → analysis → app, and the command line above all three.

Checked on the source (every import statement, at any depth, including those inside functions)
and on a fresh interpreter (what importing each package actually loads).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "tensor_memory": {"analysis", "app", "tensor_memory_cli", "streamlit", "plotly", "pyvista"},
    "analysis": {"app", "tensor_memory_cli", "streamlit"},
    "app": {"tensor_memory_cli"},
}


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_no_module_imports_a_layer_above_it(package):
    offenders = {str(path.relative_to(ROOT)): sorted(imported_roots(path) & FORBIDDEN[package])
                 for path in sorted((ROOT / package).rglob("*.py"))}
    assert not {k: v for k, v in offenders.items() if v}


@pytest.mark.parametrize("package", ["tensor_memory", "analysis"])
def test_importing_a_package_loads_nothing_above_it(package):
    code = (f"import sys, {package}, {package}.cli; "
            f"print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))")
    loaded = set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                                cwd=ROOT).stdout.split())
    assert package in loaded  # the check ran
    assert not loaded & FORBIDDEN[package]


def test_the_checker_sees_an_import_inside_a_function(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from analysis.cli import add_trace_parsers\n    import app.cli\n")
    assert imported_roots(module) == {"analysis", "app"}
