"""Every public kedi exception.

The branches separate who has to act::

    KediError
    ├── KediUsageError                 the embedding Python code misused kedi's API
    ├── KediConfigError                a bad setting (environment variable, CLI option)
    ├── KediDiagnosticError            the .kedi source is wrong; carries Diagnostics
    │   ├── KediSyntaxError            parse errors (alias: KediParseError)
    │   └── KediCheckError             static check errors (names, directives, profiles)
    ├── KediExecutionError             the program failed while running; carries trace frames
    │   ├── KediTypeExecutionError     (also a TypeError)
    │   ├── KediValueExecutionError    (also a ValueError)
    │   ├── KediKeyExecutionError      (also a KeyError)
    │   └── KediNameError              (also a NameError)
    ├── KediPromiseLeak                an unresolved parallel result was used concretely
    ├── AdapterError                   a model call failed; may carry `partial`
    │   ├── CapabilityError            the adapter cannot represent the request
    │   ├── OutputValidationError      the model's structured output never validated
    │   ├── ScriptExhaustedError       a `script:` model ran out of replies
    │   ├── TurnAbandoned              not sent: an earlier call on its lane failed
    │   ├── StopRun                    a tool stopped the run on purpose (tools raise it)
    │   └── ProviderError              a representable request failed operationally
    │       ├── AuthenticationError
    │       ├── ModelNotFoundError
    │       ├── ContextLengthError
    │       ├── HistoryShapeError      the provider rejected the message sequence
    │       └── RateLimitError
    ├── ExtraNotInstalledError         an optional framework is missing (also ImportError)
    └── HistoryError                   invalid history input (also a ValueError)
        ├── HistoryProcessingError     a history processor failed
        └── HistoryProcessingValidationError   a processor returned an invalid edit

Every exception here pickles (see `__reduce__`), so errors cross process and
thread boundaries intact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kedi.source import Span


def redact_text(text: str) -> str:
    """`kedi.redaction.redact_text`, imported on first use (`import kedi` stays light)."""
    from kedi.redaction import redact_text as redact

    return redact(text)


class KediError(Exception):
    """Base class of every kedi exception.

    Its `str` and `repr` are redacted (`kedi.redaction`): a message that quotes
    a server's reply or a URL never shows a key.
    """

    def __str__(self) -> str:
        return redact_text(super().__str__())

    def __repr__(self) -> str:
        return redact_text(super().__repr__())

    def render(self, use_color: bool = False) -> str:
        """Return the text shown to a user (the CLI prints this to stderr)."""
        return f"Kedi error: {type(self).__name__}\n  {self}"


class KediUsageError(KediError):
    """The embedding Python code called kedi's API incorrectly."""


class KediConfigError(KediError):
    """A configuration value (environment variable, option) is invalid."""


class ExtraNotInstalledError(KediError, ImportError):
    """An optional framework needed by an adapter is not installed."""

    def __init__(self, package: str, extra: str) -> None:
        self.package = package
        self.extra = extra
        super().__init__(
            f"the {package!r} package is not installed; install it with: "
            f'pip install "kedi[{extra}]"'
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.package, self.extra))


# --------------------------------------------------------------------------- diagnostics


MAX_SHOWN_DIAGNOSTICS = 20
"""A diagnostic error renders at most this many problems, then counts the rest."""

SCREEN_WIDTH = 100
"""At most this much of a source line is shown under a diagnostic."""


