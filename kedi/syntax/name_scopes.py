"""The lexical scopes of a module, as the static checks see them: what each binds and reads.

`ScopeBuilder` walks a parsed module once and records, per scope (the module,
each procedure, each `@eval:` metric), the names it binds (`Binding`) and the
names it reads (`Ref`), with where and how they are read. The checks in
`kedi.syntax.checks` then decide which reads can never resolve; the rules for
what binds a name are in that module's docs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal, assert_never

from kedi.source import Span
from kedi.syntax import ast
from kedi.syntax.python_snippets import python_bindings

BindingKind = Literal["value", "procedure", "type", "profile", "python", "import"]
RefKind = Literal["value", "agent", "use", "use_list", "export", "type"]


@dataclass(frozen=True, slots=True)
class Binding:
    """One way a scope binds a name (a procedure binding keeps its definition, for arity)."""

    kind: BindingKind
    procedure: ast.Procedure | None = None
    at: Span | None = None
    """Where the binding takes effect in its scope; None when that is not a place in the
    scope's order (a profile, a `global` name bound from a nested scope)."""


@dataclass(frozen=True, slots=True)
class Ref:
    """One read of a name: where, how (`kind`), and the call when it is `<name(...)>`."""

    name: str
    span: Span
    kind: RefKind
    call: ast.Call | None = None
    ordered: bool = True
    """False when the read does not run in its scope's source order (an eval dataset
    is evaluated after the whole file has run, a procedure's signature when it is called)."""


@dataclass(eq=False, slots=True)
class Scope:
    """One lexical scope: its enclosing scope, what it binds and the names it reads."""

    parent: Scope | None
    bindings: dict[str, list[Binding]] = field(default_factory=dict)
    refs: list[Ref] = field(default_factory=list)

    def bind(
        self,
        name: str,
        kind: BindingKind,
        procedure: ast.Procedure | None = None,
        at: Span | None = None,
    ) -> None:
        self.bindings.setdefault(name, []).append(Binding(kind, procedure, at))

    def chain(self) -> Iterator[Scope]:
        scope: Scope | None = self
        while scope is not None:
            yield scope
            scope = scope.parent

    def owner_of(self, name: str) -> Scope | None:
        """The innermost scope (this one or an enclosing one) that binds `name`."""
        return next((scope for scope in self.chain() if name in scope.bindings), None)


