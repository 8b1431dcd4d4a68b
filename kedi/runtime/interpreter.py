"""The async evaluator: statements in order, values, names, types and embedded Python.

`Interpreter._handlers` maps each statement class to its handler: a method
here, `model_statement` for `>>` and `<<` (`kedi.runtime.model_statements`),
or a directive's handler (`kedi.runtime.directive_statements`).

Statements run in source order. Values follow the lexical scope chain
dynamically; agent state (adapter, model, system, settings, history) is an
immutable snapshot replaced by directives and captured by procedures where
they are defined. Only `>>` and `<<` cross the model boundary (see
`kedi.runtime.calls`).
"""

from __future__ import annotations

import builtins
import functools
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.to_thread

from kedi.errors import (
    KediExecutionError,
    KediNameError,
    KediTypeExecutionError,
    KediValueExecutionError,
)
from kedi.runtime import interrupts, trace
from kedi.runtime.directive_statements import (
    directive_statement,
    profile_statement,
    system_statement,
    use_statement,
)
from kedi.runtime.imports import ModuleInstances, run_import
from kedi.runtime.model_statements import model_statement
from kedi.runtime.procedures import KediProcedure, not_a_procedure
from kedi.runtime.python_bridge import CompiledSnippets, PythonBridge, PythonFailure
from kedi.runtime.scheduler import KediPromise, Scheduler
from kedi.runtime.scopes import UNBOUND, AgentState, Args, Frame, Outcome, Scope
from kedi.runtime.types import (
    TypeCheckError,
    TypeResolutionError,
    UnknownTypeError,
    build_custom_type,
    check_value,
    resolve_type,
    type_label,
)
from kedi.runtime.values import capture_placeholder, render
from kedi.source import SourceFile, Span
from kedi.syntax import ast
from kedi.syntax.unsupported import UNSUPPORTED_STATEMENTS

if TYPE_CHECKING:
    from kedi.syntax.linking import LinkedModule

RESERVED_ARGS = "args"
PythonResultT = TypeVar("PythonResultT")


