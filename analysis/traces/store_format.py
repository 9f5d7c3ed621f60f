"""What a trace store (a zarr v3 folder, ``docs/formats.md``) may hold, checked before zarr opens any of it.

Every ``zarr.json`` is read here first, as size-limited strict JSON, and held to an allowlist: groups and arrays
only; the data types traces write; the codecs ``bytes``, ``zstd`` and ``crc32c`` (nothing that could run code or
build objects); a regular chunk grid that cuts the first axis alone; the default chunk keys, separated by '.'; no
storage transformers; a numeric fill value. A symlink anywhere in the store is refused. Chunk files are checked as
they are read: present (a missing one would read silently as the fill value) and, for zstd, a frame that says it
decodes to exactly one chunk's bytes (no decompression bomb).
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from analysis.traces.validation import TraceError, fail
from tensor_memory.storage.files import FileFormatError, read_json

STORE_VERSION = 2  # the store's format version (the one-file format is validation.TRACE_VERSION)
PROGRESS_FILE = "trace.json"  # the header and progress record, replaced atomically after each segment
NODE_FILE = "zarr.json"
CHUNK_KEYS = {"name": "default", "configuration": {"separator": "."}}  # c.<i>.0.0.0.0: no folder per chunk
MAX_NODE_BYTES = 64 << 10  # a zarr.json is a few hundred bytes
MAX_CHUNK_BYTES = 1 << 28  # 256 MB: a trace store's chunks are 1 to 32 MB
MAX_PROGRESS_BYTES = 4 << 20  # the header's info is a few kilobytes
DATA_TYPES = ("bool", "int8", "uint8", "int32", "int64", "float16", "float32", "float64")
ARRAY_KEYS = {
    "zarr_format",
    "node_type",
    "shape",
    "data_type",
    "chunk_grid",
    "chunk_key_encoding",
    "fill_value",
    "codecs",
    "attributes",
    "storage_transformers",
    "dimension_names",
}
GROUP_KEYS = {"zarr_format", "node_type", "attributes", "consolidated_metadata"}
CODEC_CHAINS = (("bytes",), ("bytes", "zstd"), ("bytes", "crc32c"), ("bytes", "zstd", "crc32c"))  # in this order
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"  # a zstd frame's first four bytes


@dataclasses.dataclass(frozen=True)
class ArrayNode:
    """One array's checked metadata: shape, numpy dtype, rows per chunk (the first axis), codecs' names."""

    shape: tuple[int, ...]
    dtype: np.dtype
    rows: int
    codecs: tuple[str, ...]

    def chunk_count(self, length: int) -> int:
        """The chunks that hold the first ``length`` rows (1 for a 0-d array)."""
        return -(-length // self.rows) if self.shape else 1

    def row_bytes(self) -> int:
        """One row's size (the whole of a 0-d array)."""
        return int(np.prod(self.shape[1:])) * self.dtype.itemsize

    def chunk_bytes(self) -> int:
        """One chunk's decoded size."""
        return self.row_bytes() * (self.rows if self.shape else 1)


def chunk_key(node: ArrayNode, index: int) -> str:
    """The default key (``.``-separated: one folder of files per array) of chunk ``index`` along the first axis, every
    other axis being one chunk."""
    return ".".join(["c", str(index), *("0" for _ in node.shape[1:])]) if node.shape else "c"


def scan_store(path: Path) -> tuple[dict[str, dict[str, Any]], set[str]]:
    """Node name ('' for the root) → its ``zarr.json`` as checked JSON, and every file's path in the store, after
    refusing any symlink in it (from the folder listings themselves: no call per file)."""
    nodes: dict[str, dict[str, Any]] = {}
    files: set[str] = set()
    folders = [""]
    while folders:
        folder = folders.pop()
        with os.scandir(path / folder) as entries:
            for entry in entries:
                name = f"{folder}/{entry.name}" if folder else entry.name
                if entry.is_symlink():
                    raise fail(path, f"holds a symbolic link, {name!r}")
                if entry.is_dir():
                    folders.append(name)
                else:
                    files.add(name)
        if f"{folder}/{NODE_FILE}" in files or (not folder and NODE_FILE in files):
            nodes[folder] = read_node(path, path / folder / NODE_FILE)
    return nodes, files


def read_node(store: Path, path: Path) -> dict[str, Any]:
    try:
        return read_json(path, MAX_NODE_BYTES, "a zarr.json")
    except FileFormatError as error:
        raise fail(store, str(error)) from None


def read_progress(store: Path) -> dict[str, Any]:
    """The store's header and progress record, as strict JSON."""
    try:
        return read_json(store / PROGRESS_FILE, MAX_PROGRESS_BYTES, "the trace store's header")
    except FileFormatError as error:
        raise fail(store, f"not a complete trace store ({error})") from None


def check_group(store: Path, name: str, node: dict[str, Any]) -> None:
    if set(node) - GROUP_KEYS or node.get("zarr_format") != 3 or node.get("consolidated_metadata") is not None:
        raise fail(store, f"group {name or '/'!r} is not a plain zarr v3 group")


