"""The `Store`: every query of the history store, written once for both backends.

A backend (`sqlite.py`, `postgres.py`) supplies a `Driver`: how to open a
write or read transaction and how it spells placeholders. Everything else,
including migrations and the one-transaction turn commit, lives here.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from itertools import repeat
from typing import Any, Protocol

from kedi.history.lanes import Conversation, Lane, LaneKey
from kedi.history.linear import Expander, MissingBase
from kedi.history.store.exchanges import (
    Bases,
    ExchangeBases,
    Key,
    expand_exchanges,
    shorten_exchanges,
)
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
from kedi.history.store.schema import COMPONENT, LATEST, MIGRATIONS
from kedi.redaction import redacted_json

__all__ = ["Driver", "Store", "StoreTransaction"]


class Cursor(Protocol):
    """The DB-API cursor subset the store uses."""

    def execute(self, sql: str, params: Sequence[Any] = ...) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def fetchmany(self, size: int = ...) -> list[Any]: ...


class Driver(Protocol):
    """What a backend provides."""

    kind: str
    """`sqlite` or `postgresql`."""
    location: str
    """The file path, or the DSN with its password masked."""

    def transaction(self, *, write: bool) -> AbstractContextManager[Cursor]:
        """One database transaction; commits on normal exit, rolls back on an exception."""

    def translate(self, sql: str) -> str:
        """`sql` with `?` placeholders in the backend's own style."""

    def lock_schema(self, cursor: Cursor) -> None:
        """Serialize concurrent migrations (inside the migration transaction)."""

    def hold_session(self, session_id: str, holder: str) -> str | None:
        """Take the session's run lock without waiting; None when taken (or already held here),
        else how its holder described itself ('' when unknown).

        The lock must be one the operating system or the server drops when the
        holder ends in any way (closing the store, exiting, SIGKILL).
        """

    def forget_session(self, session_id: str) -> None:
        """Drop what the run lock of a deleted session leaves behind (if no run holds it)."""

    def close(self) -> None:
        """Release the connection (and every session lock held through it)."""


def _json(value: Any) -> str:
    (text,) = redacted_json([value])
    return text


