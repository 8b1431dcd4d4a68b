"""Build `kedi.syntax.ast` nodes while the LALR parser reduces (no Lark tree).

`Builder` has one method per grammar rule or alias, in grammar order; Lark calls
it with the rule's children (tokens, including punctuation and layout, and the
nodes already built). It picks the meaningful children, builds the node, and
reports the errors that are easier to state here than in the grammar: names,
signatures, custom types, directive body shapes, suites, module paths. Text and
code inside rows (escapes, trimming, fences, docstrings, spans) are handled by
`kedi.syntax._text`.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace
from typing import Any

from lark import Token

from kedi.source import Span
from kedi.syntax import ast
from kedi.syntax._text import (
    current_source,
    docstring,
    fence_code,
    inline_code,
    offset_span,
    raw_line,
    segments,
    span_of,
    string_literal,
)
from kedi.syntax.diagnostics import DEFAULT_HINT, IDENTIFIER, NAME_HINT, SyntaxProblem
from kedi.syntax.directives import DIRECTIVE_NAMES, SPECS

_HEAD_NAME = re.compile(r"[>@~][ \t]*([^\s(:]*)")
_LITERAL_BASES = frozenset({"Literal", "Annotated"})
_LITERAL_NAMES: dict[str, bool | None] = {"True": True, "False": False, "None": None}
_PROFILE_MEMBERS = (ast.Directive, ast.SystemDirective, ast.Use)
_SUITE_ONLY = {
    ast.TestCase: "`> case:` belongs inside a `@test:` block",
    ast.EvalData: "A dataset (`> data:`, `> test_data:`) belongs inside an `@eval:` block",
    ast.EvalMetric: "`> metric:` belongs inside an `@eval:` block",
}
# Tokens that only delimit or lay out a construct; `_parts` drops them.
_STRUCTURE = frozenset(
    {
        "_NL",
        "_BNL",
        "INDENT",
        "_DEDENT",
        "TPL",
        "_EQ",
        "_RAW",
        "_LT",
        "_GT",
        "_LSQB",
        "_RSQB",
        "_LPAR",
        "_RPAR",
        "_COMMA",
        "_COLON",
        "_PIPE",
        "_ARROW",
        "ASSIGN_OPEN",
    }
)


def is_identifier(name: str) -> bool:
    """Tell whether `name` is a Kedi identifier (`[A-Za-z_][A-Za-z0-9_]*`)."""
    return IDENTIFIER.match(name) is not None


@dataclass(slots=True)
class _Block:
    """An indented body: its items, its `INDENT` token (whose value may hold a docstring), its span."""

    indent: Token
    items: list[Any]
    span: Span

    @classmethod
    def of(cls, children: list[Any]) -> _Block:
        """Build from `INDENT items... _DEDENT` children."""
        return cls(children[0], _parts(children), span_of(children[1:]))


class Builder:
    """The parser's callbacks: grammar rule or alias name -> AST node."""

    # ------------------------------------------------------------------ module

    def start(self, children: list[Any]) -> ast.Module:
        body = _statements(_parts(children))
        if body and isinstance(body[0], ast.PythonBlock):
            body[0] = replace(body[0], prelude=True)
        source = current_source()
        return ast.Module(body=tuple(body), path=source.path, span=source.span(0, len(source.text)))

    # ------------------------------------------------------------------ statements

    def template(self, children: list[Any]) -> ast.Template:
        rows = tuple(part for part in _parts(children) if isinstance(part, ast.Row))
        if not rows:
            raise _problem(children, "Empty template: `>>` needs prompt text")
        return ast.Template(rows=rows, span=span_of(children))

    def raw_invoke(self, children: list[Any]) -> ast.RawInvoke:
        (name, type_), *rows = _parts(children)
        if type_ is not None and type_ != ast.TypeName(name="str"):
            raise SyntaxProblem(
                type_.span,
                "A raw invoke always binds `str`; it cannot have another type",
                f"write `[{name}] << ...`, or use `>>` with `[{name}: ...]` for a typed answer",
            )
        if not rows:
            raise _problem(children, "Empty raw invoke: `<<` needs prompt text")
        for row in rows:
            _reject_captures(
                row.segments,
                "Output fields are not allowed in a raw `<<` prompt",
                "a raw invoke binds the whole reply; use `>>` for output fields",
            )
        return ast.RawInvoke(target=name, type=type_, rows=tuple(rows), span=span_of(children))

    def assign(self, children: list[Any]) -> ast.Assign:
        (name, type_), *value = _parts(children)
        return ast.Assign(
            target=name, type=type_, value=_value(value, children), span=span_of(children)
        )

    def target(self, children: list[Any]) -> tuple[str, ast.TypeExpr | None]:
        name, *type_ = _parts(children)
        return _name(name, "identifier"), _top_type(type_[0]) if type_ else None

    def return_(self, children: list[Any]) -> ast.Return:
        return ast.Return(value=_value(_parts(children), children), span=span_of(children))

    def python_statement(self, children: list[Any]) -> ast.PythonStatement:
        return ast.PythonStatement(code=inline_code(children[0]), span=span_of(children))

    def python_block(self, children: list[Any]) -> ast.PythonBlock:
        return ast.PythonBlock(code=fence_code(children[0]), span=span_of(children))

    def rendered(self, children: list[Any]) -> ast.Rendered:
        parts = segments(children)
        _reject_captures(
            parts,
            "Output fields (`[name]`) are only allowed in `>>` templates",
            "write `\\[` for a literal bracket",
        )
        return ast.Rendered(segments=parts, span=span_of(children))

    def fence(self, children: list[Any]) -> ast.Fence:
        return ast.Fence(code=fence_code(children[0]), span=span_of(children))

    def row(self, children: list[Any]) -> ast.Row:
        return ast.Row(segments=segments(children), span=span_of(children))

    def procedure(self, children: list[Any]) -> ast.Procedure:
        head, *parts = _parts(children)
        name = _head_name(head, "procedure")
        params = tuple(part for part in parts if isinstance(part, ast.Param))
        _check_params(params, "parameter")
        rest = [part for part in parts if not isinstance(part, ast.Param)]
        block = rest.pop() if rest and isinstance(rest[-1], _Block) else None
        if block is None:
            raise _problem(
                children,
                f"Procedure `{name}` needs an indented body",
                "indent the body under the `@name(...):` line",
            )
        return ast.Procedure(
            name=name,
            params=params,
            returns=_top_type(rest[0]) if rest else None,
            docstring=docstring(block.indent),
            body=tuple(_statements(block.items)),
            span=span_of(children),
        )

    def custom_type(self, children: list[Any]) -> ast.CustomType:
        head, *params = _parts(children)
        name = _head_name(head, "type")
        _check_params(tuple(params), "field")
        for param in params:
            if param.default is not None and param.type is None:
                raise SyntaxProblem(
                    param.span,
                    f"Field `{param.name}` has a default but no type",
                    f"annotate it: `{param.name}: Type = `default``",
                )
        fields = tuple(
            ast.FieldDef(name=p.name, type=p.type, default=p.default, span=p.span) for p in params
        )
        return ast.CustomType(name=name, fields=fields, span=span_of(children))

    def block(self, children: list[Any]) -> _Block:
        return _Block.of(children)

    def param(self, children: list[Any]) -> ast.Param:
        token, *parts = _parts(children)
        name = _name(token, "identifier")
        type_: ast.TypeExpr | None = None
        default: ast.PythonCode | None = None
        for part in parts:
            if isinstance(part, Token) and part.type == "FENCE":
                raise _problem([part], "A default cannot be a fenced block", DEFAULT_HINT)
            if isinstance(part, Token):
                default = inline_code(part)
            else:
                type_ = _top_type(part)
        return ast.Param(name=name, type=type_, default=default, span=span_of(children))

    # ------------------------------------------------------------------ directives

    def directive(self, children: list[Any]) -> ast.Directive:
        head, *parts = _parts(children)
        name = _directive_name(head)
        value = next((part.segments for part in parts if isinstance(part, ast.Row)), None)
        body = parts[-1] if parts and isinstance(parts[-1], _Block) else None
        entries = _config(body, f"`> {name}:`") if body is not None else ()
        spec = SPECS.get(name)
        if value is not None and body is not None:
            raise _problem(
                children,
                f"`> {name}:` has both a one-line value and an indented body",
                "keep one of them",
            )
        if value is None and body is None:
            raise _problem([head], f"`> {name}:` needs a value")
        if spec is not None and body is not None and not spec.accepts_config:
            raise _problem(
                children,
                f"`> {name}:` takes a one-line value, not an indented body",
                f"write `> {name}: value`",
            )
        if spec is not None and value is not None and not spec.accepts_line:
            raise _problem(children, f"`> {name}:` needs an indented body of `key: value` settings")
        _reject_captures(value or (), f"Output fields are not allowed in `> {name}:`")
        return ast.Directive(name=name, value=value, config=entries, span=span_of(children))

    def dir_body(self, children: list[Any]) -> _Block:
        return _Block.of(children)

    def config_entry(self, children: list[Any]) -> ast.ConfigEntry:
        head, *parts = _parts(children)
        key = str(head)[:-1].strip()
        value: tuple[ast.Segment, ...] = ()
        items: tuple[str, ...] = ()
        for part in parts:
            if isinstance(part, ast.Row):
                value = part.segments
                _reject_captures(value, f"Output fields are not allowed in the `{key}:` setting")
            else:
                items = tuple(part.items)
        if value and items:
            raise _problem(
                children, f"`{key}:` has both a value and an indented list", "keep one of them"
            )
        return ast.ConfigEntry(key=key, value=value, items=items, span=span_of(children))

    def raw_lines(self, children: list[Any]) -> _Block:
        block = _Block.of(children)
        block.items = [raw_line(line) for line in block.items]
        return block

    def system(self, children: list[Any]) -> ast.SystemDirective:
        head, *parts = _parts(children)
        rows = [part for part in parts if isinstance(part, ast.Row)]
        block = [part for part in parts if isinstance(part, _Block)]
        if rows and block:
            raise _problem(
                children,
                "`> system:` has both a one-line value and indented rows",
                "keep one of them",
            )
        rows += block[0].items if block else []
        if not rows:
            raise _problem([head], "`> system:` needs instruction text")
        for row in rows:
            _reject_captures(
                row.segments,
                "Output fields are not allowed in `> system:` text",
                "system text is a read-only template: use `<name>` or <`expr`>",
            )
            for segment in row.segments:
                if isinstance(segment, ast.Call):
                    raise SyntaxProblem(
                        segment.span,
                        "Procedure calls are not allowed in `> system:` text",
                        "compute the text first: [text] = <proc()>, then use <text>",
                    )
        return ast.SystemDirective(rows=tuple(rows), span=span_of(children))

    def system_rows(self, children: list[Any]) -> _Block:
        return _Block.of(children)

    def use(self, children: list[Any]) -> ast.Use:
        head, *parts = _parts(children)
        block = [part for part in parts if isinstance(part, _Block)]
        if block and len(parts) > 1:
            raise _problem(children, "`> use:` takes either one name or an indented list, not both")
        if not parts:
            raise _problem([head], "`> use:` needs a name or an indented list of names")
        return ast.Use(
            names=tuple(block[0].items if block else parts),
            block=bool(block),
            span=span_of(children),
        )

    def name_list(self, children: list[Any]) -> _Block:
        return _Block.of(children)

    def use_name(self, children: list[Any]) -> ast.UseName:
        token = children[0]
        if token.type == "NAME":
            return ast.UseName(name=str(token), span=span_of(children))
        name = str(token)[1:-1].strip()
        if not is_identifier(name):
            raise _problem(
                children,
                f"`{name}` is not a name",
                "the backtick form names a tool or profile; it is not an expression",
            )
        return ast.UseName(name=name, python=True, span=span_of(children))

    def profile(self, children: list[Any]) -> ast.ProfileDef:
        _, name, *body = _parts(children)
        if not body:
            raise _problem(children, f"Profile `{name}` needs an indented body of `>` directives")
        members = []
        for item in body[0].items:
            if isinstance(item, ast.ConfigEntry):
                raise _mixed_body(item, body[0].items, "`> profile:`")
            if not isinstance(item, _PROFILE_MEMBERS):
                raise SyntaxProblem(
                    item.span,
                    "A profile body holds only agent directives",
                    "define profiles, imports and procedures at top level",
                )
            members.append(item)
        return ast.ProfileDef(
            name=str(name),
            docstring=docstring(body[0].indent),
            members=tuple(members),
            span=span_of(children),
        )

    def import_(self, children: list[Any]) -> ast.Import:
        _, path, *names = _parts(children)
        selective = str(path).endswith(":")
        module = str(path).rstrip(":").rstrip()
        _check_module_path(path, module)
        if selective and not names:
            raise _problem(
                children,
                f"`> import: {module}:` needs an indented list of names",
                f"or write `> import: {module}` to import every export",
            )
        if names and not selective:
            raise _problem(
                children,
                "Add `:` after the module path to import selected names",
                f"write `> import: {module}:`",
            )
        return ast.Import(
            module=module, names=tuple(names[0].items) if names else None, span=span_of(children)
        )

    def export(self, children: list[Any]) -> ast.Export:
        head, *parts = _parts(children)
        star = any(isinstance(part, Token) for part in parts)
        names = [part for part in parts if isinstance(part, ast.UseName)]
        for part in parts:
            if isinstance(part, _Block):
                names += part.items
        if star and names:
            raise _problem(children, "`> export: *` cannot also list names")
        if not star and not names:
            raise _problem([head], "`> export:` needs `*` or an indented list of names")
        return ast.Export(names=tuple(names), star=star, span=span_of(children))

    def package(self, children: list[Any]) -> ast.Package:
        _, name, *body = _parts(children)
        if not body:
            raise _problem(children, f"Package `{name}` needs an indented body of manifest fields")
        return ast.Package(
            name=str(name), config=_config(body[0], "`> package:`"), span=span_of(children)
        )

    def optimize(self, children: list[Any]) -> ast.Optimize:
        _, name, *template = _parts(children)
        if not template:
            raise _problem(children, f"`> optimize: {name}:` needs an indented template")
        return ast.Optimize(name=str(name), template=template[0], span=span_of(children))

    def optimize_rows(self, children: list[Any]) -> ast.Template:
        rows = tuple(_parts(children))
        if not rows:
            raise _problem(children, "Empty template: `>>` needs prompt text")
        return ast.Template(rows=rows, span=span_of(children[1:]))

    def auto(self, children: list[Any]) -> ast.Auto:
        lines: list[str] = []
        for part in _parts(children)[1:]:
            if isinstance(part, _Block):
                lines += part.items
            else:
                lines.append(raw_line(part))
        if not lines:
            raise _problem(children, "`> auto:` needs a specification")
        return ast.Auto(spec="\n".join(lines), span=span_of(children))

    # ------------------------------------------------------------------ suites

    def test_suite(self, children: list[Any]) -> ast.TestSuite:
        _, name, *body = _parts(children)
        cases = []
        for item in _suite_items(children, body, f"@test: {name}"):
            if not isinstance(item, ast.TestCase):
                raise SyntaxProblem(item.span, "A `@test:` block holds only `> case:` entries")
            cases.append(item)
        return ast.TestSuite(procedure=str(name), cases=tuple(cases), span=span_of(children))

    def eval_suite(self, children: list[Any]) -> ast.EvalSuite:
        _, name, *body = _parts(children)
        datasets = []
        metric: ast.EvalMetric | None = None
        for item in _suite_items(children, body, f"@eval: {name}"):
            if isinstance(item, ast.EvalData):
                datasets.append(item)
            elif isinstance(item, ast.EvalMetric) and metric is None:
                metric = item
            elif isinstance(item, ast.EvalMetric):
                raise SyntaxProblem(
                    item.span,
                    "An `@eval:` block has exactly one `> metric:`",
                    "score everything in one metric, or write a second `@eval:` block",
                )
            else:
                raise SyntaxProblem(
                    item.span,
                    "Unknown directive in @eval body",
                    "an `@eval:` block holds `> data:`, `> test_data:` and one `> metric:`",
                )
        return ast.EvalSuite(
            procedure=str(name), datasets=tuple(datasets), metric=metric, span=span_of(children)
        )

    def suite_body(self, children: list[Any]) -> _Block:
        return _Block.of(children)

    def case(self, children: list[Any]) -> ast.TestCase:
        _, name, *body = _parts(children)
        if not body:
            raise _problem(children, f"Case `{name}` needs an indented backtick line or fence")
        return ast.TestCase(name=str(name), body=body[0], span=span_of(children))

    def case_body(self, children: list[Any]) -> ast.PythonCode:
        (token,) = _parts(children)
        return fence_code(token) if token.type == "FENCE" else inline_code(token)

    def data(self, children: list[Any]) -> ast.EvalData:
        head, name, *value = _parts(children)
        if not value:
            raise _problem(children, f"Dataset `{name}` needs an indented `= ...` body")
        kind = "test_data" if "test_data" in head else "data"
        return ast.EvalData(kind=kind, name=str(name), value=value[0], span=span_of(children))

    def metric(self, children: list[Any]) -> ast.EvalMetric:
        _, name, *rest = _parts(children)
        value = rest.pop() if rest and not isinstance(rest[-1], Token) else None
        if value is None:
            raise _problem(children, f"Metric `{name}` needs an indented `= ...` body")
        dataset = str(rest[0]) if rest else None
        return ast.EvalMetric(name=str(name), dataset=dataset, value=value, span=span_of(children))

    def return_body(self, children: list[Any]) -> ast.Value:
        (ret,) = _parts(children)
        return ret.value  # type: ignore[no-any-return]

    # ------------------------------------------------------------------ segments

    def bare_backtick(self, children: list[Any]) -> ast.BareBacktick:
        return ast.BareBacktick(code=inline_code(children[0]), span=span_of(children))

    def subst(self, children: list[Any]) -> ast.Subst:
        return ast.Subst(name=str(children[1]), span=span_of(children))

    def call(self, children: list[Any]) -> ast.Call:
        name, *args = _parts(children)
        if len(args) == 1 and not args[0].segments:
            args = []
        for arg in args:
            if not arg.segments:
                raise _problem(
                    children,
                    f"Empty argument in the call to `{name}`",
                    "write `\\,` for a literal comma",
                )
            _reject_captures(arg.segments, "Output fields are not allowed in call arguments")
        return ast.Call(name=str(name), args=tuple(args), span=span_of(children))

    def arg(self, children: list[Any]) -> ast.Argument:
        span = span_of(children) if children else _NO_SPAN
        return ast.Argument(segments=segments(children), span=span)

    def inline_python(self, children: list[Any]) -> ast.InlinePython:
        return ast.InlinePython(code=inline_code(children[1]), span=span_of(children))

    def capture(self, children: list[Any]) -> ast.Capture:
        name, *type_ = _parts(children)
        return ast.Capture(
            name=_name(name, "identifier"),
            type=_top_type(type_[0]) if type_ else None,
            span=span_of(children),
        )

    # ------------------------------------------------------------------ types

    def type_name(self, children: list[Any]) -> ast.TypeName:
        return ast.TypeName(name=str(children[0]), span=span_of(children))

    def type_subscript(self, children: list[Any]) -> ast.TypeSubscript:
        head, *args = _parts(children)
        base = ast.TypeName(name=str(head), span=span_of([head]))
        if base.name.rsplit(".", 1)[-1] in _LITERAL_BASES:
            args = [
                ast.TypeLiteral(value=_LITERAL_NAMES[arg.name], span=arg.span)
                if isinstance(arg, ast.TypeName) and arg.name in _LITERAL_NAMES
                else arg
                for arg in args
            ]
        return ast.TypeSubscript(base=base, args=tuple(args), span=span_of(children))

    def type_python(self, children: list[Any]) -> ast.TypePython:
        return ast.TypePython(code=inline_code(children[0]), span=span_of(children))

    def type_literal(self, children: list[Any]) -> ast.TypeLiteral:
        token = children[0]
        value: str | int | float
        if token.type == "NUMBER":
            value = float(token) if any(char in token for char in ".eE") else int(token)
        else:
            value = string_literal(token)
        return ast.TypeLiteral(value=value, span=span_of(children))

    def type_union(self, children: list[Any]) -> ast.TypeUnion:
        return ast.TypeUnion(
            options=tuple(_top_type(part) for part in _parts(children)), span=span_of(children)
        )