def _screen_window(line: str, column: int) -> tuple[str, int]:
    """`line` cut to `SCREEN_WIDTH` characters around the 0-based `column`; return (text, new column)."""
    if len(line) <= SCREEN_WIDTH:
        return line, column
    start = max(0, min(column - SCREEN_WIDTH // 2, len(line) - SCREEN_WIDTH))
    text = line[start : start + SCREEN_WIDTH]
    prefix = "..." if start > 0 else ""
    suffix = "..." if start + SCREEN_WIDTH < len(line) else ""
    return prefix + text + suffix, column - start + len(prefix)


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One problem in the source: where it is and what to do about it."""

    span: Span
    message: str
    hint: str | None = None
    source_line: str = ""
    """The text of the first line of `span` (filled in by whoever has the source)."""

    @property
    def path(self) -> str:
        return self.span.path

    @property
    def line(self) -> int:
        return self.span.line

    @property
    def column(self) -> int:
        return self.span.column

    def render(self, title: str, kind: str) -> str:
        """Render in the documented layout (file, line, column, caret, message).

        A source line longer than a screen line shows the part around the
        column, marked with `...` where it is cut.
        """
        span = self.span
        width = 1
        if span.end_line == span.line and span.end_column > span.column:
            width = span.end_column - span.column
        elif self.source_line:
            width = max(1, len(self.source_line) - span.column + 1)
        lines = [
            f"{title}:",
            "",
            f'  File "{span.path}", line {span.line}, column {span.column}',
        ]
        if self.source_line:
            text, column = _screen_window(self.source_line, span.column - 1)
            width = max(1, min(width, len(text) - column))
            # Tabs expanded here, so the caret lands under the text a terminal shows.
            start = len(text[:column].expandtabs())
            end = len(text[: column + width].expandtabs())
            lines.append(f"  {text.expandtabs()}")
            # A column just past the end (Python's "expected ':'") still gets its caret.
            lines.append("  " + " " * start + "^" * max(1, end - start))
        lines += ["", f"Kedi error: {kind}", f"  {self.message}"]
        if self.hint:
            lines.append(f"  hint: {self.hint}")
        return "\n".join(lines)


class KediDiagnosticError(KediError):
    """Base of errors that point at places in the source."""

    title = "Kedi error"
    kind = "Error"

    def __init__(self, diagnostics: list[Diagnostic] | tuple[Diagnostic, ...]) -> None:
        self.diagnostics = tuple(diagnostics)
        if not self.diagnostics:
            raise ValueError("a diagnostic error needs at least one diagnostic")
        first = self.diagnostics[0]
        super().__init__(f"{first.span}: {first.message}")

    def render(self, use_color: bool = False) -> str:
        """The first `MAX_SHOWN_DIAGNOSTICS` diagnostics, then how many more there are."""
        shown = [d.render(self.title, self.kind) for d in self.diagnostics[:MAX_SHOWN_DIAGNOSTICS]]
        hidden = len(self.diagnostics) - MAX_SHOWN_DIAGNOSTICS
        if hidden > 0:
            shown.append(f"and {hidden} more {'problem' if hidden == 1 else 'problems'}")
        return "\n\n".join(shown)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.diagnostics,))


class KediSyntaxError(KediDiagnosticError):
    """The source does not parse."""

    title = "Kedi parse error"
    kind = "ParseError"


KediParseError = KediSyntaxError
"""The name the Kedi documentation uses for `KediSyntaxError`."""


class KediCheckError(KediDiagnosticError):
    """The source parses but fails a static check (names, directives, profiles)."""

    title = "Kedi check error"
    kind = "CheckError"


# --------------------------------------------------------------------------- execution


@dataclass(frozen=True, slots=True)
class KediTraceFrame:
    """One step of a Kedi stack trace, pointing at a `.kedi` line."""

    kind: str
    """What ran there: "procedure", "template", "inline python", "return block", ..."""
    label: str
    span: Span | None
    procedure_name: str | None = None
    source_snippet: str = ""


@dataclass(frozen=True, slots=True)
class KediPythonTrace:
    """A line of embedded Python that raised, mapped back to its `.kedi` line."""

    code: str
    filename: str
    python_line: int
    kedi_line: int
    path: str
    snippet: str
    procedure: str | None = None


_SHOWN_PYTHON_TRACES = 3
"""Embedded Python lines shown at each end of a long chain (a recursion); the rest are counted."""


class KediExecutionError(KediError):
    """The program failed while running.

    `frames` is the Kedi stack (outermost first), `original` the exception that
    caused it, `python_traces` the embedded Python lines involved.
    """

    def __init__(
        self,
        message: str,
        *,
        frames: tuple[KediTraceFrame, ...] = (),
        original: BaseException | None = None,
        python_traces: tuple[KediPythonTrace, ...] = (),
    ) -> None:
        message = redact_text(message)
        super().__init__(message)
        self._keep(message, frames, original, python_traces)

    def _keep(
        self,
        message: str,
        frames: tuple[KediTraceFrame, ...],
        original: BaseException | None,
        python_traces: tuple[KediPythonTrace, ...],
    ) -> None:
        self.message = message
        self.frames = tuple(frames)
        self.original = original
        self.python_traces = tuple(python_traces)

    @property
    def partial(self) -> Any:
        """Partial evidence of a failed model call (see `kedi.history.PartialResult`)."""
        return getattr(self.original, "partial", None)

    @property
    def where(self) -> str:
        """`file:line` of the innermost `.kedi` line the trace points at, or ""."""
        spans = [frame.span for frame in self.frames if frame.span is not None]
        return f"{spans[-1].path}:{spans[-1].line}" if spans else ""

    def __str__(self) -> str:
        return redact_text(self.render())

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"

    def render(self, use_color: bool = False) -> str:
        out = ["Kedi stack trace:"]
        frames: tuple[KediTraceFrame | None, ...] = self.frames
        if len(frames) > 2 * _SHOWN_FRAMES:
            # A deep recursion: its outermost and innermost frames tell the story.
            frames = (*frames[:_SHOWN_FRAMES], None, *frames[-_SHOWN_FRAMES:])
        for frame in frames:
            if frame is None:
                hidden = len(self.frames) - 2 * _SHOWN_FRAMES
                out += ["", f"  ... {hidden} more frames ..."]
                continue
            if frame.span is None:
                out.append(f"  in {frame.label}")
                continue
            where = f"in {frame.label}"
            out += ["", f'  File "{frame.span.path}", line {frame.span.line}, {where}']
            if frame.source_snippet:
                snippet, _ = _screen_window(frame.source_snippet, frame.span.column - 1)
                out.append(f"  \u2771 {frame.span.line} {snippet}")
        traces = self.python_traces
        hidden = len(traces) - 2 * _SHOWN_PYTHON_TRACES
        if hidden > 1:  # a deep recursion: the first and last frames tell the story
            shown = traces[:_SHOWN_PYTHON_TRACES] + traces[-_SHOWN_PYTHON_TRACES:]
        else:
            shown, hidden = traces, 0
        for number, trace in enumerate(shown):
            if hidden and number == _SHOWN_PYTHON_TRACES:
                out.append(f"    ... {hidden} more embedded Python lines ...")
            where = f"    embedded Python line {trace.python_line}"
            if trace.filename != shown[0].filename:
                # Another snippet (a prelude function, say): its own `.kedi` line, since
                # the Kedi frame above names only the block that called it.
                where += f', File "{trace.path}", line {trace.kedi_line}'
            out.append(where)
            if trace.snippet:
                snippet, _ = _screen_window(trace.snippet, 0)
                out.append(f"    \u2771 {trace.python_line} {snippet}")
        original = self.original
        # Name what caused the failure (a Python exception, an adapter error);
        # kedi's internal signals (type checks) are named by this error's class.
        named = original is not None and (
            isinstance(original, KediError) or not type(original).__module__.startswith("kedi")
        )
        kind = type(original).__name__ if named else type(self).__name__
        heading = "Inline Python error" if self.python_traces else "Kedi error"
        out += ["", f"{heading}: {kind}"]
        out += [f"  {line}" for line in self.message.splitlines() or [""]]
        return "\n".join(out)

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_execution_error,
            (type(self), self.message, self.frames, self.python_traces, _picklable(self.original)),
        )


_SHOWN_FRAMES = 12
"""A rendered trace of more than twice this many frames shows this many at each end."""


def _picklable(value: BaseException | None) -> BaseException | None:
    """`value` if it survives pickling, else a RuntimeError carrying its type and text."""
    import pickle

    try:
        pickle.dumps(value)
    except Exception:
        return RuntimeError(f"{type(value).__name__}: {value}")
    return value


def _rebuild_execution_error(
    cls: type[KediExecutionError],
    message: str,
    frames: tuple[KediTraceFrame, ...],
    python_traces: tuple[KediPythonTrace, ...],
    original: BaseException | None = None,
) -> KediExecutionError:
    return cls(message, frames=frames, python_traces=python_traces, original=original)


class KediTypeExecutionError(KediExecutionError, TypeError):
    """A value had the wrong type at a checked boundary."""


class KediValueExecutionError(KediExecutionError, ValueError):
    """A value was invalid at a checked boundary."""


class KediKeyExecutionError(KediExecutionError, KeyError):
    """A key lookup failed while running the program."""

    def __str__(self) -> str:
        return redact_text(self.render())


class KediNameError(KediExecutionError, NameError):
    """A name could not be resolved."""


def execution_error_class(kind: type[KediError]) -> type[KediExecutionError]:
    """The `KediExecutionError` class that is also a `kind`, for wrapping a `kind` error.

    A run wraps every error escaping a statement into a `KediExecutionError`
    carrying the Kedi trace. An adapter's error (`ProviderError`,
    `RateLimitError`, ...), a configuration error or a history error stays an
    instance of its own class too, so `except kedi.ProviderError` around
    `program.run_sync(...)` catches it, and the original's attributes
    (`status`, `retryable`, `reason`) read through. The class keeps the name
    `KediExecutionError`; one is made per `kind` and kept.
    """
    made = _EXECUTION_CLASSES.get(kind)
    if made is None:
        try:
            made = type(
                "KediExecutionError",
                (KediExecutionError, kind),
                {
                    "__module__": __name__,
                    "__doc__": f"A run failed with a {kind.__name__} (the error in `original`).",
                    "__init__": _init_execution_error,
                    "__getattr__": _read_through_original,
                    "__reduce__": _reduce_also_a,
                },
            )
        except TypeError:  # a kind whose layout cannot be combined (none of kedi's own)
            made = KediExecutionError
        _EXECUTION_CLASSES[kind] = made
    return made


_EXECUTION_CLASSES: dict[type[KediError], type[KediExecutionError]] = {}


def _init_execution_error(
    self: KediExecutionError,
    message: str,
    *,
    frames: tuple[KediTraceFrame, ...] = (),
    original: BaseException | None = None,
    python_traces: tuple[KediPythonTrace, ...] = (),
) -> None:
    # The kind's own __init__ is skipped: its attributes are the original's.
    message = redact_text(message)
    Exception.__init__(self, message)
    self._keep(message, frames, original, python_traces)


def _read_through_original(self: KediExecutionError, name: str) -> Any:
    original = self.__dict__.get("original")
    if original is None or name.startswith("__"):
        raise AttributeError(name)
    return getattr(original, name)


def _reduce_also_a(self: KediExecutionError) -> tuple[Any, ...]:
    kind = next(base for base in type(self).__bases__ if base is not KediExecutionError)
    return (
        _rebuild_also_a,
        (kind, self.message, self.frames, self.python_traces, _picklable(self.original)),
    )


def _rebuild_also_a(
    kind: type[KediError],
    message: str,
    frames: tuple[KediTraceFrame, ...],
    python_traces: tuple[KediPythonTrace, ...],
    original: BaseException | None,
) -> KediExecutionError:
    return execution_error_class(kind)(
        message, frames=frames, python_traces=python_traces, original=original
    )


class KediPromiseLeak(KediError):
    """An unresolved parallel result was used as a concrete value."""


# --------------------------------------------------------------------------- adapters


class AdapterError(KediError):
    """A model call failed. `partial` holds what completed before the failure."""

    def __init__(self, message: str, *, partial: Any = None) -> None:
        message = redact_text(message)
        super().__init__(message)
        self.message = message
        self.partial = partial

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_adapter_error, (type(self), self.message, self.__dict__.copy()))


def _rebuild_adapter_error(
    cls: type[AdapterError], message: str, state: dict[str, Any]
) -> AdapterError:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


class CapabilityError(AdapterError):
    """The adapter cannot represent the request (checked before any I/O)."""


class OutputValidationError(AdapterError):
    """The model's structured output did not validate, even after retries."""


class ScriptExhaustedError(AdapterError):
    """A `script:` model has no reply left for a call."""


class TurnAbandoned(AdapterError):
    """A scheduled call was not sent because an earlier call on its lane failed."""


class StopRun(AdapterError):
    """Raised by a tool to stop the run deliberately (golem's canceled stage).

    A tool raises `kedi.StopRun(reason)`. The adapter keeps the results of the
    batch recorded before the stop, closes every unanswered call of the batch
    with the interrupted result (stamped), and raises a `StopRun` whose
    `partial` (stage `canceled`) resumes with no repair. `reason` is the
    tool's text.
    """

    def __init__(
        self, reason: str = "", *, partial: Any = None, message: str | None = None
    ) -> None:
        super().__init__(
            message if message is not None else (reason or "a tool stopped the run"),
            partial=partial,
        )
        self.reason = reason


class ProviderError(AdapterError):
    """A request the adapter can represent failed operationally."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retryable: bool = False,
        partial: Any = None,
    ) -> None:
        super().__init__(message, partial=partial)
        self.status = status
        self.retryable = retryable


class AuthenticationError(ProviderError):
    """The provider rejected the credentials (401/403)."""


class ModelNotFoundError(ProviderError):
    """The provider does not know the model (404)."""


class ContextLengthError(ProviderError):
    """The request exceeded the model's context window."""


class HistoryShapeError(ProviderError):
    """The provider rejected the message sequence (tool calls and results unpaired)."""


class RateLimitError(ProviderError):
    """The provider throttled the request (429) and retries ran out."""


# --------------------------------------------------------------------------- history


class HistoryError(KediError, ValueError):
    """Invalid history input (trim/budget bounds, malformed messages)."""


class HistoryProcessingError(HistoryError):
    """A history processor raised, or its input could not be copied."""


class HistoryProcessingValidationError(HistoryError):
    """A history processor returned an edit that breaks the history's invariants."""
