"""What ``trace_model`` and :class:`~analysis.traces.trace.Trace` are given, checked before anything runs: a wrong
type, shape or value is one line, a ValueError as every expected failure of this project is, naming the argument
and what to pass.

A Trace built in memory gets the cheap checks (types, and its per-chunk and per-position arrays and σ(γ) within
their bounds); its volumes are checked when a file or store is loaded (:mod:`analysis.traces.validation`), since
checking them at every construction would read them all, a store's included.
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from analysis.traces.validation import CHUNK_FIELDS, TARGET_ARRAYS, out_of_bounds

NO_TARGET = (-1, -100)  # "no target here": −1, and Hugging Face's "ignore" index
PER_TOKEN = tuple(name.partition("/")[2] for name in TARGET_ARRAYS)  # its per-position ones


def check_model(model: Any) -> None:
    if not isinstance(model, nn.Module):
        raise ValueError(f"trace_model: model must be a torch nn.Module holding a TensorMemory, got {_kind(model)}")


def checked_inputs(inputs: Any) -> tuple[torch.Tensor | dict[str, torch.Tensor], int]:
    """``inputs`` as the model takes them (a tensor, or a plain dict of tensors: a tokenizer's BatchEncoding
    becomes one) and N, after checking that they are one sequence: every tensor of two axes or more has batch 1."""
    form = "a torch tensor (1, N, …) or a dict of tensors (a Hugging Face model's input_ids, attention_mask, …)"
    if isinstance(inputs, torch.Tensor):
        named = {"inputs": inputs}
    elif isinstance(inputs, Mapping) and inputs:
        named = {f"inputs[{key!r}]": value for key, value in inputs.items()}
        for where, value in named.items():
            if not isinstance(value, torch.Tensor):
                raise ValueError(
                    f"trace_model: {where} must be a tensor (inputs is passed as model(**inputs)), got {_kind(value)}"
                )
        inputs = dict(inputs)
    else:
        got = "an empty dict" if isinstance(inputs, Mapping) else _kind(inputs)
        raise ValueError(f"trace_model: inputs must be {form}, got {got}")
    where = "inputs['input_ids']" if "inputs['input_ids']" in named else next(iter(named))
    first = named[where]
    if first.dim() < 2 or first.shape[0] != 1:
        raise ValueError(
            f"trace_model records one sequence: {where} must be of shape (1, N, …), got {tuple(first.shape)}"
        )
    for other, value in named.items():
        if value.dim() >= 2 and value.shape[0] != 1:
            raise ValueError(
                f"trace_model: {other} has batch {value.shape[0]} (shape {tuple(value.shape)}), {where} batch 1; "
                f"trace_model records one sequence: give every input a first axis of 1"
            )
    return inputs, int(first.shape[1])


def checked_tokens(tokens: Any, N: int) -> list[str] | None:
    """``tokens`` as a list of N strings UTF-8 can store (any iterable of strings is taken), or None."""
    if tokens is None:
        return None
    what = f"trace_model: tokens must be N = {N} strings, one per position (a list)"
    if isinstance(tokens, (str, bytes)) or not isinstance(tokens, Iterable):
        raise ValueError(f"{what}, got {_kind(tokens)}")
    tokens = list(tokens)
    if len(tokens) != N:
        raise ValueError(f"{what}, got {len(tokens)}")
    check_text(tokens, "trace_model: tokens")
    return tokens


def checked_vocabulary(vocabulary: Any) -> list[str] | None:
    """``vocabulary`` (each class's text, ``vocabulary[i]`` class i's) as a list of strings UTF-8 can store, or None."""
    if vocabulary is None:
        return None
    if isinstance(vocabulary, (str, bytes, Mapping)) or not isinstance(vocabulary, Iterable):
        raise ValueError(
            f"trace_model: vocabulary must be each class's text, a list of strings (vocabulary[i] is class i's), "
            f"got {_kind(vocabulary)}"
        )
    vocabulary = list(vocabulary)
    check_text(vocabulary, "trace_model: vocabulary", "one a class")
    return vocabulary


def check_text(tokens: list[Any], where: str, each: str = "one token a position") -> None:
    """Every token a string that UTF-8 can store (a lone surrogate, from text decoded with errors='surrogateescape',
    cannot be)."""
    for i, token in enumerate(tokens):
        if not isinstance(token, str):
            raise ValueError(f"{where}[{i}] must be a string ({each}), got {_kind(token)}")
    try:
        "".join(tokens).encode("utf-8")
    except UnicodeEncodeError as error:
        bad = error.object[error.start]
        i = next(i for i, token in enumerate(tokens) if bad in token)
        raise ValueError(
            f"{where}[{i}] = {tokens[i]!r} holds {bad!r}, a lone surrogate UTF-8 cannot store; decode the text "
            f"with errors='replace'"
        ) from None


def checked_targets(targets: Any, N: int) -> torch.Tensor | None:
    """``targets`` as N classes (int64), −1 where there is none (N − 1 given: the last position has none)."""
    if targets is None:
        return None
    what = (
        f"trace_model: targets must be N = {N} (or N − 1, the next tokens) integer classes, −1 or −100 where there "
        f"is none (a tensor, numpy array or list of ints)"
    )
    if isinstance(targets, torch.Tensor):
        values = targets.detach().cpu()
    elif isinstance(targets, (str, bytes)) or not isinstance(targets, (Iterable, np.ndarray)):
        raise ValueError(f"{what}, got {_kind(targets)}")
    else:
        try:
            array = np.asarray(targets)
        except (ValueError, TypeError):  # a ragged list
            array = np.empty(0, dtype=object)
        if array.dtype.kind not in "iufcb":  # strings, None, ints beyond int64 (numpy keeps them as objects)
            raise ValueError(f"{what}, got a {type(targets).__name__} of {_element_kind(targets)}")
        values = torch.from_numpy(array.astype(np.int64) if array.dtype.kind == "u" else array)
    if values.dtype.is_floating_point or values.dtype.is_complex or values.dtype == torch.bool:
        raise ValueError(f"{what}, got {tuple(values.shape)} of {values.dtype}")
    if values.dim() not in (1, 2) or values.shape[:-1] not in ((), (1,)) or values.shape[-1] not in (N, N - 1):
        raise ValueError(f"{what}, got shape {tuple(values.shape)}")
    values = values.reshape(-1).long()
    bad = torch.nonzero((values < 0) & (values != NO_TARGET[0]) & (values != NO_TARGET[1]))
    if len(bad):
        i = int(bad[0])
        raise ValueError(
            f"trace_model: targets[{i}] is {int(values[i])}; a target is a class ≥ 0, or −1 or −100 where there is none"
        )
    values = torch.cat([values, values.new_full((N - len(values),), -1)])  # N − 1 padded to N
    return torch.where(values < 0, -1, values)


def check_options(name: Any, gates: Any, cell_state: Any, progress: Any, out: Any) -> None:
    """trace_model's remaining arguments: a string label, three switches and a path."""
    if name is not None and not isinstance(name, str):
        raise ValueError(
            f"trace_model: name must be a string (the trace's label; None: the model's class), got {name!r}"
        )
    for option, value in (("gates", gates), ("cell_state", cell_state)):
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"trace_model: {option} must be True or False, got {value!r}")
    if progress is not None and not isinstance(progress, (bool, np.bool_)):
        raise ValueError(
            f"trace_model: progress must be True, False or None (a bar for four segments or more), got {progress!r}"
        )
    if out is not None and not isinstance(out, (str, os.PathLike)):
        raise ValueError(
            f"trace_model: out must be a path (a str or pathlib.Path): a name ending in .safetensors for one file, "
            f"any other for a new folder holding a trace store; got {_kind(out)}"
        )


