"""Static checks behind `kedi check`: what is certainly wrong without running.

`check_module` runs every check over a parsed `Module` and returns the
diagnostics sorted by position; `check_or_raise` turns them into one
`KediCheckError`. Each check is one small generator over a shared
`_Context`, which holds the lexical scopes (what each scope binds and which
names it reads; `kedi.syntax.name_scopes`) built once per module.

The checks are conservative: value lookup is dynamic, so a name is reported
only when nothing in the module, its enclosing scopes, the embedder's
`known_globals`, Python's builtins or any Python block could bind it. Python
inside backticks and fences is only compiled (a syntax error is reported at
its `.kedi` line and column); the names it reads and the backtick directive
values are left to the runtime. In particular:

- a scope binds its parameters, assignment and raw-invoke targets, captures,
  procedures, custom types, selectively imported names and every name a
  Python block or statement in it may bind (`global` names bind at top level);
  profiles bind at top level. Where in the scope does not matter, with one
  exception: a procedure or custom type read in its own scope above its
  definition, when nothing else binds the name before the read (spec 5.1:
  declarations take effect where they appear, so the run would fail there);
- `> import: module` (all exports) binds the module's exports once linking
  has resolved it (`imports=`); before that, or after a Python
  `from m import *`, the names it brings are unknown and the name checks are
  off for the module;
- `<name>` inside directive text (`> system:`, settings values) is rendered
  wherever the agent state is materialized, so it may use a name bound in any
  scope of the module;
- `<proc(...)>` arity is checked only when the innermost scope binding the
  name binds it exactly once, as a Kedi procedure;
- for profile cycles, a profile name defined twice means its last definition.
"""

from __future__ import annotations

import ast as python_ast
import builtins
import difflib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import fields, replace
from functools import cache
from pathlib import PurePath
from typing import Any

from kedi.errors import Diagnostic, KediCheckError, KediUsageError
from kedi.source import SourceFile, Span
from kedi.syntax import ast
from kedi.syntax.directives import (
    AGENT_HARNESSES,
    FRAMEWORK_ADAPTERS,
    MCP_TRANSPORTS,
    PACKAGE_NAME,
    SETTING_NAMES,
    SPECS,
    DirectiveSpec,
    Placement,
    Validator,
    parse_plain_value,
)
from kedi.syntax.name_scopes import RefKind, Scope, ScopeBuilder
from kedi.syntax.python_snippets import PythonMode, literal_type, snippet_source, syntax_error

_ALWAYS_KNOWN = frozenset(dir(builtins)) | {"args"}
_RESERVED = "args"


def check_module(
    module: ast.Module,
    *,
    source: SourceFile | None = None,
    fragment: bool = False,
    known_globals: Iterable[str] = (),
    imports: Mapping[str, Mapping[str, ast.Procedure | None]] | None = None,
) -> list[Diagnostic]:
    """Run every static check and return the problems found, sorted by position.

    Args:
        module: the parsed program.
        source: its text; when given, each diagnostic carries its source line.
        fragment: the module is an interactive fragment, where `> export:`,
            `> package:`, `@test:` and `@eval:` are rejected.
        known_globals: names the embedder provides at run time (tools, env).
        imports: the exports of each linked module, by the path written in
            `> import:`, each with its Kedi procedure when it is one; a whole
            import of a module not in it turns the name checks off.
    """
    if not isinstance(module, ast.Module):
        raise KediUsageError(f"check_module() expects a Module, not {type(module).__name__}")
    too_deep = _too_deep(module)
    if too_deep is not None:
        found = [too_deep]  # the other checks (and the interpreter) recurse over the tree
    else:
        context = _Context(module, fragment, frozenset(known_globals), source, imports)
        found = [diagnostic for check in _CHECKS for diagnostic in check(context)]
    if source is not None:
        lines: dict[int, str] = {}  # one string per line, however many problems it has
        found = [
            replace(
                d,
                source_line=lines.get(d.span.line)
                or lines.setdefault(d.span.line, source.line_text(d.span.line)),
            )
            for d in found
        ]
    return sorted(found, key=lambda d: (d.span.line, d.span.column, d.message))


MAX_NESTING = 100
"""How deeply procedures, calls (`<f(<g(x)>)>`) and type subscripts may nest, counted together.

The parser accepts any depth; the checks and the interpreter walk the tree
recursively, so deeper programs get a located error instead of a `RecursionError`.
"""

_NESTING = (ast.Procedure, ast.Call, ast.TypeSubscript, ast.TypeUnion, ast.ProfileDef)


