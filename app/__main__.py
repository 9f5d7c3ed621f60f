"""``python -m app [streamlit options]``: the explorer's server, its pages prepared while it starts.

``streamlit run app/main.py`` runs nothing until a browser connects, so the first visitor waits while
torch and the analysis modules import, the checkpoint loads and every chunk's views are built, and the
first visit of each other page waits for its own measures (Diagnose's summaries over many samples, the
Audit, ...). This starts the same server (``make run`` and ``tensor-memory app`` use it) and, beside it,
does that work once into the server's own caches, which every session shares: the opening page first,
then what the other pages ask for on the opening checkpoint; the log says ``Pages prepared`` when it is
done. A visitor then finds the pages' measures ready and only draws them: what is left of a first visit
is mostly the browser's (``benchmarks/first_visit.py`` times each page; docs/performance.md has the figures).
"""

from __future__ import annotations

import gc
import ipaddress
import sys
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

from app.server_options import config_options, option

MAIN = Path(__file__).resolve().parent / "main.py"
PREPARED = "Pages prepared"  # the server's log line once the preparation is done (benchmarks wait for it)


def prepare_opening_page() -> None:
    """The opening page's work (:func:`opening_page_work`), into the running server's caches."""
    import logging

    from streamlit import runtime

    while not runtime.exists():  # the caches live in the server's runtime: use them, not a private copy
        time.sleep(0.05)
    # Outside a script run Streamlit warns at each cached call that there is no ScriptRunContext: expected here.
    # The logger is the process's, so its level is put back once the work is done.
    logger = logging.getLogger("streamlit.runtime.scriptrunner_utils.script_run_context")
    level = logger.level
    logger.setLevel(logging.ERROR)
    start = time.perf_counter()
    try:
        opened = opening_page_work()
        if opened is not None:
            other_pages_work(opened)
    finally:
        logger.setLevel(level)
    # Streamlit collects garbage after every script run (runner.postScriptGC): what is here now (the modules, the
    # models, the caches) lives as long as the server, so later collections skip it instead of walking it each time.
    gc.freeze()
    print(f"{PREPARED} in {time.perf_counter() - start:.1f} s.", file=sys.stderr, flush=True)


def opening_page_work() -> Opening | None:
    """The checkpoint, the sample and Explore's payload of the opening page, asked for exactly as the page asks
    (its defaults: the task's opening seed with its own settings, the last memory layer, the default view or none
    when there is no memory to draw), so the page finds them cached; returns what was opened. A ``--trace`` file or a
    pretrained memory opens on a page of its own (the trace, the MiniLM page): nothing is prepared for them."""
    from analysis.figures import use_template_by_default
    from app import cache, state
    from app.layout import VolumeView
    from app.sidebar import opening_seed
    from app.spans import opening_chunk, stepping_span
    from app.views.explore import explore_views
    from tensor_memory.pretrained.checkpoint import is_pretrained_memory

    use_template_by_default()
    label, folder = state.startup_checkpoint()
    if state.startup_trace() is not None or is_pretrained_memory(folder):
        return None
    ref = cache.CheckpointRef.of(folder, label)
    sample = cache.Sample(opening_seed(cache.load(ref).checkpoint.task.name))
    trace = cache.sample_trace(ref, sample)
    layer = trace.layer_names[-1] if trace.layer_names else None
    drawable = layer is not None and state.memory_note(ref, cache.load(ref), trace) is None  # as Context decides
    chunk = opening_chunk(trace)
    span = stepping_span(chunk, trace.num_chunks)  # the page the stepper opens on (None: all of it)
    cache.stepper_payload("explore", explore_views, ref, sample, layer, VolumeView() if drawable else None, span)
    return Opening(ref, sample, layer, drawable, chunk, span)


class Opening(NamedTuple):
    """What the opening page shows: the checkpoint, the sample, the memory layer (None: none), whether the memory
    views are drawn, the chunk it opens on and the span of chunks the browser holds (None: all)."""

    ref: Any  # app.cache.CheckpointRef (app.cache is imported only once the server runs)
    sample: Any  # app.cache.Sample
    layer: str | None
    memory: bool
    chunk: int
    span: tuple[int, int] | None