_NO_SPAN = Span("<unknown>", 0, 0, 0, 0)

# ---------------------------------------------------------------------- children


def _parts(children: list[Any]) -> list[Any]:
    """The children that carry meaning: nodes and non-punctuation tokens."""
    return [
        child for child in children if not isinstance(child, Token) or child.type not in _STRUCTURE
    ]


def _problem(children: list[Any], message: str, hint: str | None = None) -> SyntaxProblem:
    return SyntaxProblem(span_of(children), message, hint)


# ---------------------------------------------------------------------- names and checks


def _name(token: Token, what: str) -> str:
    name = str(token)
    if not is_identifier(name):
        raise _problem([token], f"Invalid {what} `{name}`", NAME_HINT)
    return name


def _head_name(token: Token, what: str) -> str:
    match = _HEAD_NAME.match(token)
    assert match is not None and token.start_pos is not None
    name = match.group(1)
    if not name:
        raise _problem([token], f"Missing {what} name")
    if not is_identifier(name):
        start = token.start_pos + match.start(1)
        raise SyntaxProblem(
            offset_span(start, start + len(name)), f"Invalid {what} name `{name}`", NAME_HINT
        )
    return name


def _directive_name(token: Token) -> str:
    name = str(token)[1:-1].strip()
    if name not in DIRECTIVE_NAMES:
        close = difflib.get_close_matches(name, sorted(DIRECTIVE_NAMES), n=1)
        raise _problem(
            [token],
            f"Unknown directive `> {name}:`",
            f"did you mean `{close[0]}`?" if close else None,
        )
    return name


