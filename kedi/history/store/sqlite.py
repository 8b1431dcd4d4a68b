"""The SQLite backend: one file, WAL mode, `BEGIN IMMEDIATE` writes, a busy timeout.

The connection runs in autocommit mode and opens every transaction itself,
so a turn is exactly one `BEGIN IMMEDIATE ... COMMIT`: a process killed
mid-commit leaves the turn either wholly in the file or wholly out of it
(SQLite's WAL recovery), and writers from several processes queue on the
file's lock for up to the busy timeout before failing with a clear error.
`synchronous=FULL` makes each committed turn durable across a power loss,
not only a process crash.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kedi.history.store.base import Store
from kedi.history.store.records import StoreError

__all__ = ["open_sqlite"]


class SQLiteDriver:
    """A `Driver` over one `sqlite3` connection."""

    kind = "sqlite"

    def __init__(self, path: Path, busy_timeout: float) -> None:
        self.location = str(path)
        self._timeout = busy_timeout
        self._lock = threading.RLock()
        """One transaction at a time on the connection (procedures may run in threads)."""
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._connection = sqlite3.connect(
                str(path), timeout=busy_timeout, isolation_level=None, check_same_thread=False
            )
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute("PRAGMA synchronous=FULL")
            self._connection.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as error:
            raise self._error(error) from None
        except OSError as error:
            raise StoreError(
                f"cannot open the history store {path}: {error.strerror or error}"
            ) from None
        try:
            path.chmod(0o600)  # conversations hold user data
        except OSError:
            pass

    def _error(self, error: sqlite3.Error) -> StoreError:
        text = str(error)
        if "locked" in text or "busy" in text:
            return StoreError(
                f"the history store {self.location} stayed locked by another process for more than "
                f"{self._timeout:g}s; try again, or use PostgreSQL (KEDI_HISTORY=postgresql://...) for many writers"
            )
        if "not a database" in text or "malformed" in text:
            return StoreError(
                f"{self.location} is not a kedi history store (or is damaged): {text}"
            )
        return StoreError(f"history store {self.location}: {text}")

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[Any]:
        """`BEGIN IMMEDIATE` (write) or `BEGIN` (read) ... `COMMIT`; rollback on any exception."""
        with self._lock:
            yield from self._transaction(write)

    def _transaction(self, write: bool) -> Iterator[Any]:
        connection = self._connection
        try:
            connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
        except sqlite3.Error as error:
            raise self._error(error) from None
        cursor = connection.cursor()
        try:
            yield cursor
            connection.execute("COMMIT")
        except BaseException as error:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            if isinstance(error, sqlite3.Error):
                raise self._error(error) from None
            raise
        finally:
            cursor.close()

    def translate(self, sql: str) -> str:
        """SQLite takes `?` placeholders as they are."""
        return sql

    def lock_schema(self, cursor: Any) -> None:
        """`BEGIN IMMEDIATE` already holds the file's write lock."""

    def close(self) -> None:
        """Close the connection."""
        self._connection.close()


def open_sqlite(path: Path, *, busy_timeout: float = 10.0) -> Store:
    """The store in the SQLite file at `path` (created with its directory if missing)."""
    return Store(SQLiteDriver(path, busy_timeout))
