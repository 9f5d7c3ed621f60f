"""Fixtures shared by the analysis tests."""

from pathlib import Path

import pytest

from tensor_memory import load_checkpoint

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"


@pytest.fixture(scope="module")
def occlusion():
    """The shipped occlusion memory model (loaded once per test module; tests must not change it)."""
    return load_checkpoint(CHECKPOINTS / "occlusion-tensor")