class Interpreter:
    """Runs one program: holds the module scope, the Python bridge and the call layer."""

    def __init__(
        self,
        module: ast.Module,
        source: SourceFile,
        *,
        args: Mapping[str, Any] | None = None,
        env: Mapping[str, Any] | None = None,
        calls: Any = None,
        parallel: int = 0,
        linked: LinkedModule | None = None,
        modules: ModuleInstances | None = None,
        compiled: CompiledSnippets | None = None,
    ) -> None:
        self.module = module
        self.linked = linked
        """The module's resolved imports (`kedi.syntax.linking.link`); None for unlinked source."""
        self.modules = modules if modules is not None else ModuleInstances()
        """The imported modules of this run, shared with every module it imports."""
        self.source = source
        self.bridge = PythonBridge(source.path, compiled)
        self.module_scope = Scope()
        self.env: dict[str, Any] = dict(env or {})
        self.env[RESERVED_ARGS] = Args(args)
        self.calls = calls
        """The model-call layer (`kedi.runtime.calls.CallLayer`)."""
        self._snippets: dict[int, str] = {}
        self.limiter = anyio.CapacityLimiter(parallel) if parallel > 0 else None
        """Bounds model calls in flight; None runs calls sequentially."""

    @functools.cached_property
    def python_threads(self) -> anyio.CapacityLimiter:
        """Worker threads for embedded Python that calls procedures synchronously.

        Unbounded, so nested calls can never wait for each other's threads
        (anyio's default pool of 40 deadlocked at depth 39); the call depth
        limit bounds how many one chain of calls takes. Made on first use:
        most runs never need it.
        """
        return anyio.CapacityLimiter(math.inf)

    # ================================================================== entry points

    async def run_module(
        self,
        *,
        agent: AgentState | None = None,
        declarations_only: bool = False,
        body_arguments: Mapping[str, Any] | None = None,
    ) -> Any:
        """Run the prelude, then the top-level statements; return the program's result.

        With `body_arguments` the statements run as the body of a procedure whose
        parameters hold those values (the `@kedi.query` form).
        """
        body = self.module.body
        if body and isinstance(body[0], ast.PythonBlock) and body[0].prelude:
            self._run_prelude(body[0])
            body = body[1:]
        if declarations_only:
            body = tuple(s for s in body if isinstance(s, _DECLARATIONS))
        scope = self.module_scope
        if body_arguments is not None:
            scope = Scope(scope, params=frozenset(body_arguments))
            scope.vars.update(body_arguments)
        with trace.frame("top-level program", None):
            returned, value = await self.run_body(body, scope, agent or AgentState(), None)
        return value if returned else None

    def _run_prelude(self, block: ast.PythonBlock) -> None:
        with trace.frame("prelude", block.span, snippet=self.snippet(block.span)):
            try:
                self.bridge.run_prelude(block.code)
            except PythonFailure as failure:
                raise self._python_error(failure) from None
            if RESERVED_ARGS in self.bridge.prelude:
                raise KediValueExecutionError(
                    "`args` is reserved for program arguments; the prelude cannot define it",
                    frames=trace.current_frames(),
                )

    async def run_body(
        self,
        body: Sequence[ast.Statement],
        scope: Scope,
        agent: AgentState,
        procedure: str | None,
        check_result: Callable[[Any], Any] | None = None,
    ) -> Outcome:
        """Run statements in order until a return; return (returned, value).

        In parallel mode the body owns a scheduler: its model calls run
        concurrently and are all drained before the body returns or fails.
        `check_result` checks the returned value at the `=` that returns it, so
        a wrong value's error points at that line.
        """
        frame = Frame(scope, agent, procedure)
        frame.check_result = check_result
        if self.limiter is None:
            return await self._run_statements(body, frame)
        async with Scheduler(self.limiter, quiet=self.calls.quiet) as scheduler:
            frame.scheduler = scheduler
            return await self._run_statements(body, frame)

    async def _run_statements(self, body: Sequence[ast.Statement], frame: Frame) -> Outcome:
        statement: ast.Statement | None = None
        try:
            for statement in body:
                if interrupts.requested:  # Ctrl-C: stop between statements (see `interrupts`)
                    raise KeyboardInterrupt
                handler = self._handlers[type(statement)]
                outcome = await handler(self, statement, frame)
                if outcome is not None:
                    return outcome
        except BaseException as exc:
            if not isinstance(exc, Exception) and statement is not None:
                interrupts.locate(statement.span)
            raise
        return False, None

    # ================================================================== statements

    async def _assign(self, node: ast.Assign, frame: Frame) -> None:
        kind = "assignment block" if isinstance(node.value, ast.Fence) else "assignment"
        with trace.frame(
            kind, node.span, snippet=self.snippet(node.span), procedure=frame.procedure
        ):
            self.check_assignable(node.target, frame)
            value = await self.evaluate_value(node.value, frame, native_call=True)
            annotation = self.resolve_type_in(node.type, frame.scope)
            value = self.check(annotation, value, f"assignment to `{node.target}`")
            self.bind(frame, node.target, value, node.span)

    async def _return(self, node: ast.Return, frame: Frame) -> Outcome:
        kind = "return block" if isinstance(node.value, ast.Fence) else "return"
        with trace.frame(
            kind, node.span, snippet=self.snippet(node.span), procedure=frame.procedure
        ):
            value = await self.evaluate_value(node.value, frame, native_call=False)
            return True, value if frame.check_result is None else frame.check_result(value)

    async def _python_statement(self, node: ast.PythonStatement, frame: Frame) -> None:
        with trace.frame(
            "python statement",
            node.span,
            snippet=self.snippet(node.span),
            procedure=frame.procedure,
        ):
            await self.execute_python(node.code, frame)

    async def _python_block(self, node: ast.PythonBlock, frame: Frame) -> None:
        with trace.frame(
            "fenced python", node.span, snippet=self.snippet(node.span), procedure=frame.procedure
        ):
            await self.execute_python(node.code, frame)

    async def _procedure(self, node: ast.Procedure, frame: Frame) -> None:
        self.check_assignable(node.name, frame)
        defaults = {}
        for param in node.params:
            if param.default is not None:
                defaults[param.name] = await self.evaluate_python(param.default, frame)
        procedure = KediProcedure(node, self, frame.scope, frame.agent, defaults)
        frame.scope.vars[node.name] = procedure

    async def _custom_type(self, node: ast.CustomType, frame: Frame) -> None:
        self.check_assignable(node.name, frame)
        with trace.frame(
            "type expression", node.span, snippet=self.snippet(node.span), procedure=frame.procedure
        ):
            namespace = self.namespace(frame)
            try:
                model = build_custom_type(
                    node,
                    lambda name: self._lookup_type_name(name, frame.scope),
                    lambda code: self.bridge.evaluate(code, namespace),
                )
            except TypeResolutionError as exc:
                raise KediNameError(str(exc), frames=trace.current_frames(), original=exc) from None
            except PythonFailure as failure:
                raise self._python_error(failure) from None
        frame.scope.vars[node.name] = model

    async def _import(self, node: ast.Import, frame: Frame) -> None:
        with trace.frame(
            "import", node.span, label=f"import {node.module}", snippet=self.snippet(node.span)
        ):
            frame.scope.vars.update(await run_import(node, self))

    async def _declaration_only(self, node: Any, frame: Frame) -> None:
        """`> export:` and `> package:` were settled at check time; nothing runs."""

    async def _unsupported(self, node: Any, frame: Frame) -> None:
        raise KediExecutionError(UNSUPPORTED_STATEMENTS[type(node)], frames=trace.current_frames())

    async def _suite(self, node: Any, frame: Frame) -> None:
        """Test and eval suites never run during normal execution."""

    _handlers: dict[type, Callable[..., Any]] = {}

    # ================================================================== values

    async def evaluate_value(self, value: ast.Value, frame: Frame, *, native_call: bool) -> Any:
        """Evaluate an assignment / return right-hand side.

        A sole backtick expression keeps its native value; a sole procedure call
        keeps it on assignments (`native_call`); anything else renders to `str`.
        """
        if isinstance(value, ast.Fence):
            result = await self.execute_python(value.code, frame, must_return=True)
            return result
        segments = value.segments
        if len(segments) == 1:
            only = segments[0]
            if isinstance(only, ast.BareBacktick):
                return await self.evaluate_python(only.code, frame)
            if native_call and isinstance(only, ast.Call):
                return await self.call(only, frame)
        return await self.render_segments(segments, frame)

    async def render_rows(self, rows: Sequence[ast.Row], frame: Frame) -> str:
        """Render template rows joined with newlines (captures show as `[name]`)."""
        return "\n".join([await self.render_segments(row.segments, frame) for row in rows])

    async def render_segments(self, segments: Sequence[ast.Segment], frame: Frame) -> str:
        """Render segments left to right (nested calls first)."""
        parts: list[str] = []
        for segment in segments:
            if isinstance(segment, ast.Text):
                parts.append(segment.value)
            elif isinstance(segment, ast.Subst):
                parts.append(render(await self.read(segment.name, frame)))
            elif isinstance(segment, ast.Call):
                parts.append(render(await self.call(segment, frame)))
            elif isinstance(segment, ast.Capture):
                parts.append(capture_placeholder(segment.name))
            else:
                parts.append(render(await self.evaluate_python(segment.code, frame)))
        return "".join(parts)

    async def argument(self, argument: ast.Argument, frame: Frame) -> Any:
        """One call argument: native when a sole substitution/call/Python, else text."""
        segments = argument.segments
        if len(segments) == 1:
            only = segments[0]
            if isinstance(only, ast.Subst):
                return await self.read(only.name, frame)
            if isinstance(only, ast.Call):
                return await self.call(only, frame)
            if isinstance(only, (ast.InlinePython, ast.BareBacktick)):
                return await self.evaluate_python(only.code, frame)
        return await self.render_segments(segments, frame)

    async def call(self, node: ast.Call, frame: Frame) -> Any:
        """`<proc(args)>`: evaluate arguments left to right, then call."""
        callee = await self.read(node.name, frame)
        args = [await self.argument(a, frame) for a in node.args]
        if isinstance(callee, KediProcedure):
            return await callee.invoke(tuple(args), {})
        if callable(callee) and not isinstance(callee, type):
            return await self._call_python(callee, args)
        raise not_a_procedure(node.name, callee)

    async def _call_python(self, function: Callable[..., Any], args: Sequence[Any]) -> Any:
        # A thread: the function may call a procedure synchronously, which hops back to the loop.
        return await anyio.to_thread.run_sync(
            lambda: function(*args), limiter=self.python_threads, abandon_on_cancel=True
        )

    async def _call_from_python(self, function: Any, /, *args: Any, **kwargs: Any) -> Any:
        """A direct call `f(...)` in embedded Python, awaited in the caller's task."""
        if isinstance(function, KediProcedure):
            return await function.invoke(args, kwargs)
        return function(*args, **kwargs)

    # ================================================================== names

    async def read(self, name: str, frame: Frame) -> Any:
        """Look a name up for `<name>` (forcing a pending result); unknown names are errors."""
        try:
            value = self.lookup(name, frame.scope)
        except KeyError:
            raise KediNameError(f"unknown name `{name}`", frames=trace.current_frames()) from None
        if isinstance(value, KediPromise):
            value = await self.force(name, value, frame.scope)
        return value

    async def force(self, name: str, promise: KediPromise, scope: Scope) -> Any:
        """Wait for a pending result; the binding then holds the plain value."""
        value = await promise.force()
        owner = scope.find(name)
        if owner is not None and owner.vars.get(name) is promise:
            owner.vars[name] = value
        return value

    async def _force_references(self, code: ast.PythonCode, frame: Frame) -> None:
        """Python reads of pending results wait for them before the code runs."""
        for name in self.bridge.references(code):
            scope = frame.scope.find(name)
            if scope is not None:
                value = scope.vars[name]
                if isinstance(value, KediPromise):
                    await self.force(name, value, frame.scope)

    def lookup(self, name: str, scope: Scope) -> Any:
        """Kedi bindings, then prelude names, then runtime globals (args, env), then builtins."""
        value = self.find(name, scope)
        if value is UNBOUND:
            raise KeyError(name)
        return value

    def find(self, name: str, scope: Scope) -> Any:
        """What `lookup` finds, or `UNBOUND` instead of a KeyError (no exception on a miss)."""
        value = scope.get(name, UNBOUND)
        if value is not UNBOUND:
            return value
        value = self.bridge.prelude.get(name, UNBOUND)
        if value is UNBOUND:
            value = self.env.get(name, UNBOUND)
        if value is UNBOUND:
            value = getattr(builtins, name, UNBOUND)
        return value

    def bind(self, frame: Frame, name: str, value: Any, span: Span | None) -> None:
        """A Kedi assignment (or published output) to `name`."""
        frame.scope.assignment_target(name).vars[name] = value

    def check_assignable(self, name: str, frame: Frame) -> None:
        """Raise if `name` cannot be assigned here: `args`, or a parameter of the procedure."""
        if name == RESERVED_ARGS:
            raise KediValueExecutionError(
                "`args` is reserved for program arguments and cannot be assigned",
                frames=trace.current_frames(),
            )
        if name in frame.scope.params:
            raise KediValueExecutionError(
                f"cannot assign to parameter `{name}`; derive a new local name instead",
                frames=trace.current_frames(),
            )

    # ================================================================== types

    def resolve_type_in(self, expr: ast.TypeExpr | None, scope: Scope) -> Any:
        """Resolve a Kedi type expression in `scope` (None means `str`)."""
        if expr is None:
            return str
        namespace: dict[str, Any] | None = None

        def evaluate(code: ast.PythonCode) -> Any:
            nonlocal namespace
            if namespace is None:
                namespace = self.namespace(Frame(scope, AgentState(), None))
            return self.bridge.evaluate(code, namespace)

        try:
            return resolve_type(expr, lambda name: self._lookup_type_name(name, scope), evaluate)
        except UnknownTypeError as exc:
            raise KediNameError(str(exc), frames=trace.current_frames(), original=exc) from None
        except TypeResolutionError as exc:
            raise KediTypeExecutionError(
                str(exc), frames=trace.current_frames(), original=exc
            ) from None
        except PythonFailure as failure:
            raise self._python_error(failure) from None

    def _lookup_type_name(self, name: str, scope: Scope) -> Any:
        value = self.lookup(name, scope)
        if name in _BUILTIN_SHADOW_SAFE and not isinstance(value, type):
            raise KeyError(name)
        return value

    def type_label(self, expr: ast.TypeExpr | None) -> Any:
        """A readable annotation for signatures (resolved lazily elsewhere)."""
        if expr is None:
            return str
        try:
            return resolve_type(
                expr, lambda name: self._lookup_type_name(name, self.module_scope), _no_python
            )
        except Exception:
            return _source_text(expr)

    def check(
        self, annotation: Any, value: Any, what: str, *, missing: bool = False, hint: str = ""
    ) -> Any:
        """Strict validation at a boundary (no coercion); `hint` follows a failure's message."""
        try:
            return check_value(annotation, value)
        except TypeCheckError as exc:
            if missing:
                message = f"{what}: the procedure ended without returning a value (declared `{type_label(annotation)}`)"
                if hint:
                    message += f"\nhint: {hint}"
            else:
                message = f"{what}: {exc}"
            raise KediTypeExecutionError(
                message, frames=trace.current_frames(), original=exc
            ) from None

    # ================================================================== python

    def namespace(self, frame: Frame, *, complete: bool = False) -> dict[str, Any]:
        """Globals for embedded Python: builtins < runtime env < prelude < Kedi bindings.

        A name is looked up when the code first reads it (then kept for the
        rest of the evaluation), so an expression costs what it reads, not the
        size of the program. `complete` copies every binding instead, for code
        that lists its globals (`globals()`, `vars()`, `dir()`).
        """
        if not complete:
            return _Namespace(self, frame.scope)
        namespace: dict[str, Any] = {"__builtins__": builtins}
        namespace.update(self.env)
        namespace.update(self.bridge.prelude)
        for scope in frame.scope.chain():
            namespace.update(scope.vars)
        return namespace

    async def evaluate_python(self, code: ast.PythonCode, frame: Frame) -> Any:
        """Evaluate one Python expression (`` `expr` ``, `` <`expr`> ``, defaults)."""
        with trace.frame(
            "inline python", code.span, snippet=self.snippet(code.span), procedure=frame.procedure
        ):
            try:
                return await self._run_python(
                    code, frame, self.bridge.evaluate, self.bridge.evaluate_awaiting
                )
            except PythonFailure as failure:
                raise self._python_error(failure) from None

    async def execute_python(
        self, code: ast.PythonCode, frame: Frame, *, must_return: bool = False
    ) -> Any:
        """Run Python statements; sync writes to existing Kedi names back."""
        try:
            result = await self._run_python(
                code, frame, self.bridge.execute, self.bridge.execute_awaiting
            )
        except PythonFailure as failure:
            raise self._python_error(failure) from None
        for name, value in result.writes.items():
            self._sync_write(name, value, frame)
        if must_return and not result.returned:
            raise KediValueExecutionError(
                "a `= ```` ` block must `return` a value", frames=trace.current_frames()
            )
        return result.value

    async def _run_python(
        self,
        code: ast.PythonCode,
        frame: Frame,
        run: Callable[[ast.PythonCode, dict[str, Any]], PythonResultT],
        run_awaiting: Callable[..., Awaitable[PythonResultT]],
    ) -> PythonResultT:
        """Run `code` with the bridge's `run` (or `run_awaiting`) as `_procedures_called` says.

        Here when it calls no procedure; awaiting the procedures it calls
        directly; else in a worker thread whose calls hop back to the loop.

        Raises:
            PythonFailure: the code raised or does not compile.
        """
        await self._force_references(code, frame)
        namespace = self.namespace(frame, complete=self.bridge.reads_dynamically(code))
        procedures = self._procedures_called(code, frame)
        if procedures is None:
            return run(code, namespace)
        if procedures:
            return await run_awaiting(code, namespace, procedures, self._call_from_python)
        return await anyio.to_thread.run_sync(
            run, code, namespace, limiter=self.python_threads, abandon_on_cancel=True
        )

    def _sync_write(self, name: str, value: Any, frame: Frame) -> None:
        if name == RESERVED_ARGS:
            raise KediValueExecutionError(
                "`args` is reserved for program arguments and cannot be assigned",
                frames=trace.current_frames(),
            )
        scope = frame.scope.find(name)
        if scope is not None:
            scope.vars[name] = value
        elif name in self.bridge.prelude:
            self.bridge.prelude[name] = value

    def _procedures_called(self, code: ast.PythonCode, frame: Frame) -> frozenset[str] | None:
        """How to run code that may call procedures.

        None: it names no procedure, so it runs right here. The names of the
        procedures it reads: each is only called directly, so the calls are
        awaited on the event loop (no thread). An empty set: some procedure
        is used otherwise (`map(f, xs)`, inside a lambda), so the code runs in
        a worker thread and the call hops back to the loop.
        """
        scope = frame.scope
        procedures = frozenset(
            [
                name
                for name in self.bridge.references(code)
                if isinstance(self.find(name, scope), KediProcedure)
            ]
        )
        if not procedures:
            return None
        return procedures if self.bridge.calls_only(code, procedures) else frozenset()

    def _python_error(self, failure: PythonFailure) -> KediExecutionError:
        original = failure.original
        if isinstance(original, KediExecutionError):
            return original
        return trace.wrap(original, python_traces=tuple(failure.traces))

    # ================================================================== misc

    def snippet(self, span: Span | None) -> str:
        """The source line where `span` starts."""
        if span is None or span.line < 1:
            return ""
        text = self._snippets.get(span.line)
        if text is None:
            text = self._snippets[span.line] = self.source.line_text(span.line).strip()
        return text


