"""Kedi stack traces: frames pointing at `.kedi` lines, never at kedi's own code.

The interpreter pushes a frame for every procedure and statement it runs
(context-local, so concurrent calls keep separate stacks), except model calls,
which `attach` their frame to an error escaping them. When a non-kedi
exception escapes a frame it is wrapped once into a `KediExecutionError` that
carries a snapshot of the stack; outer frames let it pass unchanged.
"""

from __future__ import annotations

from contextvars import ContextVar, Token

from kedi.errors import (
    KediError,
    KediExecutionError,
    KediKeyExecutionError,
    KediNameError,
    KediPythonTrace,
    KediTraceFrame,
    KediTypeExecutionError,
    KediValueExecutionError,
    execution_error_class,
)
from kedi.source import Span

_STACK: ContextVar[tuple[KediTraceFrame, ...]] = ContextVar("kedi_trace", default=())

_FLAVOURS: tuple[tuple[type[BaseException], type[KediExecutionError]], ...] = (
    (NameError, KediNameError),
    (KeyError, KediKeyExecutionError),
    (TypeError, KediTypeExecutionError),
    (ValueError, KediValueExecutionError),
)


def current_frames() -> tuple[KediTraceFrame, ...]:
    """The Kedi stack of the running task, outermost first."""
    return _STACK.get()


def entry(
    kind: str,
    span: Span | None,
    *,
    label: str | None = None,
    procedure: str | None = None,
    snippet: str = "",
) -> KediTraceFrame:
    """The stack entry a `frame` pushes (immutable, so one entry can serve many runs of a statement)."""
    return KediTraceFrame(kind, label or kind, span, procedure, snippet)


class frame:
    """`with frame(...)`: run a block under a Kedi trace frame; wrap foreign exceptions escaping it.

    A class, not a `@contextmanager` generator: it runs around every
    statement, and a plain `__enter__`/`__exit__` pair costs less than a
    generator's set-up and two resumptions.
    """

    __slots__ = ("_entry", "_token")

    def __init__(
        self,
        kind: str,
        span: Span | None,
        *,
        label: str | None = None,
        procedure: str | None = None,
        snippet: str = "",
    ) -> None:
        self._entry = entry(kind, span, label=label, procedure=procedure, snippet=snippet)

    def __enter__(self) -> None:
        self._token = push(self._entry)

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        try:
            if isinstance(exc, Exception) and not isinstance(exc, KediExecutionError):
                raise wrap(exc) from exc  # wrapped while this frame is still on the stack
        finally:
            pop(self._token)


def push(pushed: KediTraceFrame) -> Token[tuple[KediTraceFrame, ...]]:
    """Push an entry on the running task's stack; give the token to `pop` when leaving.

    `frame` does both around a block; a hot path may do them itself, wrapping
    foreign exceptions with `wrap` before it pops, as `frame` does.
    """
    return _STACK.set(_STACK.get() + (pushed,))


def pop(token: Token[tuple[KediTraceFrame, ...]]) -> None:
    """Remove the entry that `push` returned `token` for."""
    _STACK.reset(token)


def attach(error: KediExecutionError, entry: KediTraceFrame) -> None:
    """Give `error` the frame `entry` of a statement it escaped that ran without pushing it.

    Model calls, the hottest statements, do not push their frame (see
    `Interpreter._model_statement`). Every error raised while one runs
    starts with the running task's stack, so the statement's frame goes right
    after it; an error from elsewhere (another stack) passes unchanged, as it
    passes a pushed frame.
    """
    outer = _STACK.get()
    depth = len(outer)
    if error.frames[:depth] == outer:
        error.frames = (*outer, entry, *error.frames[depth:])


def wrap(
    exc: BaseException,
    message: str | None = None,
    python_traces: tuple[KediPythonTrace, ...] = (),
) -> KediExecutionError:
    """Build the execution error for `exc` with the current stack."""
    if isinstance(exc, KediExecutionError):
        return exc
    cls = KediExecutionError
    if isinstance(exc, KediError):
        if type(exc) is not KediError:
            cls = execution_error_class(type(exc))  # `except ProviderError` still catches it
    else:
        for builtin, flavour in _FLAVOURS:
            if isinstance(exc, builtin):
                cls = flavour
                break
    text = message or _message(exc)
    return cls(text, frames=current_frames(), original=exc, python_traces=python_traces)


def _message(exc: BaseException) -> str:
    if isinstance(exc, KeyError) and exc.args:
        return f"key {exc.args[0]!r} not found"
    text = str(exc)
    return text or type(exc).__name__
