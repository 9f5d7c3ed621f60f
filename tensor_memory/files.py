"""Reading and writing files safely: atomic writes, strict JSON, and safetensors checked by hand.

What checkpoints, traces, training runs and reports share:

- **Atomic writes** (a temp file in the same directory, fsync, ``os.replace``): a run killed
  mid-write leaves the file either complete-old or complete-new, never half written.
- **Strict JSON**: no NaN, no duplicate keys, UTF-8, a size cap.
- **safetensors checked before it is read**: the header's length, JSON, dtypes, shapes and
  offsets against the file size, and a pickle (what ``torch.save`` writes) refused by its first
  bytes. Nothing is ever unpickled.

Every malformed input raises one :class:`FileFormatError` naming the file, the problem and what
to do about it.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import stat
import struct
import tempfile
from pathlib import Path
from typing import Any, Optional, Union

import torch

from .errors import FileFormatError
from .user_files import check_plain_name, read_user_file

MAX_HEADER_BYTES = 8 << 20  # safetensors JSON header: ~150 bytes per tensor

# safetensors dtype name → (torch dtype, bytes per element). Weights must be one of the floating ones.
FLOAT_DTYPES = {"F16": (torch.float16, 2), "BF16": (torch.bfloat16, 2), "F32": (torch.float32, 4),
                "F64": (torch.float64, 8)}
OTHER_DTYPES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8, "U64": 8,
                "F8_E4M3": 1, "F8_E5M2": 1}

PathLike = Union[str, os.PathLike]


def _fsync_dir(directory: Path) -> None:
    try:  # makes the rename itself durable; not possible on every platform/filesystem
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(path: PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the complete old file or the complete new one.

    The bytes go to a temp file in the same directory, are fsynced, then ``os.replace``d over
    ``path``. On any error the temp file is removed and ``path`` is untouched.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        try:  # mkstemp makes 0600 files; keep the old file's mode, or use the usual 0644
            mode = stat.S_IMODE(path.stat().st_mode)
        except OSError:
            mode = 0o644
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as error:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(error, OSError) and not error.filename:  # a failed write names no file: name the one meant
            raise OSError(error.errno, error.strerror or str(error), str(path)) from None
        raise
    _fsync_dir(path.parent)


# The temp files atomic_write_bytes makes: ".<name>.<8 random characters>.tmp" (tempfile.mkstemp).
TEMP_PATTERN = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")


def remove_stale_temp_files(directory: PathLike) -> list[Path]:
    """Delete the temp files that killed atomic writes left in ``directory``; returns what was removed.

    Call it where one process owns the folder (a training run's --out, a checkpoint being saved).
    """
    removed = []
    try:
        entries = list(Path(directory).iterdir())
    except OSError:
        return removed
    for path in entries:
        if TEMP_PATTERN.match(path.name) and path.is_file() and not path.is_symlink():
            try:
                path.unlink()
                removed.append(path)
            except OSError:
                pass
    return removed


# Files that belong to a checkpoint or a run: never the --out of another command.
RUN_FILES = ("model.safetensors", "config.json", "metrics.json", "train_log.jsonl", "resume.safetensors")


def check_output_path(path: PathLike, overwrite: bool = False, inputs: tuple = (), option: str = "--out") -> Path:
    """``path`` if a command may write its result there, else a ValueError saying why, before any work.

    Refused always: a folder, a path whose folder is missing or not writable, a file of a checkpoint or
    run (:data:`RUN_FILES` beside a ``config.json``), and one of the command's own ``inputs``. Refused
    unless ``overwrite``: any other existing file.
    """
    path = Path(path)
    where = f"{option} {path}"
    check_plain_name(path, option)
    if path.is_dir():
        raise ValueError(f"{where}: is a folder; give a file name inside it")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise ValueError(f"{where}: its folder {parent} does not exist (or is not a folder); create it first")
    if path.name in RUN_FILES and (parent / "config.json").exists():
        raise ValueError(f"{where}: is a file of the checkpoint or run in {parent}; writing there would destroy "
                         f"it, so choose another file name")
    for source in inputs:
        if path.exists() and Path(source).exists() and os.path.samefile(path, source):
            raise ValueError(f"{where}: is this command's own input; choose another file name")
    if path.exists() and not overwrite:
        raise ValueError(f"{where}: exists already; pass --overwrite to replace it, or choose another file name")
    try:  # can a file be created there at all (read-only folders, /proc, …)?
        fd, probe = tempfile.mkstemp(dir=parent, prefix=f".{path.name}.", suffix=".tmp")
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise ValueError(f"{where}: cannot write in {parent} ({error.strerror or error})") from None
    return path


def atomic_write_text(path: PathLike, text: str) -> None:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def _json_default(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return value.item()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return value.item()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


def finite_or_none(value: Any) -> Any:
    """Metrics: NaN/inf (a diverged loss) become null, so the file stays strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_or_none(v) for v in value]
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return finite_or_none(value.item())
    return value


