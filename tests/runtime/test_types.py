"""Kedi type expressions, custom types, strict checks and output schemas."""

from __future__ import annotations

import datetime
import inspect
import pickle
import typing
from typing import Annotated, Any, Literal, Optional

import pytest
from pydantic import BaseModel, FileUrl, HttpUrl, ValidationError

from kedi.runtime.types import (
    BUILTIN_TYPES,
    Email,
    KediModel,
    Regex,
    TypeCheckError,
    TypeResolutionError,
    UnknownTypeError,
    build_custom_type,
    check_value,
    output_spec,
    resolve_type,
    type_label,
)
from kedi.source import Span
from kedi.syntax.ast import (
    CustomType,
    FieldDef,
    PythonCode,
    TypeExpr,
    TypeLiteral,
    TypeName,
    TypePython,
    TypeSubscript,
    TypeUnion,
)

SPAN = Span("flow.kedi", 3, 5, 3, 12)


def name(text: str) -> TypeName:
    return TypeName(name=text, span=SPAN)


def sub(base: str, *args: TypeExpr) -> TypeSubscript:
    return TypeSubscript(base=name(base), args=args, span=SPAN)


def lit(value: Any) -> TypeLiteral:
    return TypeLiteral(value=value, span=SPAN)


def code(text: str, line: int = 1) -> PythonCode:
    return PythonCode(code=text, first_line=line)


def no_names(key: str) -> Any:
    raise KeyError(key)


def python(namespace: dict[str, Any] | None = None) -> Any:
    """An `evaluate` callable over a plain namespace."""
    scope = dict(namespace or {})
    return lambda snippet: eval(snippet.code, scope)


def resolve(expr: TypeExpr | None, names: dict[str, Any] | None = None) -> Any:
    table = names or {}

    def lookup(key: str) -> Any:
        return table[key]

    return resolve_type(expr, lookup, python(table))


def custom(type_name: str, *fields: FieldDef) -> CustomType:
    return CustomType(name=type_name, fields=fields, span=Span("flow.kedi", 1, 1, 1, 10))


def field(field_name: str, type_: TypeExpr | None = None, default: str | None = None) -> FieldDef:
    return FieldDef(
        name=field_name,
        type=type_,
        default=code(default) if default is not None else None,
        span=SPAN,
    )


# --------------------------------------------------------------------------- resolution


@pytest.mark.parametrize(
    ("type_name", "expected"),
    [
        ("str", str),
        ("int", int),
        ("float", float),
        ("bool", bool),
        ("bytes", bytes),
        ("object", object),
        ("list", list),
        ("dict", dict),
        ("tuple", tuple),
        ("set", set),
        ("datetime", datetime.datetime),
        ("date", datetime.date),
        ("time", datetime.time),
        ("timedelta", datetime.timedelta),
        ("Regex", Regex),
        ("Email", Email),
        ("HttpUrl", HttpUrl),
        ("FileUrl", FileUrl),
        ("Any", Any),
        ("None", None),
    ],
)
def test_builtin_type_names_resolve(type_name: str, expected: Any) -> None:
    assert resolve(name(type_name)) is expected


def test_builtin_table_lists_the_documented_names() -> None:
    documented = (
        "str int float bool bytes object list dict tuple set Union Optional Literal Annotated "
        "datetime date time timedelta Regex Email HttpUrl FileUrl Any None"
    )
    assert set(BUILTIN_TYPES) == set(documented.split())


def test_missing_annotation_means_str() -> None:
    assert resolve(None) is str


def test_nested_generics() -> None:
    annotation = resolve(sub("dict", name("str"), sub("list", name("float"))))
    assert annotation == dict[str, list[float]]
    assert check_value(annotation, {"a": [1.5, 2.0]}) == {"a": [1.5, 2.0]}


def test_tuple_with_ellipsis() -> None:
    assert resolve(sub("tuple", name("int"), name("..."))) == tuple[int, ...]


