"""Kedi type expressions, custom types and strict value checks, all on pydantic.

Three jobs, one vocabulary (plain Python annotations such as `list[str]` or
`Incident | None`):

* `resolve_type` turns an AST `TypeExpr` into an annotation;
* `build_custom_type` turns a `~Name(...)` declaration into a strict pydantic model;
* `check_value` and `output_spec` validate values at boundaries and describe the
  combined output object of one `>>` call.

Strictness decisions (pydantic strict mode, checked against pydantic 2.13):

* no string-to-number or number-to-string coercion: `"5"` is not an `int`;
* `bool` is not an `int` and `1` is not a `bool`;
* an `int` is accepted where a `float` is required (Python's numeric tower, and
  JSON cannot tell `3` from `3.0`); `check_value` keeps the original `int`;
* in Python values `list` and `tuple` are distinct: a list is not a `tuple[...]`
  and a tuple is not a `list[...]`; in JSON model output an array is accepted for
  `list`, `tuple` and `set`;
* a `dict` is not accepted where a model is required, at boundaries and in
  `Issue(owner={...})`; an explicit `Issue.model_validate(data)` and JSON model
  output still build nested objects;
* dates, times and durations must be real `datetime` objects in Python values,
  and ISO 8601 strings in JSON model output;
* `HttpUrl` and `FileUrl` accept a `str` that parses as such a URL; `check_value`
  keeps the original `str` (it never swaps the object it was given).
"""

from __future__ import annotations

import copyreg
import dataclasses
import datetime
import re
import weakref
from collections.abc import Callable, Mapping, Sequence
from contextvars import ContextVar
from functools import lru_cache
from inspect import Parameter, Signature
from types import MappingProxyType, NoneType, UnionType
from typing import Annotated, Any, Literal, Optional, Union, assert_never, get_args, get_origin
from uuid import uuid4

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    FileUrl,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
    HttpUrl,
    PydanticUserError,
    TypeAdapter,
    ValidationError,
    create_model,
)
from pydantic.fields import FieldInfo
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import PydanticCustomError, core_schema

from kedi.adapters.base import OutputSpec
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

Lookup = Callable[[str], Any]
"""Lexical name lookup: returns the visible value, raises `KeyError` when unknown."""
Evaluate = Callable[[PythonCode], Any]
"""Evaluates one backtick expression in the current environment."""


# --------------------------------------------------------------------------- errors