def _check_params(params: tuple[ast.Param, ...], what: str) -> None:
    seen: set[str] = set()
    defaulted: ast.Param | None = None
    for param in params:
        if param.name in seen:
            raise SyntaxProblem(param.span, f"Duplicate {what} `{param.name}`")
        seen.add(param.name)
        if param.default is not None:
            defaulted = param
        elif defaulted is not None:
            raise SyntaxProblem(
                param.span,
                f"Required {what} `{param.name}` follows defaulted {what} `{defaulted.name}`",
                f"move `{param.name}` before `{defaulted.name}`",
            )


def _module_path_problem(module: str) -> str | None:
    if module.startswith("/"):
        return "absolute paths are not allowed"
    if "\\" in module:
        return "use `/` between segments, not backslashes"
    if module.endswith(".kedi"):
        return "leave out the `.kedi` suffix"
    for segment in module.split("/"):
        if segment in (".", ".."):
            return "`.` and `..` segments are not allowed"
        if not segment:
            return "a path segment is empty"
        if not is_identifier(segment):
            return f"`{segment}` is not an identifier"
    return None


def _check_module_path(token: Token, module: str) -> None:
    reason = _module_path_problem(module)
    if reason:
        raise _problem([token], f"Invalid module path `{module}`: {reason}")