def dumps_json(data: Any) -> str:
    """Strict JSON (no NaN), indented, with a trailing newline."""
    return json.dumps(data, indent=2, allow_nan=False, default=_json_default) + "\n"


def json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null",
             int: "a number", float: "a number"}
    return names.get(type(value), type(value).__name__)


def _regular_file(path: Path, cap: int, what: str) -> int:
    """The size of ``path``, a regular file no larger than ``cap`` bytes."""
    try:
        info = path.stat()
    except OSError as error:
        raise FileFormatError(f"{path}: cannot read {what}: {error.strerror or error}") from None
    if not stat.S_ISREG(info.st_mode):
        raise FileFormatError(f"{path}: {what} is not a regular file; replace it with the file itself")
    if info.st_size > cap:
        raise FileFormatError(f"{path}: {what} is {info.st_size / 2**20:.1f} MB, over the {cap / 2**20:.0f} MB "
                              f"limit for this file; it is not a checkpoint this project writes")
    return info.st_size


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def read_json(path: PathLike, cap: int, what: str = "the JSON file") -> dict[str, Any]:
    """A JSON object from ``path``: strict JSON (no NaN, no duplicate keys), UTF-8, at most ``cap`` bytes."""
    path = Path(path)
    _regular_file(path, cap, what)  # its own lines for a missing file and a file over the cap
    raw = read_user_file(path, cap, what)
    if not raw.strip():
        raise FileFormatError(f"{path}: {what} is empty; it should hold a JSON object (re-save the checkpoint)")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FileFormatError(f"{path}: {what} is not UTF-8 text, so not valid JSON "
                              f"(re-save the checkpoint)") from None
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_reject_constant)
    except json.JSONDecodeError as error:
        raise FileFormatError(f"{path}: invalid JSON in {what}: {error.msg} at line {error.lineno} column "
                              f"{error.colno} (fix the file or re-save the checkpoint)") from None
    except (ValueError, RecursionError) as error:
        problem = "nested too deeply" if isinstance(error, RecursionError) else str(error)
        raise FileFormatError(f"{path}: invalid JSON in {what}: {problem}") from None
    if not isinstance(data, dict):
        raise FileFormatError(f"{path}: {what} must hold a JSON object ({{...}}), got {json_type(data)}")
    return data


@dataclasses.dataclass
class TensorInfo:
    dtype: str
    shape: tuple[int, ...]


def _looks_pickled(head: bytes) -> Optional[str]:
    if head.startswith(b"PK\x03\x04"):
        return "a zip archive (what torch.save writes: it holds a pickle)"
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "a pickle (e.g. written by torch.save or pickle.dump)"
    return None


