"""Open a trace store (``docs/formats.md``) lazily: every array checked from its metadata, volumes read when indexed.

:func:`read_store` reads the header and progress record and every ``zarr.json`` (:mod:`analysis.traces.store_format`)
and holds them to the header's expected arrays (:func:`~analysis.traces.validation.expected_shapes`) before zarr
opens anything. The small arrays (vectors, per-chunk scores, tokens, int8 scales, summaries) are read whole and
checked as a trace file's are; volumes stay in the store: :class:`LazyVolumes` reads only the chunks an index selects
and checks each chunk file and its values (finite, a gate's within its bounds) as it reads them. A store cut short
(``complete`` false) opens up to its last complete segment, ``info["incomplete"]`` saying so; its per-chunk summaries
are read as far, and the totals, written only at the end, are made from the writes' coordinates (no volume read).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import zarr
from zarr.storage import LocalStore

from analysis.traces.store_format import (
    STORE_VERSION,
    ArrayNode,
    check_array,
    check_chunk_file,
    check_group,
    chunk_key,
    read_progress,
    scan_store,
)
from analysis.traces.summaries import TOTALS, write_totals
from analysis.traces.validation import (
    MAX_TRACE_BYTES,
    REDO,
    TRACE_FORMAT,
    TraceError,
    check_consistency,
    check_names,
    check_values,
    expected_shapes,
    fail,
    out_of_bounds,
)


class LazyVolumes:
    """(K, C, D, H, W) volumes (float16, or int8 codes) in a store, read a selection of chunks at a time: indexing the
    first axis reads only the zarr chunks it touches; ``np.asarray`` reads them all."""

    def __init__(self, store: Path, name: str, array: zarr.Array, node: ArrayNode, length: int) -> None:
        self.store, self.name, self.array, self.node = store, name, array, node
        self.shape = (length, *node.shape[1:])
        self.dtype = node.dtype
        self.ndim = len(self.shape)

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> np.ndarray:
        """Read only the chunks the first index selects, then apply the rest of the index."""
        key = key if isinstance(key, tuple) else (key,)
        first, rest = key[0], key[1:]
        if first is Ellipsis or first is None:
            return np.asarray(self)[key]
        rows = np.arange(self.shape[0])[first]  # the chunks selected, as numpy would select them
        values = self._read(np.atleast_1d(rows))
        if np.ndim(rows) == 0:  # an integer: the chunk axis is gone
            return values[0][rest]
        return values[(slice(None), *rest)]

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        values = self._read(np.arange(self.shape[0]))
        return values if dtype is None else values.astype(dtype)

    def astype(self, dtype: Any, copy: bool = True) -> np.ndarray:
        return np.asarray(self, dtype=dtype)

    def _read(self, rows: np.ndarray) -> np.ndarray:
        """Rows ``rows`` (any order, repeats allowed), each chunk file checked before zarr decodes it."""
        if rows.size == 0:
            return np.empty((0, *self.shape[1:]), self.dtype)
        wanted, back = np.unique(rows, return_inverse=True)
        first, last = int(wanted[0]), int(wanted[-1])
        indices = [int(i) for i in np.unique(wanted // self.node.rows)]
        for index in indices:
            check_chunk_file(self.store, self.name, self.node, index)
        try:
            if last - first + 1 == len(wanted):
                values = self.array[first : last + 1]
            else:
                values = self.array.get_orthogonal_selection((wanted,))
        except Exception as error:  # zarr's and the codecs' errors for a damaged chunk, named here
            keys = chunk_key(self.node, indices[0]) + (f" … {chunk_key(self.node, indices[-1])}" if indices[1:] else "")
            raise TraceError(
                f"{self.store}: array {self.name!r}, chunk {keys} (trace chunks {first}..{last}) cannot be read "
                f"({type(error).__name__}: {error}); {REDO}"
            ) from None
        if self.dtype.kind == "f" and not np.isfinite(values).all():
            raise fail(self.store, f"array {self.name!r} holds NaN or infinite values in chunks {first}..{last}")
        problem = out_of_bounds(self.name, values)
        if problem:
            raise fail(self.store, f"array {self.name!r}, read in chunks {first}..{last}, {problem}")
        return values[back]


def read_store(path: str | Path) -> tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """The trace store at ``path`` (a folder written by ``trace_model(..., out=…)`` or
    :func:`~analysis.traces.store_writer.write_store`), checked first (module docstring; TraceError otherwise): its
    info, its arrays by file name (volumes lazy) and its summaries, for ``load_trace`` to make a trace of."""
    path = Path(path)
    record = read_progress(path)
    found, files = scan_store(path)
    nodes = checked_nodes(path, found)
    info = store_info(path, record, nodes)
    incomplete = "incomplete" in info
    expected = expected_shapes(info, path)
    summaries = summary_shapes(path, info, nodes)
    check_names(path, expected, nodes, also=summaries)
    meta_names = [n for n in nodes if n.startswith("meta/")]
    lengths = {n: stored_length(path, n, nodes[n], shape, incomplete) for n, (shape, _) in expected.items()}
    lengths.update({n: nodes[n].shape[0] if nodes[n].shape else 0 for n in meta_names})
    for name, shape in summaries.items():  # the totals are written at the end: a store cut short has none yet
        if not (incomplete and name.rpartition("/")[2] in TOTALS):
            lengths[name] = stored_length(path, name, nodes[name], shape, incomplete)
    small = sum(nodes[n].row_bytes() * max(length, 1) for n, length in lengths.items() if len(nodes[n].shape) != 5)
    if small > MAX_TRACE_BYTES:  # what is read whole: a header claiming a huge input would exhaust the memory
        raise fail(path, f"its arrays other than volumes hold {small:,} bytes, over the {MAX_TRACE_BYTES:,} limit")
    store = LocalStore(path, read_only=True)
    arrays: dict[str, Any] = {}
    for name, length in lengths.items():
        node = nodes[name]
        volume = name in expected and len(expected[name][0]) == 5
        for index in range(node.chunk_count(length)):  # volumes: present (their frames are checked when read)
            if not (volume and f"{name}/{chunk_key(node, index)}" in files):
                check_chunk_file(path, name, node, index)
        array = zarr.open_array(store, path=name, mode="r")
        if volume:
            kind = expected[name][1]
            if node.dtype != (np.dtype(np.int8) if kind == "int8" else np.dtype(np.float16)):
                raise fail(path, f"array {name!r} is {node.dtype}, a trace's volumes are float16 or int8")
            arrays[name] = LazyVolumes(path, name, array, node, length)
        else:
            arrays[name] = read_whole(path, name, array, length)
    for name, (_, kind) in expected.items():
        if not isinstance(arrays[name], LazyVolumes):
            check_values(path, name, arrays[name], kind)
    for name in summaries:
        if name in arrays:
            check_summary(path, name, arrays[name])
    check_consistency(path, info, arrays)
    return info, arrays, stored_summaries(info, arrays)


def checked_nodes(path: Path, nodes: dict[str, dict[str, Any]]) -> dict[str, ArrayNode]:
    """The store's arrays by name, every node's metadata held to the allowlist first."""
    arrays = {}
    for name, node in nodes.items():
        kind = node.get("node_type")
        if kind == "group":
            check_group(path, name, node)
        elif kind == "array" and name:
            arrays[name] = check_array(path, name, node)
        else:
            raise fail(path, f"node {name or '/'!r} is a zarr {kind!r}; a trace store holds groups and arrays")
    return arrays


def store_info(path: Path, record: dict[str, Any], nodes: dict[str, ArrayNode]) -> dict[str, Any]:
    """The header's info; for a store cut short, as far as its last complete segment, with ``incomplete`` saying so."""
    if record.get("format") != TRACE_FORMAT:
        raise fail(path, "its trace.json does not name the trace format")
    if record.get("version") != STORE_VERSION:
        raise TraceError(
            f"{path}: trace store version {record.get('version')!r}, this version of tensor-memory reads "
            f"version {STORE_VERSION}; {REDO}"
        )
    info, chunks, positions = record.get("info"), record.get("chunks"), record.get("positions")
    counts = [chunks, positions]
    if not (isinstance(info, dict) and all(type(v) is int and v >= 0 for v in counts)):
        raise fail(path, "its trace.json lacks the info, or whole numbers of chunks and positions recorded")
    if type(record.get("complete")) is not bool:
        raise fail(path, "its trace.json does not say whether the trace is complete")
    if record["complete"]:
        if counts != [info.get("num_chunks"), info.get("num_tokens")]:
            raise fail(path, "its trace.json counts other chunks or positions than its info")
        return info
    if chunks < 1:
        raise fail(path, "its capture was cut short before the first segment was written: it holds no chunk")
    short = {**info, "num_chunks": chunks, "num_tokens": positions}
    short["incomplete"] = f"cut short: {positions} of {info.get('num_tokens')} positions recorded"
    if info.get("tokens") and "tokens/offsets" in nodes:  # the token text up to the last position recorded
        offsets = nodes["tokens/offsets"]
        if not (offsets.shape and offsets.shape[0] > positions and offsets.dtype.kind in "iu"):
            raise fail(path, "its token offsets do not reach the positions recorded")
        check_chunk_file(path, "tokens/offsets", offsets, positions // offsets.rows)
        array = zarr.open_array(LocalStore(path, read_only=True), path="tokens/offsets", mode="r")
        short["token_bytes"] = int(read_whole(path, "tokens/offsets", array, positions + 1)[-1])
    return short


def summary_shapes(path: Path, info: dict[str, Any], nodes: dict[str, ArrayNode]) -> dict[str, tuple[int, ...]]:
    """The stored summaries' names and shapes: ``summary/<layer>/<name>``, (K,) per chunk, the grid for totals."""
    out = {}
    for layer, entry in info["layers"].items():
        prefix = f"summary/{layer}/"
        for name in nodes:
            key = name[len(prefix) :]
            if name.startswith(prefix) and key.isidentifier():
                out[name] = tuple(entry["grid"]) if key in TOTALS else (int(info["num_chunks"]),)
    return out


def stored_length(path: Path, name: str, node: ArrayNode, shape: tuple[int, ...], incomplete: bool) -> int:
    """The rows to read of array ``name``: its header's ``shape`` (a store cut short may hold more, not yet
    recorded as durable)."""
    fits = node.shape[1:] == shape[1:] and len(node.shape) == len(shape)
    if shape and fits and (node.shape[0] == shape[0] or (incomplete and node.shape[0] > shape[0])):
        return shape[0]
    if not shape and not node.shape:
        return 0
    raise fail(path, f"array {name!r} has shape {list(node.shape)}, the header implies {list(shape)}")


def read_whole(path: Path, name: str, array: zarr.Array, length: int) -> np.ndarray:
    """The first ``length`` rows of a small array (all of a 0-d one), a damaged chunk named."""
    try:
        return array[:length] if array.ndim else array[...]
    except Exception as error:  # zarr's and the codecs' errors for a damaged chunk, named here
        raise fail(path, f"array {name!r} cannot be read ({type(error).__name__}: {error})") from None


def check_summary(path: Path, name: str, values: np.ndarray) -> None:
    """A summary is floats, NaN where it is undefined (a first chunk's distance to earlier writes), never infinite."""
    if values.dtype.kind != "f" or np.isinf(values).any():
        raise fail(path, f"array {name!r} is not a summary of finite floats (NaN where undefined)")


def stored_summaries(info: dict[str, Any], arrays: dict[str, Any]) -> dict[str, dict[str, np.ndarray]]:
    """Per layer, its stored summaries by name, a store cut short's totals made from its writes; a layer without them
    has none (computed from its volumes when asked for)."""
    out = {}
    for layer, entry in info["layers"].items():
        prefix = f"summary/{layer}/"
        found = {n[len(prefix) :]: v for n, v in arrays.items() if n.startswith(prefix)}
        if found and "incomplete" in info:
            writes = arrays[f"layer/{layer}/mu_write"], arrays[f"layer/{layer}/sigma"]
            found.update(write_totals(*writes, tuple(entry["grid"])))
        if all(total in found for total in TOTALS):
            out[layer] = found
    return out


__all__ = ["read_store", "LazyVolumes"]