def test_union_syntax_with_none() -> None:
    annotation = resolve(TypeUnion(options=(name("str"), name("None")), span=SPAN))
    assert annotation == str | None
    assert check_value(annotation, None) is None


def test_union_with_literal_none_node() -> None:
    assert resolve(TypeUnion(options=(name("int"), lit(None)), span=SPAN)) == int | None


def test_optional_and_union_subscripts() -> None:
    assert resolve(sub("Optional", name("int"))) == int | None
    assert resolve(sub("Union", name("int"), name("str"))) == int | str


def test_optional_takes_exactly_one_argument() -> None:
    with pytest.raises(TypeResolutionError, match="`Optional` takes exactly one type"):
        resolve(sub("Optional", name("int"), name("str")))


def test_literal_values() -> None:
    annotation = resolve(sub("Literal", lit("open"), lit("closed")))
    assert annotation == Literal["open", "closed"]
    assert check_value(annotation, "open") == "open"
    with pytest.raises(TypeCheckError) as info:
        check_value(annotation, "blocked")
    assert info.value.message == 'expected Literal["open", "closed"], got str \'blocked\''


def test_literal_name_argument_is_its_value() -> None:
    assert resolve(sub("Literal", lit("a"), name("None"))) == Literal["a", None]


def test_annotated_keeps_description() -> None:
    annotation = resolve(sub("Annotated", name("str"), lit("Display name"), lit("ignored")))
    assert annotation == Annotated[str, annotation.__metadata__[0]]
    assert annotation.__metadata__[0].description == "Display name"
    assert resolve(sub("Annotated", name("str"), lit("Display name"))) == annotation


def test_annotated_with_one_argument_is_the_type() -> None:
    assert resolve(sub("Annotated", name("int"))) is int


def test_annotated_description_must_be_a_string() -> None:
    with pytest.raises(
        TypeResolutionError, match="second argument of `Annotated` must be a string"
    ):
        resolve(sub("Annotated", name("int"), name("str")))


def test_backtick_type_is_evaluated() -> None:
    severity = Literal["low", "high"]
    expr = TypePython(code=code("Severity"), span=SPAN)
    assert resolve(expr, {"Severity": severity}) == severity


def test_backtick_value_that_is_not_a_type_is_rejected() -> None:
    expr = TypePython(code=code("limit"), span=SPAN)
    with pytest.raises(TypeResolutionError) as info:
        resolve(expr, {"limit": 5})
    assert info.value.message == "`limit` is not a type (it is int 5)"
    assert info.value.span == SPAN


def test_unknown_type_name_fails_loudly() -> None:
    with pytest.raises(UnknownTypeError) as info:
        resolve(sub("list", name("Incident")))
    assert info.value.message == "unknown type `Incident`"
    assert info.value.span == SPAN


def test_lexical_names_win_over_builtins() -> None:
    class date:  # noqa: N801 - a user type shadowing the builtin name
        pass

    assert resolve(name("date"), {"date": date}) is date


def test_lexical_value_that_is_not_a_type_is_an_error() -> None:
    with pytest.raises(TypeResolutionError, match=r"`title` is not a type \(it is str 'Bug'\)"):
        resolve(name("title"), {"title": "Bug"})


def test_dotted_names_resolve_attribute_by_attribute() -> None:
    assert resolve(name("typing.Any"), {"typing": typing}) is Any
    with pytest.raises(UnknownTypeError, match="`typing` has no attribute `Nope`"):
        resolve(name("typing.Nope"), {"typing": typing})


def test_bare_special_forms_need_arguments() -> None:
    with pytest.raises(TypeResolutionError, match=r"`Literal` needs type arguments"):
        resolve(name("Literal"))


def test_non_generic_type_with_arguments() -> None:
    with pytest.raises(TypeResolutionError, match="`int` does not take type arguments"):
        resolve(sub("int", name("str")))


def test_literal_value_is_not_a_type() -> None:
    with pytest.raises(TypeResolutionError, match=r"'x' is a value, not a type"):
        resolve(lit("x"))