class StoreTransaction:
    """One open database transaction: commit turns and run SQL of your own in it."""

    def __init__(self, cursor: Cursor, driver: Driver, bases: ExchangeBases | None = None) -> None:
        self._cursor = cursor
        self._driver = driver
        self._bases = bases
        self._committed_bases: dict[Key, Bases] = {}
        """The bases this transaction's turns leave for later ones (the store remembers them on commit)."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> None:
        """Run one statement (`?` placeholders on both backends)."""
        self._cursor.execute(self._driver.translate(sql), tuple(params))

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement and return its rows."""
        self._cursor.execute(self._driver.translate(sql), tuple(params))
        return [tuple(row) for row in self._cursor.fetchall()]

    def commit_turn(self, turn: TurnRecord) -> int:
        """Insert `turn` (numbered by the session's counter); return its sequence number.

        The counter update takes the session row's write lock, so concurrent
        writers of one session get consecutive numbers in commit order.
        """
        now = time.time()
        # `updated` is set when a run begins and ends, not per turn: changing it here would
        # rewrite a page of its index in every commit as well
        rows = self.query(
            "UPDATE sessions SET turns = turns + 1 WHERE id = ? RETURNING turns", (turn.session_id,)
        )
        if not rows:
            raise StoreError(
                f"no session {turn.session_id!r} in the store (removed while running?)"
            )
        seq = int(rows[0][0])
        lane = encode_lane_key(turn.lane)
        request, messages, rewritten, value, usage, exchanges = redacted_json(
            [
                turn.request,
                turn.messages,
                turn.rewritten,
                turn.value,
                turn.usage,
                self._linear_exchanges(turn, lane, seq),
            ]
        )
        self.execute(
            "INSERT INTO turns (session_id, seq, run_no, lane, history, epoch, run_id, origin, request, "
            "messages, rewritten, value, usage, exchanges, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                turn.session_id,
                seq,
                turn.run_no,
                lane,
                1 if turn.history else 0,
                turn.epoch,
                turn.run_id,
                turn.origin,
                request,
                messages,
                None if turn.rewritten is None else rewritten,
                value,
                usage,
                exchanges,
                now,
            ),
        )
        return seq

    def _linear_exchanges(self, turn: TurnRecord, lane: str, seq: int) -> list[Any]:
        """`turn.exchanges` in linear form (see `kedi.history.store.exchanges`), when this store can."""
        if self._bases is None or not turn.exchanges:
            return turn.exchanges
        key = (turn.session_id, turn.run_no, lane, turn.history)
        previous = self._committed_bases.get(key) or self._bases.get(key)
        # a reference must name a row that is there: the remembered turn may have been deleted since
        if previous is not None and not self.query(
            "SELECT 1 FROM turns WHERE session_id = ? AND seq = ?",
            (turn.session_id, previous[0][0]),
        ):
            previous = None
        exchanges, last = shorten_exchanges(turn.exchanges, seq, previous)
        if last is not None:
            self._committed_bases[key] = last
        return exchanges

    def create_session(
        self,
        session_id: str,
        *,
        name: str | None = None,
        program: str = "",
        model: str = "",
        parent: str | None = None,
        if_absent: bool = False,
    ) -> float:
        """Insert session `session_id` in this transaction; return its creation time.

        With `if_absent`, a session that already has this id is left as it is
        (so a caller may create its session with its first write, every time).
        A name another session has raises `StoreError`.
        """
        now = time.time()
        self.execute(
            "INSERT INTO sessions (id, name, program, model, parent, created, updated, turns) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, 0)"
            + (" ON CONFLICT (id) DO NOTHING" if if_absent else ""),
            (session_id, name, program, model, parent, now, now),
        )
        return now

    def begin_run(self, session_id: str, *, program: str = "", run_no: int | None = None) -> int:
        """Record the start of a run in this transaction; return its number.

        Without `run_no`, the next number (1, 2, ...). With it, that run, left
        as it is when it was already begun (the first run of a session created
        `if_absent` is `run_no=1`).
        """
        now = time.time()
        if run_no is None:
            rows = self.query(
                "UPDATE sessions SET updated = ?, program = CASE WHEN ? = '' THEN program ELSE ? END "
                "WHERE id = ? RETURNING (SELECT COALESCE(MAX(run_no), 0) + 1 FROM runs WHERE session_id = ?)",
                (now, program, program, session_id, session_id),
            )
            if not rows:
                raise StoreError(f"no session {session_id!r} in the store")
            run_no = int(rows[0][0])
            conflict = ""
        else:
            conflict = " ON CONFLICT (session_id, run_no) DO NOTHING"
        self.execute(
            "INSERT INTO runs (session_id, run_no, program, started, status) VALUES (?, ?, ?, ?, 'running')"
            + conflict,
            (session_id, run_no, program, now),
        )
        return run_no

    def reopen_run(self, session_id: str, run_no: int) -> None:
        """Mark a stopped run as running again (resuming it), its failure evidence spent, in this transaction."""
        self.execute(
            "UPDATE runs SET status = 'running', finished = NULL, failure = NULL WHERE session_id = ? AND run_no = ?",
            (session_id, run_no),
        )

    def finish_run(
        self, session_id: str, run_no: int, status: str, *, failure: dict[str, Any] | None = None
    ) -> None:
        """Record how a run ended (`ok`, `failed`, `interrupted`, with the failure evidence) in this transaction."""
        now = time.time()
        self.execute(
            "UPDATE runs SET finished = ?, status = ?, failure = ? WHERE session_id = ? AND run_no = ?",
            (now, status, None if failure is None else _json(failure), session_id, run_no),
        )
        self.execute("UPDATE sessions SET updated = ? WHERE id = ?", (now, session_id))


_SESSION_COLUMNS = (
    "s.id, s.name, s.program, s.model, s.parent, s.created, s.updated, s.turns, "
    "(SELECT r.status FROM runs r WHERE r.session_id = s.id ORDER BY r.run_no DESC LIMIT 1)"
)
_TURN_COLUMNS = (
    "session_id, seq, run_no, lane, history, epoch, run_id, origin, request, messages, rewritten, "
    "value, usage, exchanges, created"
)
_JSON_COLUMNS = ("request", "messages", "rewritten", "value", "usage", "exchanges")


