"""Write a trace to a store (a zarr v3 folder; layout in ``docs/formats.md``) a segment at a time, as it is recorded.

:class:`StoreWriter` appends named arrays along their first axis and records, after each segment, how far the store
is durable: ``trace.json`` (the header and the progress record) is replaced atomically once the segment's chunks are
written, and says ``complete: true`` only after the last. A capture killed half way leaves a store that opens up to
its last complete segment. :class:`SegmentedTraceWriter` turns recorded segments into a trace's arrays (the names
:meth:`Trace.arrays` gives) and its summaries; :func:`write_store` writes an in-memory trace whole.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.codecs import BytesCodec, ZstdCodec
from zarr.storage import LocalStore

from analysis.traces.segment_recorder import LayerFields, layer_traces
from analysis.traces.store_format import CHUNK_KEYS, PROGRESS_FILE, STORE_VERSION
from analysis.traces.summaries import FIELDS as SUMMARY_FIELDS
from analysis.traces.summaries import SummaryBuilder
from analysis.traces.trace import Trace
from analysis.traces.validation import TRACE_FORMAT
from tensor_memory.storage.files import atomic_write_text, check_output_path, dumps_json

VOLUME_ROWS = 8  # trace chunks per zarr chunk of a volume: 1 MB of int8 at C = 32 on 16³; a page of 64 reads 8
VECTOR_ROWS = 1024  # rows per zarr chunk of anything else, at least (more for narrow rows, up to VECTOR_BYTES)
VECTOR_BYTES = 1 << 20
ZSTD_LEVEL = 1  # fast; level 3 compresses int8 volumes a little more at half the speed (docs/formats.md)


def is_store_path(path: str | Path) -> bool:
    """Whether a trace written to ``path`` is a store (a folder, e.g. ``x.trace.zarr``), not one safetensors file."""
    return not str(path).endswith(".safetensors")


def check_store_path(path: str | Path, option: str = "--out") -> Path:
    """``path`` if a new store may be made there (a ValueError otherwise, before any work): it must not exist (a store
    is never written over), and its folder must be writable."""
    if os.path.lexists(path):  # a symbolic link too, even a dangling one: a store is never made through one
        kind = "a symbolic link" if Path(path).is_symlink() else "a folder" if Path(path).is_dir() else "a file"
        raise ValueError(
            f"{option} {path}: is {kind} that exists already; a trace store (any path not ending in .safetensors) is "
            f"a new folder, never written over: remove it, or choose a new name"
        )
    return check_output_path(path, False, option=option)


def stored_bytes(path: str | Path) -> int:
    """A trace's size on disk: its file's, or every file's in its store."""
    path = Path(path)
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else path.stat().st_size