def test_type_resolution_error_pickles() -> None:
    error = UnknownTypeError("unknown type `Foo`", SPAN)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is UnknownTypeError
    assert (copy.message, copy.span) == (error.message, error.span)


# --------------------------------------------------------------------------- custom types


def person_type() -> type[BaseModel]:
    node = custom("Person", field("age", name("int")), field("name"), field("city", name("str")))
    return build_custom_type(node, no_names, python())


def test_custom_type_positional_keyword_and_mixed_construction() -> None:
    person = person_type()
    by_position = person(30, "Ada", "London")
    by_keyword = person(age=30, name="Ada", city="London")
    mixed = person(30, name="Ada", city="London")
    assert by_position == by_keyword == mixed
    assert mixed.model_dump() == {"age": 30, "name": "Ada", "city": "London"}
    assert mixed.model_dump_json() == '{"age":30,"name":"Ada","city":"London"}'


def test_custom_type_identity() -> None:
    person = person_type()
    assert person.__name__ == person.__qualname__ == "Person"
    assert person.__module__ == "flow.kedi"
    assert issubclass(person, KediModel)
    assert str(inspect.signature(person)) == "(age: int, name: str, city: str)"


def test_custom_type_json_schema() -> None:
    schema = person_type().model_json_schema()
    assert schema["title"] == "Person"
    assert list(schema["properties"]) == ["age", "name", "city"]
    assert schema["required"] == ["age", "name", "city"]


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((30, "Ada", "London", "x"), {}, "Person() takes 3 positional arguments but 4 were given"),
        ((30,), {"age": 31}, "Person() got multiple values for argument 'age'"),
        ((), {"age": 30, "nick": "a"}, "Person() got an unexpected keyword argument 'nick'"),
    ],
)
def test_custom_type_argument_errors(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError) as info:
        person_type()(*args, **kwargs)
    assert str(info.value) == message


def test_custom_type_is_strict() -> None:
    with pytest.raises(ValidationError, match="Input should be a valid integer"):
        person_type()("30", "Ada", "London")


def test_custom_type_rejects_dict_for_nested_model() -> None:
    owner = build_custom_type(custom("Owner", field("name")), no_names, python())
    issue_node = custom("Issue", field("owner", TypeUnion(options=(name("Owner"), name("None")))))
    issue = build_custom_type(issue_node, {"Owner": owner}.__getitem__, python())
    with pytest.raises(ValidationError, match="Input should be an instance of Owner"):
        issue(owner={"name": "Ada"})
    real = owner("Ada")
    built = issue(real)
    assert built.owner is real
    assert built.model_dump() == {"owner": {"name": "Ada"}}
    # JSON model output and explicit validation still build the nested object.
    assert issue.model_validate_json('{"owner": {"name": "Ada"}}') == built
    assert issue.model_validate({"owner": {"name": "Ada"}}) == built
    assert issue.model_json_schema()["properties"]["owner"] == {
        "anyOf": [{"$ref": "#/$defs/Owner"}, {"type": "null"}]
    }


def test_custom_type_field_description_in_schema() -> None:
    node = custom("Finding", field("path", sub("Annotated", name("str"), lit("Repository path"))))
    schema = build_custom_type(node, no_names, python()).model_json_schema()
    assert schema["properties"]["path"]["description"] == "Repository path"


def test_defaults_are_evaluated_once_at_definition() -> None:
    calls = []

    def evaluate(snippet: PythonCode) -> Any:
        calls.append(snippet.code)
        return 3

    node = custom("Job", field("name"), field("retries", name("int"), "compute()"))
    job = build_custom_type(node, no_names, evaluate)
    assert [job("a").retries, job("b").retries, job("c", 5).retries] == [3, 3, 5]
    assert calls == ["compute()"]
    assert inspect.signature(job).parameters["retries"].default == 3


def test_mutable_defaults_are_not_shared() -> None:
    node = custom("Job", field("tags", sub("list", sub("list", name("str"))), "[['a']]"))
    job = build_custom_type(node, no_names, python())
    first, second = job(), job()
    first.tags[0].append("b")
    assert second.tags == [["a"]]
    assert job().tags == [["a"]]


