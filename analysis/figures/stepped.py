"""One figure at every chunk of a span: the figure drawn once, and per chunk only the values that change.

Building a Plotly figure costs milliseconds (its objects validate every property), so a page of 64 chunks drawn
figure by figure costs seconds. A view whose chunks differ in a few values (the current-chunk marker, a volume's
data, a title) is drawn once, at one chunk, by its builder; its ``*_leaves`` function (beside the builder, from the
same helpers) gives each chunk's :class:`Leaves`: a path into the figure's JSON → the value there. The figure at
chunk k is the drawn figure with chunk k's leaves put in (:func:`patched`), exactly as the builder draws it at k.
"""

from __future__ import annotations

import base64
import json
import math
from typing import Any

import numpy as np
import plotly.graph_objects as go
from _plotly_utils.utils import convert_to_base64, plotlyjsShortTypes
from plotly.io.json import to_json_plotly

Path = tuple[str | int, ...]  # keys and list indices into {"data": [...], "layout": {...}}; -1: a list's last


class Leaves(dict[Path, Any]):
    """The values of one chunk's figure that differ from the drawn one, by their path."""


def figure_json(fig: go.Figure) -> dict[str, Any]:
    """The figure as the JSON plotly.js takes (arrays as typed-array objects), as ``fig.to_json()`` writes it."""
    return json.loads(fig.to_json())


def _native(value: Any) -> bool:
    """Whether ``value`` is written to JSON as it is: text, a whole number, a finite float, True, False, None."""
    return value is None or type(value) in (str, bool, int) or (type(value) is float and math.isfinite(value))


def _plain(value: Any) -> Any:
    """``value`` as ``fig.to_json()`` writes it inside a figure: numbers, text, arrays as typed-array objects
    (plotly's own conversion for the rare int64 ones; its checks of other libraries' frames cost more than the
    rest of a chunk's leaves); Python's own text, whole numbers, finite floats and None as they are, and lists of
    them, and arrays of text as lists."""
    if _native(value) or (type(value) is list and all(map(_native, value))):
        return value
    if isinstance(value, np.ndarray) and value.dtype.kind == "U":
        return value.tolist()
    if isinstance(value, np.ndarray) and value.size and str(value.dtype) in plotlyjsShortTypes:
        array = np.ascontiguousarray(value)
        typed = {"dtype": plotlyjsShortTypes[str(array.dtype)], "bdata": base64.b64encode(array).decode("ascii")}
        return typed | ({"shape": str(array.shape)[1:-1]} if array.ndim > 1 else {})
    holder = {"value": value}
    convert_to_base64(holder)
    return json.loads(to_json_plotly(holder))["value"]


def plain_leaves(drawn: dict[str, Any], leaves: Leaves) -> list[list[Any]]:
    """``leaves`` as JSON for the figure ``drawn`` (its :func:`figure_json`): ``[path, value]`` pairs with every
    index counted from the start, so that the browser puts them in as :func:`patched` does."""
    out = []
    for path, value in leaves.items():
        node, resolved = drawn, []
        for key in path:
            if isinstance(key, int) and key < 0:
                key += len(node)
            resolved.append(key)
            node = node[key] if isinstance(node, list) or key in node else {}
        out.append([resolved, _plain(value)])
    return out


def patched(drawn: dict[str, Any], plain: list[list[Any]]) -> dict[str, Any]:
    """The figure JSON ``drawn`` with :func:`plain_leaves` put in (a copy; ``drawn`` is left as it is)."""
    out = json.loads(json.dumps(drawn))
    for path, value in plain:
        node = out
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(node, dict) else node[key]
        node[path[-1]] = value
    return out


__all__ = ["Leaves", "Path", "figure_json", "plain_leaves", "patched"]
