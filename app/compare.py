"""Two checkpoints side by side, as Diagnose shows them: which checkpoint it compares the shown one with, over how
many samples it measures them by default, and both on one sample stepping together in the browser
(:func:`comparison_payload`). Shared by the page and by the server's preparation at start (``python -m app``),
which asks for the same."""

from __future__ import annotations

from typing import Any

from analysis.figures.base import marker_leaves
from analysis.figures.chunk_input import (
    chunk_input_figure,
    chunk_input_leaves,
    chunk_outcome,
    input_has_leaves,
    prediction_card,
)
from analysis.figures.state import volume_figure, volume_leaves
from analysis.figures.timeline import timeline_figure
from analysis.measures.volumes import VolumeSeries
from analysis.traces.finite import nonfinite_fields
from analysis.traces.trace import Trace
from app import cache
from app.browser_stepper import Row, StepperPayload, stepper_payload
from app.cache import CheckpointRef, Sample

SUMMARY_SAMPLES = 32  # the default of Diagnose's "Samples to measure over"


def counterpart(label: str, options: list[str]) -> str:
    """The natural checkpoint to compare with: tensor ↔ base of the same task, else another one."""
    task, _, backbone = label.rpartition("-")
    wanted = f"{task}-{'base' if backbone == 'tensor' else 'tensor'}"
    return wanted if wanted in options else next((o for o in options if o != label), label)


def their_sample(sample: Sample, own: Any, other: Any) -> Sample:
    """The sample the compared checkpoint runs, given both checkpoints' tasks: on the same task the same settings
    (:meth:`Sample.carried_to`), on another its own task's defaults with the same seed."""
    if other.name == own.name:
        return sample.carried_to(own.config, other.config)
    return sample.with_task_defaults()


HEIGHTS = {"input": 340, "volume": 440, "timeline": 300}  # pixels, of each side's views


def comparison_payload(
    sides: list[tuple[str, Trace, VolumeSeries | None]],
    identity: Any,
    settings: Any,
    kind: str,
    span: tuple[int, int] | None = None,
) -> StepperPayload:
    """Two checkpoints on one sample side by side, stepping together: for each (name, its trace, its volume series or
    None) the input with its prediction, the prediction against the truth, the volume and the timeline. The
    annotation track and the events are the first's; both traces must have the same chunks (ValueError).
    ``identity`` names the sample, ``settings`` what else decides the series (the layer, the field, the reduction)."""
    (first, trace, _), (second, other, _) = sides
    if trace.num_chunks != other.num_chunks:
        raise ValueError(
            f"{first} has {trace.num_chunks} chunks on this sample and {second} {other.num_chunks}: "
            f"their memory chunks differ, so no chunk of one is a chunk of the other"
        )
    named = dict(zip("ab", sides, strict=True))
    start = 0 if span is None else span[0]
    drawn = {}  # drawn once, at the first chunk: a chunk's differ in leaves
    for side, (_, run, series) in named.items():
        if series is not None:
            drawn[f"{side}_volume"] = volume_figure(**_volume(series, start, kind))
        drawn[f"{side}_timeline"] = timeline_figure(run, start, span)
        if input_has_leaves(run):
            drawn[f"{side}_input"] = chunk_input_figure(run, start)

    def views(k: int, outcome: dict[str, Any]) -> dict[str, Any]:
        shown: dict[str, Any] = {}
        for side, (_, run, series) in named.items():
            stepped = f"{side}_input" in drawn
            shown[f"{side}_input"] = (chunk_input_leaves if stepped else chunk_input_figure)(run, k)
            shown[f"{side}_card"] = prediction_card(
                outcome if run is trace else chunk_outcome(run, k), run.has_predictions
            )
            if series is not None:
                shown[f"{side}_volume"] = volume_leaves(**_volume(series, k, kind))
            shown[f"{side}_timeline"] = marker_leaves(k)
        return shown

    parts = ("input", "card", "volume", "timeline")
    columns = tuple(
        tuple(f"{side}_{part}" for part in parts if part != "volume" or series is not None)
        for side, (_, _, series) in named.items()
    )
    labels = {f"{side}_input": name for side, (name, _, _) in named.items()}
    heights = {f"{side}_{part}": height for side in named for part, height in HEIGHTS.items()}
    shown = ("compare", first, second, settings, kind, tuple(s is None for _, _, s in sides))
    return stepper_payload(trace, identity, shown, views, (Row(columns, (1, 1)),), labels, heights, span, drawn=drawn)


def _volume(series: VolumeSeries, k: int, kind: str) -> dict[str, Any]:
    """The arguments of :func:`volume_figure` (and of its leaves) for chunk ``k`` of ``series``."""
    return dict(values=series.at(k), kind=kind, title=f"{series.label} after chunk {k}", value_range=series.value_range)


def comparison_views(
    refs: tuple[CheckpointRef, CheckpointRef],
    samples: tuple[Sample, Sample],
    layer: str | None,
    drawn: tuple[str, str, int, str],
    span: tuple[int, int] | None,
) -> StepperPayload:
    """:func:`comparison_payload` of two checkpoints of one task, each on its ``samples`` (the same task settings):
    the first's memory ``layer`` and the other's last, drawn as ``drawn`` (field, mode, index, kind) says; no volume
    for a checkpoint without a memory to show. The sample is the first's: the session's."""
    field, mode, index, kind = drawn
    sides = []
    for ref, sample, shown_layer in zip(refs, samples, (layer, None), strict=True):
        trace = cache.sample_trace(ref, sample)
        drawable = cache.load(ref).has_memory and not nonfinite_fields(trace)
        series = cache.volume_series(ref, sample, shown_layer, field, mode, index, span) if drawable else None
        sides.append((ref.label, trace, series))
    return comparison_payload(sides, (refs[0], samples[0]), (layer, field, mode, index), kind, span)


__all__ = ["SUMMARY_SAMPLES", "counterpart", "their_sample", "comparison_payload", "comparison_views"]
