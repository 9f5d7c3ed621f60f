"""The suite's memory check: the peak resident memory of the test process and of its largest child, printed at the
end of the session with the test during which each rose most, and a failed session when either passes the limit
(ini option ``peak_memory_limit_gb``, 6 by default; ``-o peak_memory_limit_gb=N`` sets another).

The process's peak is its high-water mark (VmHWM in /proc/self/status; ``ru_maxrss`` where there is no /proc), read
before and after each test and kept as a running maximum here, so a test that resets it (``/proc/self/clear_refs``)
cannot hide an earlier peak. The children's is ``ru_maxrss`` of the largest reaped descendant; Linux starts a child
made by vfork and exec (as ``subprocess`` does) at its parent's high-water mark, so a child's rise is credited to a
test only above the test process's own peak."""

from __future__ import annotations

import resource
import sys
from pathlib import Path

import pytest

LIMIT_OPTION = "peak_memory_limit_gb"
GB = 10**9
KINDS = ("test process", "largest child")
UNIT = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is in bytes on macOS, in KiB on Linux


def peaks() -> dict[str, int]:
    """Bytes: the high-water resident memory of this process and of its largest reaped child so far."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * UNIT
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return {"test process": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * UNIT, "largest child": children}
    return {"test process": int(status.split("VmHWM:")[1].split()[0]) * 1024, "largest child": children}


class MemoryPeak:
    """Peaks, the test during which each rose most, and the test during which each first passed the limit."""

    def __init__(self, limit_gb: float):
        self.limit_gb = limit_gb
        self.peak, self.started = peaks(), False
        self.rise = dict.fromkeys(KINDS, (0, ""))
        self.crossed: dict[str, str] = {}

    def note(self, where: str) -> None:
        """Take a reading: how far each peak rose above the highest seen before, it rose during ``where``."""
        now = peaks()
        for kind in KINDS:
            floor = max(self.peak[kind], self.peak["test process"] if kind == "largest child" else 0)
            if now[kind] - floor > self.rise[kind][0]:
                self.rise[kind] = (now[kind] - floor, where)
            self.peak[kind] = max(self.peak[kind], now[kind])
            if self.peak[kind] > self.limit_gb * GB and kind not in self.crossed:
                self.crossed[kind] = where

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item):
        self.note("between tests" if self.started else "start-up and collection")
        self.started = True
        try:
            return (yield)
        finally:
            self.note(item.nodeid)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session):
        self.note("the session's end")
        if self.crossed and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter):
        shown = ", ".join(f"{self.peak[kind] / GB:.2f} GB ({kind})" for kind in KINDS)
        terminalreporter.write_line(f"peak resident memory: {shown}")
        for kind, (rise, where) in self.rise.items():
            if rise >= GB // 100:  # a rise under 0.01 GB names no test worth looking at
                terminalreporter.write_line(f"  the {kind}'s peak rose most during {where} (+{rise / GB:.2f} GB)")
        for kind, where in self.crossed.items():
            terminalreporter.write_line(
                f"FAILED: the {kind}'s peak resident memory passed the {self.limit_gb:g} GB limit during {where}; "
                f"bring it under {self.limit_gb:g} GB (ini option {LIMIT_OPTION})",
                red=True,
                bold=True,
            )


def pytest_addoption(parser):
    parser.addini(LIMIT_OPTION, "fail the session when a test process's peak resident memory passes this", default="6")


def pytest_configure(config):
    config.pluginmanager.register(MemoryPeak(float(config.getini(LIMIT_OPTION))), "memory peak")
