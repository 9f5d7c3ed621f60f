"""Shared plumbing for the project's configuration dataclasses, and the initial spread of learned markers.

Every config is a ``@dataclass`` that can be turned into plain JSON-able dicts and back,
so that it can live in ``config.json`` beside the weights of a checkpoint.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, TypeVar

T = TypeVar("T", bound="ConfigBase")

# Initial spread of learned vectors, by their role. In the task encoders, what a token
# carries for the memory to keep (a binding's value, a counter's token) starts at PyTorch's N(0, 1).
# Markers of where a token sits or what kind it is (a patch's place in its frame, a map cell's row
# and column, the query flag) start at 0.02: at N(0, 1) they are an order of magnitude larger than
# the features the encoders' Linear maps give the pixels or values beside them, every chunk then
# looks alike to the memory and its writes collapse to one place. Both measured in
# docs/trainability.md. The registers backbone's register tokens are markers too.
CONTENT_STD = 1.0
MARKER_STD = 0.02


class ConfigBase:
    """Mixin giving a dataclass ``to_dict`` / ``from_dict`` with strict key checking."""

    # The fields that name folders of the user's own data for a task to read (a corpus, pictures, videos). A
    # checkpoint uploaded to a shared app must not make the server read a path of its choosing (app/upload.py).
    DATA_PATHS: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = {}
        for field in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, field.name)
            if isinstance(value, ConfigBase):
                value = value.to_dict()
            elif isinstance(value, tuple):
                value = list(value)
            out[field.name] = value
        return out

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any]) -> T:
        if not isinstance(data, dict):
            raise ValueError(f"{cls.__name__}.from_dict expects a dict, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{cls.__name__}: unknown field(s) {unknown}; known fields are {sorted(known)}")
        return cls(**data)


def require_int(owner: str, name: str, value: Any, minimum: int, maximum: int | None = None) -> None:
    """Raise ``ValueError`` naming ``owner.name`` unless ``value`` is an int in [minimum, maximum]."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{owner}.{name} must be an integer >= {minimum}, got {value!r}")
    if maximum is not None and value > maximum:
        raise ValueError(
            f"{owner}.{name} must be at most {maximum:,} (the ceiling in tensor_memory/limits.py), got {value:,}"
        )


def require_float(
    owner: str, name: str, value: Any, low: float = -math.inf, high: float = math.inf, low_open: bool = False
) -> None:
    """Raise ``ValueError`` unless ``value`` is a finite number in the range [low, high] (or (low, high])."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok:
        ok = (value > low if low_open else value >= low) and value <= high
    if not ok:
        bracket = "(" if low_open else "["
        where = "" if (low, high) == (-math.inf, math.inf) else f" in {bracket}{low}, {high}]"
        raise ValueError(f"{owner}.{name} must be a finite number{where}, got {value!r}")
