"""The event loop behind kedi's synchronous entry points: one per thread, kept open.

`Program.run_sync`, a sync `@kedi.query` / `@kedi.bind` function, a
procedure called from plain Python and `Program.procedures` all run their
coroutine to completion here. Decision: they share one event loop per thread,
made on first use and kept open between calls (as Pydantic AI's `run_sync`
does), instead of a new loop per call. Framework clients cache async HTTP
clients bound to the loop that first used them (langchain-openai keeps one
per base URL for the whole process); with a loop per call, the second
`run_sync` on the same chat model failed with "Event loop is closed".
A kept loop also keeps those clients' connections alive from one call to
the next.

The loop is closed when its thread's storage goes (at the end of the
thread, or at interpreter exit for the main thread), after the cleanup
`asyncio.run` does: tasks still pending are cancelled and awaited, and open
async generators closed. An HTTP stream that kedi stops reading at its
`data: [DONE]` leaves httpx's inner body generators to the garbage collector,
whose hook schedules their `aclose()` as tasks on this loop; closed without
running them, asyncio printed "Task was destroyed but it is pending!" after
every `kedi run --stream`.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import TypeVar

T = TypeVar("T")


class _ThreadLoop:
    """Owns one thread's loop; the loop closes when this object goes."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        weakref.finalize(self, _close, self.loop)


def _close(loop: asyncio.AbstractEventLoop) -> None:
    """Close `loop` as `asyncio.run` closes its own: pending tasks and async generators first."""
    if loop.is_closed() or loop.is_running():
        return
    try:
        # RuntimeError: the finalizer runs on a thread running another loop; then only close.
        with suppress(RuntimeError):
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()


class _PerThread(threading.local):
    owner: _ThreadLoop | None = None


_per_thread = _PerThread()


def thread_loop() -> asyncio.AbstractEventLoop:
    """This thread's kedi event loop (made on first use)."""
    owner = _per_thread.owner
    if owner is None or owner.loop.is_closed():
        owner = _per_thread.owner = _ThreadLoop()
    return owner.loop


def run_on_thread_loop(start: Callable[[], Awaitable[T]]) -> T:
    """Run `start()` to completion on this thread's kedi loop and return its result.

    When the wait is interrupted (a `KeyboardInterrupt` raised while the loop
    runs), the task is cancelled and its cleanup (`finally` blocks, closing
    connections) runs before the exception goes on.
    """

    async def main() -> T:
        return await start()

    loop = thread_loop()
    task = loop.create_task(main())
    try:
        return loop.run_until_complete(task)
    except BaseException:
        if not task.done():
            task.cancel()
            with suppress(BaseException):  # the first exception is the one to report
                loop.run_until_complete(task)
        raise


__all__ = ["run_on_thread_loop", "thread_loop"]
