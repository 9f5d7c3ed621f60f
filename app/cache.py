"""Every call into ``analysis/`` the app makes more than once, cached and keyed by what determines it.

A checkpoint is loaded once per :class:`CheckpointRef` (``st.cache_resource``: the model is shared
and read-only; interventions are hooks held per thread, so sessions need no lock). Everything else
is ``st.cache_data`` keyed by the checkpoint, the sample (seed and task parameters) and the view's
settings, so a session stepping through chunks only indexes into what is cached, and sessions
with the same settings share the work but never each other's state. A sample's PyVista renderings
are made all at once, in one render window (:func:`volume_renderings`). Every cache is bounded.
Nothing here lays out a page: pages hand their payload builders to :func:`stepper_payload`.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Callable, Hashable, Mapping
from pathlib import Path
from typing import Any

import streamlit as st

from analysis.figures.frames import png_bytes, volume_frames
from analysis.figures.views import explore_figures
from analysis.measures.addressing import addressing_report
from analysis.measures.causality import audit_checkpoint
from analysis.measures.compare import checkpoint_summary
from analysis.measures.images import Reconstruction, reconstruct
from analysis.measures.interventions import InterventionResult, intervene
from analysis.measures.language import TokenLosses, token_losses
from analysis.measures.occlusion import belief_survival
from analysis.measures.overview import chunk_overview
from analysis.measures.volumes import VolumeSeries, state_series
from analysis.measures.world import READOUT_SAMPLES, decoded_map
from analysis.measures.world import world_readout as fitted_readout
from analysis.traces.capture import capture
from analysis.traces.export import trace_bytes
from analysis.traces.predictions import prediction_trace
from analysis.traces.store_format import PROGRESS_FILE
from analysis.traces.trace import Trace, TraceError, load_trace
from analysis.traces.training_log import addressing_history
from tensor_memory import memory_layers
from tensor_memory.storage.checkpoint import CONFIG_FILE, MODEL_FILE, Checkpoint, CheckpointError, load_checkpoint
from tensor_memory.training.log import read_training_log

from .cli import DEVICE_ENV

RENDER_LOCK = threading.Lock()  # one off-screen render at a time: VTK windows are not shared between threads safely


@dataclasses.dataclass(frozen=True)
class CheckpointRef:
    """A checkpoint folder as the caches know it; ``stamp`` changes when its files are replaced."""

    label: str
    path: str
    stamp: tuple[int, int]  # (mtime_ns of model.safetensors, of config.json)

    @classmethod
    def of(cls, path: Path, label: str) -> CheckpointRef:
        """The reference to the checkpoint in ``path``; CheckpointError when its files are missing."""
        try:
            stamp = tuple((path / name).stat().st_mtime_ns for name in (MODEL_FILE, CONFIG_FILE))
        except OSError as error:
            raise CheckpointError(
                f"{path}: cannot read the checkpoint ({error.strerror or error}); expected a "
                f"folder holding {MODEL_FILE} and {CONFIG_FILE}"
            ) from None
        return cls(label=label, path=str(path.resolve()), stamp=stamp)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class TraceRef:
    """A trace opened in the app (``tensor-memory app --trace``, an upload, or one under the data root): a recorded
    sample with no weights to run again, one safetensors file or a trace store (a folder, read a page at a time).
    ``stamp`` changes when the file is replaced, or the store records another segment."""

    label: str
    path: str
    stamp: int  # mtime_ns of the file, or of the store's progress record

    @classmethod
    def of(cls, path: Path, label: str) -> TraceRef:
        """The reference to the trace file or store ``path``; TraceError when it cannot be read."""
        try:
            stamp = (path / PROGRESS_FILE if path.is_dir() else path).stat().st_mtime_ns
        except OSError as error:
            raise TraceError(f"{path}: cannot read the trace ({error.strerror or error})") from None
        return cls(label=label, path=str(path.resolve()), stamp=stamp)

    @property
    def is_store(self) -> bool:
        """A trace store: its volumes stay on disk, read a page at a time."""
        return Path(self.path).is_dir()


@dataclasses.dataclass(frozen=True)
class Sample:
    """The sample a session shows: stream ``seed`` of the checkpoint's task, with task parameter overrides.

    Hashable and order-free (the overrides are kept sorted by name), so it keys the caches as it is.
    """

    seed: int = 0
    overrides: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, seed: int, params: Mapping[str, Any], task_config: Any = None) -> Sample:
        """Stream ``seed`` with the task parameters ``params`` (numbers and flags, as the sidebar sets them); those
        equal to ``task_config``'s own (the task's dataclass config) are left out, so the sample a page opens on is
        ``Sample(seed)`` and shares its cache entries with anyone who asks for it so (``python -m app`` does)."""
        changed = {
            name: value
            for name, value in params.items()
            if task_config is None or getattr(task_config, name, object()) != value
        }
        return cls(int(seed), tuple(sorted(changed.items())))

    @property
    def params(self) -> dict[str, Any]:
        """The overrides as the keyword arguments the analysis functions take."""
        return dict(self.overrides)

    def carried_to(self, own: Any, other: Any) -> Sample:
        """This sample for a checkpoint whose task config is ``other`` (``own``: the config it was made for): the
        same task settings, so both run one sample even where their configs' defaults differ."""
        settings = {field.name: getattr(own, field.name) for field in dataclasses.fields(own)}
        return Sample.of(self.seed, {**settings, **self.params}, other)

    def with_task_defaults(self) -> Sample:
        """The same stream with the checkpoint's own task settings."""
        return Sample(self.seed)