class StoreWriter:
    """A new store at ``path`` (a folder that must not exist yet): named arrays appended or written whole, and the
    progress record."""

    def __init__(self, path: str | Path, volume_rows: int = VOLUME_ROWS, capacity: dict[str, int] | None = None):
        """``capacity``: the rows an appended array will likely reach, by its name's first part (``tokens``, …; else
        ``""``): it is made that long at once, so appending writes chunks and no metadata (:meth:`trim` at the end)."""
        self.path = Path(path)
        if os.path.lexists(self.path):
            raise ValueError(f"{self.path}: exists already; remove it or choose another name for the trace store")
        self.path.mkdir()
        self.store = LocalStore(self.path)
        zarr.create_group(store=self.store)
        self.volume_rows = volume_rows
        self.capacity = capacity or {}
        self.arrays: dict[str, zarr.Array] = {}
        self.rows: dict[str, int] = {}  # rows appended so far

    def _create(self, name: str, value: np.ndarray, shape: tuple[int, ...]) -> zarr.Array:
        row_bytes = int(np.prod(value.shape[1:])) * value.dtype.itemsize
        rows = self.volume_rows if value.ndim == 5 else max(VECTOR_ROWS, VECTOR_BYTES // max(row_bytes, 1))
        self.arrays[name] = zarr.create_array(
            self.store,
            name=name,
            shape=shape,
            chunks=(rows, *value.shape[1:]) if value.ndim else (),
            dtype=value.dtype,
            fill_value=np.zeros((), value.dtype).item(),
            serializer=BytesCodec(endian="little"),
            compressors=[ZstdCodec(level=ZSTD_LEVEL, checksum=True)],
            chunk_key_encoding=CHUNK_KEYS,
            config={"write_empty_chunks": True},  # a chunk of zeros is written too: a missing one means damage
            overwrite=True,
        )
        return self.arrays[name]

    def append(self, arrays: dict[str, np.ndarray]) -> None:
        """Each array's rows after those appended before (the first call creates it)."""
        for name, value in arrays.items():
            value = np.ascontiguousarray(value)
            if name not in self.rows:
                size = self.capacity.get(name.split("/")[0], self.capacity.get("", 0))
                self._create(name, value, (size, *value.shape[1:]))
                self.rows[name] = 0
            array, start = self.arrays[name], self.rows[name]
            self.rows[name] = stop = start + len(value)
            if stop > array.shape[0]:
                array.resize((stop, *array.shape[1:]))
            if len(value):
                array[start:stop] = value

    def trim(self) -> None:
        """Every appended array cut to the rows appended (made longer at first than it came to be)."""
        for name, rows in self.rows.items():
            if self.arrays[name].shape[0] != rows:
                self.arrays[name].resize((rows, *self.arrays[name].shape[1:]))

    def put(self, arrays: dict[str, np.ndarray]) -> None:
        """Each array written whole (replacing an earlier one of the same name)."""
        for name, value in arrays.items():
            value = np.asarray(value)
            self._create(name, value, value.shape)[...] = value

    def progress(self, info: dict[str, Any], chunks: int, positions: int, complete: bool = False) -> None:
        """Record, atomically, that ``chunks`` chunks (``positions`` positions) are written; ``complete`` last."""
        record = {
            "format": TRACE_FORMAT,
            "version": STORE_VERSION,
            "complete": complete,
            "chunks": chunks,
            "positions": positions,
            "info": info,
        }
        atomic_write_text(self.path / PROGRESS_FILE, dumps_json(record))


class SegmentedTraceWriter:
    """A trace of sample row 0, written as its segments are recorded: each segment's layers, per-chunk scores and
    per-position scores appended, its summaries built on the way (``summary/<layer>/<name>``)."""

    def __init__(
        self,
        path: str | Path,
        tokens: list[str] | None,
        segment_chunks: int,
        chunks: int,
        positions: int,
        vocabulary: list[str] | None = None,
    ):
        """``chunks`` and ``positions``: how many the whole trace will likely hold (the arrays are made that long);
        ``tokens`` and ``vocabulary``: the trace's text, written at once."""
        aligned = math.gcd(segment_chunks, VOLUME_ROWS)  # whole zarr chunks a segment: none read back to append
        rows = aligned if aligned >= VOLUME_ROWS // 2 else VOLUME_ROWS
        self.writer = StoreWriter(path, rows, capacity={"tokens": positions, "": chunks})
        self.path = self.writer.path
        self.builders: dict[str, SummaryBuilder] = {}
        self.chunks = self.positions = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="trace-store")
        self._pending: Future | None = None
        self.text: dict[str, Any] = {}  # the header's entries for the token arrays (Trace.text_info)
        if tokens is not None or vocabulary is not None:  # the text's arrays, as a trace names them
            text = Trace(info={}, layers={}, chunks={}, meta={}, tokens=tokens, vocabulary=vocabulary)
            arrays = text.arrays()
            self.writer.put(arrays)
            self.text = text.text_info(arrays)

    def add(
        self,
        layers: LayerFields,
        k: int,
        positions: int,
        chunks: dict[str, np.ndarray],
        per_token: dict[str, np.ndarray],
        info: dict[str, Any],
    ) -> None:
        """One segment: its recorded ``layers`` (B, k', …), the ``k`` chunks it completed, its ``positions``, its
        per-chunk and per-position scores; ``info`` the header as it would read with the chunks so far. It is
        summarised, compressed and written in a background thread while the next segment is recorded (one segment
        at most waits: the memory held stays two segments')."""
        self.wait()
        self.chunks, self.positions = self.chunks + k, self.positions + positions
        if per_token:
            self.text["position_targets"] = True
        header, done = {**info, **self.text}, (self.chunks, self.positions)
        self._pending = self._pool.submit(self._write, layers, k, chunks, per_token, header, done)

    def _write(self, layers: LayerFields, k: int, chunks: dict, per_token: dict, info: dict, done: tuple) -> None:
        traces = layer_traces(layers, 0, k)
        arrays = Trace(info={}, layers=traces, chunks=chunks, meta={}, per_token=per_token).arrays()
        whole = {name: arrays.pop(name) for name in [n for n in arrays if n.endswith("/gate_scale")]}
        for path, layer in traces.items():
            builder = self.builders.setdefault(path, SummaryBuilder(layer.grid))
            summaries = builder.add({field: getattr(layer, field) for field in SUMMARY_FIELDS})
            arrays.update({f"summary/{path}/{name}": value for name, value in summaries.items()})
        self.writer.append(arrays)
        self.writer.put(whole)
        self.writer.progress(info, *done)  # only now are the segment's chunks (done: chunks, positions) durable

    def wait(self) -> None:
        """Until the segment being written is written (its error, if any, raised here)."""
        if self._pending is not None:
            pending, self._pending = self._pending, None
            pending.result()

    def finish(self, info: dict[str, Any]) -> Path:
        """The summaries' totals, then the final header: the store is complete."""
        self.wait()
        self.writer.trim()
        totals = {f"summary/{p}/{n}": v for p, b in self.builders.items() for n, v in b.totals().items()}
        self.writer.put(totals)
        self.writer.progress({**info, **self.text}, self.chunks, self.positions, complete=True)
        return self.path

    def close(self) -> None:
        """Let the background thread finish the segment it writes, and end it."""
        self._pool.shutdown(wait=True)


def write_store(trace: Trace, path: str | Path) -> Path:
    """An in-memory trace written whole as a store at ``path`` (a folder that must not exist yet), its summaries
    with it; returns the path."""
    writer = StoreWriter(path)
    arrays = trace.arrays()
    writer.put(arrays)
    writer.put({f"summary/{name}/{key}": v for name in trace.layers for key, v in trace.summary(name).items()})
    info = trace.text_info(arrays)
    writer.progress(info, trace.num_chunks, int(info["num_tokens"]), complete=True)
    return writer.path


__all__ = [
    "check_store_path",
    "stored_bytes",
    "StoreWriter",
    "SegmentedTraceWriter",
    "write_store",
    "is_store_path",
    "VOLUME_ROWS",
    "ZSTD_LEVEL",
]
