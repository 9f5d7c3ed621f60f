"""Builds the package as pyproject.toml says, and puts the files that ship with it into the wheel: copies of the run
configs, the small data, the trained checkpoints and the explorer's Streamlit settings, under
``tensor_memory/_shipped/`` (``tensor_memory/shipped.py`` finds them there once installed, and lists what to copy).

The repository keeps them at its root, where the README, the Makefile and the tests use them; an editable install
(``make setup``) reads them there and copies nothing.
"""

import importlib.util
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _shipped():
    """``tensor_memory/shipped.py`` alone: importing the package would import torch."""
    spec = importlib.util.spec_from_file_location("_tensor_memory_shipped", HERE / "tensor_memory" / "shipped.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildWithShippedFiles(build_py):
    """``build_py`` that also copies the shipped files into the build folder's ``tensor_memory/_shipped/``."""

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        shipped = _shipped()
        target = Path(self.build_lib) / "tensor_memory" / shipped.COPY
        shutil.rmtree(target, ignore_errors=True)  # nothing left from an earlier build of other files
        for relative in shipped.package_files(HERE):
            destination = target / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(HERE / relative, destination)


setup(cmdclass={"build_py": BuildWithShippedFiles})
