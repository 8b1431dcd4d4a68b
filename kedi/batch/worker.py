"""Running one row: a compiled program, its shared adapters, and the ledger write.

A `RowRunner` is what each engine's worker holds (the local engine one, each
Ray actor its own): the program compiled once, an `AdapterPool` whose
adapters every row it runs shares (one connection pool per adapter,
instrumented by `metering`), and a ledger connection. `run` binds the row to
`args`, runs the program in its session (a new one, or the one a cut-off
run left, resumed: `StoreLedger.resume_point`) with a `BatchRecorder`
committing each call's turn, and records the outcome with the end of its run
(one transaction, shared with the writes of other rows: `committer`) before
returning it.
"""

from __future__ import annotations

import asyncio
import inspect
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_jsonable_python

from kedi.adapters import create_adapter
from kedi.adapters.base import Adapter, CallRequest, CallResult
from kedi.batch.committer import GroupCommitter
from kedi.batch.inputs import Row
from kedi.batch.ledger import Outcome, RowStart, StoreLedger
from kedi.batch.metering import Gate, GatedTransport, RowUsage, instrument, start_row_usage
from kedi.errors import KediConfigError, KediExecutionError
from kedi.history.lanes import Lane, LaneKey
from kedi.history.store import TurnRecord
from kedi.history.store.base import Store
from kedi.runtime.program import compile_program
from kedi.runtime.sessions import SessionRecorder


@dataclass(frozen=True, slots=True)
class BatchSpec:
    """Everything a worker needs to run a job's rows (plain data: Ray ships it to actors)."""

    job: str
    program_source: str
    program_path: str
    store: str = field(repr=False)
    """The history store's location (a path or a DSN, which may hold a password: never shown)."""
    adapter: str | None = None
    model: str | None = None
    base_url: str | None = None
    fields_read: tuple[tuple[str, int], ...] = ()
    """The row fields the program reads (`args.text`), each with the first line reading it."""

    def missing_fields(self, row: Row) -> str:
        """What a failed row's error adds when the row lacks fields the program reads ("" if none)."""
        present = row.fields()
        missing = [
            f"args.{name} ({self.program_path}:{line})"
            for name, line in self.fields_read
            if name not in present
        ]
        return f" (this row has no field for {', '.join(missing)})" if missing else ""


class AdapterPool:
    """The adapters of one worker, one per (adapter, model) name pair, shared by all its rows.

    Rows name their adapters as `kedi run` does (`--adapter/--model`, then the
    program's own `> adapter:` / `> model:` directives); each row's run builds
    them through `get`, its `adapter_factory`, so every row of the worker
    shares one instance per pair (one connection pool), rate-limited and
    counting usage. An adapter
    whose class takes an httpx `transport` and a `base_url` (the
    OpenAI-compatible one) is built with the job's `GatedTransport`, so each
    HTTP request (retries included) passes the gate; any other adapter is
    gated once per model call. `connections` is how many rows may be in
    flight (the transport keeps a connection alive for each).
    """

    def __init__(self, gate: Gate, base_url: str | None, connections: int) -> None:
        self._gate = gate
        self._base_url = base_url
        self._connections = connections
        self._adapters: dict[tuple[Any, Any], Adapter] = {}

    def get(self, adapter: Any, model: str | None) -> Adapter:
        key = (adapter, model)
        instance = self._adapters.get(key)
        if instance is None:
            instance = self._adapters[key] = self._build(adapter, model)
        return instance

    def _build(self, adapter: Any, model: str | None) -> Adapter:
        instance = create_adapter(adapter, model)
        parameters = inspect.signature(type(instance)).parameters
        if "transport" in parameters and "base_url" in parameters:
            transport = GatedTransport(self._gate, self._connections)
            rebuilt = type(instance)(model, base_url=self._base_url, transport=transport)  # type: ignore[call-arg]  # only OpenAI-compatible adapters reach here
            return instrument(rebuilt, self._gate, gates_requests=False)
        if self._base_url is not None:
            raise KediConfigError(
                f"--base-url applies to the openai adapter, not {instance.shortname!r}"
            )
        return instrument(instance, self._gate, gates_requests=True)

    async def aclose(self) -> None:
        """Close the transports the pool opened."""
        for instance in self._adapters.values():
            transport = getattr(instance, "_transport", None)
            if isinstance(transport, GatedTransport):
                await transport.aclose()


def describe_error(failure: Exception) -> dict[str, str]:
    """A row's error as RESULTS shows it: the cause's type, its message, and where (`file:line`)."""
    if isinstance(failure, KediExecutionError):
        cause = failure.original if failure.original is not None else failure
        error = {"type": type(cause).__name__, "message": failure.message}
        if failure.where:
            error["where"] = failure.where
        return error
    return {"type": type(failure).__name__, "message": str(failure) or repr(failure)}