class _Namespace(dict[str, Any]):
    """Embedded Python's globals, filled from the Kedi scope chain as names are read.

    Python asks a dict subclass's `__missing__` for names its globals and
    locals lack (`LOAD_NAME` and `LOAD_GLOBAL` both do), so a read costs one
    lookup along the chain and nothing is copied up front.
    """

    __slots__ = ("_interpreter", "_scope")

    def __init__(self, interpreter: Interpreter, scope: Scope) -> None:
        super().__init__(__builtins__=builtins)
        self._interpreter = interpreter
        self._scope = scope

    def __missing__(self, name: str) -> Any:
        value = self._interpreter.find(name, self._scope)
        if value is UNBOUND:
            raise KeyError(name)
        dict.__setitem__(self, name, value)
        return value

    def get(self, name: str, default: Any = None) -> Any:
        """`dict.get` that loads the binding like a read does."""
        try:
            return self[name]
        except KeyError:
            return default


_BUILTIN_SHADOW_SAFE = frozenset(
    {"str", "int", "float", "bool", "bytes", "object", "list", "dict", "tuple", "set"}
)
_DECLARATIONS = (
    ast.Procedure,
    ast.CustomType,
    ast.ProfileDef,
    ast.Directive,
    ast.SystemDirective,
    ast.Use,
    ast.Import,
)


