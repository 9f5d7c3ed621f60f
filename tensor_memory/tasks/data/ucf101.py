"""UCF-101 at a user path: its lists and splits (the videos are read by :mod:`.video`).

Nothing downloads. The folder (``path``) holds the videos as ``<ClassName>/v_<Class>_gXX_cYY.avi``
(decoded with PyAV), or as pre-extracted frame folders ``<ClassName>/<stem>/`` or ``<stem>/`` of
jpg/jpeg/png images (read with Pillow, in name order with digit runs compared as numbers). The lists
(``classInd.txt``, ``trainlist0N.txt``, ``testlist0N.txt`` of the official ``ucfTrainTestlist``) are
looked for in ``path/ucfTrainTestlist``, then ``path/../ucfTrainTestlist``, then ``path`` itself,
unless a folder is named.

Splits of fold N: ``test`` is ``testlist0N`` exactly, in its order; ``valid`` is the ``trainlist0N``
clips of its :data:`VALID_GROUPS` lowest group numbers (a group's clips share actor and background, so
a group goes whole to one side); ``train`` is the rest of ``trainlist0N``. Labels are classInd's
(1-based in the file, 0-based here), found from the clip's class folder; a list's own label column,
when present, must agree.

A malformed list or a list line pointing outside ``path`` raises one
:class:`~tensor_memory.storage.files.FileFormatError` naming the file.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path, PurePosixPath

from ...storage.files import FileFormatError
from ...storage.user_files import read_user_text

LISTS_FOLDER = "ucfTrainTestlist"
CLASS_FILE = "classInd.txt"
FOLDS = (1, 2, 3)
VALID_GROUPS = 3  # the trainlist's lowest group numbers held out for validation
MAX_LIST_BYTES = 16 << 20  # the official lists are at most ~400 KB
GROUP_CLIP = re.compile(r"_g(\d+)_c(\d+)$")  # v_ApplyEyeMakeup_g08_c01 → group 8, clip 1

UCF_HELP = (
    "a UCF-101 folder holds <ClassName>/v_<Class>_gXX_cYY.avi (or frame folders) and the lists "
    "classInd.txt, trainlist0N.txt, testlist0N.txt of ucfTrainTestlist "
    "(pass --set task.params.path=FOLDER, and task.params.lists=FOLDER if the lists live elsewhere)"
)


@dataclasses.dataclass(frozen=True)
class Clip:
    """One list entry: ``entry`` as the list writes it, its 0-based ``label``, ``group`` (gXX) and the
    ``source`` it is read from (an .avi file or a frame folder)."""

    entry: str
    label: int
    group: int
    source: Path


@dataclasses.dataclass(frozen=True)
class UCFSplits:
    classes: tuple[str, ...]  # class names by 0-based label
    train: tuple[Clip, ...]
    valid: tuple[Clip, ...]
    test: tuple[Clip, ...]
    lists: Path  # the folder the lists were read from
    valid_groups: tuple[int, ...]

    def split(self, name: str) -> tuple[Clip, ...]:
        return {"train": self.train, "valid": self.valid, "test": self.test}[name]


# ---------------------------------------------------------------------------------------
# The lists
# ---------------------------------------------------------------------------------------


def list_names(fold: int) -> tuple[str, str, str]:
    return CLASS_FILE, f"trainlist0{fold}.txt", f"testlist0{fold}.txt"


def find_lists(path: Path, lists: str, fold: int) -> Path:
    """The folder holding the fold's three list files: ``lists`` if given, else the first of
    ``path/ucfTrainTestlist``, ``path/../ucfTrainTestlist`` and ``path`` that holds all three."""
    names = list_names(fold)
    if lists:
        folder = Path(lists).expanduser()
        for name in names:
            if not (folder / name).is_file():
                raise FileFormatError(f"{folder / name}: no such file; the lists folder must hold {', '.join(names)}")
        return folder
    candidates = [path / LISTS_FOLDER, path.parent / LISTS_FOLDER, path]
    for folder in candidates:
        if all((folder / name).is_file() for name in names):
            return folder
    looked = ", ".join(str(c) for c in candidates)
    raise FileFormatError(f"{path}: found no folder holding {', '.join(names)} (looked in {looked}); {UCF_HELP}")


def _read_lines(path: Path) -> list[tuple[int, list[str]]]:
    """(line number, whitespace-separated fields) of each non-blank line of a list file."""
    text = read_user_text(path, MAX_LIST_BYTES, "a UCF-101 list", UCF_HELP)  # official: ASCII, CRLF line ends
    return [(number, line.split()) for number, line in enumerate(text.splitlines(), 1) if line.strip()]


def read_classes(path: Path) -> tuple[str, ...]:
    """classInd.txt's class names by 0-based label; its ids must be 1..n, each once."""
    by_id: dict[int, str] = {}
    names: set[str] = set()
    for number, fields in _read_lines(path):
        if len(fields) != 2 or not fields[0].isdigit():
            raise FileFormatError(
                f"{path}, line {number}: expected '<class id> <ClassName>', got {' '.join(fields)[:80]!r}"
            )
        key, name = int(fields[0]), fields[1]
        if key in by_id or name in names:  # a set: linear in the list's length
            raise FileFormatError(f"{path}, line {number}: class id {key} or name {name!r} appears twice")
        by_id[key] = name
        names.add(name)
    if not by_id:
        raise FileFormatError(f"{path}: lists no classes; {UCF_HELP}")
    if sorted(by_id) != list(range(1, len(by_id) + 1)):
        raise FileFormatError(f"{path}: class ids must run 1..{len(by_id)} (each once), got {sorted(by_id)[:5]}…")
    return tuple(by_id[k] for k in range(1, len(by_id) + 1))


