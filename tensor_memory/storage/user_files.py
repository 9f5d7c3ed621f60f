"""How every file a user names is read: only a regular file under its cap, and nothing can block.

A path from a user may name a named pipe (reading it waits for a writer for good), a device such as
``/dev/zero`` (it never ends), a folder, or a file far larger than what it should be. Every reader of
such a path (pictures, frames, videos, tokenizers, lists, corpora, run configs, logs, JSON, checkpoints,
traces, resume files, uploads) opens it with :func:`open_user_file`, which opens without waiting, checks
what was opened and reads to the cap at most: :func:`read_user_file` for bytes, :func:`read_safetensors`
for a safetensors file, whose header is checked by hand (its length, JSON, dtypes, shapes and offsets
against the file size, a pickle refused by its first bytes) before any tensor is built. Nothing is ever
unpickled.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import stat
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

import torch

from ..errors import FileFormatError

FILE_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


@contextlib.contextmanager
def open_user_file(path: str | os.PathLike[str], cap: int, what: str, fix: str = "") -> Iterator[tuple[BinaryIO, int]]:
    """(the open file, its size) of ``path``, a regular file of at most ``cap`` bytes: how every file a user names is
    opened, so that nothing can block.

    The file is opened without waiting (``O_NONBLOCK``), and what was opened, links followed, must be a regular file
    (a named pipe, ``/dev/zero`` or a folder is refused unopened for reading). Checking the opened file, not the name,
    leaves no moment for the name to be swapped for a pipe. A missing file raises ``FileNotFoundError`` for the caller
    to say where it should come from; every other problem a :class:`FileFormatError` naming the file, what it should be
    (``what``) and ``fix`` (", …" appended)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise
    except OSError as error:
        raise FileFormatError(f"{path}: cannot read {what}: {error.strerror or error}{fix}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_size > cap:
        os.close(fd)
        if info.st_size > cap and stat.S_ISREG(info.st_mode):
            raise too_large(path, cap, what, fix, info.st_size)
        kind = next((name for test, name in FILE_KINDS if test(info.st_mode)), "not a regular file")
        raise FileFormatError(f"{path}: is {kind}, not {what} (a regular file){fix}")
    with os.fdopen(fd, "rb", buffering=0) as handle:
        try:
            yield handle, info.st_size
        except OSError as error:
            raise FileFormatError(f"{path}: cannot read {what}: {error.strerror or error}{fix}") from None


def too_large(path: Path, cap: int, what: str, fix: str = "", size: int | None = None) -> FileFormatError:
    """``path`` is over its cap: of ``size`` bytes, or growing past the cap as it was read."""
    amount = f"is {_amount(size)}" if size is not None else "grew"
    return FileFormatError(f"{path}: {what} {amount}, over the {_amount(cap)} limit{fix}")


def read_user_file(path: str | os.PathLike[str], cap: int, what: str, fix: str = "") -> bytes:
    """The bytes of ``path``, opened by :func:`open_user_file`; at most ``cap`` bytes are read, so a file that grows
    while it is read (or a special file that claims size 0) is refused too."""
    with open_user_file(path, cap, what, fix) as (handle, size):
        data = read_up_to(handle, cap + 1, size)
        if len(data) > cap:
            raise too_large(Path(path), cap, what, fix)  # it said it was smaller
        return data


def read_up_to(handle: BinaryIO, count: int, size: int) -> bytearray:
    """Up to ``count`` bytes of ``handle``, fewer only at its end, for a file that says it holds ``size``: one
    allocation when it does, growing as it goes when it holds more (a file still being written, a ``/proc`` file)."""
    data = bytearray(min(count, size + 1))  # one byte more than it says, to see its end in the same pass
    done = 0
    while done < count:
        if done == len(data):
            data.extend(bytes(min(count - done, 1 << 20)))
        with memoryview(data) as whole, whole[done:] as rest:
            got = handle.readinto(rest)  # one read of an unbuffered file may return less than asked
        if not got:
            break
        done += got
    del data[done:]
    return data


def read_user_text(path: str | os.PathLike[str], cap: int, what: str, missing: str) -> str:
    """:func:`read_user_file` decoded as UTF-8 text (a byte-order mark dropped); a missing file is a
    :class:`FileFormatError` that says ``missing`` (where the file should come from)."""
    try:
        raw = read_user_file(path, cap, what)
    except FileNotFoundError:
        raise FileFormatError(f"{path}: no such file; {missing}") from None
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise FileFormatError(f"{path}: {what} is not UTF-8 text ({error.reason} at byte {error.start})") from None


def _amount(size: int) -> str:
    """A size in the unit people would say: 16 MB, 64 KB, 99 bytes."""
    if size >= 2**20:
        return f"{size / 2**20:.0f} MB"
    return f"{size / 2**10:.0f} KB" if size >= 2**10 else f"{size} bytes"


def check_plain_name(path: str | os.PathLike[str], option: str) -> None:
    """A ValueError naming ``option`` when a path a user gives to write to holds a control character (a newline, a
    tab): a file name nobody can type or read back in a listing."""
    if any(ord(character) < 32 or ord(character) == 127 for character in str(path)):
        raise ValueError(f"{option} {str(path)!r}: holds a control character (a newline, a tab); choose a plain name")


# safetensors files: read whole, in one pass, and checked by hand before a tensor is built

MAX_HEADER_BYTES = 8 << 20  # safetensors JSON header: ~150 bytes per tensor

# safetensors dtype name → (torch dtype, bytes per element). Weights must be one of the floating ones.
FLOAT_DTYPES = {
    "F16": (torch.float16, 2),
    "BF16": (torch.bfloat16, 2),
    "F32": (torch.float32, 4),
    "F64": (torch.float64, 8),
}
OTHER_DTYPES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "I16": 2,
    "U16": 2,
    "I32": 4,
    "U32": 4,
    "I64": 8,
    "U64": 8,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
}
TORCH_DTYPES = {
    **{name: dtype for name, (dtype, _) in FLOAT_DTYPES.items()},
    "BOOL": torch.bool,
    "U8": torch.uint8,
    "I8": torch.int8,
    "I16": torch.int16,
    "U16": torch.uint16,
    "I32": torch.int32,
    "U32": torch.uint32,
    "I64": torch.int64,
    "U64": torch.uint64,
    "F8_E4M3": torch.float8_e4m3fn,
    "F8_E5M2": torch.float8_e5m2,
}
NUMPY_DTYPES = tuple(name for name in TORCH_DTYPES if name not in ("BF16", "F8_E4M3", "F8_E5M2"))  # numpy has these