def read_safetensors_layout(path: PathLike, max_bytes: int, what: str = "the weights file",
                            redo: str = "re-save the checkpoint (save_checkpoint writes safetensors)",
                            ) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    """Check a safetensors file's structure without reading its tensors: ({name: (dtype, shape)}, metadata).

    Checks: size caps, pickle/zip magic, header length, header JSON, every entry's dtype,
    shape and data offsets, and that the data section is exactly as long as the header says.
    ``what`` names the file and ``redo`` says how to fix it in the error messages.
    """
    path = Path(path)
    size = _regular_file(path, max_bytes, what)
    header, header_len = _read_header(path, size, what, redo)
    data_len = size - 8 - header_len
    metadata = header.pop("__metadata__", {})
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise FileFormatError(f"{path}: corrupt safetensors file: __metadata__ must map strings to strings; {redo}")
    out = {name: _entry(path, name, entry, data_len, redo) for name, entry in header.items()}
    position = 0
    for begin, end in sorted(tuple(header[name]["data_offsets"]) for name in out):  # they must tile the data exactly
        if begin != position:
            raise FileFormatError(f"{path}: corrupt safetensors file: tensor data overlaps or leaves a gap at byte "
                                  f"{position}; {redo}")
        position = end
    if position != data_len:
        raise FileFormatError(f"{path}: corrupt safetensors file: {data_len - position} unexpected bytes after "
                              f"the last tensor; {redo}")
    return out, metadata


def _read_header(path: Path, size: int, what: str, redo: str) -> tuple[dict[str, Any], int]:
    """The JSON header of a safetensors file of ``size`` bytes, and its length in bytes."""
    with open(path, "rb") as handle:
        head = handle.read(8)
        pickled = _looks_pickled(head)
        if pickled:
            raise FileFormatError(f"{path}: looks like {pickled}, not safetensors; pickles can run code when "
                                  f"loaded, so this file is refused and was not opened as one. Convert it in a "
                                  f"trusted environment with safetensors.torch.save_file(state_dict, ...)")
        if size == 0:
            raise FileFormatError(f"{path}: {what} is empty (0 bytes); {redo}")
        if len(head) < 8:
            raise FileFormatError(f"{path}: truncated safetensors file: {size} bytes, shorter than the 8-byte "
                                  f"header length; {redo}")
        (header_len,) = struct.unpack("<Q", head)
        if header_len < 2 or header_len > MAX_HEADER_BYTES:
            raise FileFormatError(f"{path}: corrupt safetensors file: bad header length {header_len} (expected "
                                  f"2 to {MAX_HEADER_BYTES} bytes); is this a safetensors file? {redo}")
        if 8 + header_len > size:
            raise FileFormatError(f"{path}: truncated safetensors file: the header says it is {header_len} "
                                  f"bytes but the file has only {size - 8} after the length; {redo}")
        header_bytes = handle.read(header_len)
    try:
        header = json.loads(header_bytes.decode("utf-8"), object_pairs_hook=_unique_keys,
                            parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as error:
        problem = "not UTF-8" if isinstance(error, UnicodeDecodeError) else (
            "nested too deeply" if isinstance(error, RecursionError) else str(error))
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
    if not isinstance(shape, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                              for n in shape):
        raise FileFormatError(bad + f"has an invalid shape {shape!r}; {redo}")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in offsets)
            or not 0 <= offsets[0] <= offsets[1]):
        raise FileFormatError(bad + f"has invalid data_offsets {offsets!r}; {redo}")
    numel = math.prod(shape)
    if offsets[1] - offsets[0] != numel * itemsize:
        raise FileFormatError(bad + f"spans {offsets[1] - offsets[0]} bytes but shape {shape} of {dtype} "
                                    f"needs {numel * itemsize}; {redo}")
    if offsets[1] > data_len:
        raise FileFormatError(f"{path}: truncated safetensors file: data shorter than the offsets in its "
                              f"header (tensor {name!r} ends at byte {offsets[1]}, the data section has "
                              f"{data_len}); {redo}")
    return TensorInfo(dtype, tuple(shape))


__all__ = ["FileFormatError", "PathLike", "FLOAT_DTYPES", "TensorInfo", "atomic_write_bytes", "atomic_write_text",
           "dumps_json", "finite_or_none", "json_type", "read_json", "read_safetensors_layout",
           "remove_stale_temp_files", "check_output_path", "RUN_FILES"]
