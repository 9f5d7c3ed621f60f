"""Follow the addressing of anyone's training loop: ``analysis.monitor`` writes a run folder while the loop runs.

    with analysis.monitor(model, "runs/mine", every=50) as mon:
        for step, batch in enumerate(loader):
            loss = ...; loss.backward(); opt.step()
            mon.step(step, loss=loss.item())

Every ``every`` steps each memory layer's addressing summary (``tensor_memory.training.run_log.layer_summary``) is
measured on a fixed probe and appended to the run folder (docs/formats.md); every ``snapshot_every`` steps a trace
of the probe's first sample goes to ``snapshots/``. The probe is the one given, or the first batch the model sees.
Looking changes nothing in the training (``probe.looking``): the same seed gives the same weights, monitored or not.
"""

from __future__ import annotations

import os
from typing import Any

from torch import nn

from analysis.monitoring.probe import FirstBatch, Probe, as_probe, first_sample, looking, run_probe
from analysis.traces.model import trace_model
from analysis.traces.trace import TraceError
from tensor_memory import memory_layers, record
from tensor_memory.accelerator import model_device
from tensor_memory.training.run_log import HEADER_FILE, RunLog, check_run_folder, summaries

SNAPSHOTS_PER_RECORD = 10  # snapshot_every="auto": one snapshot every ten records


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"monitor: {name} must be a whole number of steps ≥ 1, got {value!r}")
    return value


class Monitor:
    """Records a model's memory layers into a run folder from any training loop; see the module docstring."""

    def __init__(
        self,
        model: nn.Module,
        path: str | os.PathLike[str],
        every: int = 50,
        snapshot_every: int | str | None = "auto",
        probe: Any = None,
        overwrite: bool = False,
    ) -> None:
        if not memory_layers(model):
            raise ValueError(
                f"monitor: {type(model).__name__} has no TensorMemory layer to follow; attach one first "
                f"(tensor_memory.attach_memory(model, MemoryConfig(...))) or monitor a model that has one"
            )
        self.model, self.every = model, _positive("every", every)
        if snapshot_every == "auto":
            snapshot_every = SNAPSHOTS_PER_RECORD * self.every
        self.snapshot_every = None if snapshot_every is None else _positive("snapshot_every", snapshot_every)
        self.log = RunLog(path)
        check_run_folder(self.log.folder, "monitor: path")
        if (self.log.folder / HEADER_FILE).exists() and not overwrite:
            raise ValueError(
                f"monitor: {self.log.folder} already holds a run ({HEADER_FILE}); pass overwrite=True to replace "
                f"it, or choose another folder"
            )
        self._given: Probe | None = None if probe is None else as_probe(probe)
        self._first: FirstBatch | None = None
        self.last: dict[str, Any] | None = None  # the newest record written
        self.is_open = False

    def open(self) -> Monitor:
        """Write the run's header and, without a probe given, start watching for the first batch."""
        source = "given" if self._given is not None else "the first batch the model saw"
        self.log.start(self.model, self.every, self.snapshot_every, writer="analysis.monitor", probe=source)
        if self._given is None:
            self._first = FirstBatch(self.model)
        self.is_open = True
        return self

    def close(self) -> None:
        """Stop watching; the run folder stays as written."""
        if self._first is not None:
            self._first.remove()
        self.is_open = False

    def __enter__(self) -> Monitor:
        return self.open()

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @property
    def probe(self) -> Probe | None:
        """The input measured on: the one given, or the first batch seen (None before the model ran)."""
        return self._given if self._given is not None else self._first.probe if self._first else None

    def step(self, step: int, loss: Any = None) -> dict[str, Any] | None:
        """After training step ``step``: record when it is due (``step`` a multiple of ``every``, and of
        ``snapshot_every`` for a snapshot); returns the record written, or None. ``loss``: a number or a
        one-element tensor, read only on the steps recorded."""
        if not self.is_open:
            raise ValueError("monitor: step() called outside its `with monitor(...)` block (or before open())")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"monitor: step must be a whole number ≥ 0, got {step!r}")
        due = step % self.every == 0
        snapshot = self.snapshot_every is not None and step % self.snapshot_every == 0
        if not (due or snapshot):
            return None
        probe = self._probe_or_fail()
        device = model_device(self.model)
        with looking(self.model):
            if due:
                with record(self.model) as recording:
                    run_probe(self.model, probe, device)
            if snapshot:
                self._snapshot(step, probe)
        if due:
            self.last = self.log.append(step, summaries(recording, self.model), loss=loss)
            return self.last
        return None

    def _probe_or_fail(self) -> Probe:
        probe = self.probe
        if probe is None:
            why = self._first.error if self._first is not None and self._first.error else None
            raise ValueError(
                f"monitor: no probe to measure on ({why or 'the model has not run a forward yet'}); call step() "
                f"after the model's first forward, or pass probe= (a tensor or dict of tensors the forward takes)"
            )
        return probe

    def _snapshot(self, step: int, probe: Probe) -> None:
        """A trace of the probe's first sample, saved atomically into ``snapshots/``."""
        try:
            trace = trace_model(
                self.model, first_sample(probe), name=f"{type(self.model).__name__} step {step}", progress=False
            )
        except (TraceError, ValueError) as error:
            raise ValueError(
                f"monitor: cannot snapshot the probe at step {step}: {error}; pass a longer probe or "
                f"snapshot_every=None"
            ) from None
        trace.save(self.log.snapshot_path(step))


def monitor(
    model: nn.Module,
    path: str | os.PathLike[str],
    every: int = 50,
    snapshot_every: int | str | None = "auto",
    probe: Any = None,
    overwrite: bool = False,
) -> Monitor:
    """A :class:`Monitor` of ``model`` writing the run folder ``path``: use it as a context manager around the loop
    and call ``step(step, loss=…)`` after each step. ``snapshot_every``: "auto" (ten times ``every``), a number of
    steps, or None for no snapshots. ``probe``: the input measured on (default: the first batch the model sees).
    A folder already holding a run is refused unless ``overwrite``."""
    return Monitor(model, path, every, snapshot_every, probe, overwrite)


__all__ = ["Monitor", "monitor", "SNAPSHOTS_PER_RECORD"]
