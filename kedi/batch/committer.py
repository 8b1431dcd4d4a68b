"""Group commit: finished rows go to the ledger from one thread, many rows per transaction.

The history store syncs every transaction to disk (SQLite `synchronous=FULL`),
which costs milliseconds. Rows finish far faster than that under
`--parallel 64`, so a row's `record` hands its outcome and conversation to a
writer thread and awaits the commit; the thread writes everything that is
waiting in ONE transaction (each row still commits with its own history),
so one disk sync serves all the rows that finished during the previous one.
A row is reported finished only once its commit returned. The thread owns
its own store connection: a connection carries one transaction at a time.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable

from kedi.batch.ledger import Outcome, StoreLedger
from kedi.history.lanes import Conversation

MAX_GROUP = 512
"""The most rows one transaction writes."""

_Item = tuple[Outcome, Conversation, asyncio.AbstractEventLoop, "asyncio.Future[Outcome]"]


class GroupCommitter:
    """Writes finished rows of one job to the ledger from a thread of its own."""

    def __init__(self, job: str, open_ledger: Callable[[], StoreLedger]) -> None:
        self._job = job
        self._open_ledger = open_ledger
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._opened = threading.Event()
        self._open_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="kedi-batch-ledger", daemon=True)

    def start(self) -> None:
        """Start the thread; raise what opening its ledger raised."""
        self._thread.start()
        self._opened.wait()
        if self._open_error is not None:
            raise self._open_error

    async def record(self, outcome: Outcome, conversation: Conversation) -> Outcome:
        """Commit one row; return its outcome as recorded."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Outcome] = loop.create_future()
        self._queue.put((outcome, conversation, loop, future))
        return await future

    def close(self) -> None:
        """Commit what is waiting, then stop the thread."""
        if self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()

    def _run(self) -> None:
        try:
            ledger = self._open_ledger()
        except BaseException as error:  # handed to start()
            self._open_error = error
            self._opened.set()
            return
        self._opened.set()
        try:
            while True:
                item = self._queue.get()
                if item is None:
                    return
                group = [item]
                stopping = False
                while len(group) < MAX_GROUP:
                    try:
                        following = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if following is None:
                        stopping = True
                        break
                    group.append(following)
                self._commit(ledger, group)
                if stopping:
                    return
        finally:
            ledger.close()

    def _commit(self, ledger: StoreLedger, group: list[_Item]) -> None:
        try:
            recorded = ledger.record_many(self._job, [(outcome, conversation) for outcome, conversation, _, _ in group])
        except BaseException as error:
            for _, _, loop, future in group:
                loop.call_soon_threadsafe(_settle, future, None, error)
            return
        for (_, _, loop, future), outcome in zip(group, recorded, strict=True):
            loop.call_soon_threadsafe(_settle, future, outcome, None)


def _settle(future: asyncio.Future[Outcome], outcome: Outcome | None, error: BaseException | None) -> None:
    if future.done():  # the row was cancelled while its commit ran; the commit stands
        return
    if error is not None:
        future.set_exception(error)
    else:
        assert outcome is not None
        future.set_result(outcome)