def other_pages_work(opened: Opening) -> None:
    """What the other pages ask for on their first visit to the opening checkpoint, asked for as they ask: the
    stepper track of the pages drawn on the server, Occlusion's payload and its first intervention, Diagnose's
    summaries of this checkpoint and its counterpart with what their side-by-side stepper reads, the world
    read-out and the training history, the Audit, Export's figures and trace file; and the modules those pages
    import. Each is cached for every session, so the first visit only draws."""
    from analysis.figures import render, report, teach  # noqa: F401 - imported ahead: the pages import them
    from analysis.measures.interventions import intervention_defaults
    from analysis.measures.world import READOUTS
    from app import cache, compare, layout, state, stepping
    from app.views.occlusion import occlusion_views

    ref, sample, layer, memory, chunk, span = opened
    view = layout.VolumeView()
    cache.stepper_payload("track", stepping.track_payload, ref, sample, span)
    loaded, trace = cache.load(ref), cache.sample_trace(ref, sample)
    cache.stepper_payload("occlusion", occlusion_views, ref, sample, layer, memory, span)
    if memory and loaded.checkpoint.model.backbone.config.causal:
        first = intervention_defaults(trace, layer, chunk)["chunk"]
        cache.intervention(ref, sample, "zero", first, None, None, None, None)  # the form's opening values
    cache.summary(ref, sample, compare.SUMMARY_SAMPLES, layer)
    options = dict([state.startup_checkpoint()], **state.shipped_checkpoints())
    label = compare.counterpart(ref.label, list(options))
    other = cache.CheckpointRef.of(options[label], label)
    theirs = cache.load(other).checkpoint.task
    carried = compare.their_sample(sample, loaded.checkpoint.task, theirs)
    cache.summary(other, carried, compare.SUMMARY_SAMPLES, None)
    if theirs.name == loaded.checkpoint.task.name:  # Diagnose steps both only on one task's sample
        drawn = (view.field, view.mode, view.index, view.kind)
        pair = (ref, other), (sample, carried)
        cache.stepper_payload("diagnose", compare.comparison_views, *pair, layer, drawn, span)
    if memory and loaded.checkpoint.task.name in READOUTS:
        cache.world_readout(ref, layer)
    cache.causality(ref, sample.seed)
    series = (view.field, view.mode, view.index) if memory else None
    cache.chunk_figures(ref, sample, layer, series, view.kind, view.anchor, chunk, span)
    cache.trace_file(ref, sample)
    cache.training_history(ref)  # last: a checkpoint without a training log raises (its page says so)


def _prepare_quietly() -> None:
    """:func:`prepare_opening_page`, whose failure only costs the first visitor the wait (the page says why)."""
    try:
        prepare_opening_page()
    except Exception as error:  # noqa: BLE001 - the page reports the same problem in its own words
        print(
            f"Could not prepare the opening page ahead ({type(error).__name__}: {error}); it is made on the first "
            f"visit instead.",
            file=sys.stderr,
        )


def exposure_warning(argv: list[str]) -> str | None:
    """The line to print when the server listens beyond this machine (an address that is not a loopback one)."""
    address = option(argv, "server.address")
    if address is None or address == "localhost":
        return None  # .streamlit/config.toml's 127.0.0.1 (server_options passes it)
    try:
        if ipaddress.ip_address(address).is_loopback:
            return None
    except ValueError:  # a host name: it may be anything
        pass
    port = option(argv, "server.port") or "8501"
    return (
        f"The explorer listens on {address}:{port}: anyone who can reach this port can upload checkpoints and "
        f"run them on this machine."
    )


def main() -> None:
    warning = exposure_warning(sys.argv[1:])
    if warning:
        print(warning, file=sys.stderr, flush=True)
    threading.Thread(target=_prepare_quietly, name="prepare-opening-page", daemon=True).start()
    from streamlit.web import cli

    sys.argv = ["streamlit", "run", str(MAIN), *config_options(sys.argv[1:]), *sys.argv[1:]]  # from any folder
    cli.main(prog_name="streamlit")


if __name__ == "__main__":
    main()
