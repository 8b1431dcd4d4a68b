"""The batch ledger: each row's outcome, keyed by job and row key, with its history.

`Ledger` is the interface the engines use; `SQLiteLedger` backs it with one
SQLite file (WAL mode; one transaction per finished row that writes the
row's outcome together with its conversation history, so a crash leaves
either both or neither). A row with an outcome is finished: a resumed batch
skips it (a failed one too, unless `--retry-errors`).

Where the file is: `KEDI_HISTORY` when it names a path, else `history.db`
under the user data directory (`$XDG_DATA_HOME/kedi`, default
`~/.local/share/kedi`).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kedi.errors import KediConfigError, KediUsageError

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 30_000
"""How long a writer waits for another process's transaction (Ray workers share the file)."""


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
        return {"key": self.key, "value": self.value, "error": self.error, "usage": self.usage, "session": self.session}

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

    def finished_keys(self, job: str, *, include_failed: bool) -> set[str]:
        """The keys of the rows a resumed run skips."""

    def record(self, job: str, outcome: Outcome, history: str | None) -> None:
        """Write one row's outcome and history in one transaction (a retried row replaces its failure)."""

    def outcome(self, job: str, key: str) -> Outcome | None:
        """The row's recorded outcome, if any."""

    def outcomes(self, job: str) -> Iterator[Outcome]:
        """Every recorded outcome, in input order."""

    def job(self, job: str) -> JobInfo | None:
        """The job with its counts, or None."""

    def jobs(self) -> list[JobInfo]:
        """Every job, with its counts."""

    def remove(self, job: str) -> bool:
        """Delete the job and its rows; False when there was none."""

    def close(self) -> None:
        """Release the connection."""


def default_ledger_path() -> Path:
    """The SQLite file the ledger uses (see the module docstring)."""
    configured = os.environ.get("KEDI_HISTORY", "").strip()
    if configured.lower() == "off":
        raise KediConfigError("kedi batch needs the history store to resume; KEDI_HISTORY=off disables it")
    if configured.startswith(("postgresql://", "postgres://")):
        raise KediConfigError(
            "this build's batch ledger is SQLite only; set KEDI_HISTORY to a file path (see docs/batch.md)"
        )
    if configured:
        return Path(configured).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "kedi" / "history.db"


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS batch_schema (version INTEGER NOT NULL)",
    """CREATE TABLE IF NOT EXISTS batch_jobs (
        job TEXT PRIMARY KEY, program TEXT NOT NULL, program_digest TEXT NOT NULL,
        inputs TEXT NOT NULL, inputs_digest TEXT NOT NULL, created REAL NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS batch_rows (
        job TEXT NOT NULL, key TEXT NOT NULL, position INTEGER NOT NULL,
        failed INTEGER NOT NULL, outcome TEXT NOT NULL, history TEXT,
        finished REAL NOT NULL, PRIMARY KEY (job, key))""",
    "CREATE INDEX IF NOT EXISTS batch_rows_order ON batch_rows (job, position)",
)


