"""The Ray engine (`--engine ray`, extra `kedi[ray]`): rows on async Ray actors.

Each `RowActor` holds its own `RowRunner` (the compiled program, one shared
adapter, a ledger connection with its own group committer) and runs many
rows at once on its event loop. A remote call costs about half a millisecond
of CPU on each side, a quarter of running a row, so nothing here makes one
per row:

- Rows go to the actors in chunks (the rows the driver released in one turn
  of its event loop, spread over the least-loaded actors; `RowActor.take`),
  and every outcome of an actor comes back on one stream for the actor's
  life (`RowActor.outcomes`, a Ray streaming generator), one message for the
  rows that finished together (a group commit), whichever chunks they came in.
- Each actor runs its share of the job's concurrency (`actor_share`); the
  driver keeps `QUEUED_SHARE` more rows queued on the actors, so an actor's
  slot is refilled from its queue when a row ends, not after a round trip
  through the driver (which made the rows wait with both cores half idle).
- One `LimiterActor` holds the job's `RateLimiter`; each actor talks to it
  through a `LeasedGate`. Without `--rpm`/`--tpm` a request does not ask it
  at all; with them, the requests waiting in an actor book their slots in one
  call (a block of at most `LEASE_SECONDS` of the job's rate, so no actor
  holds much of the timeline). Successes and tokens are reported, and 429
  pauses learnt, every `SYNC_INTERVAL`; a 429 pauses its own actor at once.

The driver (`run_batch`, as for the local engine) keeps the order, the
window (the job's concurrency plus the queue) and RESULTS; it reads the
limiter's concurrency twice a second, the actors every `SYNC_INTERVAL`.

An actor that dies mid-row (killed, node lost) is replaced and its rows are
sent again with `recorded_ok`: a row whose outcome was committed before the
actor died returns that outcome instead of running again, and a row that
was not committed runs once more. Ray is imported only here, only when the
engine starts.
"""

from __future__ import annotations

import asyncio
import math
import os
import pickle
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import anyio

from kedi.batch.inputs import Row
from kedi.batch.ledger import Outcome
from kedi.batch.limits import DEFAULT_PAUSE, MAX_PAUSE, LimiterState, RateLimiter
from kedi.batch.worker import BatchSpec, RowRunner
from kedi.errors import ExtraNotInstalledError, KediError

POLL_INTERVAL = 0.5
"""Seconds between the driver's reads of the job-wide limiter state."""
SYNC_INTERVAL = 0.2
"""Seconds between an actor's reports to the limiter (successes, tokens) and its reads of a pause."""
LEASE_SECONDS = 0.5
"""The most of the job's request timeline (at `--rpm`) one actor books in one call."""
QUEUED_SHARE = 0.5
"""Rows the driver keeps queued on the actors beyond the job's concurrency, as a share of it.

An actor starts a queued row the moment one of its own finishes, so its
slots never wait for the round trip to the driver and back."""
MAX_ROW_ATTEMPTS = 5
"""How many actors one row may outlive before the job gives up on it."""


class LimiterActor:
    """The job's one `RateLimiter`, asked by every actor (a Ray actor class once wrapped)."""

    def __init__(self, rpm: float | None, tpm: float | None, parallel: int) -> None:
        self._limiter = RateLimiter(rpm=rpm, tpm=tpm, parallel=parallel)

    def lease(self, count: int) -> list[float]:
        """Book `count` requests; the seconds each must wait before it is sent."""
        return [self._limiter.reserve() for _ in range(count)]

    def report(self, successes: int, tokens: int) -> LimiterState:
        """Take an actor's successful requests and tokens since its last report; the state now."""
        for _ in range(successes):
            self._limiter.succeeded()
        self._limiter.charge(tokens)
        return self._limiter.state()

    def throttled(self, retry_after: float | None) -> None:
        self._limiter.throttled(retry_after)

    def state(self) -> LimiterState:
        return self._limiter.state()


