"""Build `kedi.syntax.ast` nodes while the LALR parser reduces (no parse tree).

`Builder` has one method per grammar rule or alias, in grammar order; the parse
loop (`kedi.syntax.parser.run`) calls it with the rule's children (tokens,
including punctuation and layout, and the nodes already built). It picks the
meaningful children, builds the node, and reports the errors that are easier to
state here than in the grammar: names, signatures, custom types, directive body
shapes, suites, module paths. Text and code inside rows (escapes, trimming,
fences, docstrings, spans) are handled by its base class
`kedi.syntax._text.FedText`. One `Builder` serves one parse.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, replace
from typing import Any

from kedi.source import Span
from kedi.syntax import ast
from kedi.syntax._postlex import Token
from kedi.syntax._text import Capture, FedText, TypeName, constructor
from kedi.syntax.diagnostics import (
    DEFAULT_HINT,
    IDENTIFIER,
    NAME_HINT,
    TRAILING_SPACES,
    SyntaxProblem,
    unspaced,
)
from kedi.syntax.directives import DIRECTIVE_NAMES, SPECS

# Every node the builder makes, with the fast constructor (see `constructor`).
Argument = constructor(ast.Argument)
Assign = constructor(ast.Assign)
Auto = constructor(ast.Auto)
BareBacktick = constructor(ast.BareBacktick)
Call = constructor(ast.Call)
ConfigEntry = constructor(ast.ConfigEntry)
CustomType = constructor(ast.CustomType)
Directive = constructor(ast.Directive)
EvalData = constructor(ast.EvalData)
EvalMetric = constructor(ast.EvalMetric)
EvalSuite = constructor(ast.EvalSuite)
Export = constructor(ast.Export)
Fence = constructor(ast.Fence)
FieldDef = constructor(ast.FieldDef)
Import = constructor(ast.Import)
InlinePython = constructor(ast.InlinePython)
Module = constructor(ast.Module)
Optimize = constructor(ast.Optimize)
Package = constructor(ast.Package)
Param = constructor(ast.Param)
Procedure = constructor(ast.Procedure)
ProfileDef = constructor(ast.ProfileDef)
PythonBlock = constructor(ast.PythonBlock)
PythonStatement = constructor(ast.PythonStatement)
RawInvoke = constructor(ast.RawInvoke)
Rendered = constructor(ast.Rendered)
Return = constructor(ast.Return)
Row = constructor(ast.Row)
SystemDirective = constructor(ast.SystemDirective)
Template = constructor(ast.Template)
TestCase = constructor(ast.TestCase)
TestSuite = constructor(ast.TestSuite)
TypeLiteral = constructor(ast.TypeLiteral)
TypePython = constructor(ast.TypePython)
TypeSubscript = constructor(ast.TypeSubscript)
TypeUnion = constructor(ast.TypeUnion)
Use = constructor(ast.Use)
UseName = constructor(ast.UseName)

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
    """An indented body: its items, its `INDENT` token (its newline run may hold a docstring), its span."""

    indent: Token
    items: list[Any]
    span: Span


@dataclass(slots=True)
class _Target:
    """An assignment target: `[name]` or `[name: Type]`."""

    name: str
    type: ast.TypeExpr | None


class Builder(FedText):
    """The parser's callbacks: grammar rule or alias name -> AST node."""

    __slots__ = ()

    # ------------------------------------------------------------------ module

    def start(self, children: list[Any]) -> ast.Module:
        body = _statements(children[1:])  # _NL _statement*
        if body and isinstance(body[0], ast.PythonBlock):
            body[0] = replace(body[0], prelude=True)
        source = self.source
        return Module(body=tuple(body), path=source.path, span=source.whole_span())

    # ------------------------------------------------------------------ statements

    def template(self, children: list[Any]) -> ast.Template:
        rows = tuple(child for child in children if isinstance(child, ast.Row))
        if not rows:
            raise self._problem(children, "Empty template: `>>` needs prompt text")
        return Template(rows=rows, span=self.span_of(children))

    def raw_invoke(self, children: list[Any]) -> ast.RawInvoke:
        name, type_, marker = self._assignment_target(children)
        rows = [part for part in children[marker + 1 :] if isinstance(part, ast.Row)]
        if type_ is not None and type_ != TypeName(name="str"):
            raise SyntaxProblem(
                type_.span,
                "A raw invoke always binds `str`; it cannot have another type",
                f"write `[{name}] << ...`, or use `>>` with `[{name}: ...]` for a typed answer",
            )
        if not rows:
            raise self._problem(children, "Empty raw invoke: `<<` needs prompt text")
        for row in rows:
            _reject_captures(
                row.segments,
                "Output fields are not allowed in a raw `<<` prompt",
                "a raw invoke binds the whole reply; use `>>` for output fields",
            )
        return RawInvoke(target=name, type=type_, rows=tuple(rows), span=self.span_of(children))

    def assign(self, children: list[Any]) -> ast.Assign:
        # (TARGET | ASSIGN_OPEN target _RSQB) _EQ value? (_NL | _BNL)
        name, type_, _ = self._assignment_target(children)
        return Assign(
            target=name,
            type=type_,
            value=self._value(children),
            span=self.span_of(children),
        )

    def target(self, children: list[Any]) -> _Target:
        # NAME (_COLON type)?
        name = self._name(children[0], "identifier")
        return _Target(name, _top_type(children[2]) if len(children) > 1 else None)

    def return_(self, children: list[Any]) -> ast.Return:
        # _EQ value? (_NL | _BNL)
        return Return(value=self._value(children), span=self.span_of(children))

    def python_statement(self, children: list[Any]) -> ast.PythonStatement:
        return PythonStatement(code=self.inline_code(children[0]), span=self.span_of(children))

    def python_block(self, children: list[Any]) -> ast.PythonBlock:
        return PythonBlock(code=self.fence_code(children[0]), span=self.span_of(children))

    def rendered(self, children: list[Any]) -> ast.Rendered:
        parts = self.segments(children)
        _reject_captures(
            parts,
            "Output fields (`[name]`) are only allowed in `>>` templates",
            "write `\\[` for a literal bracket",
        )
        return Rendered(segments=parts, span=self.span_of(children))

    def fence(self, children: list[Any]) -> ast.Fence:
        code = self.fence_code(children[0])
        return Fence(code=code, span=code.span)

    def row(self, children: list[Any]) -> ast.Row:
        return Row(segments=self.segments(children), span=self.span_of(children))

    def procedure(self, children: list[Any]) -> ast.Procedure:
        # PROC_HEAD _params _RPAR (_ARROW type)? _COLON (_NL | _BNL) block?
        name = self._head_name(children[0], "procedure")
        params = tuple([part for part in children if isinstance(part, ast.Param)])
        _check_params(params, "parameter")
        block = children[-1]
        if not isinstance(block, _Block):
            raise self._problem(
                children,
                f"Procedure `{name}` needs an indented body",
                "indent the body under the `@name(...):` line",
            )
        returns = children[-4]  # the type after `->`, else the `_RPAR` token
        return Procedure(
            name=name,
            params=params,
            returns=None if type(returns) is tuple else _top_type(returns),
            docstring=self.docstring(block.indent),
            body=tuple(_statements(block.items)),
            span=self.span_of(children),
        )

    def custom_type(self, children: list[Any]) -> ast.CustomType:
        # TYPE_HEAD _params _RPAR (_NL | _BNL)
        name = self._head_name(children[0], "type")
        params = tuple([part for part in children if isinstance(part, ast.Param)])
        _check_params(params, "field")
        for param in params:
            if param.default is not None and param.type is None:
                raise SyntaxProblem(
                    param.span,
                    f"Field `{param.name}` has a default but no type",
                    f"annotate it: `{param.name}: Type = `default``",
                )
        fields = tuple(
            FieldDef(name=p.name, type=p.type, default=p.default, span=p.span) for p in params
        )
        return CustomType(name=name, fields=fields, span=self.span_of(children))

    def block(self, children: list[Any]) -> _Block:
        return self._block(children, children[1:-1])

    def param(self, children: list[Any]) -> ast.Param:
        # (PARAM | NAME (_COLON type)?) (_EQ (CODE | FENCE))?
        token = children[0]
        type_: ast.TypeExpr | None
        if token[0] == "PARAM":
            name, type_ = self.name_and_type(token, token[1], token[2])
        else:
            name = self._name(token, "identifier")
            typed = len(children) > 1 and children[1][0] == "_COLON"
            type_ = _top_type(children[2]) if typed else None
        default: ast.PythonCode | None = None
        if len(children) > 1 and children[-2][0] == "_EQ":
            if children[-1][0] == "FENCE":
                raise self._problem(
                    children[-1:], "A default cannot be a fenced block", DEFAULT_HINT
                )
            default = self.inline_code(children[-1])
        return Param(name=name, type=type_, default=default, span=self.span_of(children))

    # ------------------------------------------------------------------ directives

    def directive(self, children: list[Any]) -> ast.Directive:
        # DIRECTIVE row? (_NL | _BNL) dir_body?
        head = children[0]
        name = self._directive_name(head)
        value = children[1].segments if isinstance(children[1], ast.Row) else None
        body = children[-1] if isinstance(children[-1], _Block) else None
        entries = _config(body, f"`> {name}:`") if body is not None else ()
        spec = SPECS.get(name)
        if value is not None and body is not None:
            raise self._problem(
                children,
                f"`> {name}:` has both a one-line value and an indented body",
                "keep one of them",
            )
        if value is None and body is None:
            raise self._problem([head], f"`> {name}:` needs a value")
        if spec is not None and body is not None and not spec.accepts_config:
            raise self._problem(
                children,
                f"`> {name}:` takes a one-line value, not an indented body",
                f"write `> {name}: value`",
            )
        if spec is not None and value is not None and not spec.accepts_line:
            raise self._problem(
                children, f"`> {name}:` needs an indented body of `key: value` settings"
            )
        _reject_captures(value or (), f"Output fields are not allowed in `> {name}:`")
        return Directive(name=name, value=value, config=entries, span=self.span_of(children))

    def dir_body(self, children: list[Any]) -> _Block:
        return self._block(children, children[1:-1])

    def config_entry(self, children: list[Any]) -> ast.ConfigEntry:
        # CONFIG_KEY row? (_NL | _BNL) raw_lines?
        key = self.text(children[0])[:-1].strip()
        value: tuple[ast.Segment, ...] = ()
        items: tuple[str, ...] = ()
        if isinstance(children[1], ast.Row):
            value = children[1].segments
            _reject_captures(value, f"Output fields are not allowed in the `{key}:` setting")
        if isinstance(children[-1], _Block):
            items = tuple(children[-1].items)
        if value and items:
            raise self._problem(
                children, f"`{key}:` has both a value and an indented list", "keep one of them"
            )
        return ConfigEntry(key=key, value=value, items=items, span=self.span_of(children))

    def raw_lines(self, children: list[Any]) -> _Block:
        block = self._block(children, _parts(children))
        block.items = [self.raw_line(line) for line in block.items]
        return block

    def system(self, children: list[Any]) -> ast.SystemDirective:
        head, *parts = _parts(children)
        rows = [part for part in parts if isinstance(part, ast.Row)]
        block = [part for part in parts if isinstance(part, _Block)]
        if rows and block:
            raise self._problem(
                children,
                "`> system:` has both a one-line value and indented rows",
                "keep one of them",
            )
        rows += block[0].items if block else []
        if not rows:
            raise self._problem([head], "`> system:` needs instruction text")
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
        return SystemDirective(rows=tuple(rows), span=self.span_of(children))

    def system_rows(self, children: list[Any]) -> _Block:
        return self._block(children, _parts(children))

    def use(self, children: list[Any]) -> ast.Use:
        head, *parts = _parts(children)
        block = [part for part in parts if isinstance(part, _Block)]
        if block and len(parts) > 1:
            raise self._problem(
                children, "`> use:` takes either one name or an indented list, not both"
            )
        if not parts:
            raise self._problem([head], "`> use:` needs a name or an indented list of names")
        return Use(
            names=tuple(block[0].items if block else parts),
            block=bool(block),
            span=self.span_of(children),
        )

    def name_list(self, children: list[Any]) -> _Block:
        return self._block(children, _parts(children))

    def use_name(self, children: list[Any]) -> ast.UseName:
        token = children[0]
        if token[0] == "NAME":
            return UseName(name=self.text(token), span=self.span_of(children))
        name = self.text(token)[1:-1].strip()
        if not is_identifier(name):
            raise self._problem(
                children,
                f"`{name}` is not a name",
                "the backtick form names a tool or profile; it is not an expression",
            )
        return UseName(name=name, python=True, span=self.span_of(children))

    def profile(self, children: list[Any]) -> ast.ProfileDef:
        _, token, *body = _parts(children)
        name = self.text(token)
        if not body:
            raise self._problem(
                children, f"Profile `{name}` needs an indented body of `>` directives"
            )
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
        return ProfileDef(
            name=name,
            docstring=self.docstring(body[0].indent),
            members=tuple(members),
            span=self.span_of(children),
        )

    def import_(self, children: list[Any]) -> ast.Import:
        _, path, *names = _parts(children)
        selective = self.text(path).endswith(":")
        module = self.text(path).rstrip(":").rstrip()
        self._check_module_path(path, module)
        if selective and not names:
            raise self._problem(
                children,
                f"`> import: {module}:` needs an indented list of names",
                f"or write `> import: {module}` to import every export",
            )
        if names and not selective:
            raise self._problem(
                children,
                "Add `:` after the module path to import selected names",
                f"write `> import: {module}:`",
            )
        return Import(
            module=module,
            names=tuple(names[0].items) if names else None,
            span=self.span_of(children),
        )

    def export(self, children: list[Any]) -> ast.Export:
        head, *parts = _parts(children)
        star = any(type(part) is tuple for part in parts)
        names = [part for part in parts if isinstance(part, ast.UseName)]
        for part in parts:
            if isinstance(part, _Block):
                names += part.items
        if star and names:
            raise self._problem(children, "`> export: *` cannot also list names")
        if not star and not names:
            raise self._problem([head], "`> export:` needs `*` or an indented list of names")
        return Export(names=tuple(names), star=star, span=self.span_of(children))

    def package(self, children: list[Any]) -> ast.Package:
        _, token, *body = _parts(children)
        name = self.text(token)
        if not body:
            raise self._problem(
                children, f"Package `{name}` needs an indented body of manifest fields"
            )
        return Package(
            name=name, config=_config(body[0], "`> package:`"), span=self.span_of(children)
        )

    def optimize(self, children: list[Any]) -> ast.Optimize:
        _, token, *template = _parts(children)
        name = self.text(token)
        if not template:
            raise self._problem(children, f"`> optimize: {name}:` needs an indented template")
        return Optimize(name=name, template=template[0], span=self.span_of(children))

    def optimize_rows(self, children: list[Any]) -> ast.Template:
        rows = tuple(_parts(children))
        if not rows:
            raise self._problem(children, "Empty template: `>>` needs prompt text")
        return Template(rows=rows, span=self.span_of(children[1:]))

    def auto(self, children: list[Any]) -> ast.Auto:
        lines: list[str] = []
        for part in _parts(children)[1:]:
            if isinstance(part, _Block):
                lines += part.items
            else:
                lines.append(self.raw_line(part))
        if not lines:
            raise self._problem(children, "`> auto:` needs a specification")
        return Auto(spec="\n".join(lines), span=self.span_of(children))

    # ------------------------------------------------------------------ suites

    def test_suite(self, children: list[Any]) -> ast.TestSuite:
        _, token, *body = _parts(children)
        name = self.text(token)
        cases = []
        for item in self._suite_items(children, body, f"@test: {name}"):
            if not isinstance(item, ast.TestCase):
                raise SyntaxProblem(item.span, "A `@test:` block holds only `> case:` entries")
            cases.append(item)
        return TestSuite(procedure=name, cases=tuple(cases), span=self.span_of(children))

    def eval_suite(self, children: list[Any]) -> ast.EvalSuite:
        _, token, *body = _parts(children)
        name = self.text(token)
        datasets = []
        metric: ast.EvalMetric | None = None
        for item in self._suite_items(children, body, f"@eval: {name}"):
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
        return EvalSuite(
            procedure=name, datasets=tuple(datasets), metric=metric, span=self.span_of(children)
        )

    def suite_body(self, children: list[Any]) -> _Block:
        return self._block(children, children[1:-1])

    def case(self, children: list[Any]) -> ast.TestCase:
        _, token, *body = _parts(children)
        name = self.text(token)
        if not body:
            raise self._problem(children, f"Case `{name}` needs an indented backtick line or fence")
        return TestCase(name=name, body=body[0], span=self.span_of(children))

    def case_body(self, children: list[Any]) -> ast.PythonCode:
        (token,) = _parts(children)
        return self.fence_code(token) if token[0] == "FENCE" else self.inline_code(token)

    def data(self, children: list[Any]) -> ast.EvalData:
        head, token, *value = _parts(children)
        name = self.text(token)
        if not value:
            raise self._problem(children, f"Dataset `{name}` needs an indented `= ...` body")
        kind = "test_data" if "test_data" in self.text(head) else "data"
        return EvalData(kind=kind, name=name, value=value[0], span=self.span_of(children))

    def metric(self, children: list[Any]) -> ast.EvalMetric:
        _, token, *rest = _parts(children)
        name = self.text(token)
        value = rest.pop() if rest and type(rest[-1]) is not tuple else None
        if value is None:
            raise self._problem(children, f"Metric `{name}` needs an indented `= ...` body")
        dataset = self.text(rest[0]) if rest else None
        return EvalMetric(name=name, dataset=dataset, value=value, span=self.span_of(children))

    def return_body(self, children: list[Any]) -> ast.Value:
        (ret,) = _parts(children)
        return ret.value

    # ------------------------------------------------------------------ segments

    def bare_backtick(self, children: list[Any]) -> ast.BareBacktick:
        code = self.inline_code(children[0])
        return BareBacktick(code=code, span=code.span)

    def call(self, children: list[Any]) -> ast.Call:
        # _LT NAME _LPAR arg (_COMMA arg)* _RPAR _GT
        name = self.text(children[1])
        args = children[3:-2:2]
        if len(args) == 1 and not args[0].segments:
            args = []
        for arg in args:
            if not arg.segments:
                raise self._problem(
                    children,
                    f"Empty argument in the call to `{name}`",
                    "write `\\,` for a literal comma",
                )
            _reject_captures(arg.segments, "Output fields are not allowed in call arguments")
        return Call(name=name, args=tuple(args), span=self.span_of(children))

    def arg(self, children: list[Any]) -> ast.Argument:
        span = self.span_of(children) if children else _NO_SPAN
        return Argument(segments=self.segments(children), span=span)

    def inline_python(self, children: list[Any]) -> ast.InlinePython:
        return InlinePython(code=self.inline_code(children[1]), span=self.span_of(children))

    def capture(self, children: list[Any]) -> ast.Capture:
        # _LSQB NAME (_COLON type)? _RSQB (a CAPTURE token is built by `segments`)
        return Capture(
            name=self._name(children[1], "identifier"),
            type=_top_type(children[3]) if len(children) > 3 else None,
            span=self.span_of(children),
        )

    # ------------------------------------------------------------------ types

    def type_name(self, children: list[Any]) -> ast.TypeName:
        (token,) = children
        return TypeName(name=self.fed[token[1] : token[2]], span=self.line_span(token))

    def type_subscript(self, children: list[Any]) -> ast.TypeSubscript:
        # DOTTED _LSQB type (_COMMA type)* _COMMA? _RSQB
        head = children[0]
        args = children[2:-1:2]
        base = TypeName(name=self.text(head), span=self.token_span(head))
        if base.name.rsplit(".", 1)[-1] in _LITERAL_BASES:
            args = [
                TypeLiteral(value=_LITERAL_NAMES[arg.name], span=arg.span)
                if isinstance(arg, ast.TypeName) and arg.name in _LITERAL_NAMES
                else arg
                for arg in args
            ]
        return TypeSubscript(base=base, args=tuple(args), span=self.span_of(children))

    def type_python(self, children: list[Any]) -> ast.TypePython:
        code = self.inline_code(children[0])
        return TypePython(code=code, span=code.span)

    def type_literal(self, children: list[Any]) -> ast.TypeLiteral:
        token = children[0]
        value: str | int | float
        if token[0] == "NUMBER":
            text = self.text(token)
            value = float(text) if any(char in text for char in ".eE") else int(text)
        else:
            value = self.string_literal(token)
        return TypeLiteral(value=value, span=self.span_of(children))

    def type_union(self, children: list[Any]) -> ast.TypeUnion:
        return TypeUnion(
            options=tuple(_top_type(part) for part in _parts(children)), span=self.span_of(children)
        )

    # ------------------------------------------------------------------ helpers

    def _block(self, children: list[Any], items: list[Any]) -> _Block:
        """Build from `INDENT ... _DEDENT` children, whose meaningful ones are `items`.

        (`INDENT item+ _DEDENT` bodies pass the children in between: no filtering.)
        """
        return _Block(children[0], items, self.span_of(children[1:]))

    def _assignment_target(self, children: list[Any]) -> tuple[str, ast.TypeExpr | None, int]:
        """Return the name and type of an assignment's target, and where its `=` or `<<` is."""
        token = children[0]
        if token[0] == "TARGET":  # `[`, name and type, `]` and the spaces before `=` or `<<`
            stop = self.fed.rindex("]", token[1], token[2])
            name, type_ = self.name_and_type(token, token[1] + 1, stop)
            return name, type_, 1
        # ASSIGN_OPEN target _RSQB
        target = children[1]
        return target.name, target.type, 3

    def _problem(self, children: list[Any], message: str, hint: str | None = None) -> SyntaxProblem:
        span = self.span_of(children)
        last = children[-1]
        if type(last) is tuple and last[0] in TRAILING_SPACES:
            _, end = unspaced(self.fed, last[1], last[2])
            span = span._replace(end_column=span.end_column - (last[2] - end))
        return SyntaxProblem(span, message, hint)

    def _name(self, token: Token, what: str) -> str:
        name = self.text(token)
        if not is_identifier(name):
            raise self._problem([token], f"Invalid {what} `{name}`", NAME_HINT)
        return name

    def _head_name(self, token: Token, what: str) -> str:
        match = _HEAD_NAME.match(self.text(token))
        assert match is not None
        name = match.group(1)
        if not name:
            raise self._problem([token], f"Missing {what} name")
        if not is_identifier(name):
            start = token[1] + match.start(1)
            raise SyntaxProblem(
                self.offset_span(start, start + len(name)),
                f"Invalid {what} name `{name}`",
                NAME_HINT,
            )
        return name

    def _directive_name(self, token: Token) -> str:
        name = self.text(token).rstrip(" \t")[1:-1].strip()  # `>`, the name, `:`
        if name not in DIRECTIVE_NAMES:
            close = difflib.get_close_matches(name, sorted(DIRECTIVE_NAMES), n=1)
            raise self._problem(
                [token],
                f"Unknown directive `> {name}:`",
                f"did you mean `{close[0]}`?" if close else None,
            )
        return name

    def _check_module_path(self, token: Token, module: str) -> None:
        reason = _module_path_problem(module)
        if reason:
            raise self._problem([token], f"Invalid module path `{module}`: {reason}")

    def _suite_items(self, children: list[Any], body: list[Any], head: str) -> list[Any]:
        if not body:
            raise self._problem(children, f"`{head}:` needs an indented body")
        return body[0].items

    def _value(self, children: list[Any]) -> ast.Value:
        """Return the value of `... _EQ value? (_NL | _BNL)` children: the node before the `_NL`."""
        value = children[-2]
        if type(value) is not tuple:
            return value
        # `=` with nothing after it (`value` is the `_EQ` token, which also holds the spaces
        # after it): an empty rendered value, right after the `=`.
        return Rendered(segments=(), span=self.offset_span(value[1] + 1, value[1] + 1))


_NO_SPAN = Span("<unknown>", 0, 0, 0, 0)

# ---------------------------------------------------------------------- children


def _parts(children: list[Any]) -> list[Any]:
    """The children that carry meaning: nodes and non-punctuation tokens."""
    return [child for child in children if type(child) is not tuple or child[0] not in _STRUCTURE]


# ---------------------------------------------------------------------- names and checks


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


def _top_type(type_: ast.TypeExpr) -> ast.TypeExpr:
    if isinstance(type_, ast.TypeLiteral):
        raise SyntaxProblem(
            type_.span, "A literal is only valid inside `Literal[...]` or `Annotated[...]`"
        )
    if isinstance(type_, ast.TypeName) and type_.name == "...":
        raise SyntaxProblem(
            type_.span, "`...` is only valid as a type argument", "for example `tuple[int, ...]`"
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
