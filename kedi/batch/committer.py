"""Group commit: a batch's store writes go through one thread, many per transaction.

The history store syncs every transaction to disk (SQLite `synchronous=FULL`),
which costs milliseconds. Rows write far more often than that under
`--parallel 64` (each model call's turn, each finished row's outcome), so a
row hands each write to a writer thread and awaits its commit; the thread
runs everything that is waiting in ONE transaction, so one disk sync serves
all the writes that arrived during the previous one, and the event loop
never waits on the disk. A write is reported done only once its transaction
committed. The thread owns its own store connection: a connection carries
one transaction at a time.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any

from kedi.history.store.base import Store, StoreTransaction

MAX_GROUP = 512
"""The most writes one transaction holds."""

Write = Callable[[StoreTransaction], Any]
"""One write: statements run in the group's transaction; its return value is the awaited result."""

_Item = tuple[Write, asyncio.AbstractEventLoop | None, "asyncio.Future[Any] | None"]


class GroupCommitter:
    """Runs the writes of one job's rows from a thread of its own, a group per transaction."""

    def __init__(self, open_store: Callable[[], Store]) -> None:
        self._open_store = open_store
        self._queue: queue.SimpleQueue[list[_Item] | None] = queue.SimpleQueue()
        self._gathered: list[_Item] = []
        self._opened = threading.Event()
        self._open_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kedi-batch-ledger", daemon=True)

    def start(self) -> None:
        """Start the thread; raise what opening its store raised."""
        self._thread.start()
        self._opened.wait()
        if self._open_error is not None:
            raise self._open_error

    async def write(self, write: Write) -> Any:
        """Run `write` in the next group's transaction; return its result once committed."""
        return await self.submit(write)

    def submit(self, write: Write) -> asyncio.Future[Any]:
        """Queue `write` for the next group's transaction; the future has its result once committed.

        Writes run in the order they were submitted. The writes of one turn
        of the event loop reach the thread together (one hand-off, one
        wake-up), however many rows asked.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if not self._gathered:
            loop.call_soon(self._hand_over)
        self._gathered.append((write, loop, future))
        return future

    def _hand_over(self) -> None:
        gathered, self._gathered = self._gathered, []
        self._queue.put(gathered)

    def write_later(self, write: Write) -> None:
        """Queue `write` without waiting for it (a cancelled row's last word; `close` commits it)."""
        self._queue.put([(write, None, None)])

    def close(self) -> None:
        """Commit what is waiting, then stop the thread."""
        if self._gathered:  # writes of rows cancelled before their hand-over
            self._hand_over()
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        try:
            store = self._open_store()
        except BaseException as error:  # handed to start()
            self._open_error = error
            self._opened.set()
            return
        self._opened.set()
        try:
            while True:
                items = self._queue.get()
                if items is None:
                    return
                group = list(items)
                stopping = False
                while len(group) < MAX_GROUP:
                    try:
                        following = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if following is None:
                        stopping = True
                        break
                    group.extend(following)
                self._commit(store, group)
                if stopping:
                    return
        finally:
            store.close()

    def _commit(self, store: Store, group: list[_Item]) -> None:
        outcomes: list[tuple[Any, BaseException | None]]
        try:
            with store.transaction() as tx:
                outcomes = [(write(tx), None) for write, _, _ in group]
        except BaseException as failure:
            outcomes = [(None, failure)] * len(group)
        # one wake-up of each waiting event loop for the whole group
        settled: dict[
            asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Any, BaseException | None]]
        ] = {}
        for (_, loop, future), (result, error) in zip(group, outcomes, strict=True):
            if loop is not None and future is not None:
                settled.setdefault(loop, []).append((future, result, error))
        for loop, futures in settled.items():
            loop.call_soon_threadsafe(_settle, futures)


def _settle(futures: list[tuple[asyncio.Future[Any], Any, BaseException | None]]) -> None:
    for future, result, error in futures:
        if future.done():  # the row was cancelled while its commit ran; the commit stands
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
