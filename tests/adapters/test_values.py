"""The offline value generator: JSON Schema → deterministic, schema-valid instance."""

from __future__ import annotations

import datetime as dt
import enum
import json
import math
import uuid
from decimal import Decimal
from ipaddress import IPv4Address, IPv6Address
from typing import Annotated, Any, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, Field, HttpUrl, Json, ValidationError, create_model

from kedi.adapters._values import synthesize


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Address(BaseModel):
    street: str
    zip_code: Annotated[str, Field(pattern=r"^\d{5}$")]


class Person(BaseModel):
    name: str
    age: Annotated[int, Field(ge=0, le=150)]
    address: Address


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = 9


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool


class Tree(BaseModel):
    label: str
    children: list[Tree]
    parent: Tree | None


class Even(BaseModel):
    odd: Odd | None = None
    items: list[Odd] = Field(default_factory=list)


class Odd(BaseModel):
    even: Even


def valid_instance(annotation: Any, **field_kwargs: Any) -> tuple[Any, Any]:
    """Synthesize for a one-field model; validate strictly as an `OutputSpec` does."""
    model = create_model("Out", value=(annotation, Field(**field_kwargs)))
    data = synthesize(model.model_json_schema())
    instance = model.model_validate_json(json.dumps(data), strict=True)
    return data["value"], instance.value


TYPES: list[tuple[str, Any, dict[str, Any]]] = [
    ("str", str, {}),
    ("int", int, {}),
    ("float", float, {}),
    ("bool", bool, {}),
    ("literal", Literal["low", "high"], {}),
    ("optional", int | None, {}),
    ("enum", Color, {}),
    ("nested model", Person, {}),
    ("list of models", list[Person], {}),
    ("dict of float lists", dict[str, list[float]], {}),
    ("datetime", dt.datetime, {}),
    ("date", dt.date, {}),
    ("time", dt.time, {}),
    ("timedelta", dt.timedelta, {}),
    ("email-like pattern", str, {"pattern": r"^[^@\s]+@[^@\s]+\.[a-z]{2,}$"}),
    ("code pattern", str, {"pattern": r"^[A-Z]{3}-\d{2}(x|y)?$"}),
    ("alternation pattern", str, {"pattern": r"^(?:north|south)-(east|west)$"}),
    ("int exclusive bounds", int, {"gt": 3, "lt": 5}),
    ("int multiple of", int, {"multiple_of": 5, "ge": 7}),
    ("negative int", int, {"le": -5}),
    ("float exclusive bounds", float, {"gt": 0.5, "lt": 0.6}),
    ("float multiple of", float, {"multiple_of": 0.25, "gt": 1}),
    ("set with min length", set[int], {"min_length": 3}),
    ("frozenset of str", frozenset[str], {"min_length": 2}),
    ("uuid", uuid.UUID, {}),
    ("http url", HttpUrl, {}),
    ("tuple", tuple[str, bool], {}),
    ("variadic tuple", tuple[int, ...], {}),
    ("discriminated union", Annotated[Cat | Dog, Field(discriminator="kind")], {}),
    ("plain union", int | str, {}),
    ("recursive model", Tree, {}),
    ("mutually recursive", Even, {}),
    ("decimal", Decimal, {}),
    ("ipv4", IPv4Address, {}),
    ("ipv6", IPv6Address, {}),
    ("json string", Json[list[int]], {}),
    ("any", Any, {}),
    ("bounded str", str, {"min_length": 10, "max_length": 12}),
    ("list of dates unique", set[dt.date], {"min_length": 3}),
    ("list with max", list[str], {"max_length": 0}),
]


@pytest.mark.parametrize(
    ("annotation", "kwargs"), [t[1:] for t in TYPES], ids=[t[0] for t in TYPES]
)
def test_values_validate_for_many_pydantic_types(annotation: Any, kwargs: dict[str, Any]) -> None:
    valid_instance(annotation, **kwargs)


@pytest.mark.parametrize(
    ("annotation", "kwargs", "expected"),
    [
        (str, {"pattern": r"^[A-Z]{3}-\d{2}(x|y)?$"}, "AAA-00"),
        (int, {"multiple_of": 5, "ge": 7}, 10),
        (set[int], {"min_length": 3}, [0, 1, 2]),
        (int, {"gt": 3, "lt": 5}, 4),
        (int, {"le": -5}, -5),
        (int, {"lt": 0}, -1),
        (int | None, {}, 0),
        (int | None, {"default": None}, None),
        (int, {"default": 42}, 42),
        (Literal["low", "high"], {}, "low"),
        (Color, {}, "red"),
        (dt.datetime, {}, "2000-01-01T00:00:00Z"),
        (tuple[str, bool], {}, ["value", True]),
        (dict[str, list[float]], {}, {"key": [0.0]}),
        (str, {"min_length": 8}, "valuexxx"),
        (str, {"max_length": 3}, "val"),
        (list[str], {"min_length": 2}, ["value", "value 2"]),
    ],
)
def test_values_are_the_smallest_readable_choice(
    annotation: Any, kwargs: dict[str, Any], expected: Any
) -> None:
    data, _ = valid_instance(annotation, **kwargs)
    assert data == expected


