"""The SQLite backend: one file, WAL mode, `BEGIN IMMEDIATE` writes, a busy timeout.

The connection runs in autocommit mode and opens every transaction itself,
so a turn is exactly one `BEGIN IMMEDIATE ... COMMIT`: a process killed
mid-commit leaves the turn either wholly in the file or wholly out of it
(SQLite's WAL recovery), and writers from several processes queue on the
file's lock for up to the busy timeout before failing with a clear error.
`synchronous=FULL` makes each committed turn durable across a power loss,
not only a process crash.

A run continuing a session holds it with `flock` on a small file per session
in `.<store>.locks/` beside the database (named by a hash of the session id,
holding the holder's pid and host): the kernel drops the lock when the
holder's file is closed, including when the process is killed.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
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
        # hidden: `history.db*` still names only the store's own files
        self._locks_dir = path.with_name(f".{path.name}.locks")
        self._held: dict[str, int] = {}
        """The session locks this store holds: session id -> the locked file's descriptor."""
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

    def _lock_file(self, session_id: str) -> Path:
        # hashed: a session id may be any text a caller chose
        return self._locks_dir / (hashlib.sha256(session_id.encode()).hexdigest()[:32] + ".lock")

    def _try_flock(self, session_id: str) -> int | None:
        """The descriptor of the session's lock file, locked; None when another holds it."""
        try:  # imported here: reading a store needs no lock, and fcntl is Unix-only
            import fcntl
        except ImportError:
            raise StoreError(
                "session locks need fcntl (a Unix system); this platform cannot record runs "
                f"in {self.location}"
            ) from None
        try:
            self._locks_dir.mkdir(mode=0o700, exist_ok=True)
            descriptor = os.open(self._lock_file(session_id), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as error:
            raise StoreError(
                f"cannot create the session lock beside {self.location}: {error.strerror or error}"
            ) from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            return None
        return descriptor

    def hold_session(self, session_id: str, holder: str) -> str | None:
        """`flock` the session's lock file and write `holder` in it; else return what it says."""
        if session_id in self._held:
            return None
        descriptor = self._try_flock(session_id)
        if descriptor is None:
            with contextlib.suppress(OSError):
                return self._lock_file(session_id).read_text(errors="replace").strip()
            return ""
        try:
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, holder.encode(), 0)
        except OSError as error:  # a full disk, say: a store error, not a traceback
            os.close(descriptor)
            raise StoreError(
                f"cannot write the session lock beside {self.location}: {error.strerror or error}"
            ) from None
        self._held[session_id] = descriptor
        return None

    def forget_session(self, session_id: str) -> None:
        """Remove the deleted session's lock file, unless another run holds it."""
        descriptor = self._held.pop(session_id, None)
        if descriptor is None:
            if not self._lock_file(session_id).exists():
                return  # never held: nothing to remove (and no lock file to create for it)
            descriptor = self._try_flock(session_id)
        if descriptor is not None:
            with contextlib.suppress(OSError):
                self._lock_file(session_id).unlink()
            os.close(descriptor)

    def close(self) -> None:
        """Close the connection and release the session locks."""
        self._connection.close()
        for descriptor in self._held.values():
            os.close(descriptor)
        self._held.clear()


def open_sqlite(path: Path, *, busy_timeout: float = 10.0) -> Store:
    """The store in the SQLite file at `path` (created with its directory if missing)."""
    return Store(SQLiteDriver(path, busy_timeout))
