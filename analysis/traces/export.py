"""Files to download: a trace as the bytes of its file, and a zip of files.

Figures as files (HTML, PNG) are in ``analysis/figures/export.py``.
"""

from __future__ import annotations

import io
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path

from analysis.traces.trace import Trace


def trace_bytes(trace: Trace) -> bytes:
    """The trace as the bytes of the safetensors file :meth:`Trace.save` writes."""
    with tempfile.TemporaryDirectory(prefix="tensor-memory-trace-") as folder:
        return trace.save(Path(folder) / "trace.safetensors").read_bytes()


def zip_bytes(files: Mapping[str, bytes]) -> bytes:
    """A zip archive holding ``files`` (name → bytes)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


__all__ = ["trace_bytes", "zip_bytes"]
