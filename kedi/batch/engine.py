"""The batch driver and the local engine.

`run_batch` reads the rows in input order, skips those the ledger has
finished, hands the others to an `Engine` while keeping at most the
limiter's concurrency in flight, and writes every outcome to RESULTS in
input order as soon as the rows before it are done. RESULTS is written to a
temporary file beside it and renamed into place when the run ends (however
it ends), so readers never see half a file. The local engine runs rows as
anyio tasks in this process; the Ray engine (`ray_engine`) on actors.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Protocol

import anyio

from kedi.adapters.resources import run_scope
from kedi.batch.inputs import Row
from kedi.batch.ledger import Ledger, Outcome
from kedi.batch.limits import LimiterState, RateLimiter
from kedi.batch.metering import LocalGate
from kedi.batch.progress import Counts, Progress
from kedi.batch.worker import BatchSpec, RowRunner


class Engine(Protocol):
    """Where rows run: in this process, or on Ray actors."""

    def session(self) -> AbstractAsyncContextManager[None]:
        """An async context manager around the whole run (workers start and stop)."""

    async def run_row(self, row: Row) -> Outcome:
        """Run one row to its recorded outcome."""

    def concurrency(self) -> int:
        """How many rows may be in flight now (lowered after 429s)."""

    def limits(self) -> LimiterState | None:
        """The job's limiter state, for the progress display."""


class LocalEngine:
    """Rows as tasks on this process's event loop, sharing one adapter and connection pool."""

    def __init__(self, spec: BatchSpec, limiter: RateLimiter) -> None:
        self._limiter = limiter
        self._runner: RowRunner | None = None
        self._spec = spec

    @asynccontextmanager
    async def session(self) -> AsyncIterator[None]:
        self._runner = RowRunner(
            self._spec, LocalGate(self._limiter), parallel=self._limiter.max_concurrency
        )
        try:
            async with run_scope():
                yield
        finally:
            await self._runner.aclose()

    async def run_row(self, row: Row) -> Outcome:
        assert self._runner is not None, "run_row outside session()"
        return await self._runner.run(row)

    def concurrency(self) -> int:
        return self._limiter.concurrency

    def limits(self) -> LimiterState | None:
        return self._limiter.state()


@dataclass(frozen=True, slots=True)
class Summary:
    """How a run ended."""

    counts: Counts
    stopped: str | None
    """Why the run stopped before every row had an outcome (None when it did not)."""
    results: Path


class OrderedResults:
    """RESULTS in input order, written to a temporary file and renamed into place."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self._file: IO[str] = open(self._temp, "w", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._pending: dict[int, Outcome] = {}
        self._next = 0

    def put(self, outcome: Outcome) -> None:
        """Take one row's outcome; write it and every ready one after it."""
        self._pending[outcome.position] = outcome
        while self._next in self._pending:
            self._write(self._pending.pop(self._next))
            self._next += 1

    def close(self) -> None:
        """Write what is left (rows after a gap, when the run stopped early) and rename."""
        for position in sorted(self._pending):
            self._write(self._pending[position])
        self._pending.clear()
        self._file.close()
        os.replace(self._temp, self.path)

    def _write(self, outcome: Outcome) -> None:
        self._file.write(json.dumps(outcome.result_line(), ensure_ascii=False) + "\n")


def write_results(outcomes: Iterable[Outcome], path: Path) -> int:
    """Write outcomes (already in input order) to `path` atomically; return how many."""
    results = OrderedResults(path)
    written = 0
    for outcome in outcomes:
        results.put(replace(outcome, position=written))
        written += 1
    results.close()
    return written


def _put_committed(
    committed: dict[str, Outcome], in_flight: dict[str, int], results: OrderedResults
) -> None:
    """Write the rows the ledger finished whose task was cancelled before it could write them."""
    for key, position in in_flight.items():
        outcome = committed.get(key)
        if outcome is not None:
            results.put(replace(outcome, position=position))


class _Window:
    """Rows in flight, bounded by a limit that may change while rows run."""

    def __init__(self) -> None:
        self.in_flight = 0
        self._changed = anyio.Event()

    async def enter(self, limit: int) -> None:
        while self.in_flight >= max(1, limit):
            await self._changed.wait()
        self.in_flight += 1

    def leave(self) -> None:
        self.in_flight -= 1
        self._changed.set()
        self._changed = anyio.Event()


JOB_WIDE_ERRORS = frozenset({"AuthenticationError", "ModelNotFoundError", "KediConfigError"})
"""Errors a row meets that every row would meet (a wrong key, an unknown model, a bad
configuration): the first stops dispatching, instead of one failed request per row."""


async def run_batch(
    *,
    job: str,
    rows: Iterable[Row],
    total: int | None,
    ledger: Ledger,
    engine: Engine,
    out: Path,
    retry_errors: bool = False,
    max_errors: int | None = None,
    progress: Progress | None = None,
) -> Summary:
    """Run the rows the ledger has not finished; write RESULTS; return the figures."""
    finished = ledger.finished(job, include_failed=not retry_errors)
    counts = progress.counts if progress is not None else Counts(total=total)
    results = OrderedResults(out)
    window = _Window()
    stopped: str | None = None
    job_wide: str | None = None  # why every other row would fail too, once a row met it
    in_flight: dict[str, int] = {}  # key -> input position of the rows started and not yet written

    async def run_one(row: Row) -> None:
        nonlocal job_wide
        try:
            outcome = await engine.run_row(row)
        finally:
            window.leave()
        if outcome.error is not None and outcome.error.get("type") in JOB_WIDE_ERRORS:
            job_wide = job_wide or (
                f"stopped: row {row.key} failed with {outcome.error['type']}, which every row "
                "would meet; fix it and run the same command again with --retry-errors"
            )
        counts.ran += 1
        counts.failed += outcome.failed
        counts.tokens += outcome.usage.get("input_tokens", 0) + outcome.usage.get(
            "output_tokens", 0
        )
        in_flight.pop(row.key, None)
        results.put(outcome)
        if progress is not None:
            progress.update(engine.limits())

    try:
        async with engine.session(), anyio.create_task_group() as group:
            counts.started = time.monotonic()  # the rate counts rows, not the engine's start-up
            for row in rows:
                known = finished.pop(row.key, None)
                if known is not None:
                    counts.skipped += 1
                    results.put(replace(known, position=row.position))
                    continue
                await window.enter(engine.concurrency())
                if job_wide is not None:
                    window.leave()
                    stopped = job_wide
                    break
                if max_errors is not None and counts.failed >= max_errors:
                    window.leave()
                    stopped = (
                        f"stopped after {counts.failed} failed rows (--max-errors {max_errors})"
                    )
                    break
                in_flight[row.key] = row.position
                group.start_soon(run_one, row)
    finally:
        if in_flight:  # cut off (Ctrl-C, an error): some of these rows committed their outcome
            _put_committed(ledger.finished(job, include_failed=True), in_flight, results)
        results.close()
        if progress is not None:
            progress.close(engine.limits())
    return Summary(counts, stopped, out)
