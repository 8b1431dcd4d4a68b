"""The PostgreSQL backend (`pip install 'kedi[postgres]'`, psycopg 3).

One connection per store; every transaction is explicit (`BEGIN ... COMMIT`)
and a turn commits in one. Concurrent writers of one session are ordered by
the row lock the turn counter's `UPDATE` takes; migrations take a
transaction-scoped advisory lock so two workers starting at once do not both
run them. A run continuing a session holds it with a session-level advisory
lock (`pg_try_advisory_lock` on a key hashed from the session id) on the
store's connection, which the server drops when that connection ends, however
the process ended; the connection's `application_name` names the holder's pid
and host for the refusal message. The DSN's password never appears in messages.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kedi.errors import ExtraNotInstalledError
from kedi.history.store.base import Store
from kedi.history.store.records import StoreError, mask_dsn

__all__ = ["open_postgres"]

_SCHEMA_LOCK = 0x6B656469  # "kedi": the advisory-lock key for migrations


class PostgresDriver:
    """A `Driver` over one psycopg connection."""

    kind = "postgresql"

    def __init__(self, dsn: str, busy_timeout: float) -> None:
        try:
            import psycopg
        except ImportError:
            raise ExtraNotInstalledError("psycopg", "postgres") from None
        self._psycopg = psycopg
        self._lock = threading.RLock()
        """One transaction at a time on the connection (procedures may run in threads)."""
        self.location = mask_dsn(dsn)
        try:
            self._connection = psycopg.connect(
                dsn,
                autocommit=True,
                connect_timeout=max(1, int(busy_timeout)),
                options=f"-c lock_timeout={int(busy_timeout * 1000)}",
            )
        except psycopg.Error as error:
            raise StoreError(
                f"cannot connect to the history store {self.location}: {_first_line(error)}"
            ) from None

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[Any]:
        """An explicit transaction; rolled back on any exception."""
        psycopg = self._psycopg
        try:
            with self._lock, self._connection.transaction(), self._connection.cursor() as cursor:
                yield cursor
        except psycopg.Error as error:
            raise StoreError(f"history store {self.location}: {_first_line(error)}") from None

    def translate(self, sql: str) -> str:
        """`?` placeholders become psycopg's `%s`."""
        return sql.replace("%", "%%").replace("?", "%s")

    def lock_schema(self, cursor: Any) -> None:
        """Serialize migrations across workers (released at commit)."""
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))

    def hold_session(self, session_id: str, holder: str) -> str | None:
        """`pg_try_advisory_lock` on the session's key; else the holder's `application_name`."""
        key = _session_key(session_id)
        try:
            with self._lock, self._connection.cursor() as cursor:
                cursor.execute("SELECT pg_try_advisory_lock(%s)", (key,))
                taken = cursor.fetchone()
                if taken and taken[0]:
                    cursor.execute(
                        "SELECT set_config('application_name', %s, false)", (f"kedi {holder}"[:63],)
                    )
                    return None
                cursor.execute(
                    "SELECT a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
                    "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
                    "AND l.classid::bigint = %s AND l.objid::bigint = %s",
                    (key >> 32, key & 0xFFFFFFFF),
                )
                row = cursor.fetchone()
        except self._psycopg.Error as error:
            raise StoreError(f"history store {self.location}: {_first_line(error)}") from None
        name = str(row[0]) if row and row[0] else ""
        return name.removeprefix("kedi ") if name.startswith("kedi ") else ""

    def forget_session(self, session_id: str) -> None:
        """Advisory locks leave nothing behind."""

    def close(self) -> None:
        """Close the connection (the server drops its session locks)."""
        self._connection.close()


def _session_key(session_id: str) -> int:
    """The session's advisory-lock key: 63 bits of a hash (never `_SCHEMA_LOCK` in practice)."""
    return int.from_bytes(hashlib.sha256(b"kedi-session:" + session_id.encode()).digest()[:8]) >> 1


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def open_postgres(dsn: str, *, busy_timeout: float = 10.0) -> Store:
    """The store in the PostgreSQL database at `dsn`."""
    return Store(PostgresDriver(dsn, busy_timeout))