class SQLiteLedger:
    """The `Ledger` in one SQLite file, shared safely by several processes."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_ledger_path()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._create()
        except sqlite3.Error as error:
            raise KediConfigError(f"cannot open the batch ledger {self.path}: {error}") from None

    def _create(self) -> None:
        with self._transaction():
            for statement in _SCHEMA:
                self._db.execute(statement)
            row = self._db.execute("SELECT version FROM batch_schema").fetchone()
            if row is None:
                self._db.execute("INSERT INTO batch_schema VALUES (?)", (SCHEMA_VERSION,))
            elif row[0] > SCHEMA_VERSION:
                raise KediConfigError(
                    f"the batch ledger {self.path} was written by a newer kedi (schema {row[0]}); upgrade kedi"
                )

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)

    def open_job(self, job: JobInfo, *, force: bool) -> None:
        with self._transaction():
            known = self._db.execute(
                "SELECT program, program_digest, inputs, inputs_digest FROM batch_jobs WHERE job = ?", (job.name,)
            ).fetchone()
            if known is None:
                self._db.execute(
                    "INSERT INTO batch_jobs VALUES (?, ?, ?, ?, ?, ?)",
                    (job.name, job.program, job.program_digest, job.inputs, job.inputs_digest, time.time()),
                )
                return
            changed = [
                what
                for what, old, new in (("program", known[1], job.program_digest), ("inputs", known[3], job.inputs_digest))
                if old != new
            ]
            if changed and not force:
                raise KediUsageError(
                    f"job {job.name!r} was started with a different {' and '.join(changed)} "
                    f"({known[0]} over {known[2]}); pass --force to continue it with this one "
                    f"(finished rows are kept), choose another --job, or `kedi batch rm {job.name}`"
                )
            if changed:
                self._db.execute(
                    "UPDATE batch_jobs SET program = ?, program_digest = ?, inputs = ?, inputs_digest = ? WHERE job = ?",
                    (job.program, job.program_digest, job.inputs, job.inputs_digest, job.name),
                )

    def finished_keys(self, job: str, *, include_failed: bool) -> set[str]:
        query = "SELECT key FROM batch_rows WHERE job = ?" + ("" if include_failed else " AND failed = 0")
        return {key for (key,) in self._db.execute(query, (job,))}

    def record(self, job: str, outcome: Outcome, history: str | None) -> None:
        text = json.dumps(outcome.to_dict(), ensure_ascii=False)
        with self._transaction():
            self._db.execute(
                "INSERT OR REPLACE INTO batch_rows VALUES (?, ?, ?, ?, ?, ?, ?)",
                (job, outcome.key, outcome.position, int(outcome.failed), text, history, time.time()),
            )

    def outcome(self, job: str, key: str) -> Outcome | None:
        row = self._db.execute("SELECT outcome FROM batch_rows WHERE job = ? AND key = ?", (job, key)).fetchone()
        return None if row is None else Outcome.from_dict(json.loads(row[0]))

    def outcomes(self, job: str) -> Iterator[Outcome]:
        cursor = self._db.execute("SELECT outcome FROM batch_rows WHERE job = ? ORDER BY position", (job,))
        for (text,) in cursor:
            yield Outcome.from_dict(json.loads(text))

    def history(self, job: str, key: str) -> str | None:
        """The conversation JSON recorded with the row (None without one)."""
        row = self._db.execute("SELECT history FROM batch_rows WHERE job = ? AND key = ?", (job, key)).fetchone()
        return None if row is None else row[0]

    def job(self, job: str) -> JobInfo | None:
        return next(iter(self._jobs("WHERE j.job = ?", (job,))), None)

    def jobs(self) -> list[JobInfo]:
        return self._jobs("", ())

    def _jobs(self, where: str, params: tuple[Any, ...]) -> list[JobInfo]:
        query = f"""
            SELECT j.job, j.program, j.program_digest, j.inputs, j.inputs_digest,
                   COALESCE(SUM(r.failed = 0), 0), COALESCE(SUM(r.failed), 0)
            FROM batch_jobs j LEFT JOIN batch_rows r ON r.job = j.job {where}
            GROUP BY j.job ORDER BY j.created"""
        return [JobInfo(*row) for row in self._db.execute(query, params)]

    def remove(self, job: str) -> bool:
        with self._transaction():
            self._db.execute("DELETE FROM batch_rows WHERE job = ?", (job,))
            return self._db.execute("DELETE FROM batch_jobs WHERE job = ?", (job,)).rowcount > 0

    def close(self) -> None:
        self._db.close()


class _Transaction:
    """`BEGIN IMMEDIATE` ... `COMMIT` (or `ROLLBACK` on an error)."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __enter__(self) -> None:
        self._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: object, *rest: object) -> None:
        self._db.execute("COMMIT" if kind is None else "ROLLBACK")
