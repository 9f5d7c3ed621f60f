"""Helpers for tests that damage a saved safetensors file on purpose (header or data bytes)."""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np


def _split(data: bytes) -> tuple[int, dict]:
    (n,) = struct.unpack("<Q", data[:8])
    return n, json.loads(data[8 : 8 + n])


def rewrite_header(saved: Path, out: Path, edit: Callable[[dict], None]) -> Path:
    """Copy ``saved`` to ``out`` with its JSON header changed in place by ``edit(header)``."""
    data = saved.read_bytes()
    n, header = _split(data)
    edit(header)
    text = json.dumps(header).encode()
    out.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n :])
    return out


def rewrite_array(saved: Path, out: Path, name: str, values: np.ndarray) -> Path:
    """Copy ``saved`` to ``out`` with array ``name``'s bytes replaced by ``values`` (same size)."""
    data = bytearray(saved.read_bytes())
    n, header = _split(bytes(data))
    start, end = header[name]["data_offsets"]
    raw = values.tobytes()
    assert len(raw) == end - start
    data[8 + n + start : 8 + n + end] = raw
    out.write_bytes(bytes(data))
    return out
