"""The Kedi abstract syntax tree.

Plain frozen dataclasses in the style of CPython's `ast`: no behaviour, children
in tuples, and a `span` on every node that takes no part in equality (so two
trees parsed from differently laid-out sources compare equal when they mean the
same thing). Families of nodes are unions (`Statement`, `Segment`, `TypeExpr`).

Text is stored already split into segments with escapes resolved and boundary
whitespace trimmed, so later stages never re-parse source text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal, TypeVar, dataclass_transform

from kedi.source import Span

_NO_SPAN = Span("<unknown>", 0, 0, 0, 0)


def _span() -> Span:
    return field(default=_NO_SPAN, compare=False, repr=False)


_Node = TypeVar("_Node")


@dataclass_transform(frozen_default=True, kw_only_default=True, field_specifiers=(field,))
def node(cls: type[_Node]) -> type[_Node]:
    """Make `cls` a frozen, slotted, keyword-only dataclass (typed so checkers see the fields)."""
    return dataclass(frozen=True, slots=True, kw_only=True)(cls)


# --------------------------------------------------------------------------- python code


@node
class PythonCode:
    """Embedded Python source.

    `code` is ready to compile: fence bodies are dedented to the fence's column.
    `first_line` is the 1-based `.kedi` line of the code's first line, so Python
    line N maps to `.kedi` line `first_line + N - 1`.
    """

    code: str
    first_line: int
    span: Span = _span()


# --------------------------------------------------------------------------- type expressions


@node
class TypeName:
    """A type by name: `str`, `Incident`, `typing.Any` (dotted names allowed)."""

    name: str
    span: Span = _span()


@node
class TypeLiteral:
    """A literal argument inside a type: the strings of `Literal[...]` or `Annotated[T, "doc"]`."""

    value: str | int | float | bool | None
    span: Span = _span()


@node
class TypeSubscript:
    """A generic application: `list[str]`, `dict[str, int]`, `Literal["a", "b"]`."""

    base: TypeName
    args: tuple[TypeExpr, ...]
    span: Span = _span()


@node
class TypeUnion:
    """`A | B | None`."""

    options: tuple[TypeExpr, ...]
    span: Span = _span()


@node
class TypePython:
    """A backtick type expression, evaluated as Python at run time: `` `Severity` ``."""

    code: PythonCode
    span: Span = _span()


TypeExpr = TypeName | TypeLiteral | TypeSubscript | TypeUnion | TypePython


# --------------------------------------------------------------------------- text segments


@node
class Text:
    """Literal text, escapes resolved, boundary whitespace trimmed."""

    value: str
    span: Span = _span()


@node
class Subst:
    """`<name>`: read a visible value and render it."""

    name: str
    span: Span = _span()


@node
class Argument:
    """One argument of a `<proc(...)>` call: its own segment list.

    A sole `Subst`, `Call`, `InlinePython` or `BareBacktick` segment passes the
    native value; anything else renders to `str`.
    """

    segments: tuple[Segment, ...]
    span: Span = _span()


@node
class Call:
    """`<proc(a, b)>`: call a procedure (positional arguments only)."""

    name: str
    args: tuple[Argument, ...]
    span: Span = _span()


@node
class InlinePython:
    """`` <`expr`> ``: evaluate one Python expression and render it."""

    code: PythonCode
    span: Span = _span()


@node
class BareBacktick:
    """`` `expr` `` inside text, or alone on an assignment/return right-hand side."""

    code: PythonCode
    span: Span = _span()


@node
class Capture:
    """`[name]` or `[name: Type]`: an output field the model must produce (templates only)."""

    name: str
    type: TypeExpr | None
    span: Span = _span()


Segment = Text | Subst | Call | InlinePython | BareBacktick | Capture


@node
class Row:
    """One physical row of a template, raw invoke, system block or optimize body."""

    segments: tuple[Segment, ...]
    span: Span = _span()


@node
class Rendered:
    """A right-hand side written as text segments (possibly a single segment)."""

    segments: tuple[Segment, ...]
    span: Span = _span()


@node
class Fence:
    """A triple-backtick Python block."""

    code: PythonCode
    span: Span = _span()


Value = Rendered | Fence


# --------------------------------------------------------------------------- statements


@node
class Template:
    """`>> rows...`: one model call; captures in the rows form one output schema."""

    rows: tuple[Row, ...]
    span: Span = _span()


@node
class RawInvoke:
    """`[target] << rows...`: a text model call; the reply is bound as `str`."""

    target: str
    type: TypeExpr | None
    rows: tuple[Row, ...]
    span: Span = _span()


@node
class Assign:
    """`[target] = value` or `[target: Type] = value`: deterministic, no model."""

    target: str
    type: TypeExpr | None
    value: Value
    span: Span = _span()


@node
class Return:
    """`= value`: return from the procedure (or end the program with a result)."""

    value: Value
    span: Span = _span()


@node
class PythonStatement:
    """A line holding only `` `statement` ``: run it for its side effects."""

    code: PythonCode
    span: Span = _span()


@node
class PythonBlock:
    """A standalone fence: run for side effects. `prelude` marks the program's first content."""

    code: PythonCode
    prelude: bool = False
    span: Span = _span()