def checked_entry(entry: str, where: str) -> PurePosixPath:
    """A list entry as a relative ``<Class>/<file>`` path; one that leaves the folder (``../``, ``/``) is refused."""
    relative = PurePosixPath(entry.replace("\\", "/"))
    if relative.is_absolute() or ".." in relative.parts:
        raise FileFormatError(
            f"{where}: entry {entry!r} points outside the UCF-101 folder; entries are <ClassName>/<video>.avi inside it"
        )
    if len(relative.parts) != 2:
        raise FileFormatError(f"{where}: expected an entry <ClassName>/<video>.avi, got {entry!r}")
    return relative


def locate(root: Path, relative: PurePosixPath) -> Path:
    """The source of an entry: ``root/<entry>`` (.avi), else the frame folder ``root/<Class>/<stem>/`` or
    ``root/<stem>/``; a missing video names the entry and the layouts looked for."""
    video = root.joinpath(*relative.parts)
    if video.exists() and not video.is_dir():  # a file, or what is not one (a pipe): read_video says which
        return video
    stem = relative.stem
    folders = (root / relative.parts[0] / stem, root / stem)
    for folder in folders:
        if folder.is_dir():
            return folder
    raise FileFormatError(
        f"{video}: missing video for list entry {str(relative)!r}: looked for the file {video} "
        f"and the frame folders {folders[0]}/ and {folders[1]}/; {UCF_HELP}"
    )


def read_clip_list(path: Path, root: Path, classes: tuple[str, ...]) -> list[Clip]:
    """The clips of a train or test list (``<Class>/<video>.avi`` with an optional 1-based label)."""
    index = {name: i for i, name in enumerate(classes)}
    clips, seen = [], set()
    for number, fields in _read_lines(path):
        where = f"{path}, line {number}"
        if len(fields) not in (1, 2) or (len(fields) == 2 and not fields[1].isdigit()):
            raise FileFormatError(
                f"{where}: expected '<ClassName>/<video>.avi [class id]', got {' '.join(fields)[:80]!r}"
            )
        relative = checked_entry(fields[0], where)
        name = relative.parts[0]
        if name not in index:
            raise FileFormatError(f"{where}: class folder {name!r} is not in {CLASS_FILE}")
        label = index[name]
        if len(fields) == 2 and int(fields[1]) != label + 1:
            raise FileFormatError(
                f"{where}: label {fields[1]} disagrees with {CLASS_FILE}, where {name} is {label + 1}"
            )
        match = GROUP_CLIP.search(relative.stem)
        if match is None:
            raise FileFormatError(
                f"{where}: video name {relative.name!r} lacks the _gXX_cYY group and clip "
                f"numbers of UCF-101 (v_<Class>_g08_c01.avi)"
            )
        key = str(relative)
        if key in seen:
            raise FileFormatError(f"{where}: entry {key!r} is listed twice")
        seen.add(key)
        clips.append(Clip(key, label, int(match.group(1)), locate(root, relative)))
    if not clips:
        raise FileFormatError(f"{path}: lists no videos; {UCF_HELP}")
    return clips


def ucf_splits(path: str, lists: str = "", fold: int = 1) -> UCFSplits:
    """The train, valid and test clips of ``fold`` of the UCF-101 folder ``path`` (see the module docstring);
    read once, and again when a list file changes."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise FileFormatError(f"{root}: no such folder; {UCF_HELP}")
    folder = find_lists(root, lists, fold)
    stamps = []
    for name in list_names(fold):
        try:
            info = (folder / name).stat()
        except OSError as error:
            raise FileFormatError(f"{folder / name}: cannot read it ({error.strerror or error})") from None
        stamps.append((info.st_mtime_ns, info.st_size))
    return _read_splits(root, folder, fold, tuple(stamps))


@functools.lru_cache(maxsize=8)
def _read_splits(root: Path, folder: Path, fold: int, stamps: tuple) -> UCFSplits:
    class_file, train_file, test_file = (folder / name for name in list_names(fold))
    classes = read_classes(class_file)
    listed = read_clip_list(train_file, root, classes)
    test = read_clip_list(test_file, root, classes)
    both = sorted({c.entry for c in listed} & {c.entry for c in test})[:3]
    if both:
        raise FileFormatError(f"{test_file}: {both} also appear in {train_file}; a test clip is never trained on")
    groups = tuple(sorted({c.group for c in listed})[:VALID_GROUPS])
    valid = [c for c in listed if c.group in groups]
    train = [c for c in listed if c.group not in groups]
    if not train:
        raise FileFormatError(
            f"{train_file}: holds only the groups {list(groups)}, which validation takes; "
            f"the training split would be empty"
        )
    return UCFSplits(classes, tuple(train), tuple(valid), tuple(test), folder, groups)


__all__ = [
    "Clip",
    "UCFSplits",
    "ucf_splits",
    "find_lists",
    "read_classes",
    "FOLDS",
    "VALID_GROUPS",
    "CLASS_FILE",
    "UCF_HELP",
]
