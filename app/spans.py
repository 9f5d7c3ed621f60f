"""Which chunks of a trace go to the browser at once: a page of a long trace, and the chunk a sample opens on.

Pure functions of the trace's length, shared by the page controls (``paging.py``) and the session's state.
"""

from __future__ import annotations

from analysis.figures.annotations import key_chunk
from analysis.traces.trace import Trace

STEPPING_WINDOW = 64  # a trace longer than this goes to the browser this many chunks at a time (a page of it)


def stepping_span(chunk: int, count: int, width: int = STEPPING_WINDOW) -> tuple[int, int] | None:
    """The page of a long trace that holds ``chunk``: (first, last) of the ``width`` chunks from ⌊chunk / width⌋·width
    (the last page may be shorter); None for a trace of at most ``width`` chunks, which goes to the browser whole."""
    if count <= width:
        return None
    first = min(max(int(chunk), 0), count - 1) // width * width
    return first, min(first + width, count) - 1


def opening_chunk(trace: Trace, width: int = STEPPING_WINDOW) -> int:
    """The chunk a sample opens on: its key chunk (:func:`key_chunk`), or the first of a trace longer than one page,
    which opens on its first page with Next to step on (its key chunk may lie on any page, the last one at worst)."""
    return 0 if trace.num_chunks > width else key_chunk(trace)


__all__ = ["STEPPING_WINDOW", "stepping_span", "opening_chunk"]