class LeasedGate:
    """A `Gate` over the job's `LimiterActor` that asks it in blocks, not once per request.

    `books` says every request needs a booked slot (`--rpm` or `--tpm` is
    set): the requests waiting for one when a lease is asked get theirs in
    that one call, at most `LEASE_SECONDS` of the job's rate at a time. A
    slot is booked only for a request already waiting, and the request waits
    for it as for a single reservation, so the job-wide spacing holds. Without
    limits a request only waits out a pause: one of this actor's 429s at once,
    another actor's once the next report (every `SYNC_INTERVAL`) brings it.
    """

    def __init__(self, limiter: Any, *, rpm: float | None, books: bool) -> None:
        self._limiter = limiter
        self._books = books
        self._block = max(1, int(rpm * LEASE_SECONDS / 60)) if rpm else None
        self._paused_until = 0.0
        self._waiting: list[asyncio.Future[float]] = []
        self._leasing = False
        self._successes = 0
        self._tokens = 0
        self._syncing: asyncio.Task[None] | None = None
        self.concurrency: int | None = None
        """The job's concurrency at the last report (None before the first)."""

    def start(self) -> None:
        """Start reporting to the limiter (from the actor's event loop; idempotent)."""
        if self._syncing is None:
            self._syncing = asyncio.ensure_future(self._sync())

    async def before_request(self) -> None:
        send_at = await self._slot() if self._books else 0.0
        delay = max(send_at, self._paused_until) - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)

    def charge(self, tokens: int) -> None:
        self._tokens += tokens

    def throttled(self, retry_after: float | None) -> None:
        pause = DEFAULT_PAUSE if retry_after is None else min(max(retry_after, 0.0), MAX_PAUSE)
        self._paused_until = max(self._paused_until, time.monotonic() + pause)
        self._limiter.throttled.remote(retry_after)

    def succeeded(self) -> None:
        self._successes += 1

    async def _slot(self) -> float:
        """This actor's clock time at which the request may be sent (booked with others waiting)."""
        slot: asyncio.Future[float] = asyncio.get_running_loop().create_future()
        self._waiting.append(slot)
        if not self._leasing:
            self._leasing = True
            asyncio.ensure_future(self._lease())
        return await slot

    async def _lease(self) -> None:
        await asyncio.sleep(0)  # the requests of this turn of the event loop share the call
        try:
            while self._waiting:
                size = len(self._waiting) if self._block is None else self._block
                asking, self._waiting = self._waiting[:size], self._waiting[size:]
                try:
                    delays = await self._limiter.lease.remote(len(asking))
                except Exception as error:  # the limiter is gone: the requests say so
                    for slot in asking:
                        if not slot.done():
                            slot.set_exception(error)
                    continue
                # the delays count from the limiter's reply: sending late, never early
                now = time.monotonic()
                for slot, delay in zip(asking, delays, strict=True):
                    if not slot.done():  # a request cancelled while waiting leaves its slot unused
                        slot.set_result(now + delay)
        finally:
            self._leasing = False

    async def _sync(self) -> None:
        while True:
            successes, tokens = self._successes, self._tokens
            self._successes = self._tokens = 0
            with suppress(Exception):  # a lost report only delays the recovery of concurrency
                state: LimiterState = await self._limiter.report.remote(successes, tokens)
                self.concurrency = state.concurrency
                self._paused_until = max(self._paused_until, time.monotonic() + state.paused_for)
            await asyncio.sleep(SYNC_INTERVAL)