def _turn_select(replay_data: bool) -> str:
    """The turn columns, the JSON ones joined into one array so each row decodes with one `json.loads`."""
    parts = []
    for name in _JSON_COLUMNS:
        if not replay_data and name in ("request", "exchanges"):
            parts.append("'null'")
        else:
            parts.append(f"COALESCE({name}, 'null')")
    return (
        "session_id, seq, run_no, lane, history, epoch, run_id, origin, created, '[' || "
        + " || ',' || ".join(parts)
        + " || ']'"
    )


def _summaries(session_id: str, rows: Sequence[Sequence[Any]]) -> list[TurnSummary]:
    """The `TurnSummary`s of rows `seq, run_no, lane, history, origin, messages, value, usage`."""
    try:
        decoded = json.loads("[" + ",".join(text for row in rows for text in row[5:]) + "]")
    except ValueError as error:
        raise StoreError(
            f"session {session_id}: a stored turn is not valid JSON ({error})"
        ) from None
    seqs, run_nos, lanes, histories, origins, *_ = zip(*rows, strict=True)
    columns = zip(
        seqs,
        run_nos,
        map(decode_lane_key, lanes),
        map(_lane_label, lanes),
        map(bool, histories),
        origins,
        decoded[0::3],
        decoded[1::3],
        decoded[2::3],
        strict=True,
    )
    # column-wise, each tuple built in C: per-row Python calls cost as much as the decoding
    return list(map(tuple.__new__, repeat(TurnSummary), columns))


@functools.lru_cache(maxsize=256)
def _lane_label(text: str) -> str:
    """The label of the encoded lane key `text` (cached: a session names a handful of lanes)."""
    return decode_lane_key(text).label()


MIN_ID_PREFIX = 4
"""How many leading characters of a session id find it (fewer would match too many)."""


def _session(row: Sequence[Any]) -> SessionInfo:
    return SessionInfo(
        id=row[0],
        name=row[1],
        program=row[2],
        model=row[3],
        parent=row[4],
        created=float(row[5]),
        updated=float(row[6]),
        turns=int(row[7]),
        status=row[8] or "",
    )


def _turn(row: Sequence[Any], expander: Expander) -> TurnRecord:
    request, messages, rewritten, value, usage, exchanges = json.loads(row[9])
    seq = int(row[1])
    try:
        exchanges = expand_exchanges(expander, seq, exchanges or [])
    except MissingBase as missing:
        raise StoreError(
            f"session {row[0]}: the exchanges of turn {seq} refer to {missing.index!r} "
            "(turn seq, position), which is not stored in the same run"
        ) from None
    return TurnRecord(
        session_id=row[0],
        seq=seq,
        run_no=int(row[2]),
        lane=decode_lane_key(row[3]),
        history=bool(row[4]),
        epoch=int(row[5]),
        run_id=row[6],
        origin=row[7],
        created=float(row[8]),
        request=request or {},
        messages=messages,
        rewritten=rewritten,
        value=value,
        usage=usage,
        exchanges=exchanges,
    )


