"""Rendering: how a native value becomes prompt or return text.

A value stays native until it crosses a rendered-text boundary (`<x>` in a
prompt, text mixed with substitutions, `= <x>`). There it becomes text through
`render`, which settles the Kedi documentation's open question (spec §12 A11):

=============================================  ======================================
value                                          text
=============================================  ======================================
`str` (and `str` subclasses)                   the string itself
`bool`, `int`, `float`, `None`, `Decimal`      `str(value)`: `True`, `3`, `0.5`, `None`
`datetime`, `date`, `time`, `timedelta`        `str(value)`: `2024-01-01`, `1:30:00`
pydantic models, dataclasses,                  compact JSON (`pydantic_core.to_json`):
`list`, `tuple`, `set`, `frozenset`, `dict`    `["a","b"]`, `{"id":7,"title":"Bug"}`
anything else                                  `str(value)`
=============================================  ======================================

Why: scalars read naturally as `str()` (a prompt wants `3`, not `"3"`), while
containers and models are structure, and JSON is the form models read best and
the form their schemas describe. Inside JSON, sets are sorted (by value, or by
type name and `repr` when the items do not compare) so the text is stable from
run to run, tuples become arrays, and leaves that JSON cannot represent fall
back to `str()`.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Sequence
from decimal import Decimal
from types import NoneType
from typing import Any

from pydantic import BaseModel
from pydantic_core import to_json

from kedi.syntax import ast

_STR_TYPES = frozenset(
    {
        int,
        float,
        bool,
        NoneType,
        Decimal,
        datetime.datetime,
        datetime.date,
        datetime.time,
        datetime.timedelta,
    }
)
_CONTAINERS = (list, tuple, set, frozenset, dict, BaseModel)


def render(value: Any) -> str:
    """Return the text a value renders to at a rendered-text boundary (see the module table)."""
    cls = type(value)
    if cls is str:
        return value
    if cls in _STR_TYPES:
        return str(value)
    if isinstance(value, _CONTAINERS) or (
        dataclasses.is_dataclass(value) and not isinstance(value, type)
    ):
        return to_json(_plain(value), fallback=str).decode()
    return str(value)


def _plain(value: Any) -> Any:
    """Turn models, dataclasses, tuples and sets into JSON-shaped data; sort sets."""
    if isinstance(value, BaseModel):
        return _plain(value.model_dump())
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if isinstance(value, set | frozenset):
        items = [_plain(item) for item in value]
        try:
            return sorted(items)
        except TypeError:
            # Mixed item types: still a stable order, by type name then repr.
            return sorted(items, key=lambda item: (type(item).__name__, repr(item)))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return value


def capture_placeholder(name: str) -> str:
    """How a capture `[name: Type]` shows in the prompt: `[name]` (decision A10)."""
    return f"[{name}]"


def constant_text(rows: Sequence[ast.Row]) -> str | None:
    """The text of template rows that hold only literal text and captures, else None.

    Such rows render the same every time (a capture shows as `[name]`, rows
    join with newlines), so callers render them once; rows with a
    substitution, a call or Python return None and are rendered per use.
    """
    lines = []
    for row in rows:
        parts = []
        for segment in row.segments:
            if isinstance(segment, ast.Text):
                parts.append(segment.value)
            elif isinstance(segment, ast.Capture):
                parts.append(capture_placeholder(segment.name))
            else:
                return None
        lines.append("".join(parts))
    return "\n".join(lines)