def actor_share(concurrency: int, index: int, actors: int) -> int:
    """How many of the job's `concurrency` rows actor `index` of `actors` runs at once (at least 1)."""
    return max(1, concurrency // actors + (1 if index < concurrency % actors else 0))


@dataclass(frozen=True, slots=True)
class RowFailed:
    """A row whose run raised (its ledger write failed): the driver's `run_row` raises `error`."""

    position: int
    error: BaseException


class RowActor:
    """Runs one job's rows (a Ray async actor class once wrapped).

    The driver hands it rows with `take` (a chunk per call, returning at
    once) and reads every outcome from one `outcomes` stream for the actor's
    life, a message per batch of rows that finished together (a group
    commit). The actor runs at most its share of the job's concurrency at
    once (`actor_share`, following the limiter's concurrency from its
    reports); rows beyond that wait in line, in the order they came.
    """

    def __init__(
        self,
        spec: BatchSpec,
        limiter: Any,
        parallel: int,
        rpm: float | None,
        tpm: float | None,
        place: tuple[int, int] = (0, 1),
    ) -> None:
        self._place = place
        self._gate = LeasedGate(limiter, rpm=rpm, books=bool(rpm or tpm))
        self.share = actor_share(parallel, *place)
        self._slots = anyio.CapacityLimiter(self.share)
        self._running: set[asyncio.Task[Outcome | RowFailed]] = set()
        self._finished: list[Outcome | RowFailed] = []
        self._woken: asyncio.Event | None = None
        self._runner = RowRunner(spec, self._gate, parallel=self.share)

    async def ready(self) -> int:
        return os.getpid()

    async def take(self, rows: list[tuple[Row, bool]]) -> None:
        """Start the rows (each with its `recorded_ok`); their outcomes come out of `outcomes`."""
        self._gate.start()
        for row, recorded_ok in rows:
            task = asyncio.ensure_future(self._run(row, recorded_ok))
            self._running.add(task)
            task.add_done_callback(self._done)

    async def outcomes(self) -> AsyncIterator[list[Outcome | RowFailed]]:
        """Every row's outcome (or failure) as it finishes, those finished together in one message."""
        self._woken = asyncio.Event()
        while True:
            if not self._finished:
                self._woken.clear()
                await self._woken.wait()
            finished, self._finished = self._finished, []
            yield finished

    def _done(self, task: asyncio.Task[Outcome | RowFailed]) -> None:
        self._running.discard(task)
        if task.cancelled():  # the actor is going away
            return
        self._finished.append(task.result())
        if self._woken is not None:
            self._woken.set()

    async def _run(self, row: Row, recorded_ok: bool) -> Outcome | RowFailed:
        if self._gate.concurrency is not None:
            share = actor_share(self._gate.concurrency, *self._place)
            if share != self._slots.total_tokens:
                self._slots.total_tokens = share
        async with self._slots:
            try:
                return await self._runner.run(row, recorded_ok=recorded_ok)
            except Exception as error:  # its ledger write failed: the driver's run_row raises it
                return RowFailed(row.position, _sendable(error))


def _sendable(error: Exception) -> Exception:
    """`error`, or a `KediError` saying the same when it cannot be pickled to the driver."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # any pickling failure: the message still reaches the driver
        return KediError(f"{type(error).__name__}: {error}")
    return error


def import_ray() -> Any:
    """Ray, or a clear error naming the extra to install."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # never phone home
    try:
        import ray
    except ImportError:
        raise ExtraNotInstalledError("ray", "ray") from None
    return ray


def init_ray(address: str) -> bool:
    """Connect to (or, for `local`, start) a Ray cluster; True when this call started it."""
    if address == "local":
        # Ray resolves 127.0.0.1 to the machine's network address unless told this
        # is a single-machine cluster (read when Ray is imported): a private
        # cluster stays on the loopback address.
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    ray = import_ray()
    if ray.is_initialized():
        return False
    options: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "configure_logging": False,
    }
    if address == "local":
        # A private cluster on the loopback address, as many CPUs as this machine has.
        options.update(address="local", _node_ip_address="127.0.0.1")
    else:
        options.update(address=address)
    try:
        ray.init(**options)
    except (ConnectionError, RuntimeError, ValueError) as error:
        raise KediError(f"cannot reach the Ray cluster at {address!r}: {error}") from None
    return True


@dataclass(slots=True)
class _Sent:
    """A row the driver handed to an actor, and the `run_row` call waiting for its outcome."""

    row: Row
    outcome: asyncio.Future[Outcome]
    attempts: int = 0
    """Actors that died running it so far."""


@dataclass(slots=True, eq=False)
class _Worker:
    """One live actor, the rows it holds (by input position) and the task reading its outcomes.

    The reader starts with the actor's first rows, so an actor that dies on
    arrival (its store unreachable, say) is replaced only to run rows, each
    of which gives up after `MAX_ROW_ATTEMPTS` actors.
    """

    actor: Any
    index: int
    running: dict[int, _Sent] = field(default_factory=dict)
    reader: asyncio.Task[None] | None = None