@node
class Docstring:
    """The leading `###` block comment of a procedure or profile, delimiters removed."""

    text: str
    span: Span = _span()


@node
class Param:
    """A procedure parameter: `name: Type = `default``."""

    name: str
    type: TypeExpr | None
    default: PythonCode | None
    span: Span = _span()


@node
class Procedure:
    """`@name(params) -> Type:` with an indented body."""

    name: str
    params: tuple[Param, ...]
    returns: TypeExpr | None
    docstring: Docstring | None
    body: tuple[Statement, ...]
    span: Span = _span()


@node
class FieldDef:
    """A custom-type field: `name: Type = `default``."""

    name: str
    type: TypeExpr | None
    default: PythonCode | None
    span: Span = _span()


@node
class CustomType:
    """`~Name(fields)`: a pydantic model."""

    name: str
    fields: tuple[FieldDef, ...]
    span: Span = _span()


# --------------------------------------------------------------------------- directives


@node
class ConfigEntry:
    """One `key: value` row of a configuration body.

    `items` holds the indented raw lines under a key written with no value (the
    `python_dependencies:` list of a package manifest).
    """

    key: str
    value: tuple[Segment, ...]
    items: tuple[str, ...] = ()
    span: Span = _span()


@node
class Directive:
    """A directive with a one-line value or a configuration body.

    Covers `adapter agent model effort approval history settings mcp artifacts
    skills codemode subagent max_agents workflow`. Exactly one of `value` and
    `config` is given (`config` is empty for the one-line form). `name` is kept
    as written; unknown names are rejected by the parser.
    """

    name: str
    value: tuple[Segment, ...] | None
    config: tuple[ConfigEntry, ...] = ()
    span: Span = _span()


@node
class SystemDirective:
    """`> system: text` or `> system:` with indented rows; rows join with a newline."""

    rows: tuple[Row, ...]
    span: Span = _span()


@node
class UseName:
    """One name in `> use:`; `python` marks the backtick form `` `name` ``."""

    name: str
    python: bool = False
    span: Span = _span()


@node
class Use:
    """`> use: name` (tool, then profile) or the indented list form (tools only)."""

    names: tuple[UseName, ...]
    block: bool
    span: Span = _span()


@node
class ProfileDef:
    """`> profile: name:` with `>` member directives."""

    name: str
    docstring: Docstring | None
    members: tuple[ProfileMember, ...]
    span: Span = _span()


@node
class Import:
    """`> import: a/b` (all exports) or `> import: a/b:` with a name list."""

    module: str
    names: tuple[UseName, ...] | None
    span: Span = _span()


@node
class Export:
    """`> export:` with a name list, or `> export: *`."""

    names: tuple[UseName, ...]
    star: bool
    span: Span = _span()


@node
class Package:
    """`> package: name:` with its manifest fields (only in `package.kedi`)."""

    name: str
    config: tuple[ConfigEntry, ...]
    span: Span = _span()


@node
class Optimize:
    """`> optimize: span:` inside a procedure: one template (leading `>>` optional)."""

    name: str
    template: Template
    span: Span = _span()


@node
class Auto:
    """`> auto:` inside a procedure: a natural-language specification."""

    spec: str
    span: Span = _span()


ProfileMember = Directive | SystemDirective | Use


# --------------------------------------------------------------------------- suites


@node
class TestCase:
    """`> case: name:` with a backtick line or a fence of assertions."""

    __test__: ClassVar[bool] = False
    """Not a pytest test class, although its name starts with `Test`."""

    name: str
    body: PythonCode
    span: Span = _span()


@node
class TestSuite:
    """`@test: procedure:`."""

    __test__: ClassVar[bool] = False
    """Not a pytest test class, although its name starts with `Test`."""

    procedure: str
    cases: tuple[TestCase, ...]
    span: Span = _span()


@node
class EvalData:
    """`> data: name:` or `> test_data: name:` whose body is a return (`= ...`)."""

    kind: Literal["data", "test_data"]
    name: str
    value: Value
    span: Span = _span()


@node
class EvalMetric:
    """`> metric: fn(dataset):` whose body is a return; `dataset` may be absent (legacy)."""

    name: str
    dataset: str | None
    value: Value
    span: Span = _span()


@node
class EvalSuite:
    """`@eval: procedure:` with datasets and exactly one metric."""

    procedure: str
    datasets: tuple[EvalData, ...]
    metric: EvalMetric | None
    span: Span = _span()


Statement = (
    Template
    | RawInvoke
    | Assign
    | Return
    | PythonStatement
    | PythonBlock
    | Procedure
    | CustomType
    | Directive
    | SystemDirective
    | Use
    | ProfileDef
    | Import
    | Export
    | Package
    | Optimize
    | Auto
    | TestSuite
    | EvalSuite
)


@node
class Module:
    """A whole program (or a query docstring body)."""

    body: tuple[Statement, ...]
    path: str = "<string>"
    span: Span = _span()
