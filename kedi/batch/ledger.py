"""The batch ledger: each row's outcome, keyed by job and row key, in the history store.

`Ledger` is the interface the engines use; `StoreLedger` keeps it in kedi's
history store (`kedi.history.store`: SQLite by default, PostgreSQL for many
machines, chosen by `KEDI_HISTORY`), in two tables of its own (component
`batch` of the store's schema versions):

- `batch_jobs`: one row per job: the program and inputs it runs over, with
  their digests (a change is refused unless `--force`).
- `batch_rows`: one row per finished row: its position, whether it failed,
  and its outcome (JSON), keyed by (job, row key).

Each row's conversation is a session of its own, named `batch/<job>/<key>`,
recorded as `kedi run` records a run (`kedi.runtime.sessions`): every model
call's turn is committed when the call returns, the row's session and first
run created with its first write (`RowSession.open`), so a crash leaves the
calls a row had finished. The row's end, its run's status (with the failure
evidence and partial of a failed call) and its `batch_rows` line, is ONE
transaction with its last history write, so a crash leaves all or nothing.
A row with a line is finished: a resumed batch skips it (a failed one too,
unless `--retry-errors`). A row cut off mid-way has a session whose last run
did not end `ok`: the next run resumes it as `kedi run --resume` does, its
recorded calls served from the store and the failed call continued from its
partial (`resume_point`). Writes go through `GroupCommitter`: one
transaction, one disk sync, for the writes that arrived while the last one
was written.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from kedi.errors import KediConfigError, KediUsageError
from kedi.history.identity import new_id
from kedi.history.lanes import Conversation
from kedi.history.store import StoreError, TurnRecord, default_location, open_store
from kedi.history.store.base import Store, StoreTransaction

SCHEMA_VERSION = 1
BUSY_TIMEOUT = 30.0
"""Seconds a writer waits for another process's transaction (Ray workers share a SQLite file)."""
_SCHEMA = [
    """CREATE TABLE IF NOT EXISTS batch_jobs (
        job TEXT PRIMARY KEY, program TEXT NOT NULL, program_digest TEXT NOT NULL,
        inputs TEXT NOT NULL, inputs_digest TEXT NOT NULL, created DOUBLE PRECISION NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS batch_rows (
        job TEXT NOT NULL, key TEXT NOT NULL, position BIGINT NOT NULL, failed BIGINT NOT NULL,
        outcome TEXT NOT NULL, finished DOUBLE PRECISION NOT NULL, PRIMARY KEY (job, key))""",
    "CREATE INDEX IF NOT EXISTS batch_rows_order ON batch_rows (job, position)",
]


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one row ended: its value or its error, with usage and the session id."""

    key: str
    position: int
    value: Any = None
    error: dict[str, str] | None = None
    usage: dict[str, int] = field(default_factory=dict)
    session: str = ""

    @property
    def failed(self) -> bool:
        return self.error is not None

    def result_line(self) -> dict[str, Any]:
        """The row's line in RESULTS."""
        return {
            "key": self.key,
            "value": self.value,
            "error": self.error,
            "usage": self.usage,
            "session": self.session,
        }

    def to_dict(self) -> dict[str, Any]:
        return {"position": self.position, **self.result_line()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Outcome:
        return cls(
            key=data["key"],
            position=data["position"],
            value=data.get("value"),
            error=data.get("error"),
            usage=data.get("usage") or {},
            session=data.get("session") or "",
        )


@dataclass(frozen=True, slots=True)
class JobInfo:
    """A job's identity: what it runs over, and its counts."""

    name: str
    program: str
    program_digest: str
    inputs: str
    inputs_digest: str
    succeeded: int = 0
    failed: int = 0


class Ledger(Protocol):
    """What the batch engines need from the store."""

    def open_job(self, job: JobInfo, *, force: bool) -> None:
        """Create the job, or check that an existing one runs the same program and inputs."""

    def finished(self, job: str, *, include_failed: bool) -> dict[str, Outcome]:
        """The outcomes of the rows a resumed run skips, by key."""

    def started(self, job: str) -> set[str]:
        """The keys of the rows that have a session (begun, perhaps cut off), one query for the run."""

    def outcome(self, job: str, key: str) -> Outcome | None:
        """The row's recorded outcome, if any."""

    def outcomes(self, job: str) -> Iterator[Outcome]:
        """Every recorded outcome, in input order."""

    def job(self, job: str) -> JobInfo | None:
        """The job with its counts, or None."""

    def jobs(self) -> list[JobInfo]:
        """Every job, with its counts."""

    def remove(self, job: str) -> bool:
        """Delete the job, its rows and their sessions; False when there was none."""

    def close(self) -> None:
        """Release the connection."""


def store_location() -> str:
    """The store every worker of a job opens: `KEDI_HISTORY`, else the default file.

    Resolved once by the driver and handed to the workers, so Ray actors on
    other machines open the same store whatever their own environment says.
    """
    return os.environ.get("KEDI_HISTORY", "").strip() or str(default_location())


def session_name(job: str, key: str) -> str:
    """The name of a row's session in the history store."""
    return f"batch/{job}/{key}"


class StoreLedger:
    """The `Ledger` in kedi's history store (see the module docstring)."""

    def __init__(
        self, location: str | os.PathLike[str] | None = None, *, program: str = "", model: str = ""
    ) -> None:
        """Open the store at `location` (default: `KEDI_HISTORY`); rows' sessions record `program` and `model`."""
        self._program, self._model = program, model
        store = open_store(location, busy_timeout=BUSY_TIMEOUT)
        if store is None:
            raise KediConfigError(
                "kedi batch records its rows in the history store; KEDI_HISTORY=off disables it"
            )
        self.store: Store = store
        self.store.extend_schema("batch", SCHEMA_VERSION, _SCHEMA)

    def _query(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self.store.transaction() as tx:
            return tx.query(sql, params)

    def open_job(self, job: JobInfo, *, force: bool) -> None:
        with self.store.transaction() as tx:
            known = tx.query(
                "SELECT program, program_digest, inputs, inputs_digest FROM batch_jobs WHERE job = ?",
                (job.name,),
            )
            if not known:
                tx.execute(
                    "INSERT INTO batch_jobs VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        job.name,
                        job.program,
                        job.program_digest,
                        job.inputs,
                        job.inputs_digest,
                        time.time(),
                    ),
                )
                return
            program, program_digest, inputs, inputs_digest = known[0]
            changed = [
                what
                for what, old, new in (
                    ("program", program_digest, job.program_digest),
                    ("inputs", inputs_digest, job.inputs_digest),
                )
                if old != new
            ]
            if changed and not force:
                raise KediUsageError(
                    f"job {job.name!r} was started with a different {' and '.join(changed)} "
                    f"({program} over {inputs}); pass --force to continue it with this one "
                    f"(finished rows are kept), choose another --job, or `kedi batch rm {job.name}`"
                )
            if changed:
                tx.execute(
                    "UPDATE batch_jobs SET program = ?, program_digest = ?, inputs = ?, inputs_digest = ? WHERE job = ?",
                    (job.program, job.program_digest, job.inputs, job.inputs_digest, job.name),
                )

    def finished(self, job: str, *, include_failed: bool) -> dict[str, Outcome]:
        query = "SELECT outcome FROM batch_rows WHERE job = ?" + (
            "" if include_failed else " AND failed = 0"
        )
        return {outcome.key: outcome for outcome in map(_outcome, self._query(query, (job,)))}

    def started(self, job: str) -> set[str]:
        prefix = session_name(job, "")
        rows = self._query(
            "SELECT name FROM sessions WHERE name LIKE ? ESCAPE '\\'", (_like_prefix(prefix),)
        )
        return {name[len(prefix) :] for (name,) in rows}

    def new_row(self, job: str, key: str) -> RowStart:
        """A row that has no session yet: a new one (its id is its conversation's), run 1."""
        session_id = new_id()
        return RowStart(
            RowSession(job, key, session_id, 1, self._program, self._model),
            Conversation(session_id),
        )

    def resume_point(self, job: str, key: str) -> RowStart:
        """Where row `key` starts: its cut-off run resumed, or a new run (of its session, if it has one)."""
        session = self.store.find_session(session_name(job, key), prefix=False)
        if session is None:
            return self.new_row(job, key)
        runs = self.store.runs(session.id)
        last = runs[-1] if runs else None
        if last is None or last.status == "ok":
            run = RowSession(
                job, key, session.id, (last.run_no if last else 0) + 1, self._program, self._model
            )
            return RowStart(run, Conversation(session.id))
        run = RowSession(
            job, key, session.id, last.run_no, self._program, self._model, resumed=True
        )
        return RowStart(
            run,
            self.store.load_conversation(session.id, before_run=last.run_no),
            recorded=tuple(self.store.turns(session.id, run_no=last.run_no)),
            failure=last.failure,
        )

    def outcome(self, job: str, key: str) -> Outcome | None:
        rows = self._query("SELECT outcome FROM batch_rows WHERE job = ? AND key = ?", (job, key))
        return _outcome(rows[0]) if rows else None

    def outcomes(self, job: str) -> Iterator[Outcome]:
        rows = self._query("SELECT outcome FROM batch_rows WHERE job = ? ORDER BY position", (job,))
        return map(_outcome, rows)

    def job(self, job: str) -> JobInfo | None:
        return next(iter(self._jobs("WHERE j.job = ?", (job,))), None)

    def jobs(self) -> list[JobInfo]:
        return self._jobs("", ())

    def _jobs(self, where: str, params: tuple[Any, ...]) -> list[JobInfo]:
        query = f"""
            SELECT j.job, j.program, j.program_digest, j.inputs, j.inputs_digest,
                   COALESCE(SUM(CASE WHEN r.failed = 0 THEN 1 ELSE 0 END), 0), COALESCE(SUM(r.failed), 0)
            FROM batch_jobs j LEFT JOIN batch_rows r ON r.job = j.job {where}
            GROUP BY j.job, j.program, j.program_digest, j.inputs, j.inputs_digest, j.created
            ORDER BY j.created"""
        return [
            JobInfo(
                row[0], row[1], row[2], row[3], row[4], succeeded=int(row[5]), failed=int(row[6])
            )
            for row in self._query(query, params)
        ]

    def remove(self, job: str) -> bool:
        sessions = self._query(
            "SELECT id FROM sessions WHERE name LIKE ? ESCAPE '\\'",
            (_like_prefix(session_name(job, "")),),
        )
        for (session_id,) in sessions:
            self.store.delete_session(session_id)
        with self.store.transaction() as tx:
            tx.execute("DELETE FROM batch_rows WHERE job = ?", (job,))
            return bool(tx.query("DELETE FROM batch_jobs WHERE job = ? RETURNING job", (job,)))

    def close(self) -> None:
        self.store.close()


def _like_prefix(prefix: str) -> str:
    """A LIKE pattern for names starting with `prefix` (escape character `\\`)."""
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


@dataclass(frozen=True, slots=True)
class RowSession:
    """A row's session and run in the store, written with the row's first write."""

    job: str
    key: str
    session_id: str
    run_no: int
    program: str = ""
    model: str = ""
    resumed: bool = False
    """The run was cut off before: it is reopened (else begun)."""

    def open(self, tx: StoreTransaction, *, model: str = "") -> None:
        """Make the session and its run exist and run (idempotent); `model` labels a new session."""
        if self.resumed:
            tx.reopen_run(self.session_id, self.run_no)
            return
        name = session_name(self.job, self.key)
        tx.create_session(
            self.session_id,
            name=name,
            program=self.program,
            model=model or self.model,
            if_absent=True,
        )
        tx.begin_run(self.session_id, program=self.program, run_no=self.run_no)

    def commit_turn(
        self, tx: StoreTransaction, turn: TurnRecord, *, opened: bool, model: str = ""
    ) -> None:
        """One model call's turn (the write `BatchRecorder` hands the committer), opening the row first unless `opened`."""
        if not opened:
            self.open(tx, model=model)
        tx.commit_turn(turn)

    def finish(
        self,
        tx: StoreTransaction,
        outcome: Outcome,
        *,
        failure: dict[str, Any] | None,
        opened: bool,
        turns: int,
        model: str = "",
    ) -> Outcome:
        """The row's end: its run's status and failure evidence, its `batch_rows` line.

        `turns` is how many turns the run must have in the store: fewer (a
        turn's write failed) raises `StoreError`, and nothing of the end is written.
        """
        if not opened:  # no call was recorded: `model` labels the session by its failed call
            self.open(tx, model=model)
        ((stored,),) = tx.query(
            "SELECT COUNT(*) FROM turns WHERE session_id = ? AND run_no = ?",
            (self.session_id, self.run_no),
        )
        if int(stored) < turns:
            raise StoreError(
                f"row {self.key!r}: {turns - int(stored)} of its model calls were not recorded in the store; "
                "its outcome is not recorded (run the command again to resume it)"
            )
        tx.finish_run(
            self.session_id, self.run_no, "failed" if outcome.failed else "ok", failure=failure
        )
        tx.execute(
            "INSERT INTO batch_rows VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (job, key) DO UPDATE SET "
            "position = excluded.position, failed = excluded.failed, outcome = excluded.outcome, "
            "finished = excluded.finished",
            (
                self.job,
                outcome.key,
                outcome.position,
                int(outcome.failed),
                json.dumps(outcome.to_dict()),
                time.time(),
            ),
        )
        return outcome

    def interrupt(self, tx: StoreTransaction, failure: dict[str, Any]) -> None:
        """A cancelled row's run: `interrupted`, with the evidence the next run resumes from (no outcome)."""
        self.open(tx)
        tx.finish_run(self.session_id, self.run_no, "interrupted", failure=failure)


@dataclass(frozen=True, slots=True)
class RowStart:
    """How a row's run starts: its session, the conversation before its run, what its cut-off run recorded."""

    session: RowSession
    conversation: Conversation
    recorded: tuple[TurnRecord, ...] = ()
    failure: dict[str, Any] | None = None


def _outcome(row: tuple[Any, ...]) -> Outcome:
    return Outcome.from_dict(json.loads(row[0]))
