"""Figures built once per set of inputs, and the next chunks' figures built ahead of time.

Building a Plotly figure costs tens of milliseconds (validation, templates, subplots); a chunk
view has eight. :class:`FigureCache` keeps built figures by a key naming everything they depend
on (sample, layer, view settings, chunk), least recently used out first, and builds requested
keys in one worker thread while the current chunk is on screen, so stepping to a neighbour finds
its figures ready. A figure taken from the cache is shared: callers never modify it
(``st.plotly_chart`` only reads it). A key being built ahead is waited for, never built twice.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Hashable, Iterable

import streamlit as st

CAPACITY = 160  # figure sets kept; a set of a few figures takes a few hundred kB


class FigureCache:
    """A bounded, thread-safe memo of built figures with one worker that builds ahead."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._done: OrderedDict[Hashable, Any] = OrderedDict()
        self._pending: dict[Hashable, Future] = {}
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="figures-ahead")

    def _store(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._done[key] = value
            self._done.move_to_end(key)
            while len(self._done) > self._capacity:
                self._done.popitem(last=False)

    def get(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The value for ``key``: cached, or waited for if being built ahead, or built now."""
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
            pending = self._pending.get(key)
        if pending is not None and not pending.cancelled():
            try:
                return pending.result()
            except Exception:  # noqa: BLE001  the build's error is raised again by building here
                pass
        value = build()
        self._store(key, value)
        return value

    def _build_ahead(self, key: Hashable, build: Callable[[], Any]) -> Any:
        try:
            value = build()
            self._store(key, value)
            return value
        finally:
            with self._lock:
                self._pending.pop(key, None)

    def ahead(self, jobs: Iterable[tuple[Hashable, Callable[[], Any]]]) -> None:
        """Build these keys in the worker, in order; jobs queued earlier and not yet started are dropped."""
        with self._lock:
            for future in list(self._pending.values()):
                future.cancel()
            self._pending = {k: f for k, f in self._pending.items() if not f.cancelled()}
            for key, build in jobs:
                if key not in self._done and key not in self._pending:
                    self._pending[key] = self._worker.submit(self._build_ahead, key, build)


@st.cache_resource
def figure_cache() -> FigureCache:
    """The process's figure cache, shared by every session (keys name everything a figure depends on)."""
    return FigureCache()


__all__ = ["FigureCache", "figure_cache"]
