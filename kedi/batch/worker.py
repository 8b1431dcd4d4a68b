"""Running one row: a compiled program, its shared adapter, and the ledger write.

A `RowRunner` is what each engine's worker holds (the local engine one, each
Ray actor its own): the program compiled once, one adapter instance shared by
every row it runs (one connection pool, instrumented by `metering`), and a
ledger connection. `run` binds the row to `args`, runs the program in a
fresh conversation, and records the outcome with the conversation's history
with the conversation's history (one ledger transaction, shared with the
rows that finish at the same time: `committer`) before returning it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import to_jsonable_python

from kedi.adapters import create_adapter
from kedi.adapters.base import Adapter
from kedi.batch.committer import GroupCommitter
from kedi.batch.inputs import Row
from kedi.batch.ledger import Outcome, StoreLedger
from kedi.batch.metering import Gate, GatedTransport, instrument, start_row_usage
from kedi.errors import KediConfigError, KediExecutionError
from kedi.history.lanes import Conversation
from kedi.runtime.program import compile_program


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


def build_adapter(spec: BatchSpec, gate: Gate) -> Adapter:
    """The adapter every row shares, gated by the job's limits and counting usage.

    An adapter whose class takes an httpx `transport` and a `base_url` (the
    OpenAI-compatible one) is rebuilt with the job's `GatedTransport`, so each
    HTTP request (retries included) passes the gate; any other adapter is
    gated once per model call.
    """
    adapter = create_adapter(spec.adapter, spec.model)
    parameters = inspect.signature(type(adapter)).parameters
    if "transport" in parameters and "base_url" in parameters:
        rebuilt = type(adapter)(spec.model, base_url=spec.base_url, transport=GatedTransport(gate))  # type: ignore[call-arg]
        return instrument(rebuilt, gate, gates_requests=False)
    if spec.base_url is not None:
        raise KediConfigError(f"--base-url applies to the openai adapter, not {adapter.shortname!r}")
    return instrument(adapter, gate, gates_requests=True)


def describe_error(failure: Exception) -> dict[str, str]:
    """A row's error as RESULTS shows it: the cause's type, its message, and where (`file:line`)."""
    if isinstance(failure, KediExecutionError):
        cause = failure.original if failure.original is not None else failure
        spans = [frame.span for frame in failure.frames if frame.span is not None]
        error = {"type": type(cause).__name__, "message": failure.message}
        if spans:
            error["where"] = f"{spans[-1].path}:{spans[-1].line}"
        return error
    return {"type": type(failure).__name__, "message": str(failure) or repr(failure)}


class RowRunner:
    """Runs rows of one job and records each outcome in the ledger."""

    def __init__(self, spec: BatchSpec, gate: Gate) -> None:
        self.spec = spec
        self.program = compile_program(spec.program_source, path=spec.program_path)
        self.adapter = build_adapter(spec, gate)
        self.ledger = StoreLedger(spec.store)
        self.committer = GroupCommitter(
            spec.job, lambda: StoreLedger(spec.store, program=spec.program_path, model=spec.model or "")
        )
        self.committer.start()

    async def run(self, row: Row, *, recorded_ok: bool = False) -> Outcome:
        """Run `row` and record its outcome.

        `recorded_ok` says the row may already have an outcome (a retry after
        a worker died): then the recorded one is returned and nothing runs twice.
        """
        if recorded_ok:
            known = self.ledger.outcome(self.spec.job, row.key)
            if known is not None:
                return known
        usage = start_row_usage()
        conversation = Conversation()
        value: Any = None
        error: dict[str, str] | None = None
        try:
            result = await self.program.run(
                args=row.args, adapter=self.adapter, model=self.spec.model, conversation=conversation, quiet=True
            )
            value = to_jsonable_python(result, fallback=str)
        except Exception as failure:  # a bug in one row must not end the job; the row says what it was
            error = describe_error(failure)
        outcome = Outcome(
            key=row.key,
            position=row.position,
            value=value,
            error=error,
            usage=usage.as_dict(),
            session=conversation.conversation_id,
        )
        return await self.committer.record(outcome, conversation)

    async def aclose(self) -> None:
        """Commit what is waiting; close the ledger connections and the adapter's transport."""
        self.committer.close()
        self.ledger.close()
        transport = getattr(self.adapter, "_transport", None)
        if transport is not None:
            await transport.aclose()
