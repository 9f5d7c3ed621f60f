"""The session's context: which checkpoint and sample it shows, the trace, the memory layer, the chunk.

``main.py`` builds a :class:`Context` once per run from the sidebar's choices and publishes it in
the session; pages read it with :func:`current`. The chunk is the session's, shared by every page: a
new sample opens at its key chunk (a long trace at its first), the server moves it (:func:`go_to`) or
follows the browser's stepper to it (:func:`follow`). Everything a session chooses lives in its own
``st.session_state``, so sessions never see each other's choices; what they compute is shared
only through the caches in :mod:`app.cache`. Failures never leave a session without a view:
a checkpoint that does not load falls back to the last one that did, a sample that cannot run
falls back to the checkpoint's own task settings, and each says why with ``st.error``.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from pathlib import Path
from typing import Any

import streamlit as st

from analysis.figures.escape import markdown_code, markdown_text
from analysis.traces.finite import nonfinite_fields
from analysis.traces.store_format import PROGRESS_FILE
from analysis.traces.trace import Trace
from tensor_memory import shipped
from tensor_memory.errors import EXPECTED_ERRORS, describe
from tensor_memory.shipped import checkpoints as shipped_checkpoints  # the picker's list: by name, long_range/NAME
from tensor_memory.storage.checkpoint import Checkpoint, CheckpointError

from . import cache, spans
from .cache import CheckpointRef, Loaded, Sample, TraceRef
from .cli import CHECKPOINT_ENV, DATA_ROOT_ENV, TRACE_ENV

DEFAULT_CHECKPOINT = "occlusion-tensor"
CONTEXT_KEY = "context"
GOOD_CHECKPOINT_KEY = "last_good_checkpoint"
CHUNK_KEY = "chunk"
MOVES_KEY = "chunk_moves"  # how many times the server moved the chunk itself (the browser's stepper follows)
SAMPLE_KEY = "chunk_sample"  # the sample the chunk belongs to: a new sample opens at its key chunk


def startup_checkpoint() -> tuple[str, Path]:
    """(label, folder) to open on: ``$TENSOR_MEMORY_CHECKPOINT`` (set by ``tensor-memory app --checkpoint``),
    else occlusion-tensor."""
    chosen = os.environ.get(CHECKPOINT_ENV)
    if chosen:
        path = Path(chosen).expanduser().resolve()
        names = {folder.resolve(): name for name, folder in shipped_checkpoints().items()}
        return names.get(path, path.name), path  # a shipped one by its name in the list (long_range/…)
    return DEFAULT_CHECKPOINT, shipped.root() / "checkpoints" / DEFAULT_CHECKPOINT


def startup_trace() -> tuple[str, Path] | None:
    """(label, file or store folder) of the trace to open on (``$TENSOR_MEMORY_TRACE``, set by ``tensor-memory app
    --trace``)."""
    chosen = os.environ.get(TRACE_ENV)
    if not chosen:
        return None
    path = Path(chosen).expanduser().resolve()
    return trace_label(path.name), path


def data_root() -> Path | None:
    """The folder whose data uploaded checkpoints may read (``$TENSOR_MEMORY_DATA_ROOT``, set by ``tensor-memory app
    --data-root``); None: uploads may read no data of this server."""
    chosen = os.environ.get(DATA_ROOT_ENV)
    return Path(chosen).expanduser().resolve() if chosen else None


def trace_label(name: str) -> str:
    """The picker's name for a trace file or store (traces and checkpoints share one picker)."""
    return f"trace: {name}"


def is_trace_name(entry: os.DirEntry) -> bool:
    """Whether a folder entry is a trace the data root offers: a ``*.trace.safetensors`` file, or a folder holding a
    store's progress record (``trace.json``). Symbolic links are never offered."""
    if entry.is_symlink():
        return False
    if entry.is_file():
        return entry.name.endswith(".trace.safetensors")
    return entry.is_dir() and os.path.isfile(os.path.join(entry.path, PROGRESS_FILE))


