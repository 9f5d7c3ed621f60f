"""Fixtures shared by the analysis tests, and the suite's check of its peak resident memory (memory_peak.py)."""

from pathlib import Path

import pytest
from memory_peak import pytest_addoption, pytest_configure  # noqa: F401 (hooks: the memory check runs in every session)

from tensor_memory import load_checkpoint

CHECKPOINTS = Path(__file__).resolve().parents[1] / "checkpoints"


@pytest.fixture(scope="module")
def occlusion():
    """The shipped occlusion memory model (loaded once per test module; tests must not change it)."""
    return load_checkpoint(CHECKPOINTS / "occlusion-tensor")