class BatchRecorder(SessionRecorder):
    """A row's `SessionRecorder`: its turns go through the job's group committer.

    A resumed row (`RowStart.recorded`) has the calls its cut-off run
    finished served from the store, and the call that failed continues from
    its partial, as `kedi run --resume` does. A served call's recorded usage
    counts in the row's `usage` (what the row cost, once), not in the job's
    token budget (nothing was sent).
    """

    def __init__(
        self, store: Store, start: RowStart, committer: GroupCommitter, usage: RowUsage
    ) -> None:
        resuming = bool(start.recorded or start.failure)
        super().__init__(
            store,
            start.session.session_id,
            start.session.run_no,
            mode="resume" if resuming else "live",
            recorded=start.recorded,
            failure=start.failure,
        )
        self._row = start.session
        self._committer = committer
        self._usage = usage
        self.opened = False
        """Whether a write creating the row's session and run is queued (later writes need not create them)."""
        self.recorded_turns = len(start.recorded)
        """The turns its cut-off run had recorded; with `queued`, how many its run has at the end."""
        self.queued = 0

    async def persist(self, turn: TurnRecord) -> None:
        """Queue the turn's write without waiting for its commit: the row's end checks it.

        Writes commit in the order they were queued, and the row's end
        (`RowSession.finish`) refuses to record an outcome unless every turn
        the run queued is in the store, so a row still never has an outcome
        without its history; the row waits for one commit, not one per call.
        A turn lost in a crash before its commit is sent again on resume.
        """
        opened, label = self.opened, self.model_label
        queued = self._committer.submit(
            lambda tx: self._row.commit_turn(tx, turn, opened=opened, model=label)
        )
        queued.add_done_callback(_checked_at_the_end)
        self.opened = True
        self.queued += 1

    def _serve(
        self,
        adapter: Adapter,
        key: LaneKey,
        request: CallRequest,
        turn: TurnRecord,
        lane: Lane | None,
    ) -> CallResult:
        result = super()._serve(adapter, key, request, turn, lane)
        self._usage.add(result.usage)
        return result


def _checked_at_the_end(write: asyncio.Future[Any]) -> None:
    """A queued turn's failure is the row end's to report (`RowSession.finish`), not asyncio's log's."""
    if not write.cancelled():
        write.exception()


class RowRunner:
    """Runs rows of one job and records each outcome in the ledger."""

    def __init__(self, spec: BatchSpec, gate: Gate, *, parallel: int) -> None:
        """Compile the job's program; `parallel` is how many of its rows this runner runs at once."""
        self.spec = spec
        self.program = compile_program(spec.program_source, path=spec.program_path)
        self.adapters = AdapterPool(gate, spec.base_url, parallel)
        self.ledger = StoreLedger(spec.store, program=spec.program_path, model=spec.model or "")
        self._started = self.ledger.started(spec.job)
        """Rows that had a session when the runner started: they may have a cut-off run to resume."""
        self.committer = GroupCommitter(lambda: StoreLedger(spec.store).store)
        self.committer.start()

    async def run(self, row: Row, *, recorded_ok: bool = False) -> Outcome:
        """Run `row` and record its outcome.

        `recorded_ok` says the row may already have an outcome or a session (a
        retry after a worker died): then the recorded outcome is returned and
        nothing runs twice, or its cut-off run is resumed.
        """
        if recorded_ok:
            known = self.ledger.outcome(self.spec.job, row.key)
            if known is not None:
                return known
        if recorded_ok or row.key in self._started:
            start = self.ledger.resume_point(self.spec.job, row.key)
        else:
            start = self.ledger.new_row(self.spec.job, row.key)
        usage = start_row_usage()
        recorder = BatchRecorder(self.ledger.store, start, self.committer, usage)
        value: Any = None
        error: dict[str, str] | None = None
        try:
            result = await self.program.run(
                args=row.args,
                adapter=self.spec.adapter,
                model=self.spec.model,
                conversation=start.conversation,
                quiet=True,
                recorder=recorder,
                adapter_factory=self.adapters.get,
            )
            value = to_jsonable_python(result, fallback=str)
        except (
            Exception
        ) as row_error:  # a bug in one row must not end the job; the row says what it was
            error = describe_error(row_error)
            error["message"] += self.spec.missing_fields(row)
        except (
            BaseException
        ):  # cancelled (Ctrl-C): no outcome; the next run resumes the row from here
            evidence = recorder.failure or {"stage": "canceled"}
            self.committer.write_later(lambda tx: start.session.interrupt(tx, evidence))
            raise
        outcome = Outcome(
            key=row.key,
            position=row.position,
            value=value,
            error=error,
            usage=usage.as_dict(),
            session=start.session.session_id,
        )
        failure = (
            None
            if error is None
            else {"error": f"{error['type']}: {error['message']}", **(recorder.failure or {})}
        )
        opened, turns = recorder.opened, recorder.recorded_turns + recorder.queued
        label = recorder.model_label
        return await self.committer.write(
            lambda tx: start.session.finish(
                tx, outcome, failure=failure, opened=opened, turns=turns, model=label
            )
        )

    async def aclose(self) -> None:
        """Commit what is waiting; close the ledger connections and the adapter's transport."""
        self.committer.close()
        self.ledger.close()
        await self.adapters.aclose()
