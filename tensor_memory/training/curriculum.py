"""A curriculum over horizon: short samples first (off by default).

For the first ``training.horizon_steps`` steps a training batch is drawn from the task with its horizon
(``Task.horizon``: map building's observations, binding's writes, occlusion's and moving digits' frames) grown
linearly from ``training.horizon_from`` to the task's own value; from that step on, and in every validation and
evaluation, the task is its own. A short sample puts each query a few items after what answers it, so a read can
find its write before the memory has learned to keep one for long. The horizon never changes the model's shapes,
so one model trains on every length.
"""

from __future__ import annotations

from ..tasks import Task, make_task
from .config import TrainConfig


def horizon_at(step: int, steps: int, start: int, end: int) -> int:
    """The horizon at training step ``step``: ``start`` at step 0 rising linearly to ``end`` at ``steps``
    (rounded to the nearest integer); ``end`` from ``steps`` on, or when the curriculum is off (``steps`` 0)."""
    if steps <= 0 or step >= steps:
        return end
    return round(start + (end - start) * step / steps)


class HorizonCurriculum:
    """Which task a training step draws from: ``task`` with its horizon at :func:`horizon_at` (built once per
    value). Refuses a task without a horizon, streamed training, and a start outside [1, the task's own value]."""

    def __init__(self, task: Task, cfg: TrainConfig) -> None:
        self.task, self.steps, self.start = task, cfg.horizon_steps, cfg.horizon_from
        self.end = getattr(task.config, task.horizon) if task.horizon else 0
        self._tasks: dict[int, Task] = {self.end: task}
        if not self.steps:
            return
        if task.horizon is None:
            raise ValueError(
                f"training.horizon_steps={self.steps}: task {task.name} has no horizon to grow (map "
                f"building, coordinate binding, occlusion and moving digits have); set it to 0"
            )
        if cfg.stream_segments > 1:
            raise ValueError(
                "training.horizon_steps with training.stream_segments: a streamed sample's length is "
                "its segments'; use one or the other"
            )
        if not 1 <= self.start <= self.end:
            raise ValueError(
                f"training.horizon_from={self.start}: the curriculum starts {task.name}'s "
                f"{task.horizon} between 1 and its own value, {self.end}"
            )
        self.task_at(0)  # the shortest task built now: a start the task refuses is said before training

    def task_at(self, step: int) -> Task:
        """The task training step ``step`` draws its batch from."""
        value = horizon_at(step, self.steps, self.start, self.end)
        if value not in self._tasks:
            params = {**self.task.config.to_dict(), self.task.horizon: value}
            try:
                self._tasks[value] = make_task(self.task.name, params)
            except ValueError as error:
                raise ValueError(
                    f"training.horizon_from={self.start}: {self.task.name} with {self.task.horizon}="
                    f"{value} is refused: {error}"
                ) from None
        return self._tasks[value]


__all__ = ["horizon_at", "HorizonCurriculum"]