def data_root_traces(root: Path | None = None, depth: int = 2, limit: int = 2000) -> dict[str, Path]:
    """The traces under the data root (``--data-root``), by picker label (their path under it): files and stores
    (:func:`is_trace_name`) in it and in its folders down to ``depth`` levels (2: its own folders' entries), never
    through a symbolic link nor into a store, looking at ``limit`` entries at most (a data root may hold a corpus).
    Opening one checks it as any trace."""
    root = data_root() if root is None else root
    found: dict[str, Path] = {}
    folders, seen = [(root, 0)] if root is not None and root.is_dir() else [], 0
    while folders and seen < limit:
        folder, level = folders.pop(0)
        try:
            with os.scandir(folder) as listing:
                entries = sorted(itertools.islice(listing, limit - seen), key=lambda e: e.name)
        except OSError:  # unreadable: offers nothing
            continue
        for entry in entries:
            seen += 1
            if is_trace_name(entry):
                found[trace_label(os.path.relpath(entry.path, root))] = Path(entry.path)
            elif level + 1 < depth and entry.is_dir(follow_symlinks=False) and not entry.name.startswith("."):
                folders.append((Path(entry.path), level + 1))
    return found


@dataclasses.dataclass
class Context:
    """What every page of this session shows: a checkpoint and a sample run through it, or an opened trace
    file (``loaded`` None: no weights, so only the pages that read a trace apply)."""

    ref: CheckpointRef | TraceRef
    loaded: Loaded | None
    sample: Sample  # the sample the trace was captured from
    trace: Trace | None  # None when no sample could be run (``problem`` says why)
    problem: str | None
    layer: str | None  # the memory layer shown; None without memory layers
    memory_note: str | None  # why the memory views are off, or None

    @property
    def is_trace_file(self) -> bool:
        """An opened trace file: no weights to run, no task to draw new samples from."""
        return self.loaded is None

    @property
    def checkpoint(self) -> Checkpoint:
        if self.loaded is None:
            raise ValueError(f"{self.ref.label} is a trace file: it has no checkpoint")
        return self.loaded.checkpoint

    @property
    def task(self) -> str | None:
        """The task of the checkpoint (or of the checkpoint a trace file recorded); None for another model's trace."""
        if self.loaded is None:
            return None if self.trace is None else self.trace.info.get("task")
        return self.checkpoint.task.name

    @property
    def backbone(self) -> str:
        if self.loaded is None:
            return "?" if self.trace is None else str(self.trace.info.get("backbone", "?"))
        return self.checkpoint.model.backbone.config.kind

    @property
    def seed(self) -> int:
        return self.sample.seed

    @property
    def has_memory_views(self) -> bool:
        return self.trace is not None and self.layer is not None and self.memory_note is None

    @property
    def num_chunks(self) -> int:
        return 0 if self.trace is None else self.trace.num_chunks

    @property
    def sample_key(self) -> tuple[Any, ...]:
        """What identifies the sample shown: the stepper restarts when it changes."""
        return self.ref, self.sample

    @property
    def chunk(self) -> int:
        """The current chunk, within the trace."""
        return min(max(int(st.session_state.get(CHUNK_KEY, 0)), 0), max(self.num_chunks - 1, 0))


def _fallback(failed: CheckpointRef) -> CheckpointRef | None:
    """The checkpoint to show instead of ``failed``: the last one that loaded, else the startup one."""
    previous = st.session_state.get(GOOD_CHECKPOINT_KEY)
    if previous is not None and previous != failed:
        return previous
    label, path = startup_checkpoint()
    try:
        startup = CheckpointRef.of(path, label)
    except CheckpointError:
        return None
    return startup if startup != failed else None


def load_checkpoint_or_previous(ref: CheckpointRef) -> tuple[CheckpointRef, Loaded]:
    """The chosen checkpoint loaded, or — with an ``st.error`` saying why — the last one that loaded."""
    try:
        loaded = cache.load(ref)
    except CheckpointError as error:
        fallback = _fallback(ref)
        if fallback is None:
            st.error(markdown_text(f"Could not load the checkpoint {ref.label}: {error}"))
            st.stop()
        st.error(markdown_text(f"Could not load the checkpoint {ref.label}: {error}. Still showing {fallback.label}."))
        return load_checkpoint_or_previous(fallback)
    st.session_state[GOOD_CHECKPOINT_KEY] = ref
    return ref, loaded