def check_segment(segment: Any, chunk_size: int) -> None:
    if segment is not None and (
        isinstance(segment, bool) or not isinstance(segment, int) or segment < 1 or segment % chunk_size
    ):
        raise ValueError(
            f"trace_model: segment must be a positive multiple of the memory's chunk size "
            f"({chunk_size}) so that every chunk is recorded once, got {segment!r}"
        )


def _kind(value: Any) -> str:
    """What a value is, for a message: a numpy array says how to make it a tensor."""
    if isinstance(value, np.ndarray):
        return f"a numpy array ({value.dtype}): pass torch.from_numpy(…)"
    return (
        repr(value) if isinstance(value, (str, bytes, int, float)) and len(repr(value)) < 40 else type(value).__name__
    )


def _element_kind(values: Iterable[Any]) -> str:
    """The types a list holds (an int beyond int64 said so), for a message."""
    kinds = {"int beyond int64" if isinstance(v, int) and abs(v) >= 2**63 else type(v).__name__ for v in values}
    return ", ".join(sorted(kinds)) or "nothing"


def check_trace_fields(trace: Any, layer_type: type) -> None:
    """A Trace's arguments (module docstring): their types, each layer a ``layer_type``, the per-chunk and
    per-position arrays numpy arrays of a trace's names, their probabilities in [0, 1] and targets ≥ −1."""
    if not isinstance(trace.info, dict):
        raise ValueError(f"Trace: info must be a dict (the trace's header), got {type(trace.info).__name__}")
    if not isinstance(trace.layers, dict) or not all(
        isinstance(k, str) and isinstance(v, layer_type) for k, v in trace.layers.items()
    ):
        raise ValueError("Trace: layers must be a dict of LayerTrace by memory path (e.g. 'backbone.blocks.1.memory')")
    for argument, known in (("chunks", CHUNK_FIELDS), ("per_token", PER_TOKEN), ("meta", None)):
        arrays = getattr(trace, argument)
        if not isinstance(arrays, dict):
            raise ValueError(f"Trace: {argument} must be a dict of numpy arrays by name, got {type(arrays).__name__}")
        for key, value in arrays.items():
            where = f"Trace: {argument}[{key!r}]"
            if known is not None and key not in known:
                raise ValueError(f"{where} is not one of a trace's {argument} arrays: {', '.join(known)}")
            if not isinstance(value, (np.ndarray, np.generic)):
                raise ValueError(f"{where} must be a numpy array, got {type(value).__name__}")
            problem = None if known is None else out_of_bounds(key, value)
            if problem:
                raise ValueError(f"{where} {problem}")
            if key == "target" and value.dtype.kind == "i" and value.size and value.min() < -1:
                raise ValueError(f"{where} holds {value.min()}; a target is a class ≥ 0, or −1 where there is none")
    if trace.tokens is not None:
        if not isinstance(trace.tokens, list):
            raise ValueError(
                f"Trace: tokens must be a list of strings (one per position) or None, got {type(trace.tokens).__name__}"
            )
        check_text(trace.tokens, "Trace: tokens")
    if trace.vocabulary is not None:
        if not isinstance(trace.vocabulary, list):
            raise ValueError(
                f"Trace: vocabulary must be a list of strings (each class's text) or None, "
                f"got {type(trace.vocabulary).__name__}"
            )
        check_text(trace.vocabulary, "Trace: vocabulary", "one a class")
    if not isinstance(trace.summaries, dict):
        raise ValueError(f"Trace: summaries must be a dict by layer, got {type(trace.summaries).__name__}")


