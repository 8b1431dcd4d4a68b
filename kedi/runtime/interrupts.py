"""Ctrl-C during a run: stop within a second, at a safe point, and say where.

`run_interruptibly` runs a program's coroutine on the thread's kedi event loop
(`kedi.runtime.loops`) with its own SIGINT handler (installed only on the main thread,
and not when the process ignores SIGINT: see below). The first Ctrl-C

- raises `KeyboardInterrupt` at once when embedded Python is running on the
  loop's thread (`python.running`), which stops `time.sleep(30)` or a long
  loop where it is, as Python itself would;
- otherwise sets `requested`, which the interpreter reads between statements,
  and cancels the run's task, which stops a model call while it waits.

Neither can land inside kedi's own bookkeeping (a lane commit, a transcript
write), so history never holds half a turn. The run then ends with
`KediInterrupted`, carrying the innermost statement that was running. A
second Ctrl-C ends the process at once with status 130. (Python runs signal
handlers between bytecodes, so a single C call that holds the interpreter,
such as `sum(range(10**12))`, finishes before either takes effect.)

A process that ignores SIGINT (started under `nohup`, or as a background
job of a non-interactive shell, or that set `SIG_IGN` itself) keeps ignoring
it during a run, as `kedi batch` does and Unix programs do: such a run is
stopped with SIGTERM or a kill.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any, TypeVar

from kedi.runtime.loops import run_on_thread_loop
from kedi.source import Span

T = TypeVar("T")

EXIT_STATUS = 130
"""The exit status of a run stopped by Ctrl-C (128 + SIGINT), as shells use."""


class _PythonState(threading.local):
    running = 0
    """How many embedded Python evaluations this thread is inside (the class value is every thread's start)."""


python = _PythonState()
"""Per thread: whether embedded Python runs here now (the bridge counts it up and down)."""

requested = False
"""Set by the first Ctrl-C of a run; the interpreter stops at the next statement."""

_location: Span | None = None
_loop: asyncio.AbstractEventLoop | None = None
_task: asyncio.Task[Any] | None = None


class KediInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C; `location` is the statement that was running (None if unknown)."""

    def __init__(self, location: Span | None) -> None:
        super().__init__(location)
        self.location = location

    def describe(self) -> str:
        """The one line the command line prints: `kedi: interrupted at file:line`."""
        if self.location is None:
            return "kedi: interrupted"
        return f"kedi: interrupted at {self.location.path}:{self.location.line}"


def locate(span: Span | None) -> None:
    """Record where an interrupt unwound from; the first (innermost) call wins."""
    global _location
    if requested and _location is None and span is not None:
        _location = span


def run_interruptibly(start: Callable[[], Awaitable[T]]) -> T:
    """Run `start()` on the thread's kedi loop; a Ctrl-C ends it with `KediInterrupted`.

    Off the main thread (where Python delivers no signals) no handler is
    installed, nor when SIGINT is ignored (`SIG_IGN`): the run keeps ignoring it.
    """
    if threading.current_thread() is not threading.main_thread():
        return run_on_thread_loop(start)
    global requested, _location
    requested, _location = False, None
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        return run_on_thread_loop(start)
    previous = signal.signal(signal.SIGINT, _on_sigint)
    try:
        return run_on_thread_loop(lambda: _main(start))
    except BaseException as exc:
        if requested or isinstance(exc, KeyboardInterrupt):
            requested = True
            raise KediInterrupted(_location) from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)
        _forget_loop()


async def _main(start: Callable[[], Awaitable[T]]) -> T:
    global _loop, _task
    _loop, _task = asyncio.get_running_loop(), asyncio.current_task()
    return await start()


def _forget_loop() -> None:
    global _loop, _task
    _loop = _task = None


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global requested
    if requested:
        os.write(2, b"kedi: interrupted\n")
        os._exit(EXIT_STATUS)
    requested = True
    if python.running:
        raise KeyboardInterrupt
    loop, task = _loop, _task
    if loop is not None and task is not None:
        loop.call_soon_threadsafe(task.cancel)
