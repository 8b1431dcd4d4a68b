"""Rendering native values to text (spec §12 A11, docs/language.md)."""

from __future__ import annotations

import dataclasses
import datetime
import enum
from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel

from kedi.runtime.values import render


class Ticket(BaseModel):
    id: int
    title: str
    labels: set[str] = set()


@dataclasses.dataclass
class Point:
    x: int
    y: tuple[int, int]


class Color(enum.Enum):
    RED = "red"


class Opaque:
    def __str__(self) -> str:
        return "opaque!"


@pytest.mark.parametrize(
    ("value", "text"),
    [
        ("Ada", "Ada"),
        ("", ""),
        (3, "3"),
        (-0.5, "-0.5"),
        (True, "True"),
        (None, "None"),
        (Decimal("1.10"), "1.10"),
        (datetime.date(2024, 1, 1), "2024-01-01"),
        (datetime.datetime(2024, 1, 1, 9, 30), "2024-01-01 09:30:00"),
        (datetime.time(9, 30), "09:30:00"),
        (datetime.timedelta(hours=1, minutes=30), "1:30:00"),
        (["a", 1, None, True], '["a",1,null,true]'),
        ((1, 2), "[1,2]"),
        ({"k": [1, 2]}, '{"k":[1,2]}'),
        ({"zeta", "alpha", "mid"}, '["alpha","mid","zeta"]'),
        (frozenset({3, 1, 2}), "[1,2,3]"),
        ({1, "a"}, '[1,"a"]'),
        ({"when": datetime.date(2024, 1, 1)}, '{"when":"2024-01-01"}'),
        (["é"], '["é"]'),
        (Ticket(id=7, title="Bug", labels={"b", "a"}), '{"id":7,"title":"Bug","labels":["a","b"]}'),
        ([Ticket(id=1, title="x")], '[{"id":1,"title":"x","labels":[]}]'),
        (Point(1, (2, 3)), '{"x":1,"y":[2,3]}'),
        ([Opaque()], '["opaque!"]'),
        (Color.RED, "Color.RED"),
        (Opaque(), "opaque!"),
    ],
)
def test_render(value: Any, text: str) -> None:
    assert render(value) == text


def test_render_returns_the_same_string_object() -> None:
    value = "a long prompt " * 10
    assert render(value) is value


def test_render_dataclass_class_is_not_json() -> None:
    assert render(Point) == str(Point)
