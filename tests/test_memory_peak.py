"""The suite's memory check (memory_peak.py) fails a session whose test process or child passes the limit, naming
the test, and passes one that stays under it: each case is a small pytest session run in its own process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
HOLD = "b'x' * (400 << 20)"  # 400 MB written, so resident (zeroed pages from calloc would not be)
TESTS = f"""
import subprocess, sys

def test_small():
    assert sum(range(10)) == 45

def test_holds_400_mb():
    held = {HOLD}
    assert len(held) == 400 << 20

def test_child_holds_400_mb():
    subprocess.run([sys.executable, "-c", "held = {HOLD}"], check=True)
"""


def session(tmp_path: Path, chosen: str) -> subprocess.CompletedProcess:
    """A pytest session over ``TESTS`` (the tests ``-k chosen`` selects) with the check on and a 0.3 GB limit."""
    (tmp_path / "test_sizes.py").write_text(TESTS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "pytest", "-p", "memory_peak", "-o", "peak_memory_limit_gb=0.3", "-k", chosen]
    return subprocess.run(
        [*command, "-p", "no:cacheprovider", "test_sizes.py"], cwd=tmp_path, env=env, capture_output=True, text=True
    )


def line(done: subprocess.CompletedProcess, words: str) -> str:
    return next(line for line in done.stdout.splitlines() if words in line)


def number(line: str, kind: str = "") -> float:
    """The GB figure in ``line``: the one before `` GB (kind)``, or the rise ``(+N GB)``."""
    return float(line.split(f" GB ({kind})")[0].split()[-1]) if kind else float(line.split("(+")[1].split()[0])


@pytest.mark.parametrize(
    "chosen, kind",
    [("test_holds_400_mb", "test process"), ("test_child_holds_400_mb", "largest child")],
)
def test_a_session_over_the_limit_fails_naming_the_test(tmp_path, chosen, kind):
    done = session(tmp_path, f"small or {chosen}")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "2 passed" in done.stdout  # every test passed: the check alone failed the session
    failed = line(done, "FAILED: ")
    assert failed.startswith(f"FAILED: the {kind}'s peak resident memory passed the 0.3 GB limit during test_sizes.py")
    assert f"during test_sizes.py::{chosen};" in failed
    rose = line(done, f"the {kind}'s peak rose most during")
    assert rose.split(" during ")[1].startswith(f"test_sizes.py::{chosen} (+") and number(rose) > 0.3
    assert number(line(done, "peak resident memory: "), kind) > 0.4


def test_a_session_under_the_limit_passes_and_reports_its_peak(tmp_path):
    done = session(tmp_path, "small")
    assert done.returncode == 0, done.stdout + done.stderr
    assert 0.01 < number(line(done, "peak resident memory: "), "test process") < 0.3
    assert "FAILED" not in done.stdout