VECTOR_SHAPES = {"mu_read": ("K", 3), "read": ("K", "C"), "mu_write": ("K", 3), "sigma": ("K",), "content": ("K", "C")}


def check_layer_fields(layer: Any, volumes: tuple[str, ...]) -> None:
    """A LayerTrace's arguments: volumes ``h`` (K, C, D, H, W) and the others of ``volumes`` None or alike, the vectors
    numpy arrays of K rows (:data:`VECTOR_SHAPES`), σ(γ) a number in [0, 1]."""
    shape = tuple(getattr(layer.h, "shape", ()))
    if len(shape) != 5:
        raise ValueError(f"LayerTrace: h must be the hidden volumes (K, C, D, H, W), got shape {shape}")
    sizes = {"K": shape[0], "C": shape[1]}
    for field in volumes:
        value = getattr(layer, field)
        if field != "h" and value is not None and tuple(getattr(value, "shape", ())) != shape:
            got = getattr(value, "shape", type(value).__name__)
            raise ValueError(f"LayerTrace: {field} must be None or volumes of h's shape {shape}, got {got}")
    for field, dims in VECTOR_SHAPES.items():
        value, want = getattr(layer, field), tuple(sizes.get(d, d) for d in dims)
        if not isinstance(value, np.ndarray) or value.shape != want:
            got = value.shape if isinstance(value, np.ndarray) else type(value).__name__
            raise ValueError(
                f"LayerTrace: {field} must be a numpy array of shape {want} ({', '.join(map(str, dims))}), got {got}"
            )
    gate = layer.gate_scale
    if isinstance(gate, (bool, np.bool_)) or not isinstance(gate, numbers.Real) or not (gate != gate or 0 <= gate <= 1):
        raise ValueError(f"LayerTrace: gate_scale must be σ(γ), a sigmoid: a number in [0, 1], got {gate!r}")
