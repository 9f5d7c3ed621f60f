"""The sidebar: the checkpoint (shipped, or uploaded as a .zip) or a trace (a file, or a store under the data root),
the sample's settings, the memory layer. Checkpoints and traces share one picker: a trace shows what it recorded, no
new samples."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import streamlit as st

from analysis.figures.escape import markdown_code, markdown_text
from analysis.traces.trace import Trace
from tensor_memory.errors import EXPECTED_ERRORS, describe
from tensor_memory.storage.checkpoint import Checkpoint, CheckpointError

from . import cache, runs
from .cache import CheckpointRef, Sample, TraceRef
from .state import data_root, data_root_traces, shipped_checkpoints, startup_checkpoint, startup_trace, trace_label
from .upload import (
    MAX_UPLOAD_BYTES,
    UploadError,
    check_data_paths,
    checkpoint_label,
    discard_trace_upload,
    discard_upload,
    save_trace_upload,
    unpack_checkpoint,
)

CHOICE_KEY = "checkpoint_choice"
UPLOAD_KEY = "checkpoint_upload"
UPLOADS_KEY = "uploaded_checkpoints"  # {label: folder} of this session's uploads
TRACE_UPLOAD_KEY = "trace_upload"
TRACES_KEY = "opened_traces"  # {label: file} of this session's uploaded traces
OUTCOMES_KEY = "upload_outcomes"  # {file_id: (label or None, message)}: each upload is checked once
RUN_PATH_KEY = "run_path"
LAYER_KEY = "layer_choice"
SEED_KEY = "seed"
SEED_TASK_KEY = "seed_task"  # the task the seed was last set for
# The sample a task opens on. Images opens on seed 3, a held-out face where the reconstruction clearly beats
# filling in the visible mean (the README's picture); seed 0 there is a near-uniform texture.
OPENING_SEEDS = {"masked_patches": 3}


def checkpoint_options() -> dict[str, Path]:
    """Every checkpoint this session can pick: the startup one, the shipped ones, its uploads."""
    label, path = startup_checkpoint()
    return {label: path, **shipped_checkpoints(), **st.session_state.setdefault(UPLOADS_KEY, {})}


def trace_options() -> dict[str, Path]:
    """Every trace this session can pick: the one it started on, the trace files and stores under the data root
    (:func:`app.state.data_root_traces`), its uploads (one file each)."""
    startup = startup_trace()
    found = data_root_traces()
    return {**dict([startup] if startup else []), **found, **st.session_state.setdefault(TRACES_KEY, {})}


def _check_trace_upload(file: Any) -> tuple[str | None, str]:
    """(label, message) for an uploaded trace file: the label is None when it is not a usable trace."""
    try:
        path = save_trace_upload(file.getvalue())
    except UploadError as error:
        return None, f"Could not use {file.name}: {error}"
    label = trace_label(f"{file.name} ({path.stem[:8]})")
    try:
        trace = cache.opened_trace(TraceRef.of(path, label))
    except EXPECTED_ERRORS as error:
        discard_trace_upload(path)  # refused: nothing of it stays on disk
        return None, f"Could not use {file.name}: {describe(error)}"
    st.session_state[TRACES_KEY][label] = path
    return label, f"Opened {label}: {trace.num_chunks} chunks, {len(trace.layers)} memory layer(s)."


def _upload_box(label: str, types: list[str], key: str, check, help: str) -> None:
    """An upload box whose file is checked once; a usable one becomes the shown choice at once."""
    upload = st.file_uploader(label, type=types, key=key, max_upload_size=MAX_UPLOAD_BYTES >> 20, help=help)
    if upload is None:
        return
    outcomes = st.session_state.setdefault(OUTCOMES_KEY, {})
    if upload.file_id not in outcomes:
        outcomes[upload.file_id] = check(upload)
        if outcomes[upload.file_id][0] is not None:
            st.session_state[CHOICE_KEY] = outcomes[upload.file_id][0]  # show a new upload at once
    label, message = outcomes[upload.file_id]
    if label:
        st.success(markdown_text(message))
    else:
        shown = st.session_state.get(CHOICE_KEY, startup_checkpoint()[0])
        st.error(markdown_text(f"{message} Still showing {shown}."))


def _check_upload(file: Any) -> tuple[str | None, str]:
    """(label, message) for an uploaded zip: the label is None when it is not a usable checkpoint."""
    try:
        folder = unpack_checkpoint(file.getvalue())
    except UploadError as error:
        return None, f"Could not use {file.name}: {error}"
    label = checkpoint_label(folder, file.name)
    try:
        check_data_paths(folder, data_root())  # before loading: building its task may read those folders
    except UploadError as error:
        discard_upload(folder)
        return None, f"Could not use {file.name}: {error}"
    try:
        loaded = cache.load(CheckpointRef.of(folder, label))
    except CheckpointError as error:
        discard_upload(folder)  # refused: nothing of it stays on disk
        return None, f"Could not use {file.name}: {error}"
    st.session_state[UPLOADS_KEY][label] = folder
    ckpt = loaded.checkpoint
    return label, f"Loaded {label}: task {ckpt.task.name}, backbone {ckpt.model.backbone.config.kind}."


def checkpoint_section() -> CheckpointRef | TraceRef:
    """The picker of checkpoints and trace files and the two upload boxes; returns the chosen checkpoint
    (not yet loaded) or trace file (not yet opened)."""
    st.subheader("Checkpoint or trace")
    picker = st.container()
    _upload_box(
        "Upload a checkpoint folder as a .zip",
        ["zip"],
        UPLOAD_KEY,
        _check_upload,
        help="Zip the folder holding model.safetensors and config.json. It is checked before use and never "
        "unpickled; pickles are refused.",
    )
    _upload_box(
        "Open a trace (.safetensors)",
        ["safetensors"],
        TRACE_UPLOAD_KEY,
        _check_trace_upload,
        help="A trace of any model with Tensor Memory layers, written by analysis.trace_model(...).save() "
        "or `tensor-memory trace`. Checked before use and never unpickled.",
    )
    traces, checkpoints = trace_options(), checkpoint_options()
    options = {**traces, **checkpoints}
    if st.session_state.get(CHOICE_KEY) not in options:
        st.session_state[CHOICE_KEY] = next(iter(traces), startup_checkpoint()[0])  # a --trace file opens first
    with picker:
        label = st.selectbox(
            "Shown checkpoint or trace",
            list(options),
            key=CHOICE_KEY,
            label_visibility="collapsed",
            help="Shipped checkpoints are named task-backbone; tensor ones have a memory to look at. "
            "Traces show the sample they recorded: the one the explorer was started with, your uploads, and "
            "under --data-root every *.trace.safetensors file and trace store (a folder holding trace.json).",
        )
    if label in traces:
        try:
            return TraceRef.of(traces[label], label)
        except EXPECTED_ERRORS:  # removed from disk: opening it says what is wrong
            return TraceRef(label=label, path=str(traces[label]), stamp=0)
    try:
        return CheckpointRef.of(options[label], label)
    except CheckpointError:  # a shipped folder being rewritten, or an upload removed from disk:
        return CheckpointRef(label=label, path=str(options[label]), stamp=(0, 0))  # loading it says what is wrong


def run_section() -> None:
    """The training run the Run page follows: the one the app was started with (``--run``), or a run folder typed
    here, which must lie under the data root (``--data-root``); a folder refused says why in one line."""
    folder, root = runs.opened(), data_root()
    with st.expander("Training run", icon=":material/monitoring:", expanded=folder is not None):
        if folder is None and root is None:
            st.caption(
                "Start the explorer with `--run DIR` to follow a training run, or `--data-root DIR` to open "
                "run folders under it."
            )
            return
        st.session_state.setdefault(RUN_PATH_KEY, "" if folder is None else str(folder))
        text = st.text_input(
            "Run folder",
            key=RUN_PATH_KEY,
            placeholder=f"a folder under {root}" if root else None,
            help="A folder written by analysis.monitor or `tensor-memory train` (run.json, run_log.jsonl): "
            + (f"under {markdown_code(root)}, or " if root else "")
            + "the one the explorer was started with.",
        )
        if text.strip():
            try:
                folder = runs.open_run(text)
            except EXPECTED_ERRORS as error:
                st.error(markdown_text(describe(error) + (f" Still following {folder.name}." if folder else "")))
        if folder is not None:
            st.page_link("views/run.py", label=f"Follow {markdown_text(folder.name)}", icon=":material/monitoring:")


def _slider(label: str, key: str, low: int, high: int, default: int, help: str = "") -> int:
    """An integer slider whose remembered value is kept within [low, high] (a plain value when low == high)."""
    value = min(max(int(st.session_state.get(key, default)), low), high)
    if low == high:
        st.caption(f"{label}: {low}")
        return low
    st.session_state[key] = value
    return int(st.slider(label, low, high, key=key, help=help or None))


def _occlusion(config: Any, task: str = "occlusion") -> dict[str, Any]:
    frames = _slider(
        "Frames (horizon)", f"{task}.frames", 4, 40, config.frames, "Frames in the sequence, one chunk each."
    )
    length = _slider(
        "Occlusion length",
        f"{task}.occlusion_length",
        0,
        frames - 2,
        config.occlusion_length,
        "Consecutive frames the ball (or digit) is hidden.",
    )
    start = -1
    if length:
        random_key = f"{task}.random_start"
        st.session_state.setdefault(random_key, config.occlusion_start == -1)
        if not st.checkbox("Random occlusion start", key=random_key):
            default = config.occlusion_start if config.occlusion_start != -1 else 2
            start = _slider(
                "Occlusion start (frame)",
                f"{task}.occlusion_start",
                2,
                frames - length,
                default,
                "First hidden frame; at least two visible frames come before.",
            )
    return {"frames": frames, "occlusion_length": length, "occlusion_start": start}


def _binding(config: Any) -> dict[str, Any]:
    writes = _slider(
        "Writes (horizon)",
        "coordinate_binding.writes",
        1,
        100,
        config.writes,
        "Key–value pairs written before the queries.",
    )
    key = "coordinate_binding.noise"
    st.session_state.setdefault(key, float(config.noise))
    noise = st.slider("Query noise", 0.0, 0.3, step=0.01, key=key, help="Standard deviation added to each query key.")
    return {"writes": writes, "noise": float(noise)}


def _map(config: Any) -> dict[str, Any]:
    return {
        "observations": _slider(
            "Observations (horizon)",
            "map_building.observations",
            1,
            128,
            config.observations,
            "Glimpses of the hidden map before the queries.",
        )
    }


def _counter(config: Any) -> dict[str, Any]:
    return {"length": _slider("Length (horizon)", "no_harm.length", 2, 128, config.length, "Tokens in the sequence.")}


MASK_CHOICES = {-1.0: "mixed (25, 50 or 75 %)", 0.25: "25 %", 0.5: "50 %", 0.75: "75 %"}


def _masked(config: Any) -> dict[str, Any]:
    key = "masked_patches.mask_rate"
    if st.session_state.get(key) not in MASK_CHOICES:
        st.session_state[key] = float(config.mask_rate) if config.mask_rate in MASK_CHOICES else 0.5
    rate = st.selectbox(
        "Patches hidden",
        list(MASK_CHOICES),
        format_func=MASK_CHOICES.get,
        key=key,
        help="The share of the image's patches the mask hides (the paper's three rates).",
    )
    return {"mask_rate": float(rate)}


TASK_CONTROLS = {
    "occlusion": _occlusion,
    "coordinate_binding": _binding,
    "map_building": _map,
    "no_harm": _counter,
    "moving_digits": lambda config: _occlusion(config, "moving_digits"),
    "masked_patches": _masked,
}


def opening_seed(task: str | None) -> int:
    """The seed a task's samples open on (:data:`OPENING_SEEDS`; 0 for the others)."""
    return OPENING_SEEDS.get(task, 0)


