"""The tasks, by name, and the model that runs one: its encoder, a backbone, its head (``model.py``).

Each task module generates or reads its samples and scores them; ``base.py`` holds what they share,
``patches.py`` how pictures become tokens, ``data/`` the real data sets they read."""

from __future__ import annotations

from typing import Any

from .action_recognition import ActionRecognition
from .base import Batch, Task, derive_seed
from .coordinate_binding import CoordinateBinding
from .language_modelling import LanguageModelling
from .map_building import MapBuilding
from .masked_patches import MaskedPatches
from .model import TaskModel
from .moving_digits import MovingDigits
from .no_harm import NoHarm
from .occlusion import Occlusion

TASKS: dict[str, type[Task]] = {
    task.name: task
    for task in (
        CoordinateBinding,
        Occlusion,
        MapBuilding,
        NoHarm,
        LanguageModelling,
        MaskedPatches,
        MovingDigits,
        ActionRecognition,
    )
}


def make_task(name: str, params: dict[str, Any] | None = None) -> Task:
    """The task called ``name`` with its config built from ``params`` (defaults for the rest)."""
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {', '.join(sorted(TASKS))}")
    cls = TASKS[name]
    return cls(cls.Config.from_dict(params or {}))


def data_paths(name: Any, params: Any) -> dict[str, str]:
    """The folders of the user's data that task ``name`` would read with ``params`` (a config's ``task.params`` as
    read, not yet validated): each of its config's ``DATA_PATHS`` fields that is set. Nothing is opened."""
    if name not in TASKS or not isinstance(params, dict):
        return {}
    return {field: str(params[field]) for field in TASKS[name].Config.DATA_PATHS if params.get(field)}


__all__ = ["Batch", "Task", "TASKS", "TaskModel", "make_task", "derive_seed", "data_paths"]
