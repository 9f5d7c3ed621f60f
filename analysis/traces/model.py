"""Trace any model: every TensorMemory inside someone's own ``nn.Module``, recorded on one input.

``trace_model(model, inputs)`` needs no task and no checkpoint of ours: a Hugging Face Transformer
with a memory attached (``tensor_memory.attach_memory``), a model imported from the paper's public
code, or anyone's own architecture. The memories are found by type, wherever they sit, and
recorded through their hook points, exactly as :func:`analysis.capture` records a checkpoint::

    trace = trace_model(gpt2, {"input_ids": ids}, tokens=tokenizer.convert_ids_to_tokens(ids[0]),
                        targets=ids[0, 1:], segment=512,
                        vocabulary=[tokenizer.decode([i]) for i in range(len(tokenizer))])
    trace.save("gpt2.trace.safetensors")       # tensor-memory app --trace gpt2.trace.safetensors

``inputs`` is what the model's forward takes: a tensor (B = 1, N, …), passed as ``model(inputs)``,
or a dict of tensors (a Hugging Face model's ``input_ids``, ``attention_mask``, …) passed as
``model(**inputs)``. ``tokens`` (one string per position) and ``targets`` (one class per position,
−1 or −100 where there is none, e.g. the next token) are optional annotations: with targets the
trace records, per chunk, the model's prediction and p(target) at the chunk's last scored position
(the output's ``logits``, or the output itself when it is a tensor (1, N, classes)). ``vocabulary`` (class i's text
at ``vocabulary[i]``) is optional too: with it the views show a prediction and its target as text, not as ids.

With ``segment=n`` (a multiple of the chunk size) the input is fed n positions at a time inside
``with streaming(model):``, so every memory carries its state from one segment to the next (a model that
threads its own state and returns it as ``(y, state)``, like this project's backbones, gets it passed back as its
second argument). A long sequence then never needs one huge forward; what it costs is bounded by the
segment, and the volumes are cut to float16 (or int8) per segment. Each segment is a call of its own:
attention (and a Hugging Face model's positions) see that segment alone, as a model read window by
window does; only the memories, and a model that threads its own state, carry across.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from analysis.traces.arguments import (
    check_model,
    check_options,
    check_segment,
    checked_inputs,
    checked_targets,
    checked_tokens,
    checked_vocabulary,
)
from analysis.traces.chunk_scorer import PER_TOKEN, check_finite, score_positions, token_chunks, written_chunks
from analysis.traces.segment_recorder import (
    Inputs,
    LayerFields,
    joined_layers,
    layer_traces,
    layers_info,
    memory_chunk_size,
    record_segments,
)
from analysis.traces.store_writer import SegmentedTraceWriter, check_store_path, is_store_path
from analysis.traces.trace import Trace, TraceError, check_volume_dtype, load_trace
from analysis.traces.validation import MODEL_SOURCE
from tensor_memory import streaming
from tensor_memory.accelerator import model_device, resolve_device
from tensor_memory.backbone import BackboneState
from tensor_memory.storage.files import check_output_path


def on_device(inputs: Inputs, device: torch.device) -> Inputs:
    """The input's tensors on ``device`` (anything else in a dict as it is)."""
    if isinstance(inputs, torch.Tensor):
        return inputs.to(device)
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def logits_of(output: Any) -> torch.Tensor | None:
    """The model's class scores (1, n, classes): an output's ``logits`` (an attribute, or a key of a dict), or the
    output (or its first element) when that is a tensor; None when the output holds neither."""
    value = output.get("logits") if isinstance(output, Mapping) else getattr(output, "logits", None)
    if value is None:
        value = output[0] if isinstance(output, (tuple, list)) and output else output
    return value if isinstance(value, torch.Tensor) and value.dim() == 3 else None


def call_model(model: nn.Module, piece: Inputs, state: BackboneState | None) -> tuple[Any, BackboneState | None]:
    """One segment through ``model``: a dict as keyword arguments (a Hugging Face model's), a tensor as the first
    argument with the carried state after it. Returns the output and the state to carry: the one a model that
    threads its own state returns as ``(y, state)``, else None (streaming carries the memories' states)."""
    if isinstance(piece, dict):
        output = model(**piece)
    else:
        output = model(piece) if state is None else model(piece, state)
    threads = isinstance(output, tuple) and len(output) == 2 and isinstance(output[1], BackboneState)
    return output, output[1] if threads else None


def scored_segment(output: Any, targets: torch.Tensor) -> tuple[dict[str, np.ndarray], int]:
    """The per-position scores (:func:`~analysis.traces.chunk_scorer.score_positions`) of one segment's output
    against its targets, and the output's number of classes, once the output is known to have logits
    (1, n, classes) that can score them."""
    logits = logits_of(output)
    if logits is None or logits.shape[:2] != (1, len(targets)):
        raise ValueError(
            "trace_model: targets were given, but the model's output has no logits (1, n, classes) to score them with"
        )
    check_finite(logits, "this input")
    classes = logits.shape[-1]
    if targets.numel() and int(targets.max()) >= classes:
        raise ValueError(f"trace_model: a target is {int(targets.max())}, but the model's output has {classes} classes")
    return score_positions(logits[0], targets), classes


def _segments(
    model: nn.Module,
    inputs: Inputs,
    N: int,
    segment: int,
    targets: torch.Tensor | None,
    recording: dict[str, Any],
) -> Iterator[tuple[int, LayerFields, dict[str, np.ndarray] | None, int]]:
    """Feed the segments with the memories carried; yields per segment (its first position, its layer fields, its
    per-position scores or None without targets, classes)."""
    with streaming(model):
        for piece in record_segments(model, partial(call_model, model), inputs, N, segment, **recording):
            scores, classes = None, 0
            if targets is not None:
                scores, classes = scored_segment(piece.output, targets[piece.start : piece.start + segment])
            yield piece.start, piece.layers, scores, classes