def _no_python(code: ast.PythonCode) -> Any:
    raise TypeResolutionError("backtick type resolved at call time", None)


def _source_text(expr: ast.TypeExpr) -> str:
    if isinstance(expr, ast.TypeName):
        return expr.name
    if isinstance(expr, ast.TypePython):
        return expr.code.code
    if isinstance(expr, ast.TypeLiteral):
        return repr(expr.value)
    if isinstance(expr, ast.TypeUnion):
        return " | ".join(_source_text(o) for o in expr.options)
    return f"{expr.base.name}[{', '.join(_source_text(a) for a in expr.args)}]"


Interpreter._handlers = {
    ast.Template: model_statement,
    ast.RawInvoke: model_statement,
    ast.Assign: Interpreter._assign,
    ast.Return: Interpreter._return,
    ast.PythonStatement: Interpreter._python_statement,
    ast.PythonBlock: Interpreter._python_block,
    ast.Procedure: Interpreter._procedure,
    ast.CustomType: Interpreter._custom_type,
    ast.Directive: directive_statement,
    ast.SystemDirective: system_statement,
    ast.Use: use_statement,
    ast.ProfileDef: profile_statement,
    ast.Import: Interpreter._import,
    ast.Export: Interpreter._declaration_only,
    ast.Package: Interpreter._declaration_only,
    ast.Optimize: Interpreter._unsupported,
    ast.Auto: Interpreter._unsupported,
    ast.TestSuite: Interpreter._suite,
    ast.EvalSuite: Interpreter._suite,
}
