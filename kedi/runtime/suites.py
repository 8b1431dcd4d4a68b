"""`@test:` suites (spec §6.5): one compiled runtime per file, cases in source order.

`SuiteRuntime.start` runs the program's top level once, as `kedi run`
would, except its returns (`=`) and its suites: declarations, imports,
assignments and model calls bind what the cases may read. A top-level
statement that fails is recorded as a setup error (the cases still run and
see what was bound before it). Each case then runs its Python with the
runtime's names, in source order, sharing the runtime (state can leak
between cases, as the spec says). An exception fails only its own case.

Assertions are rewritten before they run, in the manner of pytest: an
`assert a == b` that fails reports both operands' values and the `.kedi`
line of the assertion (`CaseFailure`).
"""

from __future__ import annotations

import ast as python_ast
import builtins
import time
import traceback
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread

from kedi.adapters.base import Usage
from kedi.errors import KediError
from kedi.runtime.calls import CallLayer
from kedi.runtime.interpreter import Interpreter
from kedi.runtime.program import Program
from kedi.runtime.scopes import AgentState, Frame
from kedi.syntax import ast

USAGE: ContextVar[list[Usage] | None] = ContextVar("kedi_suite_usage", default=None)
"""Where the model calls of the current case or eval row add their usage."""


class MeteredCallLayer(CallLayer):
    """A call layer that adds each call's usage to the current `USAGE` list."""

    async def send(self, *args: Any, **kwargs: Any) -> Any:
        result = await super().send(*args, **kwargs)
        meter = USAGE.get()
        if meter is not None:
            meter.append(result.usage)
        return result


@dataclass
class SuiteRuntime:
    """A program's top level run once; suites' cases and eval rows run against it."""

    program: Program
    interpreter: Interpreter
    setup_errors: list[str] = field(default_factory=list)
    """One line per top-level statement that failed while the runtime started."""
    agent: AgentState = field(default_factory=AgentState)
    """The agent state the top level ended in (procedures keep their own)."""

    @classmethod
    async def start(
        cls, program: Program, *, model: str | None = None, adapter: Any = None, parallel: int = 0
    ) -> SuiteRuntime:
        """Run `program`'s top level (not its returns or suites) and keep its bindings."""
        layer = MeteredCallLayer(adapter=adapter, model=model or "offline", quiet=True)
        interpreter = Interpreter(
            program.module, program.source, calls=layer, parallel=parallel, linked=program.linked
        )
        layer.limiter = interpreter.limiter
        runtime = cls(program, interpreter)
        body = program.module.body
        if body and isinstance(body[0], ast.PythonBlock) and body[0].prelude:
            try:
                interpreter._run_prelude(body[0])
            except KediError as error:
                runtime.setup_errors.append(f"line {body[0].span.line}: {error}")
            body = body[1:]
        frame = Frame(interpreter.module_scope, AgentState(), None)
        for statement in body:
            if isinstance(statement, ast.Return | ast.TestSuite | ast.EvalSuite):
                continue
            try:
                await interpreter._handlers[type(statement)](interpreter, statement, frame)
            except KediError as error:
                runtime.setup_errors.append(f"line {statement.span.line}: {error}")
        runtime.agent = frame.agent
        return runtime

    def frame(self) -> Frame:
        """A frame over the module scope, with the agent state the top level ended in."""
        return Frame(self.interpreter.module_scope, self.agent, None)


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class CaseResult:
    """The outcome of one `> case:`."""

    path: str
    procedure: str
    case: str
    line: int
    passed: bool
    failure: str = ""
    """What went wrong: the assertion with its values, or the exception."""
    failure_line: int = 0
    seconds: float = 0.0

    @property
    def id(self) -> str:
        return f"{self.path}::{self.procedure}::{self.case}"


class CaseFailure(KediError, AssertionError):
    """A rewritten `assert` that failed, with the values it compared."""

    def __init__(self, source: str, details: list[tuple[str, Any]], message: Any) -> None:
        self.source = source
        self.details = details
        self.message = message
        super().__init__(self.explain())

    def explain(self) -> str:
        lines = [f"assert {self.source}"]
        if self.message is not None:
            lines[0] += f"  ({self.message})"
        lines += [f"  {label}: {_show(value)}" for label, value in self.details]
        return "\n".join(lines)


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 300 else text[:297] + "..."


async def run_case(runtime: SuiteRuntime, suite: ast.TestSuite, case: ast.TestCase) -> CaseResult:
    """Run one case's Python against the runtime; an exception fails only this case."""
    path = runtime.program.source.path
    try:
        code = compile(_rewritten(case.body), path, "exec")
    except (
        SyntaxError
    ) as exc:  # the case's Python does not compile: fail this case only, at its line
        line = exc.lineno or case.body.first_line
        return CaseResult(
            path, suite.procedure, case.name, case.span.line, False, f"SyntaxError: {exc.msg}", line
        )
    namespace = runtime.interpreter.namespace(runtime.frame())
    namespace["__kedi_fail__"] = CaseFailure
    started = time.perf_counter()

    def execute() -> None:
        exec(code, namespace)

    try:
        await anyio.to_thread.run_sync(execute)
    except Exception as exc:
        seconds = time.perf_counter() - started
        line = _failing_line(exc, path) or case.span.line
        if isinstance(exc, CaseFailure):
            failure = f"AssertionError: {exc.explain()}"
        else:
            failure = f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"
        return CaseResult(
            path, suite.procedure, case.name, case.span.line, False, failure, line, seconds
        )
    return CaseResult(
        path,
        suite.procedure,
        case.name,
        case.span.line,
        True,
        seconds=time.perf_counter() - started,
    )


