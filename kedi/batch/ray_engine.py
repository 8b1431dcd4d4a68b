"""The Ray engine (`--engine ray`, extra `kedi[ray]`): rows on async Ray actors.

Each `RowActor` holds its own `RowRunner` (the compiled program, one shared
adapter, a ledger connection) and runs many rows at once on its event loop.
One `LimiterActor` holds the job's `RateLimiter`: every actor asks it before
each request, so the rate limits and the 429 pause are job-wide, on one
machine or many. The driver (`run_batch`, as for the local engine) keeps
the order, the window and RESULTS; it reads the limiter's concurrency twice
a second.

An actor that dies mid-row (killed, node lost) is replaced and its rows are
sent again with `recorded_ok`: a row whose outcome was committed before the
actor died returns that outcome instead of running again, and a row that
was not committed runs once more. Ray is imported only here, only when the
engine starts.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

from kedi.batch.inputs import Row
from kedi.batch.ledger import Outcome
from kedi.batch.limits import LimiterState, RateLimiter
from kedi.batch.worker import BatchSpec, RowRunner
from kedi.errors import ExtraNotInstalledError, KediError

POLL_INTERVAL = 0.5
"""Seconds between the driver's reads of the job-wide limiter state."""
MAX_ROW_ATTEMPTS = 5
"""How many actors one row may outlive before the job gives up on it."""


class LimiterActor:
    """The job's one `RateLimiter`, asked by every actor (a Ray actor class once wrapped)."""

    def __init__(self, rpm: float | None, tpm: float | None, parallel: int) -> None:
        self._limiter = RateLimiter(rpm=rpm, tpm=tpm, parallel=parallel)

    def reserve(self) -> float:
        return self._limiter.reserve()

    def charge(self, tokens: int) -> None:
        self._limiter.charge(tokens)

    def throttled(self, retry_after: float | None) -> None:
        self._limiter.throttled(retry_after)

    def succeeded(self) -> None:
        self._limiter.succeeded()

    def state(self) -> LimiterState:
        return self._limiter.state()


class RayGate:
    """A `Gate` whose limiter is the job's `LimiterActor`; reports are fire-and-forget."""

    def __init__(self, limiter: Any) -> None:
        self._limiter = limiter

    async def before_request(self) -> None:
        delay = await self._limiter.reserve.remote()
        if delay > 0:
            await asyncio.sleep(delay)

    def charge(self, tokens: int) -> None:
        self._limiter.charge.remote(tokens)

    def throttled(self, retry_after: float | None) -> None:
        self._limiter.throttled.remote(retry_after)

    def succeeded(self) -> None:
        self._limiter.succeeded.remote()


class RowActor:
    """Runs rows of one job (a Ray async actor class once wrapped)."""

    def __init__(self, spec: BatchSpec, limiter: Any, parallel: int) -> None:
        self._runner = RowRunner(spec, RayGate(limiter), parallel=parallel)

    async def ready(self) -> int:
        return os.getpid()

    async def run(self, row: Row, recorded_ok: bool) -> Outcome:
        return await self._runner.run(row, recorded_ok=recorded_ok)


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
        self._actors: list[Any] = []
        self._load: dict[int, int] = {}
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
            self._actors = [self._new_actor() for _ in range(self._count)]
            await asyncio.gather(*(actor.ready.remote() for actor in self._actors))
            poller = asyncio.ensure_future(self._poll())
            try:
                yield
            finally:
                poller.cancel()
                with suppress(asyncio.CancelledError):
                    await poller
        finally:
            for actor in [*self._actors, self._limiter]:
                if actor is not None:
                    ray.kill(actor)
            if started:
                ray.shutdown()

    def _new_actor(self) -> Any:
        per_actor = max(1, -(-self._parallel // self._count))
        cls = self._ray.remote(num_cpus=0, max_concurrency=per_actor, scheduling_strategy="SPREAD")(
            RowActor
        )
        actor = cls.remote(self._spec, self._limiter, per_actor)
        self._load[id(actor)] = 0
        return actor

    async def _poll(self) -> None:
        while True:
            with suppress(Exception):  # a slow poll only delays the display and the window
                self._state = await self._limiter.state.remote()
            await asyncio.sleep(POLL_INTERVAL)

    async def run_row(self, row: Row) -> Outcome:
        ray = self._ray
        for attempt in range(MAX_ROW_ATTEMPTS):
            actor = min(self._actors, key=lambda a: self._load[id(a)])
            self._load[id(actor)] += 1
            try:
                return await actor.run.remote(row, attempt > 0)
            except ray.exceptions.RayActorError:
                self._replace(actor)
            finally:
                self._load[id(actor)] = self._load.get(id(actor), 1) - 1
        raise KediError(
            f"row {row.key!r}: {MAX_ROW_ATTEMPTS} Ray actors died running it; giving up"
        )

    def _replace(self, dead: Any) -> None:
        if dead in self._actors:
            self._actors[self._actors.index(dead)] = self._new_actor()
            self._load.pop(id(dead), None)

    def concurrency(self) -> int:
        return self._state.concurrency

    def limits(self) -> LimiterState | None:
        return self._state

    @property
    def actors(self) -> list[Any]:
        """The live actors (tests kill one mid-row)."""
        return list(self._actors)
