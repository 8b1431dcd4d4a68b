"""What the checker reads from embedded Python without running it: the names a
snippet binds, the type of a literal expression, and whether it compiles.

All of it parses with CPython's `ast` and never executes anything. The text a
snippet compiles to (`snippet_source`) and the lenient `<name>` reading
(`parse_leniently`) live here, shared with the runtime's Python bridge, so
`kedi check` accepts exactly the Python a run accepts.
"""

from __future__ import annotations

import ast as python_ast
import re
import textwrap
import warnings
from collections.abc import Iterator
from typing import Any, Literal, cast

PythonMode = Literal["exec", "eval"]
"""How a snippet compiles: statements (fences, statement lines) or one expression."""


def snippet_source(code: str) -> str:
    """Return the text to compile: indentation and surrounding blanks removed, lines kept.

    Expressions and statements go through the same text, so the analysis of a
    snippet's statement form accepts exactly what evaluating it accepts.
    """
    return textwrap.dedent(code).lstrip(" \t").rstrip()


_ANGLE_NAME = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>")


def _angle_references(source: str) -> tuple[str, ...]:
    """Readings of `<name>` inside backtick Python as the Kedi value `name` (spec §12 A3).

    Only tried when the code does not compile as written, so valid Python such
    as `a < b > c` keeps its meaning. The candidates, in order: every
    `<name>` read as `name`; then a whole expression wrapped in `<...>` read as
    the expression itself.
    """
    candidates = [_ANGLE_NAME.sub(r"(\1)", source)]
    text = source.strip()
    if text.startswith("<") and text.endswith(">"):
        candidates.append(f"({text[1:-1]})")
    return tuple(candidates)


def parse_leniently(
    source: str, filename: str, mode: PythonMode
) -> python_ast.Module | python_ast.Expression:
    """Parse Python, falling back to the `<name>` readings; raise the original error."""
    try:
        return cast(
            python_ast.Module | python_ast.Expression, python_ast.parse(source, filename, mode)
        )
    except SyntaxError as error:
        for candidate in _angle_references(source):
            try:
                return cast(
                    python_ast.Module | python_ast.Expression,
                    python_ast.parse(candidate, filename, mode),
                )
            except SyntaxError:
                continue
        raise error from None


def syntax_error(code: str, mode: PythonMode) -> SyntaxError | None:
    """The `SyntaxError` Python raises compiling a snippet as a run would, or None when it compiles.

    Its `lineno` and `offset` count in `snippet_source(code)`. A top-level
    `return` is allowed in statements (a fence returns its value), and so is a
    top-level `await` (the runtime awaits procedure calls); an empty expression
    is the runtime's own error. Bytes Python refuses to read (a NUL) count as
    a syntax error at the snippet's first line.
    """
    source = snippet_source(code)
    if mode == "eval" and not source:
        return None
    # Odd string escapes make the parser warn; that is the runtime's business.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = parse_leniently(source, "<kedi>", mode)
            if mode == "exec":  # a top-level `return x` runs as the expression `x`
                for statements, index in top_level_returns(tree):
                    returned = statements[index]
                    value = returned.value or python_ast.copy_location(
                        python_ast.Constant(None), returned
                    )
                    statements[index] = python_ast.copy_location(python_ast.Expr(value), returned)
            compile(
                tree, "<kedi>", mode, flags=python_ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
            )
        except SyntaxError as error:
            return error
        except ValueError as error:  # "source code string cannot contain null bytes"
            return SyntaxError(str(error), ("<kedi>", 1, 1, source.partition("\n")[0]))
        except (
            RecursionError,
            MemoryError,
        ) as error:  # CPython's own nesting limit: the run fails too
            reason = str(error) or type(error).__name__
            first = source.partition("\n")[0]
            return SyntaxError(
                f"too deeply nested for Python to compile ({reason})", ("<kedi>", 1, 1, first)
            )
    return None