def check_array(store: Path, name: str, node: dict[str, Any]) -> ArrayNode:
    """The array's metadata held to the allowlist (module docstring); a TraceError naming it otherwise."""
    where = f"array {name!r}"
    extra = set(node) - ARRAY_KEYS
    if extra or node.get("zarr_format") != 3:
        what = ", ".join(sorted(extra)) or "its zarr_format"
        raise fail(store, f"{where} has zarr metadata a trace store never holds ({what})")
    dtype = node.get("data_type")
    if not isinstance(dtype, str) or dtype not in DATA_TYPES:
        raise fail(store, f"{where} holds data of type {dtype!r}; traces hold only {', '.join(DATA_TYPES)}")
    shape, grid = node.get("shape"), node.get("chunk_grid")
    chunks = grid.get("configuration", {}).get("chunk_shape") if isinstance(grid, dict) else None
    regular = isinstance(grid, dict) and grid.get("name") == "regular"
    if not (regular and _whole_numbers(shape) and _whole_numbers(chunks) and len(chunks) == len(shape)):
        raise fail(store, f"{where} has no regular chunk grid of its shape")
    if shape and (chunks[0] < 1 or list(chunks[1:]) != list(shape[1:])):
        raise fail(store, f"{where} is chunked {chunks}, not along its first axis alone")
    if node.get("chunk_key_encoding") != CHUNK_KEYS:
        raise fail(store, f"{where} has chunk keys other than the default keys separated by '.'")
    if node.get("storage_transformers", []) != [] or not isinstance(node.get("attributes", {}), dict):
        raise fail(store, f"{where} has storage transformers; a trace store has none")
    fill = node.get("fill_value")
    if isinstance(fill, str) or not isinstance(fill, (bool, int, float)):
        raise fail(store, f"{where} has fill value {fill!r}; a trace store's are numbers")
    array = ArrayNode(tuple(shape), np.dtype(dtype), chunks[0] if shape else 1, _codecs(store, where, node))
    if array.chunk_bytes() > MAX_CHUNK_BYTES:  # each chunk is decoded whole: this bounds what one read allocates
        raise fail(store, f"{where} has chunks of {array.chunk_bytes():,} bytes, over the {MAX_CHUNK_BYTES:,} limit")
    return array


def _codecs(store: Path, where: str, node: dict[str, Any]) -> tuple[str, ...]:
    """The codec names, after checking the chain is bytes (little endian), then zstd and crc32c at most."""
    codecs = node.get("codecs")
    if not isinstance(codecs, list) or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in codecs):
        raise fail(store, f"{where} has no list of codecs")
    names = tuple(c["name"] for c in codecs)
    if names not in CODEC_CHAINS:
        raise fail(store, f"{where} uses codecs {', '.join(names)}; a trace store reads bytes, zstd and crc32c only")
    for codec in codecs:
        config = codec.get("configuration", {})
        ok = {
            "bytes": lambda c: set(c) <= {"endian"} and c.get("endian", "little") == "little",
            "zstd": lambda c: set(c) <= {"level", "checksum"} and all(type(v) in (int, bool) for v in c.values()),
            "crc32c": lambda c: not c,
        }[codec["name"]]
        if set(codec) - {"name", "configuration"} or not isinstance(config, dict) or not ok(config):
            raise fail(store, f"{where} configures codec {codec['name']!r} in a way a trace store never does")
    return names


def _whole_numbers(values: Any) -> bool:
    return isinstance(values, list) and all(type(v) is int and v >= 0 for v in values)


def check_chunk_file(store: Path, name: str, node: ArrayNode, index: int) -> None:
    """Chunk ``index`` of array ``name`` is a file, and its zstd frame (when compressed) decodes to one chunk."""
    path = store / name / chunk_key(node, index)
    where = f"array {name!r}, chunk {index} ({chunk_key(node, index)})"
    try:
        with open(path, "rb") as handle:
            head, size = handle.read(18), os.fstat(handle.fileno()).st_size  # a frame header is at most 18 bytes
    except FileNotFoundError:
        raise fail(store, f"{where} is missing (deleted, or the store was copied in part)") from None
    except OSError as error:
        raise fail(store, f"{where} cannot be read ({error.strerror or error})") from None
    stored = _frame_size(head) if "zstd" in node.codecs else size - 4 * ("crc32c" in node.codecs)
    if stored != node.chunk_bytes():
        raise TraceError(
            f"{store}: {where} does not hold one chunk's {node.chunk_bytes()} bytes "
            f"(truncated or corrupt); capture it again"
        )


def _frame_size(head: bytes) -> int | None:
    """The content size a zstd frame header declares, or None where it declares none (or is no frame)."""
    if len(head) < 6 or head[:4] != ZSTD_MAGIC:
        return None
    descriptor = head[4]
    single, dictionary, size_flag = descriptor >> 5 & 1, descriptor & 3, descriptor >> 6
    at = 5 + (0 if single else 1) + (0, 1, 2, 4)[dictionary]
    width = (1 if single else 0, 2, 4, 8)[size_flag]
    if not width or len(head) < at + width:
        return None
    size = int.from_bytes(head[at : at + width], "little")
    return size + 256 if width == 2 else size


__all__ = [
    "STORE_VERSION",
    "PROGRESS_FILE",
    "ArrayNode",
    "scan_store",
    "read_progress",
    "check_group",
    "check_array",
    "check_chunk_file",
    "chunk_key",
    "CHUNK_KEYS",
]