def test_strings_read_like_their_field_names() -> None:
    model = create_model("Out", home_city=(str, ...), country=(str, ...))
    assert synthesize(model.model_json_schema()) == {"home_city": "home city", "country": "country"}


def test_float_in_a_narrow_open_interval_is_strictly_inside() -> None:
    data, _ = valid_instance(float, gt=0.5, lt=0.6)
    assert 0.5 < data < 0.6


def test_discriminated_union_takes_the_first_branch() -> None:
    _, value = valid_instance(Annotated[Cat | Dog, Field(discriminator="kind")])
    assert value == Cat(kind="cat")


def test_recursion_stops_at_the_first_repeat() -> None:
    _, tree = valid_instance(Tree)
    assert tree.children == [Tree(label="label", children=[], parent=None)]
    assert tree.parent == Tree(label="label", children=[], parent=None)


def test_unique_items_are_distinct_for_formats_and_enums() -> None:
    _, dates = valid_instance(set[dt.date], min_length=3)
    assert len(dates) == 3
    model = create_model("Out", colors=(set[Color], Field(min_length=2)))
    assert synthesize(model.model_json_schema()) == {"colors": ["red", "green"]}


def test_unsatisfiable_recursion_ends_and_fails_validation() -> None:
    class Loop(BaseModel):
        again: Loop

    data = synthesize(Loop.model_json_schema())
    with pytest.raises(ValidationError):
        Loop.model_validate_json(json.dumps(data), strict=True)


def test_pattern_python_cannot_parse_falls_back_to_the_name() -> None:
    # `\p{L}` is valid for pydantic's Rust regex engine but not for Python's re.
    model = create_model("Out", word=(str, Field(pattern=r"^\p{L}+$")))
    data = synthesize(model.model_json_schema())
    assert data == {"word": "word"}
    model.model_validate_json(json.dumps(data), strict=True)


def test_pattern_backreferences_repeat_the_group() -> None:
    # Pydantic's default Rust engine has no backreferences; the generator still handles them.
    assert synthesize({"type": "string", "pattern": r"^(ab|cd)-\1$"}) == "ab-ab"


def test_pattern_respects_min_length_by_repeating() -> None:
    data, _ = valid_instance(str, pattern=r"^[a-z]+$", min_length=4)
    assert data == "aaaa"


def test_optional_properties_take_their_defaults() -> None:
    class Settings(BaseModel):
        name: str
        retries: int = 3
        tags: list[str] = Field(default_factory=list)

    assert synthesize(Settings.model_json_schema()) == {
        "name": "name",
        "retries": 3,
        "tags": ["tags"],
    }


def test_generation_is_deterministic_and_does_not_share_schema_objects() -> None:
    schema = create_model(
        "Out", people=(list[Person], ...), tags=(list[str], ["a"])
    ).model_json_schema()
    first = synthesize(schema)
    assert first == synthesize(schema)
    first["tags"].append("edited")
    assert synthesize(schema)["tags"] == ["a"]


def test_bare_and_boolean_schemas() -> None:
    assert synthesize({}) == "text"
    assert synthesize({}, name="summary") == "summary"
    assert synthesize(True) == "text"
    assert synthesize({"type": ["null", "integer"]}) == 0
    assert synthesize({"type": "array", "prefixItems": [{"type": "integer"}], "items": False}) == [
        0
    ]
    assert synthesize({"$ref": "#/$defs/Missing"}) == "text"


@given(
    low=st.integers(-1000, 1000),
    span=st.integers(0, 1000),
    step=st.integers(1, 50),
    exclusive=st.booleans(),
)
def test_integers_land_in_bounds_on_a_multiple(
    low: int, span: int, step: int, exclusive: bool
) -> None:
    high = low + span
    schema: dict[str, Any] = {"type": "integer", "multipleOf": step}
    schema |= (
        {"exclusiveMinimum": low - 1, "exclusiveMaximum": high + 1}
        if exclusive
        else {"minimum": low, "maximum": high}
    )
    value = synthesize(schema)
    if any(
        low <= k * step <= high for k in range(math.ceil(low / step), math.floor(high / step) + 1)
    ):
        assert low <= value <= high
        assert value % step == 0


@given(
    low=st.floats(-1e6, 1e6),
    width=st.floats(1e-3, 1e6),
    low_open=st.booleans(),
    high_open=st.booleans(),
)
def test_floats_land_inside_open_and_closed_bounds(
    low: float, width: float, low_open: bool, high_open: bool
) -> None:
    high = low + width
    schema = {
        "type": "number",
        "exclusiveMinimum" if low_open else "minimum": low,
        "exclusiveMaximum" if high_open else "maximum": high,
    }
    value = synthesize(schema)
    assert low < value if low_open else low <= value
    assert value < high if high_open else value <= high