class RayEngine:
    """Rows on `actors` Ray actors sharing one job-wide limiter."""

    def __init__(
        self,
        spec: BatchSpec,
        *,
        address: str,
        actors: int,
        rpm: float | None,
        tpm: float | None,
        parallel: int,
    ) -> None:
        self._spec = spec
        self._address = address
        self._count = actors
        self._rpm, self._tpm, self._parallel = rpm, tpm, parallel
        self._workers: list[_Worker] = []
        self._outbox: list[_Sent] = []
        self._sends: set[asyncio.Task[None]] = set()
        self._limiter: Any = None
        self._state = LimiterState(
            concurrency=parallel, throttled=0, paused_for=0.0, token_debt=0.0
        )
        self._ray: Any = None

    @asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        started = init_ray(self._address)
        ray = self._ray = import_ray()
        try:
            self._limiter = ray.remote(num_cpus=0)(LimiterActor).remote(
                self._rpm, self._tpm, self._parallel
            )
            self._workers = [self._new_worker(index) for index in range(self._count)]
            await asyncio.gather(*(worker.actor.ready.remote() for worker in self._workers))
            poller = asyncio.ensure_future(self._poll())
            try:
                yield
            finally:
                tasks = [poller, *self._sends, *(w.reader for w in self._workers if w.reader)]
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            for actor in [*(worker.actor for worker in self._workers), self._limiter]:
                if actor is not None:
                    ray.kill(actor)
            if started:
                ray.shutdown()

    def _new_worker(self, index: int) -> _Worker:
        # `take` returns at once and `outcomes` runs for the actor's life: a few calls at a time.
        cls = self._ray.remote(num_cpus=0, max_concurrency=8, scheduling_strategy="SPREAD")(
            RowActor
        )
        actor = cls.remote(
            self._spec, self._limiter, self._parallel, self._rpm, self._tpm, (index, self._count)
        )
        return _Worker(actor, index)

    @staticmethod
    def _window(concurrency: int) -> int:
        """Rows the driver may have on the actors: the job's concurrency and a queue beyond it."""
        return concurrency + math.ceil(concurrency * QUEUED_SHARE)

    async def _poll(self) -> None:
        while True:
            with suppress(Exception):  # a slow poll only delays the display and the window
                self._state = await self._limiter.state.remote()
            await asyncio.sleep(POLL_INTERVAL)

    async def run_row(self, row: Row) -> Outcome:
        sent = _Sent(row, asyncio.get_running_loop().create_future())
        self._send(sent)
        return await sent.outcome

    def _send(self, sent: _Sent) -> None:
        """Queue a row; the rows queued in one turn of the event loop leave together."""
        if not self._outbox:
            asyncio.get_running_loop().call_soon(self._dispatch)
        self._outbox.append(sent)

    def _dispatch(self) -> None:
        """Spread the queued rows over the least-loaded actors, one chunk (one call) per actor."""
        queued, self._outbox = self._outbox, []
        chunks: dict[int, list[_Sent]] = {}
        for sent in queued:
            if sent.outcome.done():  # its run_row was cancelled before it left
                continue
            worker = min(self._workers, key=lambda w: len(w.running))
            if worker.reader is None:  # from its first rows on (see _Worker)
                worker.reader = asyncio.ensure_future(self._read(worker))
            worker.running[sent.row.position] = sent
            chunks.setdefault(worker.index, []).append(sent)
        for worker in self._workers:
            if worker.index in chunks:
                task = asyncio.ensure_future(self._take(worker, chunks[worker.index]))
                self._sends.add(task)
                task.add_done_callback(self._sends.discard)

    async def _take(self, worker: _Worker, chunk: list[_Sent]) -> None:
        try:
            await worker.actor.take.remote([(sent.row, sent.attempts > 0) for sent in chunk])
        except self._ray.exceptions.RayActorError:
            pass  # its reader sees the actor die and sends its rows again
        except Exception as error:  # the call itself failed: its rows say why
            for sent in chunk:
                worker.running.pop(sent.row.position, None)
                if not sent.outcome.done():
                    sent.outcome.set_exception(error)

    async def _read(self, worker: _Worker) -> None:
        """Hand each outcome the actor streams back to its row; replace the actor if it dies."""
        try:
            async for reply in worker.actor.outcomes.remote():
                for finished in await reply:
                    sent = worker.running.pop(finished.position)
                    if sent.outcome.done():
                        continue
                    if isinstance(finished, RowFailed):
                        sent.outcome.set_exception(finished.error)
                    else:
                        sent.outcome.set_result(finished)
        except self._ray.exceptions.RayActorError:
            pass
        except Exception as error:  # the stream broke otherwise: its rows say why
            self._replace(worker)
            for sent in worker.running.values():
                if not sent.outcome.done():
                    sent.outcome.set_exception(error)
            return
        # the actor died (or its stream ended, which only its end does): its rows go again
        self._replace(worker)
        for sent in worker.running.values():
            self._retry(sent)

    def _retry(self, sent: _Sent) -> None:
        """Send a row whose actor died again (`recorded_ok`), unless it outlived too many."""
        if sent.outcome.done():
            return
        sent.attempts += 1
        if sent.attempts >= MAX_ROW_ATTEMPTS:
            sent.outcome.set_exception(
                KediError(
                    f"row {sent.row.key!r}: {MAX_ROW_ATTEMPTS} Ray actors died running it; giving up"
                )
            )
            return
        self._send(sent)

    def _replace(self, dead: _Worker) -> None:
        if dead in self._workers:
            self._workers[self._workers.index(dead)] = self._new_worker(dead.index)
            with suppress(Exception):  # it may be gone already
                self._ray.kill(dead.actor)

    def concurrency(self) -> int:
        return self._window(self._state.concurrency)

    def limits(self) -> LimiterState | None:
        return self._state

    @property
    def actors(self) -> list[Any]:
        """The live actors (tests kill one mid-row)."""
        return [worker.actor for worker in self._workers]