def returns_at_top_level(code: str) -> bool:
    """Whether statement code has a `return` outside its own functions and classes.

    In a standalone fence such a `return` only ends the block (spec 2.7: its
    value is ignored); the runtime names it when a procedure then ends
    without a value. Code that does not parse has none.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = parse_leniently(snippet_source(code), "<kedi>", "exec")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return False
    return next(top_level_returns(tree), None) is not None


def top_level_returns(tree: python_ast.AST) -> Iterator[tuple[list[Any], int]]:
    """Each top-level `return` of statement code, as (its statement list, its index there).

    A `return` inside a function or class belongs to it, not to the snippet.
    Iterative, and over statements only (no expression holds a `return`), so
    code nested as deeply as Python itself compiles is walked without
    recursion. A caller may replace the yielded statement in its list.
    """
    pending = [tree]
    while pending:
        node = pending.pop()
        for _field, value in python_ast.iter_fields(node):
            if not isinstance(value, list):
                continue
            for index, child in enumerate(value):
                if isinstance(child, python_ast.Return):
                    yield value, index
                elif isinstance(child, _STATEMENT_NODES) and not isinstance(child, _OWN_SCOPES):
                    pending.append(child)


_STATEMENT_NODES = (python_ast.stmt, python_ast.excepthandler, python_ast.match_case)
_OWN_SCOPES = (python_ast.FunctionDef, python_ast.AsyncFunctionDef, python_ast.ClassDef)
"""Bodies whose `return` is their own, not the snippet's."""


def python_bindings(code: str) -> tuple[set[str], set[str], bool]:
    """Names a Python snippet may bind, names it declares `global`, and whether it star-imports.

    Every binding anywhere in the snippet counts (conservatively, even inside
    its functions). Code that does not parse binds nothing: the runtime
    reports the syntax error.
    """
    # Odd string escapes make the parser warn; that is the runtime's business.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = python_ast.parse(code)
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return set(), set(), False
    names: set[str] = set()
    global_names: set[str] = set()
    star = False
    for node in python_ast.walk(tree):
        match node:
            case python_ast.Name(ctx=python_ast.Store() | python_ast.Del()):
                names.add(node.id)
            case python_ast.FunctionDef() | python_ast.AsyncFunctionDef() | python_ast.ClassDef():
                names.add(node.name)
            case python_ast.Import() | python_ast.ImportFrom():
                for alias in node.names:
                    star = star or alias.name == "*"
                    names.add(alias.asname or alias.name.split(".")[0])
            case python_ast.Global():
                global_names.update(node.names)
            case python_ast.ExceptHandler(name=str(name)) | python_ast.MatchAs(name=str(name)):
                names.add(name)
            case python_ast.MatchStar(name=str(name)) | python_ast.MatchMapping(rest=str(name)):
                names.add(name)
    return names, global_names, star


_NUMBERS = ("bool", "int", "float", "complex")
_CONTAINERS = {
    python_ast.List: "list",
    python_ast.Tuple: "tuple",
    python_ast.Dict: "dict",
    python_ast.Set: "set",
}


def literal_type(node: python_ast.expr) -> str | None:
    """The type name of a literal Python expression (`1 + 2` is int), or None if not literal."""
    if isinstance(node, python_ast.Constant):
        return "None" if node.value is None else type(node.value).__name__
    if type(node) in _CONTAINERS:
        return _CONTAINERS[type(node)]
    if isinstance(node, python_ast.UnaryOp) and not isinstance(node.op, python_ast.Not):
        operand = literal_type(node.operand)
        return "int" if operand == "bool" else operand if operand in _NUMBERS else None
    if isinstance(node, python_ast.BinOp):
        left, right = literal_type(node.left), literal_type(node.right)
        if left == right == "str" and isinstance(node.op, python_ast.Add):
            return "str"
        if left in _NUMBERS and right in _NUMBERS:
            if isinstance(node.op, python_ast.Div):
                return "complex" if "complex" in (left, right) else "float"
            return max(left, right, "int", key=_NUMBERS.index)
    return None
