"""Compiled procedures: real Python callables with real signatures.

A `KediProcedure` is what `@name(...)` binds. Kedi code calls it with `await
invoke(...)`; Python code (backtick expressions, fences, embedding code) calls
it like any function:

- a direct call `f(x)` in a backtick or fence is awaited in the caller's task
  (the bridge rewrites it), so nested calls take no thread;
- from a worker thread that kedi started for other embedded Python (`map(f,
  xs)`, a call inside a lambda), the call hops back onto the event loop
  (`anyio.from_thread.run`);
- from plain synchronous code with no loop running, it runs on the thread's
  kedi loop (`kedi.runtime.loops`);
- `await proc.acall(...)` from async embedding code.

Every invocation counts one level of Kedi call depth; past `MAX_CALL_DEPTH`
the call fails with a `KediExecutionError` instead of exhausting the stack.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import sys
import threading
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread

from kedi.adapters.resources import run_scope
from kedi.errors import KediExecutionError, KediTypeExecutionError, KediUsageError
from kedi.runtime import trace
from kedi.runtime.loops import run_on_thread_loop
from kedi.runtime.scopes import AgentState, Scope
from kedi.syntax import ast
from kedi.syntax.directives import literal_or_text
from kedi.syntax.python_snippets import returns_at_top_level

if TYPE_CHECKING:
    from kedi.runtime.interpreter import Interpreter

MAX_CALL_DEPTH = 1000
"""How deep procedure calls may nest (Python's default recursion limit, counted in Kedi calls)."""

_PYTHON_FRAMES_PER_CALL = 40
"""An upper bound on the Python frames one Kedi call level adds (measured: about 25)."""

_DEPTH: ContextVar[int] = ContextVar("kedi_call_depth", default=0)


class KediProcedure:
    """A Kedi procedure bound to the scope and agent state where it was defined."""

    def __init__(
        self,
        node: ast.Procedure,
        interpreter: Interpreter,
        scope: Scope,
        agent: AgentState,
        defaults: Mapping[str, Any],
    ) -> None:
        self.node = node
        self.interpreter = interpreter
        self.scope = scope
        self.agent = agent
        self.__name__ = node.name
        self.__qualname__ = node.name
        self.__doc__ = node.docstring.text if node.docstring else None
        self._param_types: dict[str, Any] | None = None
        self._return_type: Any = None
        parameters = [
            inspect.Parameter(
                p.name,
                inspect.Parameter.POSITIONAL_OR_KEYWORD,
                default=defaults.get(p.name, inspect.Parameter.empty),
                annotation=interpreter.type_label(p.type),
            )
            for p in node.params
        ]
        self.__signature__ = inspect.Signature(
            parameters, return_annotation=interpreter.type_label(node.returns)
        )

    def __repr__(self) -> str:
        return f"<kedi procedure {self.__name__}{self.__signature__}>"

    # ------------------------------------------------------------------ calling

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        call = functools.partial(self.acall, *args, **kwargs)
        refuse_in_event_loop(
            f"procedure {self.__name__!r} was called synchronously from inside a running event "
            f"loop; use `await {self.__name__}.acall(...)`"
        )
        try:
            anyio.from_thread.check_cancelled()  # succeeds only in a worker thread of a run
        except RuntimeError:
            return run_on_thread_loop(call)
        return anyio.from_thread.run(call)

    async def acall(self, *args: Any, **kwargs: Any) -> Any:
        """Call the procedure from async code."""
        async with run_scope():
            return await self.invoke(args, kwargs)

    async def invoke(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], span: Any = None
    ) -> Any:
        """Bind and check the arguments, run the body, check the result."""
        node = self.node
        try:
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as exc:
            with self._header_when_called_from_python():
                raise trace.wrap(TypeError(f"procedure `{node.name}`: {exc}")) from None
        bound.apply_defaults()
        depth = _DEPTH.get() + 1
        if depth > MAX_CALL_DEPTH:
            raise _too_deep()
        if depth == 1:
            _RECURSION_LIMIT.enter()
        _RECURSION_LIMIT.fit(depth)
        depth_token = _DEPTH.set(depth)
        try:
            return await self._run(bound)
        finally:
            _DEPTH.reset(depth_token)
            if depth == 1:
                _RECURSION_LIMIT.leave()

    async def _run(self, bound: inspect.BoundArguments) -> Any:
        node = self.node
        interp = self.interpreter
        with self._header_when_called_from_python():
            scope = self._arguments_scope(bound)
        with self._frame():
            what = f"return value of `{node.name}`"
            returned, value = await interp.run_body(
                node.body,
                scope,
                self.agent,
                node.name,
                lambda value: interp.check(self._result_type(), value, what),
            )
            if returned:
                return value  # checked by the `=` that returned it, which the error points at
            return interp.check(
                self._result_type(), "", what, missing=True, hint=_ignored_return_hint(node.body)
            )

    def _frame(self) -> trace.frame:
        node = self.node
        return trace.frame(
            "procedure",
            node.span,
            label=f"procedure {node.name}",
            procedure=node.name,
            snippet=self.interpreter.snippet(node.span),
        )

    def _header_when_called_from_python(self) -> AbstractContextManager[None]:
        """Where a wrong argument points: the calling `.kedi` line, else the procedure's header.

        Called from Python there is no calling line; without the header the
        error's trace was empty.
        """
        return nullcontext() if trace.current_frames() else self._frame()

    def _arguments_scope(self, bound: inspect.BoundArguments) -> Scope:
        """The body's scope: the arguments, each checked against its parameter's type."""
        types = self._parameter_types()
        scope = Scope(self.scope, params=frozenset(bound.arguments))
        for name, value in bound.arguments.items():
            try:
                scope.vars[name] = self.interpreter.check(
                    types[name], value, f"argument `{name}` of `{self.node.name}`"
                )
            except KediTypeExecutionError as error:
                hint = _text_argument_hint(value)
                if not hint:
                    raise
                raise KediTypeExecutionError(
                    f"{error.message}\nhint: {hint}", frames=error.frames, original=error.original
                ) from None
        return scope

    def _parameter_types(self) -> dict[str, Any]:
        if self._param_types is None:
            resolve = self.interpreter.resolve_type_in
            self._param_types = {p.name: resolve(p.type, self.scope) for p in self.node.params}
        return self._param_types

    def _result_type(self) -> Any:
        if self._return_type is None:
            self._return_type = self.interpreter.resolve_type_in(self.node.returns, self.scope)
        return self._return_type