class TypeResolutionError(Exception):
    """A type expression or custom type declaration cannot be turned into a type."""

    def __init__(self, message: str, span: Span | None = None) -> None:
        """Record the message and, when known, where the type expression is."""
        super().__init__(message)
        self.message = message
        self.span = span

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle by message and span."""
        return (type(self), (self.message, self.span))


class UnknownTypeError(TypeResolutionError):
    """A type name is not visible anywhere (the interpreter reports a name error)."""


class TypeCheckError(TypeError):
    """A value does not have the type a boundary requires."""

    def __init__(self, message: str) -> None:
        """Record the readable message (`expected int, got str '5'`)."""
        super().__init__(message)
        self.message = message


# --------------------------------------------------------------------------- string formats


_EMAIL = re.compile(r"[^@\s]+@[^@\s.]+(\.[^@\s.]+)+")


class _StringFormat:
    """A `str` with an extra check and a JSON Schema `format`; values stay plain `str`.

    Used as a marker class, as pydantic's own `EmailStr` is: it is never instantiated.
    """

    format: str

    @staticmethod
    def check(value: str) -> str:
        """Return `value` if it is valid, else raise `ValueError`."""
        raise NotImplementedError

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        return core_schema.no_info_after_validator_function(cls.check, core_schema.str_schema())

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"type": "string", "format": cls.format}


class Email(_StringFormat):
    """An e-mail address (checked with a pattern, so no `email-validator` package is needed)."""

    format = "email"

    @staticmethod
    def check(value: str) -> str:
        """Return `value` if it looks like `name@domain.tld`."""
        if _EMAIL.fullmatch(value) is None:
            raise ValueError("not a valid e-mail address")
        return value


class Regex(_StringFormat):
    """A `str` that compiles as a Python regular expression."""

    format = "regex"

    @staticmethod
    def check(value: str) -> str:
        """Return `value` if `re.compile` accepts it."""
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from None
        return value


BUILTIN_TYPES: Mapping[str, Any] = MappingProxyType(
    {
        "str": str,
        "int": int,
        "float": float,
        "bool": bool,
        "bytes": bytes,
        "object": object,
        "list": list,
        "dict": dict,
        "tuple": tuple,
        "set": set,
        "Union": Union,
        "Optional": Optional,
        "Literal": Literal,
        "Annotated": Annotated,
        "datetime": datetime.datetime,
        "date": datetime.date,
        "time": datetime.time,
        "timedelta": datetime.timedelta,
        "Regex": Regex,
        "Email": Email,
        "HttpUrl": HttpUrl,
        "FileUrl": FileUrl,
        "Any": Any,
        "None": None,
    }
)
"""Type names every program sees, after its own lexical names."""

_MISSING = object()
# Bare special forms are not annotations on their own: each with an example of use.
_NEEDS_ARGUMENTS = (
    (Union, "Union[int, str]"),
    (Optional, "Optional[int]"),
    (Literal, 'Literal["a", "b"]'),
    (Annotated, 'Annotated[str, "description"]'),
)


# --------------------------------------------------------------------------- resolution


def resolve_type(expr: TypeExpr | None, lookup: Lookup, evaluate: Evaluate) -> Any:
    """Turn a type expression into a Python annotation (a missing annotation means `str`).

    Names resolve lexically first (`lookup`), then in `BUILTIN_TYPES`; dotted names
    resolve attribute by attribute. Backtick types are evaluated with `evaluate`
    (whose own errors propagate unchanged).

    Raises:
        UnknownTypeError: a name is not visible.
        TypeResolutionError: the expression names something that is not a type.
    """
    match expr:
        case None:
            return str
        case TypeName():
            return _annotation(_resolve_name(expr, lookup), f"`{expr.name}`", expr.span)
        case TypeSubscript():
            return _resolve_subscript(expr, lookup, evaluate)
        case TypeUnion():
            options = tuple(resolve_type(option, lookup, evaluate) for option in expr.options)
            return Union[options]  # noqa: UP007 - built from a runtime tuple
        case TypePython():
            label = f"`{expr.code.code.strip()}`"
            return _annotation(evaluate(expr.code), label, expr.span)
        case TypeLiteral():
            if expr.value is None:
                return None
            raise TypeResolutionError(
                f"{_short_repr(expr.value)} is a value, not a type "
                f"(write `Literal[{_literal_text(expr.value)}]` for a fixed value)",
                expr.span,
            )
        case _:
            assert_never(expr)


def _resolve_name(expr: TypeName, lookup: Lookup) -> Any:
    head, *rest = expr.name.split(".")
    try:
        value = lookup(head)
    except KeyError:
        value = BUILTIN_TYPES.get(head, _MISSING)
        if value is _MISSING:
            raise UnknownTypeError(f"unknown type `{expr.name}`", expr.span) from None
    prefix = head
    for attribute in rest:
        try:
            value = getattr(value, attribute)
        except AttributeError:
            raise UnknownTypeError(
                f"unknown type `{expr.name}`: `{prefix}` has no attribute `{attribute}`", expr.span
            ) from None
        prefix = f"{prefix}.{attribute}"
    return value


def _annotation(value: Any, label: str, span: Span) -> Any:
    """Return `value` if it can be used as an annotation, else raise naming `label`."""
    for form, example in _NEEDS_ARGUMENTS:
        if value is form:
            raise TypeResolutionError(f"{label} needs type arguments, as in `{example}`", span)
    if value is None or value is Any or isinstance(value, type) or get_origin(value) is not None:
        return value
    raise TypeResolutionError(
        f"{label} is not a type (it is {type(value).__name__} {_short_repr(value)})", span
    )


def _resolve_subscript(expr: TypeSubscript, lookup: Lookup, evaluate: Evaluate) -> Any:
    base = _resolve_name(expr.base, lookup)
    args = expr.args
    if base is Annotated:
        return _resolve_annotated(expr, lookup, evaluate)
    if base is Literal:
        return Literal[tuple(_literal_value(arg, lookup) for arg in args)]
    if base is Optional:
        if len(args) != 1:
            raise TypeResolutionError("`Optional` takes exactly one type", expr.span)
        return Optional[resolve_type(args[0], lookup, evaluate)]  # noqa: UP045 - runtime form
    if base is Union:
        return Union[tuple(resolve_type(arg, lookup, evaluate) for arg in args)]  # noqa: UP007
    resolved = tuple(_type_argument(arg, lookup, evaluate) for arg in args)
    try:
        result = base[resolved if len(resolved) != 1 else resolved[0]]
    except TypeError:
        raise TypeResolutionError(
            f"`{expr.base.name}` does not take type arguments here", expr.span
        ) from None
    return _annotation(result, f"`{expr.base.name}[...]`", expr.span)


def _resolve_annotated(expr: TypeSubscript, lookup: Lookup, evaluate: Evaluate) -> Any:
    inner = resolve_type(expr.args[0], lookup, evaluate)
    if len(expr.args) == 1:
        return inner
    description = expr.args[1]
    if not (isinstance(description, TypeLiteral) and isinstance(description.value, str)):
        raise TypeResolutionError(
            "the second argument of `Annotated` must be a string (the field's description)",
            description.span,
        )
    # Extra metadata arguments are ignored, as the Kedi documentation specifies.
    return Annotated[inner, _description(description.value)]


@lru_cache(maxsize=1024)
def _description(text: str) -> FieldInfo:
    # One FieldInfo per text, so equal annotations compare (and cache) as equal.
    info: FieldInfo = Field(description=text)
    return info


def _type_argument(arg: TypeExpr, lookup: Lookup, evaluate: Evaluate) -> Any:
    if isinstance(arg, TypeName) and arg.name in ("...", "Ellipsis"):
        return ...
    if isinstance(arg, TypeLiteral) and arg.value is not None:
        raise TypeResolutionError(
            f"{_short_repr(arg.value)} is a value, not a type argument", arg.span
        )
    return resolve_type(arg, lookup, evaluate)


def _literal_value(arg: TypeExpr, lookup: Lookup) -> Any:
    if isinstance(arg, TypeLiteral):
        return arg.value
    if isinstance(arg, TypeName):
        # `Literal[None]`, `Literal[Color.RED]`: a name stands for its value.
        return _resolve_name(arg, lookup)
    raise TypeResolutionError("`Literal` takes only literal values", arg.span)


# --------------------------------------------------------------------------- custom types


class _KediModelMeta(type(BaseModel)):  # type: ignore[misc]  # a metaclass computed from BaseModel's
    """Adds positional construction in declaration order to Kedi models.

    Done in the metaclass, not in `__init__`: a custom `__init__` makes pydantic
    validate nested models through it in Python mode, which would reject ISO date
    strings inside JSON model output.
    """

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        names = tuple(cls.model_fields)
        if len(args) > len(names):
            raise TypeError(
                f"{cls.__name__}() takes {len(names)} positional arguments "
                f"but {len(args)} were given"
            )
        for name in kwargs:
            if name not in cls.model_fields:
                raise TypeError(f"{cls.__name__}() got an unexpected keyword argument {name!r}")
        for name, value in zip(names, args, strict=False):
            if name in kwargs:
                raise TypeError(f"{cls.__name__}() got multiple values for argument {name!r}")
            kwargs[name] = value
        token = _INSTANCES_ONLY.set(True)
        try:
            return super().__call__(**kwargs)
        finally:
            _INSTANCES_ONLY.reset(token)


class KediModel(BaseModel, metaclass=_KediModelMeta):
    """Base class of every `~Name(...)` custom type: strict, positional or keyword construction."""

    model_config = ConfigDict(strict=True, protected_namespaces=())


def build_custom_type(node: CustomType, lookup: Lookup, evaluate: Evaluate) -> type[BaseModel]:
    """Build the pydantic model of a `~Name(fields)` declaration.

    Unannotated fields are `str`. Defaults are evaluated once, now, and checked
    against the field's type; pydantic deep-copies mutable defaults per instance.

    Raises:
        TypeResolutionError: a field type does not resolve, a default has the
            wrong type, or a field name clashes with pydantic's own attributes.
    """
    definitions: dict[str, Any] = {}
    parameters: list[Parameter] = []
    for field in node.fields:
        _check_field_name(node.name, field)
        annotation = resolve_type(field.type, lookup, evaluate)
        default: Any = Parameter.empty
        if field.default is not None:
            default = evaluate(field.default)
            try:
                check_value(annotation, default)
            except TypeCheckError as exc:
                raise TypeResolutionError(
                    f"default of field `{field.name}` in `{node.name}`: {exc.message}", field.span
                ) from None
        stored = ... if default is Parameter.empty else default
        definitions[field.name] = (_instances_required(annotation), stored)
        parameters.append(
            Parameter(
                field.name, Parameter.POSITIONAL_OR_KEYWORD, annotation=annotation, default=default
            )
        )
    recipe = _TypeRecipe(node.name, node.span.path, uuid4().hex, definitions, Signature(parameters))
    return _built(recipe)


@dataclasses.dataclass(frozen=True)
class _TypeRecipe:
    """What builds a custom type's class: how its values pickle, by value.

    The class's module is named after the `.kedi` path, which no process can
    import, so pickle cannot find the class by name: `_pickle_custom_type`
    pickles this recipe instead, and unpickling rebuilds the class from it (the
    same class again in a process that still has it, by `token`).
    """

    name: str
    module: str
    token: str
    """Unique per declaration evaluated: one rebuilt class per type, not per value."""
    definitions: dict[str, Any]
    signature: Signature


_LIVE_TYPES: weakref.WeakValueDictionary[str, type[BaseModel]] = weakref.WeakValueDictionary()
"""Custom types of this process by recipe token (an unpickled value gets the class back)."""


def _built(recipe: _TypeRecipe) -> type[BaseModel]:
    """The class of `recipe`: the live one if this process has it, else a new one."""
    live = _LIVE_TYPES.get(recipe.token)
    if live is not None:
        return live
    model: type[BaseModel] = create_model(
        recipe.name, __base__=KediModel, __module__=recipe.module, **recipe.definitions
    )
    model.__signature__ = recipe.signature
    model.__kedi_recipe__ = recipe  # type: ignore[attr-defined]  # read by _pickle_custom_type
    _LIVE_TYPES[recipe.token] = model
    return model


def _pickle_custom_type(cls: type[BaseModel]) -> str | tuple[Any, ...]:
    """Pickle a custom type by its recipe; `KediModel` itself (or a Python subclass) by name."""
    recipe = cls.__dict__.get("__kedi_recipe__")
    if recipe is None:
        return cls.__qualname__
    return (_built, (recipe,))


copyreg.pickle(_KediModelMeta, _pickle_custom_type)


def _check_field_name(type_name: str, field: FieldDef) -> None:
    if field.name.startswith("_"):
        raise TypeResolutionError(
            f"field `{field.name}` of `{type_name}`: field names cannot start with `_`",
            field.span,
        )
    if field.name == "model_config" or hasattr(BaseModel, field.name):
        raise TypeResolutionError(
            f"field `{field.name}` of `{type_name}` clashes with a pydantic model attribute; "
            "choose another name",
            field.span,
        )


# --------------------------------------------------------------------------- checks


def check_value(annotation: Any, value: Any) -> Any:
    """Validate `value` strictly against `annotation` and return the same object.

    Raises:
        TypeCheckError: with a message such as ``expected int, got str '5'``.
    """
    if annotation is Any or annotation is object or type(value) is annotation:
        return value
    token = _INSTANCES_ONLY.set(True)
    try:
        _checker(annotation).validate_python(value, strict=True)
    except ValidationError as exc:
        raise TypeCheckError(_mismatch(annotation, value, exc)) from None
    finally:
        _INSTANCES_ONLY.reset(token)
    return value


def _checker(annotation: Any) -> TypeAdapter[Any]:
    if _hashable(annotation):
        return _cached_checker(annotation)
    # Unhashable annotation (for example metadata holding a dict): no cache.
    return _new_checker(annotation)


@lru_cache(maxsize=2048)
def _cached_checker(annotation: Any) -> TypeAdapter[Any]:
    return _new_checker(annotation)


def _new_checker(annotation: Any) -> TypeAdapter[Any]:
    strict_annotation = _instances_required(annotation)
    try:
        # Plain Python classes from the prelude are checked with isinstance.
        return TypeAdapter(strict_annotation, config=ConfigDict(arbitrary_types_allowed=True))
    except PydanticUserError as exc:
        # Models, dataclasses and TypedDicts carry their own config and refuse ours.
        if exc.code != "type-adapter-config-unused":
            raise
        return TypeAdapter(strict_annotation)


_INSTANCES_ONLY: ContextVar[bool] = ContextVar("kedi_instances_only", default=False)
"""Set while a custom type is constructed or a boundary is checked."""


@dataclasses.dataclass(frozen=True)
class _InstanceRequired:
    """Annotation metadata: a `dict` is no substitute for this model (or dataclass).

    Pydantic's strict mode still builds a model from a `dict`; Kedi does not where
    a custom model is required: in `Issue(owner={...})` and at checked boundaries.
    The check applies only while `_INSTANCES_ONLY` is set, so an explicit
    `Issue.model_validate(data)` and JSON model output still build nested objects.
    """

    def __get_pydantic_core_schema__(
        self, source: type[Any], handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        def check(value: Any, validate: core_schema.ValidatorFunctionWrapHandler) -> Any:
            if _INSTANCES_ONLY.get() and not isinstance(value, source):
                raise PydanticCustomError(
                    "is_instance_of",
                    "Input should be an instance of {class}",
                    {"class": source.__name__},
                )
            return validate(value)

        return core_schema.no_info_wrap_validator_function(check, handler(source))


_INSTANCE_REQUIRED = _InstanceRequired()


def _instances_required(annotation: Any) -> Any:
    """Mark every model or dataclass inside `annotation` with `_InstanceRequired`."""
    if isinstance(annotation, type):
        if issubclass(annotation, BaseModel) or dataclasses.is_dataclass(annotation):
            return Annotated[annotation, _INSTANCE_REQUIRED]
        return annotation
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is None or origin is Literal or not args:
        return annotation
    rewritten = tuple(arg if arg is ... else _instances_required(arg) for arg in args)
    if all(new is old for new, old in zip(rewritten, args, strict=True)):
        return annotation
    if origin is Annotated:
        return Annotated[rewritten]
    if origin in (Union, UnionType):
        return Union[rewritten]  # noqa: UP007 - built from a runtime tuple
    return origin[rewritten]


def _mismatch(annotation: Any, value: Any, exc: ValidationError) -> str:
    message = f"expected {type_label(annotation)}, got {type(value).__name__} {_short_repr(value)}"
    first = exc.errors(include_url=False)[0]
    is_union = get_origin(annotation) in (Union, UnionType)
    plain = not first["loc"] and (first["type"].endswith("_type") or first["type"] in _PLAIN)
    if is_union or plain:
        return message
    where = "".join(f"[{part!r}]" for part in first["loc"])
    detail = first["msg"].removeprefix("Value error, ")
    return f"{message}: {where + ': ' if where else ''}{detail}"


# Error kinds whose pydantic message would only repeat "expected X, got Y".
_PLAIN = frozenset({"is_instance_of", "literal_error"})


def _short_repr(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --------------------------------------------------------------------------- outputs


_OUTPUTS_NAME = "KediOutputs"


def output_spec(captures: Sequence[tuple[str, Any]]) -> OutputSpec:
    """Build the combined output object of one `>>` call: one required field per capture.

    Names that pydantic cannot use as attributes (a leading `_`, or a `BaseModel`
    attribute such as `json`) get an internal field name and keep the capture
    name as the field's alias, so the JSON Schema and the JSON reply use it.

    Raises:
        TypeResolutionError: a capture repeats, or its type has no JSON Schema.
    """
    names = tuple(name for name, _ in captures)
    annotations = tuple(annotation for _, annotation in captures)
    if len(set(names)) != len(names):
        duplicate = next(name for name in names if names.count(name) > 1)
        raise TypeResolutionError(f"duplicate output field `{duplicate}`")
    if _hashable((names, annotations)):
        return _cached_output_spec(names, annotations)
    return _build_output_spec(names, annotations)


@lru_cache(maxsize=1024)
def _cached_output_spec(names: tuple[str, ...], annotations: tuple[Any, ...]) -> OutputSpec:
    return _build_output_spec(names, annotations)


def _build_output_spec(names: tuple[str, ...], annotations: tuple[Any, ...]) -> OutputSpec:
    fields: dict[str, Any] = {}
    for index, (name, annotation) in enumerate(zip(names, annotations, strict=True)):
        if name.startswith("_") or name == "model_config" or hasattr(BaseModel, name):
            internal = f"kedi_output_{index}"
            while internal in names:
                internal += "_"
            fields[internal] = (annotation, Field(alias=name))
        else:
            fields[name] = (annotation, ...)
    try:
        model = create_model(
            _OUTPUTS_NAME, __config__=ConfigDict(strict=True, protected_namespaces=()), **fields
        )
        schema = model.model_json_schema()
    except PydanticUserError as exc:
        raise TypeResolutionError(f"an output type cannot be described to a model: {exc}") from None
    return OutputSpec(model=model, json_schema=schema)


# --------------------------------------------------------------------------- labels


def type_label(annotation: Any) -> str:
    """Return the Kedi spelling of an annotation (`list[str]`, `Incident | None`)."""
    if annotation is None or annotation is NoneType:
        return "None"
    if annotation is Any:
        return "Any"
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin is Annotated:
        return type_label(args[0])
    if origin in (Union, UnionType):
        return " | ".join(type_label(arg) for arg in args)
    if origin is Literal:
        return f"Literal[{', '.join(_literal_text(arg) for arg in args)}]"
    if origin is not None:
        name = getattr(origin, "__name__", None) or repr(origin).removeprefix("typing.")
        inner = ", ".join("..." if arg is ... else type_label(arg) for arg in args)
        return f"{name}[{inner}]"
    if isinstance(annotation, type):
        return annotation.__name__
    return repr(annotation).removeprefix("typing.")


def _literal_text(value: Any) -> str:
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"')
        return f'"{escaped}"'
    return repr(value)


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True