def test_default_of_the_wrong_type_is_rejected() -> None:
    node = custom("Job", field("retries", name("int"), '"3"'))
    with pytest.raises(TypeResolutionError) as info:
        build_custom_type(node, no_names, python())
    assert info.value.message == "default of field `retries` in `Job`: expected int, got str '3'"


@pytest.mark.parametrize("field_name", ["json", "copy", "model_config", "model_fields"])
def test_field_names_that_clash_with_pydantic_are_rejected(field_name: str) -> None:
    with pytest.raises(TypeResolutionError, match=f"field `{field_name}` of `Doc` clashes"):
        build_custom_type(custom("Doc", field(field_name)), no_names, python())


def test_private_field_names_are_rejected() -> None:
    with pytest.raises(TypeResolutionError, match="cannot start with `_`"):
        build_custom_type(custom("Doc", field("_secret")), no_names, python())


def test_email_field() -> None:
    owner = build_custom_type(custom("Owner", field("email", name("Email"))), no_names, python())
    assert owner("ada@example.org").email == "ada@example.org"
    with pytest.raises(ValidationError, match="not a valid e-mail address"):
        owner("ada at example")
    assert owner.model_json_schema()["properties"]["email"]["format"] == "email"


# --------------------------------------------------------------------------- check_value


def test_check_value_returns_the_same_object() -> None:
    values = [1, 2, 3]
    assert check_value(list[int], values) is values
    nested = {"a": values}
    assert check_value(dict[str, list[int]], nested) is nested


@pytest.mark.parametrize(
    ("annotation", "value", "message"),
    [
        (int, "5", "expected int, got str '5'"),
        (int, True, "expected int, got bool True"),
        (bool, 1, "expected bool, got int 1"),
        (str, 5, "expected str, got int 5"),
        (tuple[int, ...], [1], "expected tuple[int, ...], got list [1]"),
        (list[int], (1,), "expected list[int], got tuple (1,)"),
        (
            list[int],
            [1, "a"],
            "expected list[int], got list [1, 'a']: [1]: Input should be a valid integer",
        ),
        (int | None, "5", "expected int | None, got str '5'"),
        (datetime.date, "2024-01-01", "expected date, got str '2024-01-01'"),
        (Email, "nope", "expected Email, got str 'nope': not a valid e-mail address"),
    ],
)
def test_check_value_is_strict(annotation: Any, value: Any, message: str) -> None:
    with pytest.raises(TypeCheckError) as info:
        check_value(annotation, value)
    assert info.value.message == message


def test_check_value_rejects_dict_for_model() -> None:
    person = person_type()
    with pytest.raises(TypeCheckError) as info:
        check_value(person, {"age": 30, "name": "Ada", "city": "London"})
    assert info.value.message.startswith("expected Person, got dict {'age': 30")
    with pytest.raises(TypeCheckError):
        check_value(list[person], [{"age": 30, "name": "Ada", "city": "London"}])  # type: ignore[valid-type]
    ada = person(30, "Ada", "London")
    assert check_value(person, ada) is ada


def test_check_value_int_is_accepted_for_float_and_kept() -> None:
    assert type(check_value(float, 3)) is int


@pytest.mark.parametrize("annotation", [Any, object])
def test_any_and_object_accept_everything(annotation: Any) -> None:
    marker = object()
    assert check_value(annotation, marker) is marker


def test_check_value_plain_python_class_uses_isinstance() -> None:
    class Point:
        pass

    point = Point()
    assert check_value(Point, point) is point
    with pytest.raises(TypeCheckError, match="expected Point, got int 1"):
        check_value(Point, 1)


def test_check_value_unhashable_annotation() -> None:
    annotation = Annotated[int, {"unhashable": []}]
    assert check_value(annotation, 4) == 4
    with pytest.raises(TypeCheckError, match="expected int, got str '4'"):
        check_value(annotation, "4")


