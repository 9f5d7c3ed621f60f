"""The files that ship with the package, found wherever it runs: the run configs (``configs/``), the small data
(``assets/``), the trained checkpoints (``checkpoints/``) and the explorer's Streamlit settings
(``.streamlit/config.toml``).

Run from a clone (or an editable install) they are the repository's own folders. A wheel carries copies of them
under ``tensor_memory/_shipped/``, put there as it is built (``setup.py``, which asks :func:`package_files` what to
copy). This module imports nothing else of the package, so that ``setup.py`` can load it on its own.
"""

from __future__ import annotations

from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
COPY = "_shipped"  # the folder inside the installed package that holds the copies
INSTALLED = Path(__file__).resolve().parent / COPY
STREAMLIT_CONFIG = Path(".streamlit") / "config.toml"
CHECKPOINT_CONFIG = "config.json"  # a folder holding one is a checkpoint (storage/checkpoint.py CONFIG_FILE)
LONG_RANGE = "long_range"  # the folder of checkpoints/ holding the long-range diagnostics' checkpoints


def root() -> Path:
    """The folder holding ``configs/``, ``assets/``, ``checkpoints/`` and ``.streamlit/``: the installed copy when
    the package was installed from a wheel, else the clone it runs from."""
    return INSTALLED if INSTALLED.is_dir() else REPOSITORY


def checkpoints(base: Path | None = None) -> dict[str, Path]:
    """The shipped checkpoint folders by name (``occlusion-tensor``), then the long-range ones as
    ``long_range/NAME``; ``base`` is the folder holding ``checkpoints/`` (default :func:`root`)."""
    folder = (base or root()) / "checkpoints"
    if not folder.is_dir():
        return {}
    found = {}
    for prefix, within in (("", folder), (f"{LONG_RANGE}/", folder / LONG_RANGE)):
        if within.is_dir():
            found.update({prefix + p.name: p for p in sorted(within.iterdir()) if (p / CHECKPOINT_CONFIG).is_file()})
    return found


def checkpoint_folder(text: str) -> Path:
    """A ``--checkpoint`` value as a folder: the path as given when it exists, else the shipped checkpoint it names
    (``occlusion-tensor``, ``checkpoints/occlusion-tensor`` or ``long_range/occlusion-tensor``), else the path as
    given (loading it then says what is missing)."""
    path = Path(text).expanduser()
    if path.exists():
        return path
    name = path.as_posix().removeprefix("./").removeprefix("checkpoints/").rstrip("/")
    return checkpoints().get(name, path)


def shipped_names(shown: int = 8) -> str:
    """Up to ``shown`` shipped checkpoint names (the memory models' first) and how many more there are, for an
    error that asks for one."""
    names = sorted(checkpoints(), key=lambda name: not name.endswith("-tensor"))
    if not names:
        return "none ships with this installation"
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")


def run_config(task: str) -> Path | None:
    """The shipped run config of ``task`` (``configs/TASK.toml``), or None when it has none."""
    path = root() / "configs" / f"{task}.toml"
    return path if path.is_file() else None


def package_files(repository: Path) -> list[Path]:
    """What a wheel ships, relative to ``repository``: every run config, the data in ``assets/``, every file of each
    checkpoint folder that :func:`checkpoints` lists (weights, config, tokenizer, metrics, log; never a script) and
    the Streamlit settings."""
    folders = [repository / "configs", repository / "assets", *checkpoints(repository).values()]
    files = [path for folder in folders for path in sorted(folder.rglob("*")) if path.is_file()]
    files = [path for path in files if path.suffix != ".py" and "__pycache__" not in path.parts]
    return [path.relative_to(repository) for path in [*files, repository / STREAMLIT_CONFIG]]


__all__ = [
    "root",
    "checkpoints",
    "checkpoint_folder",
    "shipped_names",
    "run_config",
    "package_files",
    "STREAMLIT_CONFIG",
    "COPY",
]