_CALLED_FROM_PYTHON = frozenset(
    {"inline python", "fenced python", "python statement", "assignment block", "return block"}
    | {"procedure"}  # called from the embedding Python code (`program.procedures`)
)
"""Innermost trace frames of a call made by Python code: a `str` there is the one Python gave."""


def _text_argument_hint(value: Any) -> str:
    """How to pass a value, when a `str` that failed a parameter came from text in `<f(...)>`."""
    frames = trace.current_frames()
    if not isinstance(value, str) or not frames or frames[-1].kind in _CALLED_FROM_PYTHON:
        return ""
    hint = "an argument written as text passes a string; "
    literal = literal_or_text(value) if len(value) <= 100 else value
    if isinstance(literal, str):
        return hint + "pass a value in backticks"
    return hint + f"write it in backticks (`{value.strip()}`) to pass its value"


def _ignored_return_hint(body: tuple[ast.Statement, ...]) -> str:
    """What to write instead, when a standalone fence of `body` has a `return` (ignored, spec 2.7)."""
    for statement in body:
        if isinstance(statement, ast.PythonBlock) and returns_at_top_level(statement.code.code):
            return (
                f"the `return` in the ``` block at line {statement.span.line} only ends that "
                "block (its value is ignored); to return it, open the block with = ```"
            )
    return ""


def _too_deep() -> KediExecutionError:
    frames = trace.current_frames()
    span = next((frame.span for frame in reversed(frames) if frame.span is not None), None)
    where = f" at {span.path}:{span.line}" if span is not None else ""
    return KediExecutionError(f"maximum call depth {MAX_CALL_DEPTH} exceeded{where}", frames=frames)


class _RecursionLimit:
    """Python's recursion limit: raised to fit nested Kedi calls, restored when none runs.

    The limit is the process's: left raised, it changed what later code could
    do (`kedi.compile` accepted embedded Python nested deeper than a fresh
    `kedi check` did, as Python's compiler reads the limit). A chain of calls
    (an outermost call and all it nests, in any thread) enters and leaves;
    when the last chain leaves, the limit goes back to what it was, unless
    someone else has changed it since kedi did.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._chains = 0
        self._before: int | None = None
        """The limit before kedi raised it (None: kedi has not raised it)."""
        self._raised_to = 0

    def enter(self) -> None:
        with self._lock:
            self._chains += 1

    def fit(self, depth: int) -> None:
        """Let the limit fit `depth` nested Kedi calls (it grows while chains run)."""
        needed = 1000 + depth * _PYTHON_FRAMES_PER_CALL
        if needed <= sys.getrecursionlimit():
            return
        with self._lock:
            current = sys.getrecursionlimit()
            if needed > current:
                if self._before is None:
                    self._before = current
                sys.setrecursionlimit(needed)
                self._raised_to = needed

    def leave(self) -> None:
        with self._lock:
            self._chains -= 1
            if self._chains or self._before is None:
                return
            if sys.getrecursionlimit() == self._raised_to:
                with contextlib.suppress(RecursionError):  # a caller deeper than the old limit
                    sys.setrecursionlimit(self._before)
            self._before = None


_RECURSION_LIMIT = _RecursionLimit()


def refuse_in_event_loop(advice: str) -> None:
    """Raise `KediUsageError(advice)` when this thread runs an event loop (async code).

    The sync entry points start an event loop of their own, which cannot happen
    inside a running one; `advice` names the async form to use instead.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return  # a worker thread, or plain sync code
    raise KediUsageError(advice)


def not_a_procedure(name: str, value: Any) -> KediTypeExecutionError:
    """The error for `<name(...)>` when `name` is not callable."""
    return KediTypeExecutionError(
        f"`{name}` is not a procedure (it is a {type(value).__name__})",
        frames=trace.current_frames(),
    )
