"""Parallel dataflow: scheduled model calls, promises, draining.

With parallelism on, a `>>` / `<<` statement does not wait for its model:
it is scheduled in an anyio task group and its outputs are bound as
`KediPromise`s. A promise is forced where the value is really used (a
substitution, a call argument, a Python read, a return); any other concrete use
of an unresolved promise raises `KediPromiseLeak` instead of silently
stringifying it.

Every scheduled call runs even if nobody reads its result. A body drains its
calls before it returns or lets an error out; the failure of the earliest
call in source order is raised (the one a sequential run would have hit
first), later ones are logged.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any, Literal

import anyio
import anyio.abc

from kedi.errors import KediPromiseLeak

log = logging.getLogger("kedi")


class ScheduledCall:
    """One scheduled model call: a shared future for all of its outputs."""

    __slots__ = ("sequence", "origin", "_done", "value", "error")

    def __init__(self, sequence: int, origin: str) -> None:
        self.sequence = sequence
        self.origin = origin
        self._done = anyio.Event()
        self.value: Any = None
        self.error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def settle(self, value: Any = None, error: BaseException | None = None) -> None:
        self.value = value
        self.error = error
        self._done.set()

    async def wait(self) -> Any:
        """The call's result (raises its error)."""
        await self._done.wait()
        if self.error is not None:
            raise self.error
        return self.value


def _leaking(name: str) -> Callable[..., Any]:
    def method(self: KediPromise, *args: Any, **kwargs: Any) -> Any:
        raise self._leak(name)

    method.__name__ = name
    return method


class KediPromise:
    """The pending value of one output of a scheduled call."""

    __slots__ = ("_call", "_name", "_transform")

    def __init__(
        self, call: ScheduledCall, name: str | None, transform: Callable[[Any], Any] | None = None
    ) -> None:
        object.__setattr__(self, "_call", call)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_transform", transform)

    @property
    def resolved(self) -> bool:
        """Whether the call has finished (successfully or not)."""
        return self._call.done

    async def force(self) -> Any:
        """Wait for the call and return this output's value."""
        value = await self._call.wait()
        if self._name is not None:
            value = value[self._name]
        return self._transform(value) if self._transform else value

    def map(self, function: Callable[[Any], Any]) -> KediPromise:
        """A promise of `function(value)`, computed when forced (uses no worker slot)."""
        previous = self._transform

        def composed(value: Any) -> Any:
            return function(previous(value) if previous else value)

        return KediPromise(self._call, self._name, composed)

    def __repr__(self) -> str:
        state = "resolved" if self._call.done else "pending"
        return f"<KediPromise {self._name or 'reply'} from {self._call.origin} ({state})>"

    def __copy__(self) -> KediPromise:
        return self

    def __deepcopy__(self, memo: Any) -> KediPromise:
        return self

    def _leak(self, operation: str) -> KediPromiseLeak:
        return KediPromiseLeak(
            f"the result `{self._name or 'reply'}` of the model call at {self._call.origin} was used "
            f"({operation}) before it was resolved; read it through a Kedi substitution, a call "
            "argument or a plain Python name so kedi can wait for it, or use kedi.force()"
        )

    def __getattr__(self, name: str) -> Any:
        raise self._leak(f"attribute {name!r}")

    __str__ = _leaking("str")
    __format__ = _leaking("format")
    __bytes__ = _leaking("bytes")
    __bool__ = _leaking("truth test")
    __eq__ = _leaking("comparison")
    __ne__ = _leaking("comparison")
    __lt__ = _leaking("comparison")
    __le__ = _leaking("comparison")
    __gt__ = _leaking("comparison")
    __ge__ = _leaking("comparison")
    __hash__ = _leaking("hashing")
    __len__ = _leaking("len")
    __iter__ = _leaking("iteration")
    __contains__ = _leaking("membership")
    __getitem__ = _leaking("indexing")
    __call__ = _leaking("call")
    __add__ = __radd__ = _leaking("arithmetic")
    __sub__ = __rsub__ = _leaking("arithmetic")
    __mul__ = __rmul__ = _leaking("arithmetic")
    __truediv__ = __rtruediv__ = _leaking("arithmetic")
    __floordiv__ = __rfloordiv__ = _leaking("arithmetic")
    __mod__ = __rmod__ = _leaking("arithmetic")
    __int__ = _leaking("int")
    __float__ = _leaking("float")
    __index__ = _leaking("index")
    __reduce__ = _leaking("pickling")
    __reduce_ex__ = _leaking("pickling")


class Scheduler:
    """The scheduled calls of one body (a procedure invocation or the top level)."""

    def __init__(self, limiter: anyio.CapacityLimiter, *, quiet: bool = False) -> None:
        self.limiter = limiter
        self.quiet = quiet
        """Log nothing: the run's `quiet` option (the raised failure still reaches the caller)."""
        self._group: anyio.abc.TaskGroup | None = None
        self._calls: list[ScheduledCall] = []

    async def __aenter__(self) -> Scheduler:
        # The task group opens with the first spawned call: most bodies schedule
        # none, and an open group makes every await under it cost more per level
        # of nested procedure calls.
        return self

    async def __aexit__(
        self, exc_type: Any, exc: BaseException | None, tb: Any
    ) -> Literal[False]:  # never swallows: returns False or raises the first call failure
        if self._group is None:
            return False
        # Drain: every scheduled call runs to completion before the scope exits.
        await self._group.__aexit__(None, None, None)
        if exc is not None and not isinstance(exc, Exception):
            return False  # cancellation and interrupts pass through untouched
        failures = sorted((c for c in self._calls if c.error is not None), key=lambda c: c.sequence)
        if not failures:
            return False
        # Every scheduled call precedes (in source order) whatever the main flow
        # was doing when it failed, so the earliest call failure is the one a
        # sequential run would have raised.
        first = failures[0].error
        for other in failures[1:]:
            if other.error is not None and other.error is not first:
                self._log_once(other.error, "kedi: a concurrent model call also failed: %s")
        # The main flow often failed by awaiting a failed call's promise: that is the same failure.
        known = {id(call.error) for call in failures}
        if (
            exc is not None
            and id(exc) not in known
            and id(getattr(exc, "original", None)) not in known
        ):
            self._log_once(exc, "kedi: %s")
        raise first  # type: ignore[misc]  # error is an Exception here; typed Any | None

    def _log_once(self, error: BaseException, template: str) -> None:
        """Log `error` unless the run is quiet or it was logged already (by an inner body's scheduler)."""
        if self.quiet or getattr(error, "_kedi_logged", False):
            return
        with contextlib.suppress(AttributeError):
            error._kedi_logged = True  # type: ignore[attr-defined]  # a marker attribute on the exception object
        log.warning(template, error)

    async def spawn(
        self, sequence: int, origin: str, work: Callable[[], Awaitable[Any]]
    ) -> ScheduledCall:
        """Start `work` now; return the call whose result its promises share."""
        if self._group is None:
            self._group = anyio.create_task_group()
            await self._group.__aenter__()
        call = ScheduledCall(sequence, origin)
        self._calls.append(call)

        async def run() -> None:
            try:
                call.settle(await work())
            except Exception as error:
                call.settle(error=error)

        self._group.start_soon(run)
        return call