def _too_deep(module: ast.Module) -> Diagnostic | None:
    """The diagnostic for the first construct nested more than `MAX_NESTING` deep (an iterative walk)."""
    stack: list[tuple[Any, int]] = [(module, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, _NESTING):
            depth += 1
            if depth > MAX_NESTING:
                return Diagnostic(
                    node.span,
                    f"nested too deeply: more than {MAX_NESTING} levels of procedures, calls and types",
                    "move the inner part into a procedure of its own",
                )
        # Reversed onto the stack: the first problem in source order is the one reported.
        stack.extend((child, depth) for child in reversed(_children(node)))
    return None


def check_nesting(module: ast.Module, source: SourceFile | None = None) -> None:
    """Raise the `KediCheckError` of a module nested more than `MAX_NESTING` deep; check nothing else.

    For `kedi parse --json`, whose indented output grows with the square of the depth.
    """
    too_deep = _too_deep(module)
    if too_deep is not None:
        if source is not None:
            too_deep = replace(too_deep, source_line=source.line_text(too_deep.span.line))
        raise KediCheckError([too_deep])


def check_or_raise(
    module: ast.Module,
    *,
    source: SourceFile | None = None,
    fragment: bool = False,
    known_globals: Iterable[str] = (),
    imports: Mapping[str, Mapping[str, ast.Procedure | None]] | None = None,
) -> None:
    """Run `check_module` and raise `KediCheckError` holding every problem found."""
    diagnostics = check_module(
        module, source=source, fragment=fragment, known_globals=known_globals, imports=imports
    )
    if diagnostics:
        raise KediCheckError(diagnostics)


def check_source(
    source: str,
    path: str | None = None,
    *,
    fragment: bool = False,
    known_globals: Sequence[str] = (),
    link_imports: bool = True,
) -> ast.Module:
    """Parse `source`, run every static check and reject what this build cannot run; return the module.

    `known_globals` names values the embedder provides (query arguments, env).
    `link_imports` also resolves and checks its `> import:`s (`kedi.syntax.linking`).
    """
    from kedi.syntax.parser import parse  # the parser imports this module's package
    from kedi.syntax.unsupported import reject_unsupported

    module = parse(source, path)
    file = SourceFile(source, path)
    check_or_raise(module, source=file, fragment=fragment, known_globals=known_globals)
    reject_unsupported(module, file)
    if link_imports:
        from kedi.syntax.linking import link

        link(module, file, fragment=fragment, known_globals=known_globals)
    return module


BUILTIN_TYPE_NAMES = frozenset(
    {
        "str",
        "int",
        "float",
        "bool",
        "bytes",
        "object",
        "list",
        "dict",
        "tuple",
        "set",
        "Union",
        "Optional",
    }
    | {"Literal", "Annotated", "datetime", "date", "time", "timedelta", "Regex", "Email", "HttpUrl"}
    | {"FileUrl", "Any", "None"}
)
"""The type names every program sees (the keys of `kedi.runtime.types.BUILTIN_TYPES`; a test keeps them equal)."""


# --------------------------------------------------------------------------- context


class _Context:
    """Everything the checks share: the module, its scopes and the known names."""

    def __init__(
        self,
        module: ast.Module,
        fragment: bool,
        known_globals: frozenset[str],
        source: SourceFile | None = None,
        imports: Mapping[str, Mapping[str, ast.Procedure | None]] | None = None,
    ) -> None:
        self.module = module
        self.source = source
        """The module's text, when the caller has it (for exact columns inside embedded Python)."""
        self.fragment = fragment
        self.known = _ALWAYS_KNOWN | known_globals
        self.known_globals = known_globals
        builder = ScopeBuilder(imports)
        builder.statements(module.body, builder.module)
        self.scopes = builder.scopes
        self.module_scope = builder.module
        self.open = builder.open
        self.anywhere = {name for scope in self.scopes for name in scope.bindings}
        self.nodes = _walk(module)
        """Every node of the module, in source order (walked once, shared by the checks)."""
        self.profiles: dict[str, ast.ProfileDef] = {
            s.name: s for s in module.body if isinstance(s, ast.ProfileDef)
        }
        """Top-level profiles by name; a later definition replaces an earlier one."""

    def resolves(self, name: str, scope: Scope, *, anywhere: bool = False) -> bool:
        """True when `name` may be bound when `scope` reads it."""
        if self.open or name in self.known:
            return True
        if anywhere:
            return name in self.anywhere
        return scope.owner_of(name) is not None

    def applies_profile(self, name: str) -> bool:
        """True when a one-line `> use: name` can only mean the profile `name`."""
        kinds = {b.kind for b in self.module_scope.bindings.get(name, ())}
        return kinds == {"profile"} and name not in self.known_globals and not self.open


def _did_you_mean(word: str, candidates: Iterable[str]) -> str | None:
    """A "did you mean" hint for a misspelled word, when a candidate is close enough."""
    close = difflib.get_close_matches(word, sorted(set(candidates) - {word}), n=1, cutoff=0.7)
    return f"did you mean `{close[0]}`?" if close else None


@cache
def _child_fields(cls: Any) -> tuple[str, ...]:
    return tuple(item.name for item in fields(cls) if item.name != "span")


def _children(node: Any) -> list[Any]:
    """The AST nodes directly below `node`, in source order."""
    children = []
    kind: Any = type(node)
    for name in _child_fields(kind):
        value = getattr(node, name)
        for child in value if isinstance(value, tuple) else (value,):
            if hasattr(child, "__dataclass_fields__"):
                children.append(child)
    return children


def _walk(node: Any) -> list[Any]:
    """`node` and every AST node below it, in source order."""
    found = []
    stack = [node]
    while stack:
        current = stack.pop()
        found.append(current)
        stack.extend(reversed(_children(current)))
    return found


def _literal(segments: Iterable[ast.Segment]) -> str | None:
    """The text of a value made only of literal text, else None (computed at run time)."""
    parts = []
    for segment in segments:
        if not isinstance(segment, ast.Text):
            return None
        parts.append(segment.value)
    return "".join(parts)


def _count(number: int) -> str:
    return f"{number} argument" if number == 1 else f"{number} arguments"


# --------------------------------------------------------------------------- names


def _check_names(context: _Context) -> Iterator[Diagnostic]:
    """Names that can never resolve, and `> use:` lists naming profiles."""
    for scope in context.scopes:
        for ref in scope.refs:
            in_module = scope if ref.kind != "export" else context.module_scope
            if ref.kind == "type" and ref.name in BUILTIN_TYPE_NAMES:
                continue
            if not context.resolves(ref.name, in_module, anywhere=ref.kind == "agent"):
                if ref.kind == "use" and ref.name == "skills":
                    # Reserved for skill discovery when nothing else is named `skills`
                    # (spec B23: the same switch as `> skills: enabled`, not executed yet).
                    yield Diagnostic(ref.span, _SKILLS_NOT_SUPPORTED)
                    continue
                visible = {n for s in in_module.chain() for n in s.bindings}
                hint = _did_you_mean(ref.name, visible | context.known_globals | {"args"})
                yield Diagnostic(ref.span, _UNKNOWN[ref.kind].format(ref.name), hint)
            elif ref.kind == "use_list" and context.applies_profile(ref.name):
                yield Diagnostic(
                    ref.span,
                    f"`{ref.name}` is a profile, but an indented `> use:` list registers tools only",
                    f"apply the profile with `> use: {ref.name}` on its own line",
                )


_SKILLS_NOT_SUPPORTED = "`> use: skills` (the same as `> skills: enabled`) is not supported yet"

_UNKNOWN: Mapping[RefKind, str] = {
    "value": "unknown name `{}`",
    "agent": "unknown name `{}`",
    "use": "unknown tool or profile `{}`",
    "use_list": "unknown tool `{}`",
    "export": "unknown name `{}` in `> export:`",
    "type": "unknown type `{}`",
}


def _check_defined_below(context: _Context) -> Iterator[Diagnostic]:
    """Procedures and custom types read in their own scope above their definition.

    Reported only when the first binding of the name in the reading scope is
    that definition, it comes after the read, and no enclosing scope (nor the
    embedder, builtins or an unknown import) could provide the name instead.
    """
    if context.open:
        return
    for scope in context.scopes:
        for ref in scope.refs:
            bindings = scope.bindings.get(ref.name)
            if (
                not bindings
                or not ref.ordered
                or ref.kind not in ("value", "type")
                or ref.name in context.known
                or (ref.kind == "type" and ref.name in BUILTIN_TYPE_NAMES)
                or any(ref.name in outer.bindings for outer in scope.chain() if outer is not scope)
            ):
                continue
            first = min(bindings, key=lambda b: (b.at.line, b.at.column) if b.at else (0, 0))
            if first.at is None or first.kind not in ("procedure", "type"):
                continue
            if (first.at.line, first.at.column) > (ref.span.line, ref.span.column):
                what = "procedure" if first.kind == "procedure" else "type"
                yield Diagnostic(
                    ref.span,
                    f"`{ref.name}` is defined below, at line {first.at.line}",
                    f"move the {what} definition above its first use: "
                    "a definition takes effect where it is written",
                )


def _check_arity(context: _Context) -> Iterator[Diagnostic]:
    """`<proc(...)>` calls whose argument count cannot fit the Kedi procedure called."""
    for scope in context.scopes:
        for ref in scope.refs:
            owner = scope.owner_of(ref.name) if ref.call is not None else None
            bindings = owner.bindings[ref.name] if owner is not None else []
            if ref.call is None or len(bindings) != 1 or bindings[0].procedure is None:
                continue  # not a call, or not statically one Kedi procedure
            procedure = bindings[0].procedure
            most = len(procedure.params)
            least = sum(1 for param in procedure.params if param.default is None)
            given = len(ref.call.args)
            if least <= given <= most:
                continue
            takes = _count(most) if least == most else f"{least} to {most} arguments"
            if most == 0:
                takes = "no arguments"
            were = "was" if given == 1 else "were"
            params = ", ".join(param.name for param in procedure.params)
            yield Diagnostic(
                ref.span,
                f"`{ref.name}` takes {takes} but {given} {were} given",
                f"`@{ref.name}({params})` is defined on line {procedure.span.line}"
                + ("" if procedure.span.path == ref.span.path else f" of {procedure.span.path}"),
            )


def _check_name_lists(context: _Context) -> Iterator[Diagnostic]:
    """A name listed twice in one `> import: m:` or `> export:` list."""
    for node in context.nodes:
        if isinstance(node, ast.Import) and node.names is not None:
            label, names = f"`> import: {node.module}:`", node.names
        elif isinstance(node, ast.Export):
            label, names = "`> export:`", node.names
        else:
            continue
        seen: set[str] = set()
        for name in names:
            if name.name in seen:
                yield Diagnostic(name.span, f"`{name.name}` is listed twice in {label}")
            seen.add(name.name)


def _check_duplicate_outputs(context: _Context) -> Iterator[Diagnostic]:
    """Two `[name]` fields with one name in one `>>` block."""
    for node in context.nodes:
        if not isinstance(node, ast.Template):
            continue
        seen: set[str] = set()
        for capture in _walk(node):
            if not isinstance(capture, ast.Capture):
                continue
            if capture.name in seen:
                yield Diagnostic(
                    capture.span,
                    f"duplicate output name `{capture.name}` in one template",
                    "the fields of one `>>` block form one output schema; rename one of them",
                )
            seen.add(capture.name)


def _check_reserved_args(context: _Context) -> Iterator[Diagnostic]:
    """Bindings named `args`, which the runtime owns."""
    for node in context.nodes:
        match node:
            case (
                ast.Assign(target=str(name), span=Span() as span)
                | ast.RawInvoke(target=str(name), span=Span() as span)
                | ast.Capture(name=str(name), span=Span() as span)
                | ast.Param(name=str(name), span=Span() as span)
                | ast.Procedure(name=str(name), span=Span() as span)
                | ast.CustomType(name=str(name), span=Span() as span)
            ) if name == _RESERVED:
                yield Diagnostic(
                    span, "`args` is reserved for program arguments", "choose another name"
                )


def _check_untyped_assignments(context: _Context) -> Iterator[Diagnostic]:
    """`[x] = `0 + 1``: an untyped assignment is `str` (spec 2.6); a literal's type is known now.

    The run would fail with "expected str, got int"; the check says so first,
    so `kedi check` and `kedi run` agree.
    """
    for node in context.nodes:
        if not isinstance(node, ast.Assign) or node.type is not None:
            continue
        segments = node.value.segments if isinstance(node.value, ast.Rendered) else ()
        if len(segments) != 1 or not isinstance(segments[0], ast.BareBacktick):
            continue
        try:
            tree = python_ast.parse(segments[0].code.code.strip(), mode="eval")
        except SyntaxError:
            continue  # reported where the code runs, with its Python line
        kind = literal_type(tree.body)
        if kind is not None and kind != "str":
            yield Diagnostic(
                node.span,
                f"assignment to `{node.target}`: the expression gives {kind}, "
                "but an untyped assignment holds a str",
                f"declare the type ([{node.target}: {kind}] = ...) or convert with `str(...)`",
            )


# --------------------------------------------------------------------------- embedded Python


def _check_python_syntax(context: _Context) -> Iterator[Diagnostic]:
    """Embedded Python that does not compile, at the `.kedi` line and column Python names.

    Each snippet compiles as a run would compile it (`python_snippets.syntax_error`),
    so what is reported here is a `SyntaxError` the run would meet.
    """
    for code, mode, where in _python_snippets(context):
        error = syntax_error(code.code, mode)
        if error is None:
            continue
        lines = snippet_source(code.code).split("\n")
        number = min(max(error.lineno or 1, 1), len(lines))
        written = lines[number - 1]
        message = f"invalid Python in {where}: {error.msg or 'invalid syntax'}"
        nonlocal_name = _NONLOCAL.search(written)
        if (error.msg or "").startswith(_NONLOCAL_MESSAGES) and nonlocal_name is not None:
            # Kedi values are the snippet's globals; the runtime says the same.
            name = nonlocal_name.group(1)
            message = f"`nonlocal {name}` cannot rebind a Kedi binding; use `global {name}`"
        yield Diagnostic(_python_error_span(code, number, written, error, context.source), message)


_NONLOCAL_MESSAGES = ("nonlocal declaration not allowed at module level", "no binding for nonlocal")
_NONLOCAL = re.compile(r"\bnonlocal\s+([A-Za-z_]\w*)")


def _python_snippets(context: _Context) -> Iterator[tuple[ast.PythonCode, PythonMode, str]]:
    """Every piece of embedded Python a run compiles: its code, how, and what it is written in.

    `> case:` bodies are left out: a case whose Python does not compile fails
    alone under `kedi test`, at its line, and the other cases still run.
    """
    for node in context.nodes:
        match node:
            case ast.InlinePython(code=code) | ast.BareBacktick(code=code):
                yield code, "eval", "backticks"
            case ast.TypePython(code=code) | ast.Param(default=ast.PythonCode() as code):
                yield code, "eval", "backticks"
            case ast.FieldDef(default=ast.PythonCode() as code):
                yield code, "eval", "backticks"
            case ast.PythonStatement(code=code):
                yield code, "exec", "backticks"
            case ast.PythonBlock(code=code) | ast.Fence(code=code):
                yield code, "exec", "a fence"


def _python_error_span(
    code: ast.PythonCode, number: int, written: str, error: SyntaxError, source: SourceFile | None
) -> Span:
    """Where `error`, on line `number` of the snippet (`written`, as Python read it), is in the `.kedi` file."""
    line = code.first_line + number - 1
    start = _code_column(code, line, written, source)
    # No offset (an expression cut short: `1 +`) means the end of the line.
    offset = min(max(error.offset or len(written) + 1, 1), len(written) + 1)
    end = offset + 1
    if error.end_lineno == error.lineno and (error.end_offset or 0) > offset:
        end = error.end_offset or end
    return Span(code.span.path, line, start + offset - 1, line, start + end - 1)


def _code_column(code: ast.PythonCode, line: int, written: str, source: SourceFile | None) -> int:
    """The `.kedi` column where `written`, a line of the snippet as Python reads it, starts."""
    text = source.line_text(line) if source is not None else ""
    if line == code.span.line:  # code that starts on its backtick's line
        found = text.find(written, code.span.column) if text else -1
        return found + 1 if found >= 0 else code.span.column + 1
    # A later line of a fence (or of code spanning lines) ends the `.kedi` line's text.
    stripped, written = text.rstrip(), written.rstrip()
    if written and stripped.endswith(written):
        return len(stripped) - len(written) + 1
    return len(text) - len(text.lstrip()) + 1


# --------------------------------------------------------------------------- placement

_WHERE: Mapping[Placement, tuple[str, str]] = {
    # (where the directive was found, where it belongs)
    "top": ("at top level", "at top level"),
    "procedure": ("in a procedure body", "in a procedure body"),
    "profile": ("in a profile", "in a profile body"),
    "test": ("under `@test:`", "under `@test:`"),
    "eval": ("under `@eval:`", "under `@eval:`"),
}
_FRAGMENT_REJECTS = frozenset({"export", "package", "@test", "@eval"})
_TOP_ONLY: frozenset[Placement] = frozenset({"top"})


_NODE_DIRECTIVES: Mapping[type, str] = {
    ast.SystemDirective: "system",
    ast.Use: "use",
    ast.ProfileDef: "profile",
    ast.Import: "import",
    ast.Export: "export",
    ast.Package: "package",
    ast.Optimize: "optimize",
    ast.Auto: "auto",
    ast.TestSuite: "@test",
    ast.EvalSuite: "@eval",
}
"""The directive each dedicated node is written with (`@test`/`@eval` for suites)."""


def _directive_name(statement: ast.Statement) -> str | None:
    """The directive a statement is written with, if any."""
    if isinstance(statement, ast.Directive):
        return statement.name
    return _NODE_DIRECTIVES.get(type(statement))


def _label(name: str) -> str:
    return f"`{name}:`" if name.startswith("@") else f"`> {name}:`"


def _check_placement(context: _Context) -> Iterator[Diagnostic]:
    """Directives and suites written where they are not allowed (spec §6.1)."""
    yield from _placed(context.module.body, "top", context)


def _placed(
    body: Iterable[ast.Statement], where: Placement, context: _Context
) -> Iterator[Diagnostic]:
    for statement in body:
        name = _directive_name(statement)
        # `@test:` and `@eval:` have no directive spec: suites are top-level only.
        allowed = SPECS[name].placements if name is not None and name in SPECS else _TOP_ONLY
        if name is not None and where not in allowed:
            places = [_WHERE[p][1] for p in _WHERE if p in allowed]
            yield Diagnostic(
                statement.span,
                f"{_label(name)} is not allowed {_WHERE[where][0]}",
                f"{_label(name)} belongs {' or '.join(places)}",
            )
        elif name in _FRAGMENT_REJECTS and context.fragment:
            yield Diagnostic(
                statement.span, f"{_label(name)} is not allowed in an interactive fragment"
            )
        if isinstance(statement, ast.Procedure):
            yield from _placed(statement.body, "procedure", context)
        elif isinstance(statement, ast.ProfileDef):
            yield from _placed(statement.members, "profile", context)


def _check_backend_mix(context: _Context) -> Iterator[Diagnostic]:
    """`> adapter:` and `> agent:` in one scope or one profile."""
    bodies: list[tuple[tuple[ast.Statement, ...], str]] = [(context.module.body, "scope")]
    for node in context.nodes:
        if isinstance(node, ast.Procedure):
            bodies.append((node.body, "scope"))
        elif isinstance(node, ast.ProfileDef):
            bodies.append((node.members, f"profile `{node.name}`"))
    for body, owner in bodies:
        selections = [s for s in body if isinstance(s, ast.Directive)]
        selections = [s for s in selections if s.name in ("adapter", "agent")]
        later = next((s for s in selections if s.name != selections[0].name), None)
        if later is not None:
            other = "adapter" if later.name == "agent" else "agent"
            yield Diagnostic(
                later.span,
                f"`> {later.name}:` cannot be combined with `> {other}:` in the same {owner}",
                "a scope selects either a framework adapter or an agent harness; "
                "switch in a nested procedure or profile instead",
            )


def _check_package_file(context: _Context) -> Iterator[Diagnostic]:
    """`> package:` only in `package.kedi`, which holds nothing else."""
    if context.fragment:
        return  # the placement check already rejects package metadata in fragments
    body = context.module.body
    packages = [s for s in body if isinstance(s, ast.Package)]
    if PurePath(context.module.path).name != "package.kedi":
        for package in packages:
            yield Diagnostic(
                package.span,
                "`> package:` is only allowed in a file named `package.kedi`",
                "a package manifest lives in its own `package.kedi` file",
            )
        return
    for extra in packages[1:]:
        yield Diagnostic(extra.span, "`package.kedi` holds more than one `> package:`")
    for statement in body:
        if not isinstance(statement, ast.Package):
            yield Diagnostic(
                statement.span,
                "`package.kedi` may hold only its `> package:` manifest",
                "move program code into the package's source directory",
            )


# --------------------------------------------------------------------------- directive values


def _invalid(span: Span, what: str, validator: Validator, text: str) -> Iterator[Diagnostic]:
    """Report literal `text` when `validator` rejects it."""
    if not validator.accepts(text):
        shown = f", not `{text}`" if text else ""
        hint = _did_you_mean(text, validator.choices)
        yield Diagnostic(span, f"{what} must be {validator.expected}{shown}", hint)


_ACP_HINT = "write `> agent:` with an indented `acp: <command>` row"


def _check_line_value(directive: ast.Directive, spec: DirectiveSpec) -> Iterator[Diagnostic]:
    """A literal one-line value the directive does not accept."""
    text = _literal(directive.value or ())
    span = directive.span
    if text is None or spec.value is None:
        return
    if directive.name == "adapter" and text in AGENT_HARNESSES:
        hint = _ACP_HINT if text == "acp" else f"write `> agent: {text}`"
        yield Diagnostic(span, f"`{text}` is an agent harness, not a framework adapter", hint)
    elif directive.name == "agent" and text in FRAMEWORK_ADAPTERS:
        yield Diagnostic(
            span,
            f"`{text}` is a framework adapter, not an agent harness",
            f"write `> adapter: {text}`",
        )
    elif directive.name == "agent" and text == "acp":
        yield Diagnostic(span, "`> agent: acp` needs a command", _ACP_HINT)
    else:
        yield from _invalid(span, f"`> {directive.name}:`", spec.value, text)


def _check_directives(context: _Context) -> Iterator[Diagnostic]:
    """One-line values, configuration keys and cross-key rules."""
    for node in context.nodes:
        if isinstance(node, ast.Package):
            yield from _check_package_manifest(node)
        if not isinstance(node, ast.Directive) or node.name not in SPECS:
            continue
        # The parser has already checked the body shape against the spec.
        spec = SPECS[node.name]
        if node.value is not None:
            yield from _check_line_value(node, spec)
        else:
            yield from _check_config(node.span, node.name, node.config, spec)
            rule = _CONFIG_RULES.get(node.name)
            if rule is not None:
                yield from rule(node)


def _check_package_manifest(package: ast.Package) -> Iterator[Diagnostic]:
    from kedi.syntax.manifest import manifest_problems

    yield from _invalid(package.span, "the package name", PACKAGE_NAME, package.name)
    yield from _check_config(package.span, "package", package.config, SPECS["package"])
    yield from manifest_problems(package)


def _check_config(
    span: Span, name: str, config: tuple[ast.ConfigEntry, ...], spec: DirectiveSpec
) -> Iterator[Diagnostic]:
    label = _label(name)
    seen: set[str] = set()
    for entry in config:
        if entry.key in seen:
            yield Diagnostic(entry.span, f"duplicate key `{entry.key}` in {label}")
        seen.add(entry.key)
        key = spec.keys.get(entry.key)
        if key is None:
            yield _unknown_key(entry, name, spec)
            continue
        if name == "settings" and entry.items:
            yield _nested_setting(entry, label)
            continue
        text = _literal(entry.value)
        if key.validator is not None and text is not None:
            yield from _invalid(entry.span, f"`{entry.key}` in {label}", key.validator, text)
    for required in spec.required_keys:
        if required not in seen:
            yield Diagnostic(span, f"{label} is missing the required key `{required}`")


def _nested_setting(entry: ast.ConfigEntry, label: str) -> Diagnostic:
    """A setting written with a YAML-style block under it: the value is the key's line only.

    Unchecked, the block was dropped and the setting became "" (the `openai`
    adapter sent no `extra_body`; Pydantic AI and LangChain failed mid-run on a str).
    """
    rows = [item.strip().partition(":") for item in entry.items if item.strip()]
    example = "`{...}`"
    if rows and all(colon and key.strip() for key, colon, _ in rows):
        mapping = {key.strip(): parse_plain_value(value.strip()) for key, _, value in rows}
        example = f"`{json.dumps(mapping, ensure_ascii=False)}`"
    return Diagnostic(
        entry.span,
        f"`{entry.key}` in {label} has an indented block under it, which settings do not read",
        f"write the value on the key's line, a mapping as Python: {entry.key}: {example}",
    )


def _unknown_key(entry: ast.ConfigEntry, name: str, spec: DirectiveSpec) -> Diagnostic:
    if name == "settings":
        hint = _did_you_mean(entry.key, SETTING_NAMES)
        if entry.key == "codemode":
            hint = "CodeMode is not a model setting; use `> codemode:`"
        return Diagnostic(entry.span, f"unknown setting `{entry.key}`", hint)
    hint = _did_you_mean(entry.key, spec.keys) or f"{_label(name)} takes " + ", ".join(
        f"`{key}`" for key in spec.keys
    )
    return Diagnostic(entry.span, f"unknown key `{entry.key}` in {_label(name)}", hint)


def _entries(directive: ast.Directive) -> dict[str, tuple[ast.ConfigEntry, str | None]]:
    """Configuration entries by key (the last one wins), with their literal text."""
    return {entry.key: (entry, _literal(entry.value)) for entry in directive.config}


def _history_rules(directive: ast.Directive) -> Iterator[Diagnostic]:
    entries = _entries(directive)
    mode = entries.get("compaction_mode", (None, None))[1]
    if "compaction_threshold" in entries and mode == "disabled":
        yield Diagnostic(
            entries["compaction_threshold"][0].span,
            "`compaction_threshold` cannot be combined with `compaction_mode: disabled`",
            "disabled compaction has no threshold; remove one of the two",
        )


def _mcp_rules(directive: ast.Directive) -> Iterator[Diagnostic]:
    entries = _entries(directive)
    if "transport" not in entries:
        transport: str | None = "stdio" if "command" in entries else None
    else:
        transport = entries["transport"][1]
        if transport not in MCP_TRANSPORTS:
            return  # computed at run time, or already reported as an invalid value
    if transport is None and "url" in entries:
        message = "`> mcp:` with a `url` needs `transport: http` or `transport: sse`"
    elif transport is None:
        message = "`> mcp:` needs a `command` (stdio) or a `transport` and a `url`"
    elif transport == "stdio" and "command" not in entries:
        message = "`> mcp:` with `transport: stdio` needs a `command`"
    elif transport != "stdio" and "url" not in entries:
        message = f"`> mcp:` with `transport: {transport}` needs a `url`"
    else:
        return
    yield Diagnostic(directive.span, message)


_CONFIG_RULES: Mapping[str, Callable[[ast.Directive], Iterator[Diagnostic]]] = {
    "history": _history_rules,
    "mcp": _mcp_rules,
}


# --------------------------------------------------------------------------- profiles


def _check_profile_members(context: _Context) -> Iterator[Diagnostic]:
    """Duplicate scalar members, `dynamic` without a child, unknown children."""
    for profile in (n for n in context.nodes if isinstance(n, ast.ProfileDef)):
        seen: set[str] = set()
        for member in profile.members:
            name = _directive_name(member)
            if name is None or name not in SPECS or not SPECS[name].singleton:
                continue
            if name in seen:
                yield Diagnostic(
                    member.span,
                    f"`> {name}:` is set twice in profile `{profile.name}`",
                    "a profile sets each scalar member once",
                )
            seen.add(name)
        yield from _check_children(profile, context)


def _check_children(profile: ast.ProfileDef, context: _Context) -> Iterator[Diagnostic]:
    directives = [m for m in profile.members if isinstance(m, ast.Directive)]
    children = [(d, _literal(d.value or ())) for d in directives if d.name == "subagent"]
    for directive, child in children:
        if child is not None and not context.resolves(child, context.module_scope):
            yield Diagnostic(
                directive.span,
                f"unknown profile `{child}` in `> subagent:`",
                _did_you_mean(child, context.profiles),
            )
    dynamic = [
        d for d in directives if d.name == "workflow" and _literal(d.value or ()) == "dynamic"
    ]
    if dynamic and not children:
        yield Diagnostic(
            dynamic[0].span,
            f"`> workflow: dynamic` needs a `> subagent:` in profile `{profile.name}`",
            "a dynamic workflow runs the profile's direct children",
        )


def _profile_edges(profile: ast.ProfileDef, context: _Context) -> Iterator[tuple[str, Span]]:
    """The profiles that `profile` applies (`> use:`) or delegates to (`> subagent:`)."""
    for member in profile.members:
        if isinstance(member, ast.Use) and not member.block:
            for name in member.names:
                if context.applies_profile(name.name):
                    yield name.name, name.span
        elif isinstance(member, ast.Directive) and member.name == "subagent":
            child = _literal(member.value or ())
            if child in context.profiles:
                yield child, member.span


def _check_profile_cycles(context: _Context) -> Iterator[Diagnostic]:
    """Profiles that reach themselves through `> use:` or `> subagent:`."""
    edges = {name: list(_profile_edges(p, context)) for name, p in context.profiles.items()}
    reported: set[frozenset[str]] = set()
    for start in context.profiles:
        # Depth-first search from `start` for a path back to `start`.
        stack: list[tuple[str, list[str], Span | None]] = [(start, [start], None)]
        visited: set[str] = set()
        while stack:
            name, path, first_span = stack.pop()
            for target, span in edges[name]:
                span_out = first_span or span
                if target == start and frozenset(path) not in reported:
                    reported.add(frozenset(path))
                    chain = " → ".join(f"`{n}`" for n in [*path, start])
                    yield Diagnostic(
                        span_out,
                        f"profile cycle: {chain}",
                        "a profile cannot use or delegate to itself, directly or through others",
                    )
                elif target not in visited and target != start:
                    visited.add(target)
                    stack.append((target, [*path, target], span_out))


# --------------------------------------------------------------------------- suites


def _check_suites(context: _Context) -> Iterator[Diagnostic]:
    """Suites naming unknown procedures, duplicate cases and datasets, metric problems."""
    module = context.module_scope
    procedures = {
        name
        for name, found in module.bindings.items()
        if {"procedure", "import"} & {b.kind for b in found}
    }
    # Case names per procedure: a case's id is FILE::PROCEDURE::CASE across all its `@test:` blocks.
    cases_of: dict[str, set[str]] = {}
    for suite in context.module.body:
        if not isinstance(suite, ast.TestSuite | ast.EvalSuite):
            continue
        label = f"`{_NODE_DIRECTIVES[type(suite)]}: {suite.procedure}`"
        if suite.procedure not in procedures and not context.open:
            yield Diagnostic(
                suite.span,
                f"{label} names `{suite.procedure}`, which is not a procedure in this module",
                _did_you_mean(suite.procedure, procedures),
            )
        if isinstance(suite, ast.TestSuite):
            names = [(case.name, case.span, f"case `{case.name}`") for case in suite.cases]
        else:
            names = [
                (f"{d.kind}:{d.name}", d.span, f"`> {d.kind}: {d.name}`") for d in suite.datasets
            ]
            yield from _check_metric(suite, label)
        seen = (
            cases_of.setdefault(suite.procedure, set())
            if isinstance(suite, ast.TestSuite)
            else set()
        )
        for key, span, shown in names:
            if key in seen:
                yield Diagnostic(span, f"duplicate {shown} in {label}")
            seen.add(key)


def _check_metric(suite: ast.EvalSuite, label: str) -> Iterator[Diagnostic]:
    metric = suite.metric
    if metric is None:
        yield Diagnostic(suite.span, f"{label} has no `> metric:`")
        return
    datasets = {dataset.name for dataset in suite.datasets}
    if metric.dataset is not None and metric.dataset not in datasets:
        yield Diagnostic(
            metric.span,
            f"metric `{metric.name}` reads dataset `{metric.dataset}`, which {label} does not define",
            _did_you_mean(metric.dataset, datasets),
        )


_CHECKS: tuple[Callable[[_Context], Iterator[Diagnostic]], ...] = (
    _check_names,
    _check_defined_below,
    _check_arity,
    _check_duplicate_outputs,
    _check_name_lists,
    _check_reserved_args,
    _check_untyped_assignments,
    _check_python_syntax,
    _check_placement,
    _check_backend_mix,
    _check_package_file,
    _check_directives,
    _check_profile_members,
    _check_profile_cycles,
    _check_suites,
)
"""Every check, each a generator of diagnostics over the shared context."""
