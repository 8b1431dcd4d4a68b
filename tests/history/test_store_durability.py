"""Durability and concurrency of the history store, with real processes.

Children are forked (a real process each, killed with SIGKILL) so that a
trial costs milliseconds rather than an interpreter start-up. Every turn is
committed with a row of a probe table in the same transaction (the `extra=`
hook the batch ledger uses), so "half a turn" would show as a turn without
its probe row or the other way round.
"""

from __future__ import annotations

import os
import random
import select
import signal
import sqlite3
import time
from pathlib import Path

import pytest

import kedi  # noqa: F401  (registers the adapters, as a user's program does)
from kedi.history.lanes import LaneKey
from kedi.history.store import StoreError, TurnRecord, open_store

KEY = LaneKey("offline", "offline", "digest")
PROBE = [
    "CREATE TABLE IF NOT EXISTS probe (session_id TEXT NOT NULL, seq BIGINT NOT NULL, PRIMARY KEY (session_id, seq))"
]


def postgres_dsn() -> str:
    dsn = os.environ.get("KEDI_TEST_POSTGRES_DSN")
    if not dsn:
        pytest.skip('needs PostgreSQL: set KEDI_TEST_POSTGRES_DSN (eval "$(.ci/start-postgres)")')
    return dsn


def commit_forever(location: str, session_id: str, tag: str, limit: int | None, ack: int) -> None:
    """The child: commit turns (with their probe rows) and write each committed seq to `ack`."""
    store = open_store(location)
    assert store is not None
    count = 0
    while limit is None or count < limit:
        count += 1
        turn = TurnRecord(
            session_id=session_id,
            lane=KEY,
            messages=[
                {"role": "user", "content": f"{tag} {count} " + "x" * 200},
                {"role": "assistant", "content": f"{tag} reply {count}"},
            ],
        )
        holder: list[int] = []

        def probe(tx, holder=holder) -> None:  # type: ignore[no-untyped-def]
            seq = tx.query("SELECT turns FROM sessions WHERE id = ?", (session_id,))[0][0]
            tx.execute("INSERT INTO probe (session_id, seq) VALUES (?, ?)", (session_id, seq))
            holder.append(seq)

        store.commit_turn(turn, extra=probe)
        os.write(ack, f"{holder[0]}\n".encode())
    store.close()


def fork(target, *args) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        code = 0
        try:
            target(*args, write)
        except BaseException as error:
            os.write(2, f"writer {os.getpid()} failed: {type(error).__name__}: {error}\n".encode())
            code = 1
        os._exit(code)
    os.close(write)
    return pid, read


def acked(read: int) -> list[int]:
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    return [int(line) for line in data.decode().split()]


def check_consistent(location: str, session_id: str, acks: list[int]) -> int:
    store = open_store(location)
    assert store is not None
    try:
        turns = store.turns(session_id)
        seqs = [turn.seq for turn in turns]
        assert seqs == list(range(1, len(seqs) + 1)), "turn numbers have a gap"
        assert set(acks) <= set(seqs), "a committed (acknowledged) turn was lost"
        with store.transaction() as tx:
            probes = sorted(
                row[0]
                for row in tx.query("SELECT seq FROM probe WHERE session_id = ?", (session_id,))
            )
        assert probes == seqs, "half a turn: a turn and its same-transaction row disagree"
        assert store.session(session_id).turns == len(seqs)
        for turn in turns:
            assert len(turn.messages) == 2 and turn.messages[1]["content"].endswith(
                str(turn.messages[0]["content"].split()[1])
            )
        assert len(store.load_conversation(session_id).lane(KEY)) == 2 * len(turns)
        return len(turns)
    finally:
        store.close()


def kill_trials(location: str, trials: int) -> int:
    store = open_store(location)
    assert store is not None
    store.extend_schema("durability-probe", 1, PROBE)
    session = store.create_session(name=f"kill-{random.random()}")
    store.close()
    rng = random.Random(1234)
    all_acks: list[int] = []
    killed_mid_run = 0
    for _ in range(trials):
        pid, read = fork(commit_forever, location, session.id, "t", None)
        # wait for the first commit (the child is inside its commit loop), then kill at a random point
        select.select([read], [], [], 10)
        time.sleep(rng.uniform(0, 0.004))
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        killed_mid_run += os.WIFSIGNALED(status)
        all_acks.extend(acked(read))
    total = check_consistent(location, session.id, all_acks)
    assert killed_mid_run == trials and total >= len(all_acks) > 0
    return total


def test_sigkill_during_sqlite_commits_never_loses_or_splits_a_turn(tmp_path: Path) -> None:
    location = str(tmp_path / "kill.db")
    kill_trials(location, 200)
    with sqlite3.connect(location) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


@pytest.mark.postgres
def test_sigkill_during_postgres_commits_never_loses_or_splits_a_turn() -> None:
    kill_trials(postgres_dsn(), 50)


def concurrent_writers(location: str, processes: int, each: int) -> None:
    store = open_store(location)
    assert store is not None
    store.extend_schema("durability-probe", 1, PROBE)
    session = store.create_session()
    store.close()
    children = [fork(commit_forever, location, session.id, f"w{n}", each) for n in range(processes)]
    acks: list[int] = []
    for pid, read in children:
        acks.extend(acked(read))
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, "a writer failed"
    assert check_consistent(location, session.id, acks) == processes * each == len(acks)
    store = open_store(location)
    assert store is not None
    turns = store.turns(session.id)
    store.close()
    for n in range(processes):  # each writer's turns appear in the order it committed them
        mine = [
            int(t.messages[0]["content"].split()[1])
            for t in turns
            if t.messages[0]["content"].startswith(f"w{n} ")
        ]
        assert mine == list(range(1, each + 1))


@pytest.mark.postgres
def test_eight_processes_on_one_postgres_session_keep_every_turn_in_one_order() -> None:
    concurrent_writers(postgres_dsn(), 8, 25)


def test_two_processes_on_one_sqlite_file_do_not_corrupt_it(tmp_path: Path) -> None:
    location = str(tmp_path / "shared.db")
    concurrent_writers(location, 2, 60)
    with sqlite3.connect(location) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)


def test_a_store_locked_too_long_fails_with_a_clear_error(tmp_path: Path) -> None:
    location = tmp_path / "locked.db"
    assert open_store(location) is not None
    holder = sqlite3.connect(location, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(
            StoreError, match=r"stayed locked by another process for more than 0.2s"
        ):
            open_store(location, busy_timeout=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