class ScopeBuilder:
    """Records, per lexical scope, what it binds and which names it reads."""

    def __init__(
        self, imports: Mapping[str, Mapping[str, ast.Procedure | None]] | None = None
    ) -> None:
        self.module = Scope(None)
        self.scopes = [self.module]
        self.imports = imports or {}
        """The exports of each linked module a whole `> import: m` brings, by module path.

        Each exported name maps to its Kedi procedure, when it is one the module
        defines (so calls of it get the arity check), else None.
        """
        self.open = False
        """True when some import's exports are unknown (`> import: m` not linked, `from m import *`)."""

    def statements(self, body: Iterable[ast.Statement], scope: Scope) -> None:
        for statement in body:
            self.statement(statement, scope)

    # One case per statement class; `assert_never` proves the match exhaustive.
    def statement(self, statement: ast.Statement, scope: Scope) -> None:  # noqa: C901
        match statement:
            case ast.Template(rows=rows) | ast.Optimize(template=ast.Template(rows=rows)):
                self.rows(rows, scope, "value")
            case ast.RawInvoke():
                scope.bind(statement.target, "value", at=statement.span)
                self.rows(statement.rows, scope, "value")
            case ast.Assign():
                scope.bind(statement.target, "value", at=statement.span)
                scope.refs.extend(type_refs(statement.type))
                self.value(statement.value, scope)
            case ast.Return():
                self.value(statement.value, scope)
            case ast.PythonStatement(code=code) | ast.PythonBlock(code=code):
                self.python(code, scope, statement.span)
            case ast.Procedure():
                scope.bind(statement.name, "procedure", statement, statement.span)
                # The signature's types resolve in the defining scope, but only when
                # the procedure is called: a type defined below the procedure is fine.
                signature = [*(param.type for param in statement.params), statement.returns]
                scope.refs.extend(
                    replace(ref, ordered=False) for ty in signature for ref in type_refs(ty)
                )
                inner = self.new_scope(scope)
                for param in statement.params:
                    inner.bind(param.name, "value")
                self.statements(statement.body, inner)
            case ast.CustomType():
                scope.bind(statement.name, "type", at=statement.span)
                for type_field in statement.fields:
                    scope.refs.extend(type_refs(type_field.type))
            case ast.Directive():
                self.segments(statement.value or (), scope, "agent")
                for entry in statement.config:
                    self.segments(entry.value, scope, "agent")
            case ast.SystemDirective():
                self.rows(statement.rows, scope, "agent")
            case ast.Use():
                kind: RefKind = "use_list" if statement.block else "use"
                scope.refs.extend(Ref(n.name, n.span, kind) for n in statement.names)
            case ast.ProfileDef():
                self.module.bind(statement.name, "profile")
                self.statements(statement.members, scope)
            case ast.Import(names=None) if statement.module in self.imports:
                for exported, procedure in self.imports[statement.module].items():
                    scope.bind(exported, "import", procedure, statement.span)
            case ast.Import(names=None):
                self.open = True
            case ast.Import(names=names):
                for name in names or ():
                    scope.bind(name.name, "import", at=statement.span)
            case ast.Export():
                scope.refs.extend(Ref(n.name, n.span, "export") for n in statement.names)
            case ast.EvalSuite():
                read_before = len(scope.refs)
                for dataset in statement.datasets:
                    self.value(dataset.value, scope)
                scope.refs[read_before:] = [
                    replace(ref, ordered=False) for ref in scope.refs[read_before:]
                ]
                if statement.metric is not None:
                    metric_scope = self.new_scope(scope)
                    metric_scope.bind("expected", "value")
                    if statement.metric.dataset is not None:
                        metric_scope.bind(statement.metric.dataset, "value")
                    self.value(statement.metric.value, metric_scope)
            case ast.Package() | ast.Auto() | ast.TestSuite():
                pass  # no Kedi names: manifest fields, prose, Python assertions
            case _:  # pragma: no cover - unreachable: every statement class is matched
                assert_never(statement)

    def new_scope(self, parent: Scope) -> Scope:
        scope = Scope(parent)
        self.scopes.append(scope)
        return scope

    def rows(self, rows: Iterable[ast.Row], scope: Scope, kind: RefKind) -> None:
        for row in rows:
            self.segments(row.segments, scope, kind)

    def value(self, value: ast.Value, scope: Scope) -> None:
        if isinstance(value, ast.Rendered):
            self.segments(value.segments, scope, "value")

    def segments(self, segments: Iterable[ast.Segment], scope: Scope, kind: RefKind) -> None:
        for segment in segments:
            match segment:
                case ast.Subst():
                    scope.refs.append(Ref(segment.name, segment.span, kind))
                case ast.Call():
                    scope.refs.append(Ref(segment.name, segment.span, kind, segment))
                    for argument in segment.args:
                        self.segments(argument.segments, scope, kind)
                case ast.Capture():
                    scope.bind(segment.name, "value", at=segment.span)
                    scope.refs.extend(type_refs(segment.type))
                case ast.Text() | ast.InlinePython() | ast.BareBacktick():
                    pass  # backtick Python is too dynamic to check statically
                case _:  # pragma: no cover - unreachable: every segment class is matched
                    assert_never(segment)

    def python(self, code: ast.PythonCode, scope: Scope, at: Span) -> None:
        local_names, global_names, star = python_bindings(code.code)
        self.open = self.open or star
        for name in local_names:
            scope.bind(name, "python", at=at)
        for name in global_names:
            self.module.bind(name, "python", at=at if scope is self.module else None)


def type_refs(expr: ast.TypeExpr | None) -> Iterator[Ref]:
    """The names a type expression reads (the first part of a dotted name); backtick types are not read."""
    pending = [expr]
    while pending:
        match pending.pop():
            case ast.TypeName(name="..."):
                pass  # `tuple[int, ...]`: Python's Ellipsis, not a name
            case ast.TypeName(name=name, span=span):
                yield Ref(name.partition(".")[0], span, "type")
            case ast.TypeSubscript(base=base, args=args):
                pending += [base, *args]
            case ast.TypeUnion(options=options):
                pending += options
            case None | ast.TypeLiteral() | ast.TypePython():
                pass
            case other:  # pragma: no cover - unreachable: every type class is matched
                assert_never(other)