@dataclasses.dataclass
class Loaded:
    """A loaded checkpoint, shared read-only by every session."""

    checkpoint: Checkpoint

    @property
    def has_memory(self) -> bool:
        return bool(memory_layers(self.checkpoint.model))


@st.cache_resource(max_entries=8, show_spinner="Loading the checkpoint…")
def load(ref: CheckpointRef) -> Loaded:
    """The checkpoint, validated by ``load_checkpoint`` (never unpickled), on the app's device (``--device``: cpu
    unless the app was started on another); CheckpointError otherwise."""
    return Loaded(load_checkpoint(ref.path, device=os.environ.get(DEVICE_ENV, "cpu")))


@st.cache_resource(max_entries=8, show_spinner="Opening the trace…")
def opened_trace(ref: TraceRef) -> Trace:
    """The trace file, validated by ``load_trace`` (never unpickled); TraceError otherwise. Shared read-only by
    every session, as a loaded checkpoint is: a trace file may be large, and a rerun must not copy it."""
    return load_trace(ref.path)


def trace_of(ref: CheckpointRef | TraceRef, sample: Sample) -> Trace:
    """The trace shown: an opened trace file as it is, or the sample captured from the checkpoint."""
    return opened_trace(ref) if isinstance(ref, TraceRef) else sample_trace(ref, sample)


@st.cache_data(max_entries=24, show_spinner="Running the sample through the model…")
def sample_trace(ref: CheckpointRef, sample: Sample) -> Trace:
    """The sample's trace: a full capture for Tensor Memory checkpoints, predictions only for the others."""
    loaded = load(ref)
    if loaded.has_memory:
        return capture(loaded.checkpoint, seed=sample.seed, index=0, progress=False, **sample.params)
    return prediction_trace(loaded.checkpoint, seed=sample.seed, index=0, **sample.params)


@st.cache_data(max_entries=32, show_spinner=False)
def volume_series(
    ref: CheckpointRef | TraceRef,
    sample: Sample,
    layer: str,
    field: str,
    mode: str,
    index: int,
    span: tuple[int, int] | None = None,
) -> VolumeSeries:
    """A layer's ``h`` or ``c`` over every chunk (of ``span``, a page of a long trace: no volume outside it is
    read), reduced one way with one colour range."""
    return state_series(trace_of(ref, sample).layer(layer), field, mode, index, span)


@st.cache_data(max_entries=12, show_spinner="Drawing every chunk's views…")
def stepper_payload(page: str, _build: Callable[..., Any], *args: Hashable) -> Any:
    """``_build(*args)``, a page's :class:`app.browser_stepper.StepperPayload`, cached by the page's name and
    ``args``, which name everything it depends on (``_build`` itself is not hashed: a page defines it anew on every
    run). A page of a long trace's payload is several megabytes (7 MB pickled at 16³ × 32): the pages turned to
    most recently are kept, a dozen at most, so the server's memory stays bounded however many pages are turned."""
    return _build(*args)


@st.cache_data(max_entries=16, show_spinner="Measuring every chunk for the overview…")
def overview(ref: CheckpointRef | TraceRef, sample: Sample, layer: str | None) -> dict[str, Any]:
    """Per chunk of the whole trace, what the overview of a long trace plots (analysis.measures.overview)."""
    return chunk_overview(trace_of(ref, sample), layer)


@st.cache_data(max_entries=16, show_spinner="Rendering the volumes…")
def volume_renderings(
    ref: CheckpointRef | TraceRef,
    sample: Sample,
    layer: str | None,
    field: str,
    mode: str,
    index: int,
    span: tuple[int, int] | None = None,
) -> list[bytes]:
    """The PyVista volume rendering (PNG) of every chunk (of ``span``) of a layer's volume series, in one render
    window."""
    series = volume_series(ref, sample, layer, field, mode, index, span)
    with RENDER_LOCK:
        return [png_bytes(image) for image in volume_frames(series.values, series.value_range)]