def _top_type(type_: ast.TypeExpr) -> ast.TypeExpr:
    if isinstance(type_, ast.TypeLiteral):
        raise SyntaxProblem(
            type_.span, "A literal is only valid inside `Literal[...]` or `Annotated[...]`"
        )
    return type_


def _reject_captures(
    segments: tuple[ast.Segment, ...], message: str, hint: str | None = None
) -> None:
    for segment in segments:
        if isinstance(segment, ast.Capture):
            raise SyntaxProblem(segment.span, message, hint)


def _statements(items: list[Any]) -> list[Any]:
    for item in items:
        message = _SUITE_ONLY.get(type(item))
        if message is not None:
            raise SyntaxProblem(item.span, message)
    return items


def _suite_items(children: list[Any], body: list[Any], head: str) -> list[Any]:
    if not body:
        raise _problem(children, f"`{head}:` needs an indented body")
    return body[0].items  # type: ignore[no-any-return]


def _config(body: _Block, owner: str) -> tuple[ast.ConfigEntry, ...]:
    for item in body.items:
        if not isinstance(item, ast.ConfigEntry):
            raise _mixed_body(item, body.items, owner)
    return tuple(body.items)


def _mixed_body(item: Any, items: list[Any], owner: str) -> SyntaxProblem:
    if len({isinstance(other, ast.ConfigEntry) for other in items}) == 2:
        return SyntaxProblem(
            item.span,
            "A directive body cannot mix `key: value` settings and `>` directives",
            "a body holds either settings (`key: value`) or directives (`> name:`)",
        )
    if isinstance(item, ast.ConfigEntry):
        return SyntaxProblem(item.span, f"{owner} holds `>` directives, not `key: value` settings")
    return SyntaxProblem(item.span, f"{owner} holds `key: value` settings, not `>` directives")


def _value(parts: list[Any], children: list[Any]) -> ast.Value:
    if parts:
        return parts[0]  # type: ignore[no-any-return]
    # `=` with nothing after it: an empty rendered value, placed right after the `=`.
    equals = next(child for child in children if isinstance(child, Token) and child.type == "_EQ")
    return ast.Rendered(segments=(), span=offset_span(equals.end_pos, equals.end_pos))  # type: ignore[arg-type]
