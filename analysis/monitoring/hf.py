"""``TensorMemoryCallback``: the monitor inside a Hugging Face ``Trainer``.

    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[TensorMemoryCallback("runs/mine", every=50)])

The Trainer's training begins the monitor (its model, on the main process), each optimisation step calls
``step(state.global_step, loss=…)`` with the last loss the Trainer logged, and the end of training closes it.
``transformers`` is imported here only, so ``analysis`` imports without it.
"""

from __future__ import annotations

import os
from typing import Any

from analysis.monitoring.monitor import Monitor
from tensor_memory.optional import require

TrainerCallback = require("transformers", "hf", "TensorMemoryCallback (a Hugging Face Trainer's)").TrainerCallback


class TensorMemoryCallback(TrainerCallback):
    """A :class:`~analysis.monitoring.monitor.Monitor` of the Trainer's model; the arguments are the monitor's."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        every: int = 50,
        snapshot_every: int | str | None = "auto",
        probe: Any = None,
        overwrite: bool = False,
    ) -> None:
        self.options = {"path": path, "every": every, "snapshot_every": snapshot_every, "probe": probe}
        self.overwrite = overwrite
        self.monitor: Monitor | None = None
        self.loss: float | None = None  # the last loss the Trainer logged

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        if state.is_world_process_zero:  # one writer: the main process
            self.monitor = Monitor(model, overwrite=self.overwrite, **self.options).open()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and "loss" in logs:
            self.loss = logs["loss"]

    def on_step_end(self, args, state, control, **kwargs):
        if self.monitor is not None:
            self.monitor.step(state.global_step, loss=self.loss)

    def on_train_end(self, args, state, control, **kwargs):
        if self.monitor is not None:
            self.monitor.close()
            self.monitor = None


__all__ = ["TensorMemoryCallback"]