@st.cache_resource(max_entries=8, show_spinner=False)
def chunk_figures(
    ref: CheckpointRef | TraceRef,
    sample: Sample,
    layer: str | None,
    series: tuple[str, str, int] | None,
    kind: str,
    anchor: str,
    chunk: int,
    span: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """Every Explore figure of one chunk (:func:`analysis.figures.views.explore_figures`), its volumes drawn from
    ``series`` (field, mode, index; None: no memory views) over ``span``, the chunk's page of a long trace (no volume
    outside it is read). Built once and shared read-only, never copied; a few kept (a chunk's are megabytes)."""
    drawn = None if series is None else volume_series(ref, sample, layer, *series, span)
    return explore_figures(trace_of(ref, sample), chunk, layer, drawn, kind, anchor, span)


@st.cache_data(max_entries=8, show_spinner="Measuring the addressing of this trace…")
def trace_addressing(ref: TraceRef, layer: str | None) -> dict[str, Any]:
    """The addressing report of an opened trace (its one sample)."""
    return addressing_report(opened_trace(ref), layer)


@st.cache_data(max_entries=16, show_spinner="Measuring the checkpoint over many samples…")
def summary(ref: CheckpointRef, sample: Sample, samples: int, layer: str | None) -> dict[str, Any]:
    """Metrics and (for Tensor Memory) the addressing report over ``samples`` samples of the sample's stream."""
    return checkpoint_summary(load(ref).checkpoint, sample.seed, samples, layer, **sample.params)


@st.cache_data(max_entries=32, show_spinner="Running the sample with and without the intervention…")
def intervention(
    ref: CheckpointRef,
    sample: Sample,
    kind: str,
    chunk: int,
    region: tuple[tuple[int, int], ...] | None,
    layer: str | None,
    to: tuple[float, float, float] | None = None,
    sigma: float | None = None,
) -> InterventionResult:
    """The sample run untouched and with the intervention, per chunk side by side."""
    return intervene(load(ref).checkpoint, kind, chunk, sample.seed, 0, region, layer, to, sigma, **sample.params)


@st.cache_data(max_entries=8, show_spinner="Measuring the belief through occlusions of every length…")
def survival(ref: CheckpointRef, samples: int, seed: int) -> dict[str, Any]:
    """Accuracy at each hidden frame for occlusion lengths 0, 2, 4 and 6."""
    loaded = load(ref)
    return belief_survival(loaded.checkpoint, samples=samples, seed=seed)


@st.cache_data(max_entries=8, show_spinner=f"Fitting a read-out of the world over {READOUT_SAMPLES} samples…")
def world_readout(ref: CheckpointRef, layer: str | None) -> dict[str, Any] | None:
    """The task's linear read-out (analysis.measures.world), fitted on seed 0 and scored on seeds 1–3; None for
    other tasks."""
    return fitted_readout(load(ref).checkpoint, layer)


@st.cache_data(max_entries=16, show_spinner=False)
def decoded_sample_map(ref: CheckpointRef, sample: Sample, layer: str | None) -> dict[str, Any]:
    """The session's map-building sample decoded from the memory by the fitted probe."""
    return decoded_map(load(ref).checkpoint, world_readout(ref, layer), sample.seed, 0, **sample.params)


@st.cache_data(max_entries=8, show_spinner=False)
def training_history(ref: CheckpointRef) -> dict[str, Any]:
    """The addressing measures and validation headline (accuracy; PSNR for masked patches) its training logged, by
    step (analysis.traces.training_log)."""
    return addressing_history(read_training_log(Path(ref.path)), load(ref).checkpoint.task.headline)


@st.cache_data(max_entries=8, show_spinner="Auditing causality: perturbing the inputs after each position…")
def causality(ref: CheckpointRef, seed: int) -> dict[str, Any]:
    """The checkpoint's causality audit on its evaluation samples (analysis.measures.causality)."""
    return audit_checkpoint(load(ref).checkpoint, seed=seed)


@st.cache_data(max_entries=16, show_spinner="Running the text with and without the memory…")
def text_losses(ref: CheckpointRef, seed: int) -> TokenLosses:
    """Per-token losses of the session's text sample, with and without the memory's read."""
    return token_losses(load(ref).checkpoint, seed=seed)


@st.cache_data(max_entries=16, show_spinner="Reconstructing the image…")
def reconstruction(ref: CheckpointRef, sample: Sample) -> Reconstruction:
    """The session's image sample through a masked_patches checkpoint: mask, reconstruction, error, PSNR, SSIM."""
    return reconstruct(load(ref).checkpoint, seed=sample.seed, index=0, **sample.params)


@st.cache_data(max_entries=8, show_spinner=False)
def trace_file(ref: CheckpointRef | TraceRef, sample: Sample) -> bytes:
    """The sample's trace as a safetensors file (an opened trace file: its own bytes; a trace store, a folder of
    any size, is not made one: ValueError)."""
    if isinstance(ref, TraceRef) and ref.is_store:
        raise ValueError(f"{ref.label} is a trace store, the folder {ref.path}: copy the folder to take it away")
    if isinstance(ref, TraceRef):
        return Path(ref.path).read_bytes()
    return trace_bytes(sample_trace(ref, sample))


__all__ = [
    "CheckpointRef",
    "TraceRef",
    "Loaded",
    "Sample",
    "load",
    "opened_trace",
    "trace_addressing",
    "trace_of",
    "sample_trace",
    "stepper_payload",
    "overview",
    "volume_series",
    "volume_renderings",
    "chunk_figures",
    "summary",
    "intervention",
    "survival",
    "training_history",
    "world_readout",
    "decoded_sample_map",
    "trace_file",
    "causality",
    "text_losses",
    "reconstruction",
]
