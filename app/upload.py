"""Uploaded checkpoints: a checkpoint folder as a .zip, unpacked safely and validated by ``load_checkpoint``.

Nothing in an upload is ever unpickled: the archive is read with :mod:`zipfile`, only regular
files with plain relative names are written, sizes are capped before and while unpacking (a zip
bomb stops at the cap), and the folder is then checked by
:func:`tensor_memory.storage.checkpoint.load_checkpoint`, which reads only safetensors and JSON. Each
upload is unpacked into its own folder named by the archive's SHA-256, so the same file uploaded
twice (or by two sessions) shares one folder, and a folder is complete before it becomes visible.
An uploaded trace file is kept whole under traces/, named by its digest, and checked by
``analysis.load_trace`` (safetensors and JSON only) before it is shown.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import stat
import tempfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath

from tensor_memory.pretrained.checkpoint import KIND as PRETRAINED_KIND
from tensor_memory.storage.checkpoint import CONFIG_FILE, MAX_CONFIG_BYTES, MODEL_FILE
from tensor_memory.storage.files import atomic_write_bytes, read_json
from tensor_memory.tasks import data_paths

MAX_UPLOAD_BYTES = 64 << 20  # the archive; keep in step with server.maxUploadSize in .streamlit/config.toml
MAX_UNPACKED_BYTES = 600 << 20  # everything unpacked: the weights file alone may be 512 MiB
MAX_MEMBERS = 64  # a checkpoint folder holds a handful of files
KEEP_UPLOADS = 16  # unpacked uploads kept on disk; older ones are removed
MAX_ROOT_BYTES = 2 << 30  # all unpacked uploads together; the oldest go first beyond it
MAX_DEPTH = 1  # config.json at the archive's root or inside one folder, no deeper
COMPRESSIONS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate"}  # what any zip tool writes
UPLOAD_ROOT = Path(tempfile.gettempdir()) / "tensor-memory-uploads"


class UploadError(ValueError):
    """An upload that cannot be a checkpoint; the message says what is wrong and what to upload instead."""


def _member_path(info: zipfile.ZipInfo) -> PurePosixPath:
    """The member's relative path, refusing absolute paths, '..', links and anything but files and folders."""
    name = info.filename.replace("\\", "/")
    path = PurePosixPath(name)
    if path.is_absolute() or ".." in path.parts or (path.parts and path.parts[0].endswith(":")):
        raise UploadError(f"the zip holds an unsafe path {info.filename!r}; zip the checkpoint folder itself")
    if info.flag_bits & 0x1:  # bit 0: the entry is encrypted
        raise UploadError(f"the zip entry {info.filename!r} is encrypted; zip the checkpoint folder without a password")
    if info.compress_type not in COMPRESSIONS:
        raise UploadError(
            f"the zip entry {info.filename!r} uses compression method {info.compress_type}; "
            f"zip it again with the usual deflate (or none)"
        )
    kind = stat.S_IFMT(info.external_attr >> 16)  # 0 when the zip tool recorded no Unix file type
    if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
        raise UploadError(f"the zip holds {info.filename!r}, which is a link or special file; zip plain files only")
    return path


def _checkpoint_folder(names: list[PurePosixPath]) -> PurePosixPath:
    """The folder inside the archive that holds config.json: the root or one folder down."""
    configs = [n.parent for n in names if n.name == CONFIG_FILE]
    if not configs:
        raise UploadError(
            f"the zip holds no {CONFIG_FILE}; zip a checkpoint folder (it holds {MODEL_FILE} and {CONFIG_FILE})"
        )
    if len(configs) > 1:
        listed = ", ".join(str(c) or "." for c in configs)
        raise UploadError(f"the zip holds {len(configs)} checkpoints ({listed}); upload one checkpoint folder per zip")
    if len(configs[0].parts) > MAX_DEPTH:
        raise UploadError(
            f"the zip's {CONFIG_FILE} is {len(configs[0].parts)} folders down ({configs[0]}); zip the "
            f"checkpoint folder itself, so that its files are at the top or one folder down"
        )
    return configs[0]