class Store:
    """A history store (see the package docstring for the API)."""

    def __init__(self, driver: Driver) -> None:
        self._driver = driver
        self.kind = driver.kind
        self.location = driver.location
        self._exchange_bases = ExchangeBases()
        self.extend_schema(COMPONENT, LATEST, [], _migrations=MIGRATIONS)

    def __repr__(self) -> str:
        return f"Store({self.kind}, {self.location!r})"

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection (the store is unusable afterwards)."""
        self._driver.close()

    # ------------------------------------------------------------ transactions

    @contextmanager
    def transaction(self) -> Iterator[StoreTransaction]:
        """One write transaction: everything inside commits together or not at all."""
        with self._driver.transaction(write=True) as cursor:
            tx = StoreTransaction(cursor, self._driver, self._exchange_bases)
            yield tx
        self._exchange_bases.committed(tx._committed_bases)

    def _read(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._driver.transaction(write=False) as cursor:
            return StoreTransaction(cursor, self._driver).query(sql, params)

    def extend_schema(
        self,
        component: str,
        version: int,
        statements: Sequence[str],
        *,
        _migrations: dict[int, list[str]] | None = None,
    ) -> None:
        """Bring `component`'s tables to `version`, running each missing step once.

        With plain `statements`, they are the whole step to `version` (run once
        when the stored version is lower). Raises `StoreError` when the store
        holds a newer version than this code knows.
        """
        steps = _migrations if _migrations is not None else {version: list(statements)}
        with self.transaction() as tx:
            self._driver.lock_schema(tx._cursor)
            tx.execute(
                "CREATE TABLE IF NOT EXISTS kedi_schema (component TEXT PRIMARY KEY, version BIGINT NOT NULL)"
            )
            rows = tx.query("SELECT version FROM kedi_schema WHERE component = ?", (component,))
            current = int(rows[0][0]) if rows else 0
            if current > version:
                raise StoreError(
                    f"the history store {self.location} was written by a newer kedi "
                    f"({component} schema version {current}; this kedi knows up to {version}); "
                    "upgrade kedi, or point KEDI_HISTORY at another store"
                )
            for step in sorted(number for number in steps if current < number <= version):
                for statement in steps[step]:
                    tx.execute(statement)
            if current < version:
                tx.execute(
                    "INSERT INTO kedi_schema (component, version) VALUES (?, ?) "
                    "ON CONFLICT (component) DO UPDATE SET version = excluded.version",
                    (component, version),
                )

    def schema_version(self, component: str = COMPONENT) -> int:
        """The stored schema version of `component` (0 when it has none)."""
        rows = self._read("SELECT version FROM kedi_schema WHERE component = ?", (component,))
        return int(rows[0][0]) if rows else 0

    # ------------------------------------------------------------ sessions

    def create_session(
        self,
        *,
        name: str | None = None,
        program: str = "",
        model: str = "",
        parent: str | None = None,
        session_id: str | None = None,
    ) -> SessionInfo:
        """A new, empty session (its id is a fresh conversation id unless given)."""
        from kedi.history.identity import new_id

        identifier = session_id or new_id()
        try:
            with self.transaction() as tx:
                now = tx.create_session(
                    identifier, name=name, program=program, model=model, parent=parent
                )
        except StoreError:
            if self.find_session(name or identifier) is not None:
                raise StoreError(f"a session named {name or identifier!r} already exists") from None
            raise
        return SessionInfo(identifier, name, program, model, parent, now, now, 0)

    def find_session(self, ref: str, *, prefix: bool = True) -> SessionInfo | None:
        """The session named `ref`, or with id `ref`, or (with `prefix`) whose id starts with `ref` (if unique)."""
        where = f"SELECT {_SESSION_COLUMNS} FROM sessions s WHERE "
        rows = self._read(where + "s.name = ? OR s.id = ?", (ref, ref))
        if not rows and prefix and len(ref) >= MIN_ID_PREFIX:
            rows = self._read(where + "s.id LIKE ?", (ref.replace("%", "").replace("_", "") + "%",))
            if len(rows) > 1:
                raise StoreError(f"{ref!r} matches {len(rows)} sessions; give more of the id")
        named = [row for row in rows if row[1] == ref]
        return _session((named or rows)[0]) if rows else None

    def session(self, ref: str) -> SessionInfo:
        """`find_session`, or a `StoreError` naming `ref` and how to list sessions."""
        found = self.find_session(ref)
        if found is None and len(ref) < MIN_ID_PREFIX:
            raise StoreError(
                f"no session named {ref!r} in {self.location}, and an id prefix needs at least "
                f"{MIN_ID_PREFIX} characters: give more of the id (list them with `kedi history ls`)"
            )
        if found is None:
            raise StoreError(
                f"no session {ref!r} in {self.location} (list them with `kedi history ls`)"
            )
        return found

    def sessions(self, *, limit: int | None = None) -> list[SessionInfo]:
        """Sessions, most recently used first."""
        sql = f"SELECT {_SESSION_COLUMNS} FROM sessions s ORDER BY s.updated DESC, s.id DESC"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [_session(row) for row in self._read(sql)]

    def latest_session(self) -> SessionInfo | None:
        """The most recently used session."""
        found = self.sessions(limit=1)
        return found[0] if found else None

    def rename_session(self, session_id: str, name: str | None) -> None:
        """Give a session a name (or take it away)."""
        with self.transaction() as tx:
            tx.execute("UPDATE sessions SET name = ? WHERE id = ?", (name, session_id))

    def delete_session(self, session_id: str) -> None:
        """Remove a session with its runs and turns."""
        with self.transaction() as tx:
            tx.execute("DELETE FROM turns WHERE session_id = ?", (session_id,))
            tx.execute("DELETE FROM runs WHERE session_id = ?", (session_id,))
            tx.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        self._driver.forget_session(session_id)

    def gc(self, older_than: float) -> list[str]:
        """Remove sessions unused for `older_than` seconds; return their ids."""
        cutoff = time.time() - older_than
        stale = [
            row[0] for row in self._read("SELECT id FROM sessions WHERE updated < ?", (cutoff,))
        ]
        for session_id in stale:
            self.delete_session(session_id)
        return stale

    def fork_session(self, source: str, *, name: str | None = None) -> SessionInfo:
        """A copy of session `source` (every run and turn) under a new id, the parent recorded."""
        parent = self.session(source)
        child = self.create_session(
            name=name, program=parent.program, model=parent.model, parent=parent.id
        )
        with self.transaction() as tx:
            tx.execute(
                "INSERT INTO runs (session_id, run_no, program, started, finished, status, failure) "
                "SELECT ?, run_no, program, started, finished, status, failure FROM runs WHERE session_id = ?",
                (child.id, parent.id),
            )
            tx.execute(
                f"INSERT INTO turns ({_TURN_COLUMNS}) SELECT ?, {_TURN_COLUMNS.split(', ', 1)[1]} "
                "FROM turns WHERE session_id = ?",
                (child.id, parent.id),
            )
            # The counter numbers the next turn, so it starts past the highest copied seq:
            # a parent that lost a run's turns has gaps, and their count would reuse a seq.
            tx.execute(
                "UPDATE sessions SET turns = "
                "(SELECT COALESCE(MAX(seq), 0) FROM turns WHERE session_id = ?) WHERE id = ?",
                (child.id, child.id),
            )
        return self.session(child.id)

    # ------------------------------------------------------------ runs

    def hold_session(self, session_id: str) -> None:
        """Hold `session_id` for this store's run until the store is closed.

        A run that continues a session appends to lanes whose view it loaded at
        its start; a second run doing the same at once would interleave turns no
        request ever sent. So one run at a time: this raises `SessionBusyError`
        (naming the holder's run, start time, pid and host) when another store
        holds the session, and never waits. Readers take no lock.
        """
        holder = self._driver.hold_session(
            session_id, f"pid {os.getpid()} on {socket.gethostname()}"
        )
        if holder is None:
            return
        found = self.find_session(session_id, prefix=False)
        label = found.label if found is not None else session_id
        running = [run for run in self.runs(session_id) if run.status == "running"]
        details = [holder] if holder else []
        if running:
            started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(running[-1].started))
            details[:0] = [f"run {running[-1].run_no}", f"started at {started}"]
        raise SessionBusyError(
            f"session {label!r} has a run in progress"
            + (f" ({', '.join(details)})" if details else "")
            + "; wait for it or continue another session"
        )

    def begin_run(self, session_id: str, *, program: str = "") -> int:
        """Record the start of a run; return its number (1, 2, ...)."""
        with self.transaction() as tx:
            return tx.begin_run(session_id, program=program)

    def finish_run(
        self, session_id: str, run_no: int, status: str, *, failure: dict[str, Any] | None = None
    ) -> None:
        """Record how a run ended: `ok`, `failed` or `interrupted` (with the failure evidence)."""
        with self.transaction() as tx:
            tx.finish_run(session_id, run_no, status, failure=failure)

    def reopen_run(self, session_id: str, run_no: int) -> None:
        """Mark a failed run as running again (resuming it); its failure evidence is cleared.

        The resuming run holds the evidence it read: if it stops too, its own
        failure is stored, and if it is killed, a later resume must not apply
        the old partial to whatever call then comes first.
        """
        with self.transaction() as tx:
            tx.reopen_run(session_id, run_no)

    def runs(self, session_id: str) -> list[RunInfo]:
        """The session's runs in order."""
        rows = self._read(
            "SELECT session_id, run_no, program, started, finished, status, failure FROM runs "
            "WHERE session_id = ? ORDER BY run_no",
            (session_id,),
        )
        return [
            RunInfo(
                row[0],
                int(row[1]),
                row[2],
                float(row[3]),
                None if row[4] is None else float(row[4]),
                row[5],
                None if row[6] is None else json.loads(row[6]),
            )
            for row in rows
        ]

    def delete_run_turns(self, session_id: str, run_no: int) -> None:
        """Forget the turns of one run (re-recording it)."""
        with self.transaction() as tx:
            tx.execute(
                "DELETE FROM turns WHERE session_id = ? AND run_no = ?", (session_id, run_no)
            )

    # ------------------------------------------------------------ turns

    def commit_turn(
        self, turn: TurnRecord, *, extra: Callable[[StoreTransaction], None] | None = None
    ) -> int:
        """Commit one turn (and `extra`'s statements) in one transaction; return its sequence number."""
        with self.transaction() as tx:
            seq = tx.commit_turn(turn)
            if extra is not None:
                extra(tx)
        return seq

    def turns(
        self,
        session_id: str,
        *,
        run_no: int | None = None,
        before_run: int | None = None,
        replay_data: bool = True,
    ) -> list[TurnRecord]:
        """The session's turns in commit order (of one run, or of the runs before one).

        `replay_data=False` leaves out each turn's rendered request and
        transcript lines (empty in the records): what a listing does not show.
        """
        sql = f"SELECT {_turn_select(replay_data)} FROM turns WHERE session_id = ?"
        params: list[Any] = [session_id]
        if run_no is not None:
            sql += " AND run_no = ?"
            params.append(run_no)
        if before_run is not None:
            sql += " AND run_no < ?"
            params.append(before_run)
        expander = Expander()
        return [_turn(row, expander) for row in self._read(sql + " ORDER BY seq", params)]

    def turn_summaries(self, session_id: str, *, batch: int = 500) -> Generator[list[TurnSummary]]:
        """The session's turns in commit order, as a listing shows them: `TurnSummary` lists of up to `batch`.

        Reads only the shown columns, a batch at a time (a long session never
        sits in memory whole: 10,000 turns print a fifth faster), and decodes a
        batch's JSON in one `json.loads` (one call per row costs more than the
        decoding). The read transaction stays open until the iterator is
        exhausted or closed: finish with it before using the store again.
        """
        with self._driver.transaction(write=False) as cursor:
            cursor.execute(
                self._driver.translate(
                    "SELECT seq, run_no, lane, history, origin, messages, COALESCE(value, 'null'), usage "
                    "FROM turns WHERE session_id = ? ORDER BY seq"
                ),
                (session_id,),
            )
            while rows := cursor.fetchmany(batch):
                yield _summaries(session_id, rows)

    def load_conversation(
        self, session_id: str, *, before_run: int | None = None, adapters: Iterable[Any] = ()
    ) -> Conversation:
        """The session's conversation rebuilt from its turns (every lane, native ones decoded)."""
        # Without the replay data: rebuilding a lane reads only messages, and expanding
        # every stored exchange in full is quadratic in the session's length.
        turns = self.turns(session_id, before_run=before_run, replay_data=False)
        return build_conversation(session_id, turns, adapters=adapters)


def build_conversation(
    conversation_id: str, turns: Iterable[TurnRecord], *, adapters: Iterable[Any] = ()
) -> Conversation:
    """Replay committed turns into lanes: appends, and a rewrite replaces the lane's prior history."""
    from kedi.history.persistence import load_lane_messages

    given = tuple(adapters)
    raw: dict[LaneKey, tuple[list[Any], int]] = {}
    for turn in turns:
        if not turn.history:
            continue
        messages, _ = raw.get(turn.lane, ([], 0))
        if turn.rewritten is not None:
            messages = list(turn.rewritten)
        raw[turn.lane] = ([*messages, *turn.messages], turn.epoch)
    conversation = Conversation(conversation_id)
    for key, (data, epoch) in raw.items():
        conversation._lanes[key] = Lane(
            key, conversation_id, load_lane_messages(key, data, given, f"lane {key.label()}"), epoch
        )
    return conversation
