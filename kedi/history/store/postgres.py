"""The PostgreSQL backend (`pip install 'kedi[postgres]'`, psycopg 3).

One connection per store; every transaction is explicit (`BEGIN ... COMMIT`)
and a turn commits in one. Concurrent writers of one session are ordered by
the row lock the turn counter's `UPDATE` takes; migrations take a
transaction-scoped advisory lock so two workers starting at once do not both
run them. The DSN's password never appears in messages.
"""

from __future__ import annotations

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

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()


def _first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def open_postgres(dsn: str, *, busy_timeout: float = 10.0) -> Store:
    """The store in the PostgreSQL database at `dsn`."""
    return Store(PostgresDriver(dsn, busy_timeout))
