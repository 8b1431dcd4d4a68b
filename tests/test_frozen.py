"""`kedi._frozen.constructor` builds the very objects the dataclass's own `__init__` would."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from kedi._frozen import constructor


@dataclasses.dataclass(frozen=True, slots=True)
class Point:
    x: int
    y: int = 0
    tags: tuple[str, ...] = dataclasses.field(default_factory=tuple)
    meta: dict[str, int] = dataclasses.field(default_factory=dict, kw_only=True)


new_point = constructor(Point)


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((1,), {}),
        ((1, 2), {}),
        ((1, 2, ("a",)), {}),
        ((1,), {"meta": {"k": 1}}),
        ((), {"x": 3, "y": 4}),
    ],
)
def test_same_object_as_the_dataclass_init(args: tuple, kwargs: dict) -> None:
    built = new_point(*args, **kwargs)
    assert type(built) is Point
    assert built == Point(*args, **kwargs)
    assert repr(built) == repr(Point(*args, **kwargs))


def test_default_factories_make_a_fresh_value_per_object() -> None:
    first, second = new_point(1), new_point(2)
    assert first.meta == {} and first.meta is not second.meta


def test_built_objects_stay_frozen() -> None:
    built = new_point(1, 2)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.x = 5  # type: ignore[misc]


def test_signature_matches_the_dataclass() -> None:
    assert list(inspect.signature(new_point).parameters) == ["x", "y", "tags", "meta"]
    assert inspect.signature(new_point).parameters["meta"].kind is inspect.Parameter.KEYWORD_ONLY
    with pytest.raises(TypeError):
        new_point()