def test_regex_type() -> None:
    assert check_value(Regex, r"^a+$") == r"^a+$"
    with pytest.raises(TypeCheckError, match="not a valid regular expression"):
        check_value(Regex, "(")


def test_url_types_accept_strings_and_keep_them() -> None:
    url = "https://example.org/x"
    assert check_value(HttpUrl, url) is url
    with pytest.raises(TypeCheckError):
        check_value(HttpUrl, "not a url")
    assert check_value(FileUrl, "file:///tmp/a") == "file:///tmp/a"


# --------------------------------------------------------------------------- output_spec


def test_output_spec_fields_in_order_with_descriptions() -> None:
    described = resolve(sub("Annotated", name("str"), lit("Person or team")))
    spec = output_spec([("owner", described), ("count", int), ("tags", list[str])])
    assert spec.name == "KediOutputs"
    assert spec.fields == ("owner", "count", "tags")
    schema = spec.json_schema
    assert list(schema["properties"]) == ["owner", "count", "tags"]
    assert schema["required"] == ["owner", "count", "tags"]
    assert schema["properties"]["owner"]["description"] == "Person or team"


def test_output_spec_validates_json_strictly() -> None:
    spec = output_spec([("when", datetime.date), ("count", int)])
    assert spec.validate_json('{"when": "2024-01-31", "count": 2}') == {
        "when": datetime.date(2024, 1, 31),
        "count": 2,
    }
    with pytest.raises(ValidationError):
        spec.validate_json('{"when": "2024-01-31", "count": "2"}')


def test_output_spec_builds_custom_models_from_json() -> None:
    person = person_type()
    spec = output_spec([("person", person)])
    value = spec.validate_json('{"person": {"age": 30, "name": "Ada", "city": "London"}}')
    assert value == {"person": person(30, "Ada", "London")}
    assert spec.json_schema["properties"]["person"] == {"$ref": "#/$defs/Person"}


def test_output_spec_is_cached() -> None:
    described = resolve(sub("Annotated", name("str"), lit("same text")))
    again = resolve(sub("Annotated", name("str"), lit("same text")))
    assert output_spec([("a", described)]) is output_spec([("a", again)])
    assert output_spec([("a", int)]) is not output_spec([("b", int)])


def test_output_spec_keeps_names_pydantic_reserves() -> None:
    spec = output_spec([("json", int), ("_private", str), ("copy", str)])
    assert list(spec.json_schema["properties"]) == ["json", "_private", "copy"]
    reply = spec.model.model_validate_json('{"json": 1, "_private": "p", "copy": "c"}')
    assert reply.model_dump(by_alias=True) == {"json": 1, "_private": "p", "copy": "c"}


def test_output_spec_rejects_duplicates() -> None:
    with pytest.raises(TypeResolutionError, match="duplicate output field `a`"):
        output_spec([("a", int), ("a", str)])


def test_output_spec_rejects_types_without_json_schema() -> None:
    class Opaque:
        pass

    with pytest.raises(TypeResolutionError, match="cannot be described to a model"):
        output_spec([("thing", Opaque)])


# --------------------------------------------------------------------------- labels


@pytest.mark.parametrize(
    ("annotation", "label"),
    [
        (str, "str"),
        (None, "None"),
        (Any, "Any"),
        (list[str], "list[str]"),
        (dict[str, list[float]], "dict[str, list[float]]"),
        (tuple[int, ...], "tuple[int, ...]"),
        (Optional[int], "int | None"),  # noqa: UP045 - the typing spelling is the point
        (int | str, "int | str"),
        (Literal["a", 1], 'Literal["a", 1]'),
        (Annotated[str, "doc"], "str"),
        (datetime.date, "date"),
        (Email, "Email"),
        (HttpUrl, "HttpUrl"),
        (typing.List[int], "list[int]"),  # noqa: UP006 - the typing alias spelling is the point
    ],
)
def test_type_label(annotation: Any, label: str) -> None:
    assert type_label(annotation) == label


def test_type_label_of_custom_union() -> None:
    assert type_label(person_type() | None) == "Person | None"