def _unpack(archive: zipfile.ZipFile, folder: PurePosixPath, target: Path) -> None:
    """Write the files under ``folder`` into ``target``, counting real bytes against the cap."""
    written = 0
    for info in archive.infolist():
        path = _member_path(info)
        if info.is_dir() or path.parent != folder:
            continue  # only the checkpoint's own files; sub-folders are not part of a checkpoint
        with archive.open(info) as source, open(target / path.name, "wb") as sink:
            while chunk := source.read(1 << 20):
                written += len(chunk)
                if written > MAX_UNPACKED_BYTES:
                    raise UploadError(
                        f"the zip unpacks to over {MAX_UNPACKED_BYTES >> 20} MB; a checkpoint is far "
                        "smaller (is this the right file?)"
                    )
                sink.write(chunk)


def _size(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())


def _prune(root: Path, keep: Path) -> None:
    """Remove the oldest unpacked uploads beyond :data:`KEEP_UPLOADS` or :data:`MAX_ROOT_BYTES` (never ``keep``)."""
    folders = sorted(
        (p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")), key=lambda p: p.stat().st_mtime
    )
    total = sum(_size(p) for p in folders)
    for index, old in enumerate(folders):
        if old == keep or (len(folders) - index <= KEEP_UPLOADS and total <= MAX_ROOT_BYTES):
            continue
        total -= _size(old)
        shutil.rmtree(old, ignore_errors=True)


def discard_upload(folder: Path, root: Path = UPLOAD_ROOT) -> None:
    """Delete an unpacked upload that was refused, at once (only a folder directly under ``root``)."""
    if folder.parent.resolve() == root.resolve() and folder.is_dir():
        shutil.rmtree(folder, ignore_errors=True)


def unpack_checkpoint(data: bytes, root: Path = UPLOAD_ROOT) -> Path:
    """Unpack a zipped checkpoint folder under ``root`` and return the folder (not yet loaded).

    Raises :class:`UploadError` for anything that is not a safe zip of one checkpoint folder.
    """
    if len(data) > MAX_UPLOAD_BYTES:
        raise UploadError(f"the file is {len(data) / 2**20:.1f} MB, over the {MAX_UPLOAD_BYTES >> 20} MB upload limit")
    if not data:
        raise UploadError("the file is empty; upload a .zip of a checkpoint folder")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:
        raise UploadError(
            "the file is not a zip archive (or it is damaged); zip the checkpoint folder and upload the .zip"
        ) from None
    with archive:
        members = archive.infolist()
        if len(members) > MAX_MEMBERS:
            raise UploadError(f"the zip holds {len(members)} entries; a checkpoint folder holds a few files")
        names = [_member_path(info) for info in members if not info.is_dir()]
        folder = _checkpoint_folder(names)
        declared = sum(info.file_size for info in members)
        if declared > MAX_UNPACKED_BYTES:
            raise UploadError(
                f"the zip unpacks to {declared / 2**20:.0f} MB, over the {MAX_UNPACKED_BYTES >> 20} MB "
                "limit for a checkpoint"
            )
        root.mkdir(parents=True, exist_ok=True)
        target = root / hashlib.sha256(data).hexdigest()[:24]
        if not target.is_dir():
            staging = Path(tempfile.mkdtemp(prefix=".unpacking-", dir=root))
            try:
                _unpack(archive, folder, staging)
                os.replace(staging, target)  # complete before it is visible
            except (zipfile.BadZipFile, EOFError, zlib.error) as error:
                raise UploadError(f"the zip is damaged ({error}); zip the checkpoint folder again") from None
            except OSError as error:
                if not target.is_dir():  # else a concurrent upload of the same file got there first: use it
                    raise UploadError(f"could not unpack the upload: {error.strerror or error}") from None
            finally:
                shutil.rmtree(staging, ignore_errors=True)
    os.utime(target, follow_symlinks=False)  # its own time, never that of what a link there names
    _prune(root, keep=target)
    return target


def check_data_paths(folder: Path, data_root: Path | None) -> None:
    """An UploadError unless every folder of user data the unpacked checkpoint's task would read (a corpus, pictures,
    videos: :func:`tensor_memory.tasks.data_paths`) lies under ``data_root``, the one folder the person serving the
    app lets uploads read; with no data root, none may. An upload must not make the server read a path it names,
    so the answer never says whether a path exists. A config.json that cannot be read passes: loading refuses it."""
    try:
        config = read_json(folder / CONFIG_FILE, MAX_CONFIG_BYTES, CONFIG_FILE)
    except (ValueError, OSError):
        return
    if isinstance(config, dict) and config.get("kind") == PRETRAINED_KIND:  # it would run MiniLM, installed here
        raise UploadError(
            "it is a memory on a pretrained MiniLM; uploads take task checkpoints. Whoever serves the "
            "app can open it with tensor-memory app --checkpoint FOLDER"
        )
    task = config.get("task") if isinstance(config, dict) else None
    paths = data_paths(task.get("name"), task.get("params")) if isinstance(task, dict) else {}
    if not paths:
        return
    named = ", ".join(f"task.params.{field}" for field in paths)
    if data_root is None:
        raise UploadError(
            f"its task reads data from a folder on this server ({named}), and uploads may not name "
            f"server paths; whoever serves the app can allow folders under one data root "
            f"(tensor-memory app --data-root DIR)"
        )
    root = Path(os.path.realpath(data_root))
    for field, value in paths.items():
        if not Path(os.path.realpath(value)).is_relative_to(root):  # what the task would open, links followed
            raise UploadError(
                f"task.params.{field} names a folder outside the data root this app reads uploads' "
                f"data from; give a path under {root}"
            )


def save_trace_upload(data: bytes, root: Path = UPLOAD_ROOT) -> Path:
    """Keep an uploaded trace file under ``root``/traces (named by its digest) and return its path, not yet
    validated: ``load_trace`` checks it as it checks any trace file. The same size limit as checkpoints."""
    if len(data) > MAX_UPLOAD_BYTES:
        raise UploadError(
            f"the file is {len(data) / 2**20:.1f} MB, over the {MAX_UPLOAD_BYTES >> 20} MB upload limit; "
            f"open a larger trace with `tensor-memory app --trace FILE`"
        )
    if not data:
        raise UploadError("the file is empty; upload a trace (.safetensors) written by trace.save()")
    folder = root / "traces"
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{hashlib.sha256(data).hexdigest()[:24]}.safetensors"
    if not target.is_file():
        atomic_write_bytes(target, data)
    os.utime(target, follow_symlinks=False)  # its own time, never that of what a link there names
    kept = sorted(folder.glob("*.safetensors"), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in kept[KEEP_UPLOADS:]:
        old.unlink(missing_ok=True)
    return target


def discard_trace_upload(path: Path, root: Path = UPLOAD_ROOT) -> None:
    """Delete an uploaded trace that was refused (only a file in ``root``/traces)."""
    if path.parent.resolve() == (root / "traces").resolve():
        path.unlink(missing_ok=True)


def checkpoint_label(folder: Path, upload_name: str) -> str:
    """The picker's name for an uploaded checkpoint: the zip's name and a short digest."""
    return f"{Path(upload_name).stem} (upload {folder.name[:8]})"


__all__ = [
    "check_data_paths",
    "unpack_checkpoint",
    "discard_upload",
    "checkpoint_label",
    "save_trace_upload",
    "discard_trace_upload",
    "UploadError",
    "MAX_UPLOAD_BYTES",
]