def _capture(ref: CheckpointRef, sample: Sample) -> tuple[Trace | None, str | None]:
    try:
        return cache.sample_trace(ref, sample), None
    except EXPECTED_ERRORS as error:  # TraceError is a ValueError
        return None, describe(error)


def capture_sample(ref: CheckpointRef, sample: Sample) -> tuple[Trace | None, Sample, str | None]:
    """(trace, sample run, problem): the chosen sample, else the task's own settings with an error shown."""
    trace, problem = _capture(ref, sample)
    if trace is not None:
        return trace, sample, None
    st.error(
        markdown_text(
            f"This sample cannot be run on {ref.label}: {problem}. Showing the checkpoint's own task settings "
            f"instead; change the sample settings in the sidebar."
        )
    )
    fallback = sample.with_task_defaults()
    trace, fallback_problem = _capture(ref, fallback)
    if trace is None:
        return None, fallback, f"No sample of this checkpoint's task can be run: {fallback_problem}"
    return trace, fallback, None


def open_trace_file(ref: TraceRef) -> Trace:
    """The opened trace file, or the page stops with ``st.error`` saying why it cannot be used."""
    try:
        return cache.opened_trace(ref)
    except EXPECTED_ERRORS as error:  # TraceError is a ValueError
        st.error(markdown_text(f"Could not open the trace {ref.label}: {describe(error)}"))
        st.stop()  # ends the run


def memory_note(ref: CheckpointRef | TraceRef, loaded: Loaded | None, trace: Trace | None) -> str | None:
    """Why the memory views cannot be shown for this trace (Markdown, its names escaped), or None when they can."""
    if loaded is not None and not loaded.has_memory:
        kind = loaded.checkpoint.model.backbone.config.kind
        return (
            f"{markdown_text(ref.label)} is a {markdown_code(kind)} model: it has no Tensor Memory layers, so "
            f"there is no memory to show. Its predictions are shown; pick a `tensor` checkpoint (e.g. "
            f"occlusion-tensor) for the memory views."
        )
    if trace is not None:  # a store's volumes are checked as each page reads them: reading them here reads it all
        problems = nonfinite_fields(trace, volumes=not (isinstance(ref, TraceRef) and ref.is_store))
        if problems:
            return (
                "This trace holds NaN or infinite values, so the memory views are off (the model's weights blow "
                "up on this input; try another sample or an earlier checkpoint): " + markdown_text("; ".join(problems))
            )
    return None


def go_to(chunk: int) -> None:
    """Move the session to ``chunk``: the browser's stepper goes there, wherever it was."""
    st.session_state[CHUNK_KEY] = int(chunk)
    st.session_state[MOVES_KEY] = moves() + 1


def follow(chunk: int) -> None:
    """Take ``chunk``, which the browser's stepper already shows, as the session's."""
    st.session_state[CHUNK_KEY] = int(chunk)


def moves() -> int:
    """How many times the server has moved the chunk itself (:func:`go_to`)."""
    return int(st.session_state.get(MOVES_KEY, 0))


def publish(context: Context) -> None:
    """Make ``context`` this run's; a sample new to the session opens at :func:`spans.opening_chunk`."""
    st.session_state[CONTEXT_KEY] = context
    if context.trace is not None and st.session_state.get(SAMPLE_KEY) != context.sample_key:
        st.session_state[SAMPLE_KEY] = context.sample_key
        go_to(spans.opening_chunk(context.trace))


def current() -> Context:
    """The context ``main.py`` built for this run."""
    context = st.session_state.get(CONTEXT_KEY)
    if context is None:
        st.error("This page is part of the Tensor Memory Explorer: start it with `make run`.")
        st.stop()
    return context


__all__ = [
    "Context",
    "current",
    "publish",
    "shipped_checkpoints",
    "startup_checkpoint",
    "startup_trace",
    "trace_label",
    "data_root_traces",
    "is_trace_name",
    "open_trace_file",
    "load_checkpoint_or_previous",
    "capture_sample",
    "memory_note",
    "go_to",
    "follow",
    "moves",
    "CHUNK_KEY",
    "CHECKPOINT_ENV",
]
