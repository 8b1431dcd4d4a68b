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
    """An actor handle whose method calls (`handle.method.remote(...)`) run here and are recorded.

    Once `dead`, its calls and its streams raise `ActorDied`, as Ray's do.
    """

    def __init__(self, instance: Any) -> None:
        self.instance = instance
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.dead = False
        self._died = asyncio.Event()
        self.messages: list[list[Any]] = []
        """What each of its streams' messages held."""

    def kill(self) -> None:
        self.dead = True
        self._died.set()

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.instance, name)
        handle = self

        class Method:
            def remote(self, *args: Any) -> Any:
                handle.calls.append((name, args))
                if inspect.isasyncgenfunction(method):
                    return handle._stream(method(*args))
                result = method(*args)
                if inspect.iscoroutine(result):
                    return asyncio.ensure_future(handle._call(result))
                future = asyncio.get_running_loop().create_future()
                future.set_result(result)
                return future

        return Method()

    async def _call(self, call: Any) -> Any:
        if self.dead:
            call.close()
            raise ActorDied("the actor died")
        return await call

    async def _stream(self, replies: AsyncIterator[Any]) -> AsyncIterator[Any]:
        died = asyncio.ensure_future(self._died.wait())
        try:
            while True:
                following = asyncio.ensure_future(anext(replies))
                await asyncio.wait({following, died}, return_when=asyncio.FIRST_COMPLETED)
                if self.dead:
                    following.cancel()
                    raise ActorDied("the actor died")
                try:
                    reply = following.result()
                except StopAsyncIteration:
                    return
                self.messages.append(reply)
                done = asyncio.get_running_loop().create_future()
                done.set_result(reply)
                yield done
        finally:
            died.cancel()


class FakeRay:
    """What the engine uses of the `ray` module: `remote`, `kill`, `exceptions.RayActorError`."""

    class exceptions:  # noqa: N801 - the module's attribute name
        RayActorError = ActorDied

    def __init__(self, row_actor: type = ray_engine.RowActor) -> None:
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
        handle.kill()

    def shutdown(self) -> None:
        pass