def strict_json(text: str) -> Any:
    """``json.loads`` refusing what lenient parsers let through: NaN and Infinity, and a key given twice (a
    ValueError, or RecursionError for nesting too deep)."""
    return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


@dataclasses.dataclass
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]
    offsets: tuple[int, int] = (0, 0)  # where its bytes lie in the data section, begin and end


@dataclasses.dataclass
class SafetensorsFile:
    """A safetensors file read whole, in one pass, and checked: its layout, its metadata and its tensors as views of
    the bytes read (nothing copied; the values little-endian, as the format and every platform torch ships for)."""

    path: Path
    layout: dict[str, TensorInfo]
    metadata: dict[str, str]
    data: bytearray  # the data section

    def tensor(self, name: str) -> torch.Tensor:
        info = self.layout[name]
        dtype = TORCH_DTYPES[info.dtype]
        begin, end = info.offsets
        if begin == end:  # frombuffer refuses an empty span
            return torch.empty(info.shape, dtype=dtype)
        source, offset = self.data, begin
        if begin % torch.empty((), dtype=dtype).element_size():  # a misaligned span (a hand-made file): copied out
            source, offset = bytearray(memoryview(self.data)[begin:end]), 0
        return torch.frombuffer(source, dtype=dtype, count=math.prod(info.shape), offset=offset).view(info.shape)

    def tensors(self) -> dict[str, torch.Tensor]:
        return {name: self.tensor(name) for name in self.layout}


def _looks_pickled(head: bytes) -> str | None:
    """What the first 8 bytes of a file that is no safetensors file say it is, or None. A safetensors header of 640,
    896, 1,152 or 1,408 bytes begins with a pickle's two bytes too: the pickle's next bytes read as a header length
    over :data:`MAX_HEADER_BYTES` (the opcode after them is never 0; protocols 4 and 5 have 0x95 there)."""
    if len(head) == 8 and int.from_bytes(head, "little") <= MAX_HEADER_BYTES:
        return None
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (what torch.save writes: it holds a pickle)"
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "a pickle (e.g. written by torch.save or pickle.dump)"
    return None


def read_safetensors(
    path: str | os.PathLike[str],
    max_bytes: int,
    what: str = "the weights file",
    redo: str = "re-save the checkpoint (save_checkpoint writes safetensors)",
) -> SafetensorsFile:
    """A safetensors file read whole and checked: how every safetensors file a user names is read.

    Checks, before a tensor is built: the size cap, pickle/zip magic, header length, header JSON, every entry's
    dtype, shape and data offsets, and that the data section is exactly as long as the header says. One open file
    for the header and the data (opened by ``user_files.open_user_file``): nothing can be swapped in between.
    ``what`` names the file and ``redo`` says how to fix it in the error messages.
    """
    path = Path(path)
    with _open(path, max_bytes, what, redo) as (handle, size):
        layout, metadata, data_len = _layout(path, handle, size, what, redo)
        data = read_up_to(handle, data_len + 1, data_len)
    if len(data) != data_len:
        raise FileFormatError(f"{path}: {what} changed while it was read; {redo}")
    return SafetensorsFile(path, layout, metadata, data)


@contextlib.contextmanager
def _open(path: Path, max_bytes: int, what: str, redo: str) -> Iterator[tuple[BinaryIO, int]]:
    try:
        with open_user_file(path, max_bytes, what, f"; {redo}") as opened:
            yield opened
    except FileNotFoundError:
        raise FileFormatError(f"{path}: cannot read {what}: no such file") from None


