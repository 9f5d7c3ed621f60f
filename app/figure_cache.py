"""Figures built once per set of inputs.

Building a Plotly figure costs tens of milliseconds (validation, templates, subplots); the pages
stepped by the server (Occlusion, Teach, Images, Text, Export) draw a few per chunk, and the
Export page the whole Explore set. :class:`FigureCache` keeps built figures by a key naming
everything they depend on (sample, layer, view settings, chunk), least recently used out first.
A figure taken from the cache is shared: callers never modify it (``st.plotly_chart`` only reads
it). The Explore page needs none of this: its views go to the browser once (``browser_stepper``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

import streamlit as st

CAPACITY = 160  # figure sets kept; a set of a few figures takes a few hundred kB


class FigureCache:
    """A bounded, thread-safe memo of built figures."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._lock = threading.Lock()
        self._done: OrderedDict[Hashable, Any] = OrderedDict()

    def get(self, key: Hashable, build: Callable[[], Any]) -> Any:
        """The value for ``key``: cached, or built now (two sessions asking at once may both build it)."""
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                return self._done[key]
        value = build()
        with self._lock:
            self._done[key] = value
            self._done.move_to_end(key)
            while len(self._done) > self._capacity:
                self._done.popitem(last=False)
        return value


@st.cache_resource
def figure_cache() -> FigureCache:
    """The process's figure cache, shared by every session (keys name everything a figure depends on)."""
    return FigureCache()


__all__ = ["FigureCache", "figure_cache"]
