"""The Ray engine's remote calls, counted in-process: rows go in chunks, the limiter is asked in leases.

Ray's own start-up takes half a minute here, so these tests run the
engine's driver and gate against stand-ins for Ray's actor handles (each
`.remote(...)` call is recorded and answered in this process); the real
cluster runs in `test_ray.py`.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from kedi.batch import ray_engine
from kedi.batch.inputs import Row
from kedi.batch.ledger import Outcome
from kedi.batch.ray_engine import LeasedGate, LimiterActor, RayEngine
from kedi.batch.worker import BatchSpec
from tests.batch.helpers import max_in_window


class ActorDied(Exception):
    """Stands for `ray.exceptions.RayActorError`."""


class Handle:
    """An actor handle whose method calls (`handle.method.remote(...)`) run here and are recorded."""

    def __init__(self, instance: Any) -> None:
        self.instance = instance
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.dead = False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.instance, name)
        handle = self

        class Method:
            def remote(self, *args: Any) -> Any:
                handle.calls.append((name, args))
                if inspect.isasyncgenfunction(method):
                    return handle._stream(method(*args))
                future = asyncio.get_running_loop().create_future()
                result = method(*args)
                if inspect.iscoroutine(result):
                    return asyncio.ensure_future(result)
                future.set_result(result)
                return future

        return Method()

    async def _stream(self, replies: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for reply in replies:
            if self.dead:
                raise ActorDied("the actor died")
            done = asyncio.get_running_loop().create_future()
            done.set_result(reply)
            yield done


class FakeRay:
    """What the engine uses of the `ray` module: `remote`, `kill`, `exceptions.RayActorError`."""

    class exceptions:  # noqa: N801 - the module's attribute name
        RayActorError = ActorDied

    def __init__(self, row_actor: type) -> None:
        self.row_actor = row_actor
        self.handles: list[Handle] = []

    def remote(self, **options: Any) -> Any:
        def wrap(cls: type) -> Any:
            ray = self

            class Class:
                def remote(self, *args: Any) -> Handle:
                    actual = ray.row_actor if cls is ray_engine.RowActor else cls
                    handle = Handle(actual(*args))
                    ray.handles.append(handle)
                    return handle

            return Class()

        return wrap

    def kill(self, handle: Handle) -> None:
        handle.dead = True

    def shutdown(self) -> None:
        pass


class RowActor:
    """A row actor that answers each row at once (after `delay`), noting whether `recorded_ok` was set."""

    delay = 0.01

    def __init__(self, spec: BatchSpec, limiter: Any, parallel: int, *limits: Any) -> None:
        self.parallel = parallel

    async def ready(self) -> int:
        return 1

    async def run_rows(self, rows: list[tuple[Row, bool]]) -> AsyncIterator[list[Outcome]]:
        for row, recorded_ok in rows:
            await asyncio.sleep(self.delay)
            yield [Outcome(row.key, row.position, value=f"{row.key} again={recorded_ok}")]


SPEC = BatchSpec(job="j", program_source="", program_path="p.kedi", store="unused.db")


def engine_on(fake: FakeRay, monkeypatch: pytest.MonkeyPatch, parallel: int = 8) -> RayEngine:
    monkeypatch.setattr(ray_engine, "init_ray", lambda address: False)
    monkeypatch.setattr(ray_engine, "import_ray", lambda: fake)
    return RayEngine(SPEC, address="local", actors=2, rpm=None, tpm=None, parallel=parallel)


def rows(count: int) -> list[Row]:
    return [Row(position=n, key=f"k{n}", args={}) for n in range(count)]


def test_rows_released_together_go_to_each_actor_as_one_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeRay(RowActor)
    engine = engine_on(fake, monkeypatch)

    async def run() -> list[Outcome]:
        async with engine.session():
            return await asyncio.gather(*(engine.run_row(row) for row in rows(8)))

    outcomes = asyncio.run(run())
    assert [o.value for o in outcomes] == [f"k{n} again=False" for n in range(8)]
    limiter, *actors = fake.handles
    chunks = [args[0] for handle in actors for name, args in handle.calls if name == "run_rows"]
    assert [len(chunk) for chunk in chunks] == [4, 4]  # one call per actor, each its share
    assert [handle.instance.parallel for handle in actors] == [4, 4]


def test_the_rows_of_an_actor_that_died_are_sent_again_with_recorded_ok(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeRay(RowActor)
    engine = engine_on(fake, monkeypatch)

    async def run() -> list[Outcome]:
        async with engine.session():
            running = asyncio.gather(*(engine.run_row(row) for row in rows(8)))
            await asyncio.sleep(RowActor.delay * 1.5)  # each actor has answered one row
            fake.kill(fake.handles[1])
            return await running

    outcomes = asyncio.run(run())
    again = {o.key for o in outcomes if o.value.endswith("again=True")}
    # the dead actor had answered its first row; its other three ran again, on the other actors
    assert len(again) == 3
    assert [o.key for o in outcomes] == [f"k{n}" for n in range(8)]
    assert len(fake.handles) == 4  # the limiter, two actors, one replacement


def test_a_row_outliving_too_many_actors_fails_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class DyingActor(RowActor):
        async def run_rows(self, rows: list[tuple[Row, bool]]) -> AsyncIterator[list[Outcome]]:
            raise ActorDied("killed")
            yield []  # an async generator, as the real one

    engine = engine_on(FakeRay(DyingActor), monkeypatch)

    async def run() -> None:
        async with engine.session():
            await engine.run_row(rows(1)[0])

    with pytest.raises(ray_engine.KediError, match="'k0': 5 Ray actors died running it"):
        asyncio.run(run())


def limiter_handle(rpm: float | None, tpm: float | None = None) -> Handle:
    return Handle(LimiterActor(rpm, tpm, parallel=16))


def test_without_limits_requests_never_wait_for_the_limiter() -> None:
    limiter = limiter_handle(None)
    gate = LeasedGate(limiter, rpm=None, books=False)

    async def run() -> None:
        for _ in range(50):
            await gate.before_request()
            gate.succeeded()
            gate.charge(15)
        assert limiter.calls == []
        gate.start()  # the actor's reports: one call, everything since the last one
        await asyncio.sleep(0.01)
        assert limiter.calls == [("report", (50, 750))]

    asyncio.run(run())


def test_with_rpm_waiting_requests_book_their_slots_in_one_call_and_stay_spaced() -> None:
    limiter = limiter_handle(600)  # a slot every 0.1 s; a lease holds at most 0.5 s of them
    gate = LeasedGate(limiter, rpm=600, books=True)
    sent: list[float] = []

    async def request() -> None:
        await gate.before_request()
        sent.append(time.monotonic())

    async def run() -> None:
        await asyncio.gather(*(request() for _ in range(12)))

    asyncio.run(run())
    assert [args for name, args in limiter.calls] == [(5,), (5,), (2,)]
    assert max_in_window(sent, 0.55) <= 6  # 0.5 s holds 5 slots, 6 with its edges
    assert sent[-1] - sent[0] >= 1.05


def test_a_429_pauses_its_actor_at_once_and_the_others_from_their_next_report() -> None:
    limiter = limiter_handle(None)
    throttled, other = (LeasedGate(limiter, rpm=None, books=False) for _ in range(2))

    async def waited(gate: LeasedGate) -> float:
        began = time.monotonic()
        await gate.before_request()
        return time.monotonic() - began

    async def run() -> tuple[float, ...]:
        throttled.throttled(0.6)
        before_report = await waited(other)  # the other actor has not heard of it yet
        other.start()
        await asyncio.sleep(0.02)  # its first report brings the pause
        return (before_report, *await asyncio.gather(waited(throttled), waited(other)))

    before_report, throttled_waited, other_waited = asyncio.run(run())
    assert before_report < 0.05
    assert throttled_waited >= 0.5 and other_waited >= 0.5
    assert ("throttled", (0.6,)) in limiter.calls
