"""Carry every memory's state from one call of a model to the next.

A :class:`TensorMemory` called without a state starts from zeros, so a model that calls its
memories as ``mem(x)`` (a Hugging Face model with a memory attached, most people's own code)
sees a fresh memory at every forward call. Inside ``with streaming(model) as stream:`` each
memory of ``model`` instead continues from the state its previous call left, including the
tokens of a chunk a call cut in two, so feeding a sequence in pieces gives the outputs of
one pass (for the memories: attention sees across calls only where the model keeps a cache; and a
memory with ``public_code.partial_chunk="pad"`` writes a padded chunk at every call, so only calls cut at
chunk boundaries give one pass there)::

    with streaming(model) as stream:
        for piece in pieces:
            model(piece)          # each memory reads what earlier pieces wrote
        stream.reset()            # the next call starts a new sequence

A call that passes its own state (this project's backbones do) uses that state; the stream
keeps whatever the call returns. Leaving the block removes the carrying: the next call is
fresh again. The state keeps its autograd graph; ``stream.detach()`` cuts it (truncated
backpropagation through time). Inside ``with streams_paused():`` the streams open at its start neither give nor keep
a state, so a look at the model between two steps (a monitor's probe) leaves the carried states as they were.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from torch import nn

from .config import MemoryState
from .layer import memory_layers

_OPEN: weakref.WeakSet[Stream] = weakref.WeakSet()  # the streams whose ``with`` block is running
_PAUSED: ContextVar[frozenset[int]] = ContextVar("paused_streams", default=frozenset())  # ids of paused streams


class Stream:
    """The states carried between calls, by memory path; :meth:`reset` starts a new sequence."""

    def __init__(self, model: nn.Module) -> None:
        if not isinstance(model, nn.Module):
            raise ValueError(
                f"streaming: model must be a torch.nn.Module (the model itself), got {type(model).__name__}"
            )
        self.memories = memory_layers(model)
        if not self.memories:
            raise ValueError("no TensorMemory layer in this model: streaming carries memory states")
        self.states: dict[str, MemoryState] = {}

    def reset(self) -> None:
        """Forget every carried state: the next call of each memory starts from zeros."""
        self.states.clear()

    def detach(self) -> None:
        """Keep the carried values but cut their autograd history (truncated backpropagation)."""
        self.states = {name: state.detach() for name, state in self.states.items()}

    def before_call(self, name: str, args: tuple, kwargs: dict[str, Any]):
        """Forward pre-hook of memory ``name``: give a call without a state the carried one."""
        given = args[1] if len(args) > 1 else kwargs.get("state")
        carried = self.states.get(name)
        if given is not None or carried is None or id(self) in _PAUSED.get():
            return None
        x = args[0] if args else kwargs["x"]
        if x.shape[0] != carried.h.shape[0]:
            raise ValueError(
                f"streaming: memory {name!r} carries a state for a batch of {carried.h.shape[0]}, "
                f"this call has {x.shape[0]}; call stream.reset() before a new sequence"
            )
        if args:
            return (args[0], carried), kwargs
        return args, {**kwargs, "state": carried}

    def after_call(self, name: str, output: tuple) -> None:
        """Forward hook of memory ``name``: keep the state the call returned."""
        if id(self) not in _PAUSED.get():
            self.states[name] = output[1]


@contextmanager
def streaming(model: nn.Module) -> Iterator[Stream]:
    """Within the block, every :class:`TensorMemory` in ``model`` continues from its previous call's state."""
    stream = Stream(model)
    handles = []
    for name, memory in stream.memories.items():
        handles.append(
            memory.register_forward_pre_hook(
                lambda _m, args, kwargs, name=name: stream.before_call(name, args, kwargs), with_kwargs=True
            )
        )
        handles.append(
            memory.register_forward_hook(lambda _m, _args, output, name=name: stream.after_call(name, output))
        )
    _OPEN.add(stream)
    try:
        yield stream
    finally:
        _OPEN.discard(stream)
        for handle in handles:
            handle.remove()


@contextmanager
def streams_paused() -> Iterator[None]:
    """Within the block, every stream open at its start passes calls through fresh and keeps nothing they return;
    streams opened inside it carry as usual."""
    token = _PAUSED.set(_PAUSED.get() | {id(stream) for stream in _OPEN})
    try:
        yield
    finally:
        _PAUSED.reset(token)


__all__ = ["Stream", "streaming", "streams_paused"]