def _failing_line(exc: BaseException, path: str) -> int | None:
    lines = [
        frame.lineno for frame in traceback.extract_tb(exc.__traceback__) if frame.filename == path
    ]
    return lines[-1] if lines else None


def _rewritten(code: ast.PythonCode) -> python_ast.Module:
    """The case's Python with each `assert` reporting its operands, at `.kedi` line numbers."""
    try:
        tree = python_ast.parse(code.code)
    except SyntaxError as exc:
        exc.lineno = code.first_line + (exc.lineno or 1) - 1  # report the `.kedi` line
        raise
    tree = _AssertRewriter().visit(tree)
    python_ast.fix_missing_locations(tree)
    python_ast.increment_lineno(tree, code.first_line - 1)
    return tree


class _AssertRewriter(python_ast.NodeTransformer):
    """`assert left OP right, msg` → evaluate each side once, raise `CaseFailure` with both values."""

    def visit_Assert(self, node: python_ast.Assert) -> Any:
        test = node.test
        source = python_ast.unparse(test)
        temps: list[python_ast.stmt] = []
        details: list[python_ast.expr] = []
        if isinstance(test, python_ast.Compare) and len(test.ops) == 1:
            left, right = _temp("left", test.left, node), _temp("right", test.comparators[0], node)
            temps += [left[0], right[0]]
            condition: python_ast.expr = python_ast.Compare(
                left=left[1], ops=test.ops, comparators=[right[1]]
            )
            details = [
                _detail(f"left  ({python_ast.unparse(test.left)})", left[1]),
                _detail(f"right ({python_ast.unparse(test.comparators[0])})", right[1]),
            ]
        else:
            value = _temp("value", test, node)
            temps.append(value[0])
            condition = value[1]
            details = [] if isinstance(test, python_ast.Name) else [_detail("value", value[1])]
            details += [
                _detail(name, python_ast.Name(id=name, ctx=python_ast.Load()))
                for name in _plain_names(test)
            ]
        failure = python_ast.Raise(
            exc=python_ast.Call(
                func=python_ast.Name(id="__kedi_fail__", ctx=python_ast.Load()),
                args=[
                    python_ast.Constant(source),
                    python_ast.List(elts=details, ctx=python_ast.Load()),
                    node.msg or python_ast.Constant(None),
                ],
                keywords=[],
            ),
            cause=None,
        )
        check = python_ast.If(
            test=python_ast.UnaryOp(op=python_ast.Not(), operand=condition),
            body=[failure],
            orelse=[],
        )
        statements = [*temps, check]
        for statement in statements:
            python_ast.copy_location(statement, node)
        return statements


def _temp(
    label: str, value: python_ast.expr, at: python_ast.AST
) -> tuple[python_ast.stmt, python_ast.Name]:
    name = f"__kedi_{label}_{getattr(at, 'lineno', 0)}_{getattr(at, 'col_offset', 0)}"
    assign = python_ast.Assign(
        targets=[python_ast.Name(id=name, ctx=python_ast.Store())], value=value
    )
    return assign, python_ast.Name(id=name, ctx=python_ast.Load())


def _detail(label: str, value: python_ast.expr) -> python_ast.Tuple:
    return python_ast.Tuple(elts=[python_ast.Constant(label), value], ctx=python_ast.Load())


def _plain_names(test: python_ast.expr) -> Iterator[str]:
    """Variable names the test reads directly (not called functions), for the failure report."""
    called = {id(n.func) for n in python_ast.walk(test) if isinstance(n, python_ast.Call)}
    seen: set[str] = set()
    for node in python_ast.walk(test):
        if isinstance(node, python_ast.Name) and id(node) not in called and node.id not in seen:
            if not hasattr(
                builtins, node.id
            ):  # `__builtins__` is a dict outside __main__: ask the module
                seen.add(node.id)
                yield node.id


# --------------------------------------------------------------------------- selection


def selector(expression: str | None) -> Callable[[str], bool]:
    """A `-k` matcher: words match as case-insensitive substrings, combined with and/or/not."""
    if not expression:
        return lambda name: True
    tokens = expression.replace("(", " ( ").replace(")", " ) ").split()
    words = [t for t in tokens if t not in ("and", "or", "not", "(", ")")]

    def matches(name: str) -> bool:
        parts = [
            repr(token.lower() in name.lower()) if token in words else token for token in tokens
        ]
        try:
            return bool(
                eval(" ".join(parts), {"__builtins__": {}})
            )  # only True/False/and/or/not/parens
        except SyntaxError:
            raise ValueError(f"invalid -k expression: {expression!r}") from None

    return matches


def suites_of(module: ast.Module) -> list[ast.TestSuite]:
    """The module's `@test:` suites, in source order."""
    return [s for s in module.body if isinstance(s, ast.TestSuite)]