def _scored_chunks(
    scores: dict[str, np.ndarray] | None, chunk_size: int, K: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """K chunks' arrays and the per-position ones a trace keeps, from per-position scores (None: nothing scored)."""
    if scores is None:
        return {"scored": np.zeros(K, dtype=bool)}, {}
    return token_chunks(scores, chunk_size, K), {key: scores[key] for key in PER_TOKEN}


def _in_memory(segments: Iterator, N: int, chunk_size: int, info: Any) -> Trace:
    """The segments joined into one trace in memory."""
    recorded, scored, classes = [], [], 0
    for _, layers, scores, segment_classes in segments:
        recorded.append(layers)
        if scores is not None:
            scored.append(scores)
            classes = segment_classes
    layers = joined_layers(recorded)
    K = written_chunks(layers, N, chunk_size)
    scores = {key: np.concatenate([s[key] for s in scored]) for key in scored[0]} if scored else None
    chunks, per_token = _scored_chunks(scores, chunk_size, K)
    return Trace(info(K, classes, layers), layer_traces(layers, 0, K), chunks, meta={}, per_token=per_token)


def _to_store(segments: Iterator, N: int, segment: int, chunk_size: int, info: Any, writer: SegmentedTraceWriter):
    """Each segment written to the store as it comes; the store opened lazily once complete."""
    try:
        for start, layers, scores, classes in segments:
            n = min(segment, N - start)  # the segment's positions
            k = written_chunks(layers, n, chunk_size)
            chunks, per_token = _scored_chunks(scores, chunk_size, k)
            writer.add(layers, k, n, chunks, per_token, info(writer.chunks + k, classes, layers))
        writer.finish(info(writer.chunks, classes, layers))
    finally:
        writer.close()
    return load_trace(writer.path)


def _header(
    model: nn.Module,
    name: str | None,
    chunk_size: int,
    N: int,
    scored: bool,
    volumes: str,
    K: int,
    classes: int,
    layers: LayerFields,
) -> dict[str, Any]:
    """The trace's info for K chunks of ``layers`` scored against ``classes`` classes."""
    return {
        "source": MODEL_SOURCE,
        "checkpoint_name": name or type(model).__name__,
        "model": type(model).__name__,
        "backbone": type(model).__name__,
        "chunk_size": chunk_size,
        "num_chunks": K,
        "num_tokens": N,
        "num_classes": max(classes, 1),
        "outputs": "tokens" if scored else "none",
        "layers": layers_info(layers, volumes, chunk_size),
    }


def trace_model(
    model: nn.Module,
    inputs: Inputs,
    *,
    tokens: Sequence[str] | None = None,
    targets: Any = None,
    vocabulary: Sequence[str] | None = None,
    name: str | None = None,
    volumes: str = "float16",
    segment: int | None = None,
    gates: bool = True,
    cell_state: bool = True,
    progress: bool | None = None,
    device: str | torch.device | None = None,
    out: str | Path | None = None,
) -> Trace:
    """Record every :class:`TensorMemory` of ``model`` on one input (see the module docstring).

    ``name`` labels the trace (default: the model's class name); ``volumes`` "float16" or "int8";
    ``gates=False`` / ``cell_state=False`` leave out the gate volumes / the cell state ``c``. ``device`` (auto, cpu,
    cuda, cuda:N): move the model there first, as ``model.to`` does; None: it runs where it is. The inputs are
    moved to the model's device; the trace is on the CPU either way.

    ``out``: also write the trace there. A path ending in ``.safetensors`` gets one file (:meth:`Trace.save`); any
    other path (a folder that must not exist yet, e.g. ``x.trace.zarr``) gets a trace store
    (:mod:`analysis.traces.store_writer`) written a segment at a time as it is recorded, so the capture holds one
    segment, not the whole trace, and the trace returned is the store opened lazily.
    """
    check_model(model)
    inputs, N = checked_inputs(inputs)
    check_options(name, gates, cell_state, progress, out)
    check_volume_dtype(volumes)
    tokens, wanted, vocabulary = checked_tokens(tokens, N), checked_targets(targets, N), checked_vocabulary(vocabulary)
    if out is not None and is_store_path(out):  # where it will be written: checked before the capture, not after
        check_store_path(out, "out")
    elif out is not None:
        check_output_path(out, True, option="out")
    if device is not None:
        model.to(resolve_device(device))
    inputs = on_device(inputs, model_device(model))
    chunk_size = memory_chunk_size(model)
    check_segment(segment, chunk_size)
    if N < chunk_size:
        raise TraceError(f"the input has {N} positions, fewer than one memory chunk ({chunk_size})")
    segment = segment or N
    info = partial(_header, model, name, chunk_size, N, wanted is not None, volumes)
    store = None
    if out is not None and is_store_path(out):
        store = SegmentedTraceWriter(out, tokens, segment // chunk_size, -(-N // chunk_size), N, vocabulary)
    recording = dict(gates=gates, cell_state=cell_state, volumes=volumes, progress=progress)
    was_training = model.training
    model.eval()
    segments = _segments(model, inputs, N, segment, wanted, recording)
    try:
        if store is not None:
            return _to_store(segments, N, segment, chunk_size, info, store)
        trace = _in_memory(segments, N, chunk_size, info)
    finally:
        segments.close()  # leaves streaming(model) now, also when recording stopped on an error
        model.train(was_training)
    trace.tokens, trace.vocabulary = tokens, vocabulary
    if out is not None:
        trace.save(out)
    return trace


__all__ = ["trace_model"]