def _layout(
    path: Path,
    handle: BinaryIO,
    size: int,
    what: str,
    redo: str,
) -> tuple[dict[str, TensorInfo], dict[str, str], int]:
    """(layout, metadata, length of the data section) of the open safetensors file ``handle`` of ``size`` bytes,
    read to the start of its data."""
    header, header_len = _read_header(path, handle, size, what, redo)
    data_len = size - 8 - header_len
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise FileFormatError(f"{path}: corrupt safetensors file: __metadata__ must map strings to strings; {redo}")
    out = {name: _entry(path, name, entry, data_len, redo) for name, entry in header.items()}
    position = 0
    for begin, end in sorted(info.offsets for info in out.values()):  # they must tile the data exactly
        if begin != position:
            raise FileFormatError(
                f"{path}: corrupt safetensors file: tensor data overlaps or leaves a gap at byte {position}; {redo}"
            )
        position = end
    if position != data_len:
        raise FileFormatError(
            f"{path}: corrupt safetensors file: {data_len - position} unexpected bytes after the last tensor; {redo}"
        )
    return out, metadata, data_len


def _read_header(path: Path, handle: BinaryIO, size: int, what: str, redo: str) -> tuple[dict[str, Any], int]:
    """The JSON header of the open safetensors file ``handle`` of ``size`` bytes, and its length in bytes."""
    head = bytes(read_up_to(handle, 8, 8))
    pickled = _looks_pickled(head)
    if pickled:
        raise FileFormatError(
            f"{path}: looks like {pickled}, not safetensors; pickles can run code when "
            f"loaded, so this file is refused and was not opened as one. Convert it in a "
            f"trusted environment with safetensors.torch.save_file(state_dict, ...)"
        )
    if size == 0:
        raise FileFormatError(f"{path}: {what} is empty (0 bytes); {redo}")
    if len(head) < 8:
        raise FileFormatError(
            f"{path}: truncated safetensors file: {size} bytes, shorter than the 8-byte header length; {redo}"
        )
    (header_len,) = struct.unpack("<Q", head)
    if header_len < 2 or header_len > MAX_HEADER_BYTES:
        raise FileFormatError(
            f"{path}: corrupt safetensors file: bad header length {header_len} (expected "
            f"2 to {MAX_HEADER_BYTES} bytes); is this a safetensors file? {redo}"
        )
    if 8 + header_len > size:
        raise FileFormatError(
            f"{path}: truncated safetensors file: the header says it is {header_len} "
            f"bytes but the file has only {size - 8} after the length; {redo}"
        )
    header_bytes = read_up_to(handle, header_len, header_len)
    try:
        header = strict_json(header_bytes.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        problem = (
            "not UTF-8"
            if isinstance(error, UnicodeDecodeError)
            else ("nested too deeply" if isinstance(error, RecursionError) else str(error))
        )
        raise FileFormatError(f"{path}: corrupt safetensors file: bad JSON header ({problem}); {redo}") from None
    if not isinstance(header, dict):
        raise FileFormatError(f"{path}: corrupt safetensors file: bad JSON header (not an object); {redo}")
    return header, header_len


def _entry(path: Path, name: str, entry: Any, data_len: int, redo: str) -> TensorInfo:
    """One tensor's header entry, checked: its dtype, shape and data offsets within the data section."""
    bad = f"{path}: corrupt safetensors file: entry {name!r} "
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise FileFormatError(bad + f"must have exactly dtype, shape and data_offsets; {redo}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype in FLOAT_DTYPES:
        itemsize = FLOAT_DTYPES[dtype][1]
    elif dtype in OTHER_DTYPES:
        itemsize = OTHER_DTYPES[dtype]
    else:
        raise FileFormatError(bad + f"has unknown dtype {dtype!r}; {redo}")
    if not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise FileFormatError(bad + f"has an invalid shape {shape!r}; {redo}")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(n, int) and not isinstance(n, bool) for n in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise FileFormatError(bad + f"has invalid data_offsets {offsets!r}; {redo}")
    numel = math.prod(shape)
    if offsets[1] - offsets[0] != numel * itemsize:
        raise FileFormatError(
            bad + f"spans {offsets[1] - offsets[0]} bytes but shape {shape} of {dtype} needs {numel * itemsize}; {redo}"
        )
    if offsets[1] > data_len:
        raise FileFormatError(
            f"{path}: truncated safetensors file: data shorter than the offsets in its "
            f"header (tensor {name!r} ends at byte {offsets[1]}, the data section has "
            f"{data_len}); {redo}"
        )
    return TensorInfo(dtype, tuple(shape), (offsets[0], offsets[1]))


__all__ = [
    "open_user_file",
    "read_user_file",
    "read_up_to",
    "strict_json",
    "read_safetensors",
    "SafetensorsFile",
    "TensorInfo",
    "FLOAT_DTYPES",
    "NUMPY_DTYPES",
    "read_user_text",
    "check_plain_name",
]
