"""The history store: durable, inspectable sessions behind one small interface.

Two backends implement the same `Store` API:

- **SQLite** (default): one file, `kedi/history.db` under the platformdirs user
  data dir, WAL mode, a busy timeout, `BEGIN IMMEDIATE` write transactions.
- **PostgreSQL** (`kedi[postgres]`, psycopg 3) for many workers on many
  machines.

`KEDI_HISTORY` chooses: unset → the default SQLite file; `path.db` → that
file; `postgresql://...` → that server; `off` (or `0`, `false`, `no`, `none`,
`disabled`) → no store (`open_store` returns `None`). Any other bare word (no
path separator, no `.db`/`.sqlite`/`.sqlite3` suffix) is refused with a
`StoreError`: it is a typo far more often than a file name.

API (stable; other features such as the `kedi batch` ledger build on it)::

    from kedi.history.store import open_store, TurnRecord

    store = open_store()                     # from KEDI_HISTORY; None when "off"
    store = open_store("runs.db")            # or an explicit location
    session = store.create_session(name="triage", program="flow.kedi", model="offline")
    session = store.find_session("triage")   # by name, id or unique id prefix; None if absent
    run_no = store.begin_run(session.id, program="flow.kedi")
    seq = store.commit_turn(TurnRecord(session_id=session.id, run_no=run_no, lane=key, messages=[...]))
    store.finish_run(session.id, run_no, "ok")          # or "failed"/"interrupted", failure={...}
    conversation = store.load_conversation(session.id) # every lane rebuilt, native lanes decoded
    turns = store.turns(session.id)          # full TurnRecords (replay data included)
    listed = store.turn_summaries(session.id)  # TurnSummary tuples: what a listing shows, read fast
    store.close()

One committed turn is one database transaction. A caller that must write
rows of its own atomically with a turn passes `extra=`::

    def ledger(tx: StoreTransaction) -> None:
        tx.execute("INSERT INTO batch_items (id, state) VALUES (?, ?)", (item, "done"))
    store.commit_turn(turn, extra=ledger)

or opens the transaction itself (several turns and rows, all or nothing)::

    with store.transaction() as tx:
        tx.commit_turn(turn)
        tx.execute("UPDATE batch_items SET state = ? WHERE id = ?", ("done", item))
        rows = tx.query("SELECT state FROM batch_items WHERE id = ?", (item,))

Sessions and runs have transaction-level forms too, for a caller whose
session must appear with its first write (`kedi batch`: a row's session, its
first run and its first turn commit together)::

    with store.transaction() as tx:
        tx.create_session(session_id, name="batch/job/7", if_absent=True)
        tx.begin_run(session_id, run_no=1)      # left as it is when already begun
        tx.commit_turn(turn)
        tx.finish_run(session_id, 1, "ok")

SQL given to `execute`/`query` uses `?` placeholders on both backends (the
PostgreSQL backend rewrites them). Tables of one's own are created and
migrated with `store.extend_schema("batch", version, [ddl, ...])`: each
component has its own version row in `kedi_schema`, upgrades run forward
once, and a store written by a newer version of a component is refused.

Every value written passes through `redact` first (secret-looking keys and
known secret values masked), so API keys never reach the database.

A turn's `exchanges` are stored linear (each holds the messages its request
added and a reference to the exchange of the same run and lane it repeats:
`kedi.history.store.exchanges`); `turns()` gives them back in full.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from kedi.history.store.records import (
    RunInfo,
    SessionBusyError,
    SessionInfo,
    StoreError,
    TurnRecord,
    TurnSummary,
    decode_lane_key,
    encode_lane_key,
)
from kedi.redaction import redact

if TYPE_CHECKING:
    from kedi.history.store.base import Store, StoreTransaction

__all__ = [
    "RunInfo",
    "SessionBusyError",
    "SessionInfo",
    "Store",
    "StoreError",
    "StoreTransaction",
    "TurnRecord",
    "TurnSummary",
    "decode_lane_key",
    "default_location",
    "describe_location",
    "encode_lane_key",
    "open_store",
    "redact",
]

OFF = frozenset({"off", "0", "false", "no", "none", "disabled"})
"""The `KEDI_HISTORY` values (any case) that mean "store nothing"."""

_STORE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def default_location() -> Path:
    """The default SQLite file: `history.db` in kedi's user data directory."""
    try:
        from platformdirs import user_data_dir
    except ImportError:  # pragma: no cover - platformdirs is a dependency; XDG fallback
        base = os.environ.get("XDG_DATA_HOME") or os.path.join(
            os.path.expanduser("~"), ".local", "share"
        )
        return Path(base) / "kedi" / "history.db"
    return Path(user_data_dir("kedi", appauthor=False)) / "history.db"


def _is_postgres(location: str) -> bool:
    return location.startswith(("postgresql://", "postgres://"))


def describe_location(location: str | os.PathLike[str] | None = None) -> str:
    """Where `open_store(location)` points, for messages (a DSN's password masked)."""
    text = _configured(location)
    if text is None:
        return "off"
    if _is_postgres(text):
        from kedi.history.store.records import mask_dsn

        return mask_dsn(text)
    return text


def _configured(location: str | os.PathLike[str] | None) -> str | None:
    if location is None:
        location = os.environ.get("KEDI_HISTORY", "").strip() or None
        if location is None:
            return str(default_location())
        _refuse_a_bare_word(location)
    text = os.fspath(location)
    if text.strip().lower() in OFF:
        return None
    return text


def _refuse_a_bare_word(value: str) -> None:
    """Refuse `KEDI_HISTORY=disabeld`: a typo, not a wish for a SQLite file of that name here.

    A value is taken as a location when it is a URL, holds a path separator,
    starts with `~` or ends in `.db`, `.sqlite` or `.sqlite3`.
    """
    if value.lower() in OFF or "://" in value or value.startswith("~"):
        return
    if value.lower().endswith(_STORE_SUFFIXES) or any(sep in value for sep in ("/", os.sep)):
        return
    raise StoreError(
        f"KEDI_HISTORY={value!r} is neither `off` nor a store location: write `off` to keep "
        f"nothing, a file such as ./{value}.db, or a postgresql:// URL"
    )


def open_store(
    location: str | os.PathLike[str] | None = None, *, busy_timeout: float = 10.0
) -> Store | None:
    """Open (creating and migrating as needed) the store at `location`, or from `KEDI_HISTORY`.

    Returns `None` when the location is `off`. Raises `StoreError` with a clear
    message when the store cannot be opened, is locked for longer than
    `busy_timeout` seconds, or was written by a newer kedi.
    """
    text = _configured(location)
    if text is None:
        return None
    if _is_postgres(text):
        from kedi.history.store.postgres import open_postgres

        return open_postgres(text, busy_timeout=busy_timeout)
    from kedi.history.store.sqlite import open_sqlite

    return open_sqlite(Path(text).expanduser(), busy_timeout=busy_timeout)


def __getattr__(name: str) -> object:
    """`Store` and `StoreTransaction` load with the store's queries, on first use."""
    if name in ("Store", "StoreTransaction"):
        from kedi.history.store import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