class FakeRunner:
    """A `RowRunner` that answers row n after `delay` x (1 + n // 2), saying whether `recorded_ok` was set.

    It notes the most rows it ran at once and the order it started them in.
    """

    delay = 0.01
    failing: frozenset[str] = frozenset()

    def __init__(self, spec: BatchSpec, gate: Any, *, parallel: int) -> None:
        self.parallel = parallel
        self.running = 0
        self.most = 0
        self.started: list[int] = []

    async def run(self, row: Row, *, recorded_ok: bool = False) -> Outcome:
        self.started.append(row.position)
        self.running += 1
        self.most = max(self.most, self.running)
        try:
            await asyncio.sleep(self.delay * (1 + row.position // 2))
        finally:
            self.running -= 1
        if row.key in self.failing:
            raise ray_engine.KediError(f"the ledger write of {row.key} failed")
        return Outcome(row.key, row.position, value=f"{row.key} again={recorded_ok}")


SPEC = BatchSpec(job="j", program_source="", program_path="p.kedi", store="unused.db")


def engine_on(fake: FakeRay, monkeypatch: pytest.MonkeyPatch, parallel: int = 8) -> RayEngine:
    monkeypatch.setattr(ray_engine, "init_ray", lambda address: False)
    monkeypatch.setattr(ray_engine, "import_ray", lambda: fake)
    monkeypatch.setattr(ray_engine, "RowRunner", FakeRunner)
    return RayEngine(SPEC, address="local", actors=2, rpm=None, tpm=None, parallel=parallel)


def rows(count: int) -> list[Row]:
    return [Row(position=n, key=f"k{n}", args={}) for n in range(count)]


def row_actors(fake: FakeRay) -> list[Handle]:
    return [handle for handle in fake.handles if isinstance(handle.instance, ray_engine.RowActor)]


def test_rows_released_together_go_to_each_actor_as_one_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeRay()
    engine = engine_on(fake, monkeypatch)

    async def run() -> list[Outcome]:
        async with engine.session():
            return await asyncio.gather(*(engine.run_row(row) for row in rows(8)))

    outcomes = asyncio.run(run())
    assert [o.value for o in outcomes] == [f"k{n} again=False" for n in range(8)]
    actors = row_actors(fake)
    chunks = [args[0] for handle in actors for name, args in handle.calls if name == "take"]
    assert [len(chunk) for chunk in chunks] == [4, 4]  # one call per actor, each its share
    assert [handle.instance.share for handle in actors] == [4, 4]
    # one stream per actor brings back every outcome
    assert [[name for name, _ in handle.calls].count("outcomes") for handle in actors] == [1, 1]


def actor_alone(monkeypatch: pytest.MonkeyPatch, parallel: int, place: tuple[int, int]) -> Any:
    """A `RowActor` on `FakeRunner`, its limiter in this process."""
    monkeypatch.setattr(ray_engine, "RowRunner", FakeRunner)
    return ray_engine.RowActor(SPEC, limiter_handle(None), parallel, None, None, place)


def test_rows_that_finish_together_come_back_in_one_message_whatever_call_brought_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    actor = actor_alone(monkeypatch, 8, (0, 1))

    async def run() -> list[list[str]]:
        stream = actor.outcomes()
        for row in rows(4):  # rows 0 and 1 finish together, then 2 and 3
            await actor.take([(row, False)])
        return [[o.key for o in await anext(stream)] for _ in range(2)]

    assert asyncio.run(run()) == [["k0", "k1"], ["k2", "k3"]]


def test_an_actor_runs_its_share_of_the_concurrency_and_queues_the_rest_in_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = FakeRay()
    engine = engine_on(fake, monkeypatch, parallel=5)  # actor 0 runs 3 at once, actor 1 2
    assert engine.concurrency() == 5 + 3  # the driver keeps a queue of half as many on the actors

    async def run() -> list[Outcome]:
        async with engine.session():
            return await asyncio.gather(*(engine.run_row(row) for row in rows(30)))

    outcomes = asyncio.run(run())
    assert [o.key for o in outcomes] == [f"k{n}" for n in range(30)]
    runners = [handle.instance._runner for handle in row_actors(fake)]
    assert [runner.most for runner in runners] == [3, 2]
    assert all(runner.started == sorted(runner.started) for runner in runners)


def test_an_actors_share_follows_the_job_concurrency_after_a_429(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert [ray_engine.actor_share(5, index, 2) for index in range(2)] == [3, 2]
    assert [ray_engine.actor_share(1, index, 2) for index in range(2)] == [1, 1]
    actor = actor_alone(monkeypatch, 16, (1, 2))  # the limiter's --parallel 16 (limiter_handle)
    limiter = actor._gate._limiter.instance._limiter
    limiter.throttled(0.0)  # a 429 elsewhere: the job's concurrency halves to 8

    async def run() -> int:
        actor._gate.start()
        await asyncio.sleep(0.01)  # its first report brings the job's concurrency
        stream = actor.outcomes()
        await actor.take([(row, False) for row in rows(10)])
        finished = 0
        while finished < 10:
            finished += len(await anext(stream))
        return actor._runner.most

    assert actor.share == 8
    assert asyncio.run(run()) == 4  # its share of the job's 8


def test_a_row_whose_run_raised_raises_in_run_row_and_the_others_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(FakeRunner, "failing", frozenset({"k2"}))
    engine = engine_on(FakeRay(), monkeypatch)

    async def run() -> list[Any]:
        async with engine.session():
            return await asyncio.gather(
                *(engine.run_row(row) for row in rows(6)), return_exceptions=True
            )

    outcomes = asyncio.run(run())
    assert isinstance(outcomes[2], ray_engine.KediError)
    assert str(outcomes[2]) == "the ledger write of k2 failed"
    assert [o.key for n, o in enumerate(outcomes) if n != 2] == ["k0", "k1", "k3", "k4", "k5"]


def test_the_rows_of_an_actor_that_died_are_sent_again_with_recorded_ok(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(FakeRunner, "delay", 0.05)  # rows end 50 ms apart on each actor
    fake = FakeRay()
    engine = engine_on(fake, monkeypatch)

    async def run() -> list[Outcome]:
        async with engine.session():
            running = [asyncio.ensure_future(engine.run_row(row)) for row in rows(8)]
            await running[1]  # actor 1 (rows 1, 3, 5, 7) has answered its first row
            fake.kill(row_actors(fake)[1])
            return await asyncio.gather(*running)

    outcomes = asyncio.run(run())
    again = {o.key for o in outcomes if o.value.endswith("again=True")}
    # the dead actor had answered its first row (k1); its other three ran again
    assert again == {"k3", "k5", "k7"}
    assert [o.key for o in outcomes] == [f"k{n}" for n in range(8)]
    assert len(row_actors(fake)) == 3  # two actors, one replacement


def test_a_row_outliving_too_many_actors_fails_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class DyingActor(ray_engine.RowActor):
        async def outcomes(self) -> AsyncIterator[list[Outcome]]:  # type: ignore[override]
            raise ActorDied("killed")
            yield []  # an async generator, as the real one

    fake = FakeRay(DyingActor)
    engine = engine_on(fake, monkeypatch)

    async def run() -> None:
        async with engine.session():
            await engine.run_row(rows(1)[0])

    with pytest.raises(ray_engine.KediError, match="'k0': 5 Ray actors died running it"):
        asyncio.run(run())
    # an actor is replaced only to run a row: 2 at the start, then one per death of k0's
    assert len(row_actors(fake)) == 2 + 5


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


def test_a_failed_rows_error_that_cannot_be_pickled_still_reaches_the_driver() -> None:
    class Unpicklable(Exception):
        def __init__(self, code: int, detail: str) -> None:  # pickle calls it with args only
            super().__init__(f"{code}: {detail}")

    sent = ray_engine._sendable(Unpicklable(5, "disk full"))
    assert isinstance(sent, ray_engine.KediError)
    assert str(sent) == "Unpicklable: 5: disk full"
    plain = ray_engine.KediError("locked")
    assert ray_engine._sendable(plain) is plain