def sample_section(ckpt: Checkpoint) -> Sample:
    """Seed and task settings for the sample."""
    st.subheader("Sample")
    task, last = ckpt.task.name, st.session_state.get(SEED_TASK_KEY)
    untouched = last not in (None, task) and st.session_state.get(SEED_KEY) == opening_seed(last)
    if SEED_KEY not in st.session_state or untouched:
        st.session_state[SEED_KEY] = opening_seed(task)  # a seed left where its task opened moves to the new one's
    st.session_state[SEED_TASK_KEY] = task
    seed = int(
        st.number_input(
            "Seed",
            min_value=0,
            max_value=2**31 - 1,
            step=1,
            key=SEED_KEY,
            help="Which sample of the task's stream to run; the same seed gives the same sample.",
        )
    )
    controls = TASK_CONTROLS.get(ckpt.task.name)
    params = controls(ckpt.task.config) if controls else {}
    return Sample.of(seed, params, ckpt.task.config)


def layer_section(trace: Trace | None) -> str | None:
    """The memory layer to show (the last by default); None for a trace without memory layers."""
    if trace is None or not trace.layer_names:
        return None
    names = trace.layer_names
    if st.session_state.get(LAYER_KEY) not in names:
        st.session_state[LAYER_KEY] = names[-1]
    st.subheader("Memory layer")
    if len(names) == 1:
        st.caption(f"{markdown_code(names[0])}, the model's only memory layer")
        return names[0]
    return st.selectbox(
        "Memory layer",
        names,
        key=LAYER_KEY,
        label_visibility="collapsed",
        format_func=lambda name: name.replace("backbone.", "").replace(".memory", " memory"),
    )


__all__ = [
    "checkpoint_options",
    "checkpoint_section",
    "run_section",
    "sample_section",
    "layer_section",
    "CHOICE_KEY",
    "UPLOAD_KEY",
    "SEED_KEY",
    "OPENING_SEEDS",
    "opening_seed",
]
