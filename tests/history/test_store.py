"""The store API on both backends: sessions, turns, forks, migrations, the newer-schema refusal."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

import kedi  # noqa: F401
from kedi.history import Message
from kedi.history.lanes import LaneKey
from kedi.history.store import StoreError, TurnRecord, describe_location, open_store
from kedi.history.store.schema import LATEST
from tests.test_history_show import fill

KEY = LaneKey("offline", "offline", "digest", tools="t1")


def test_turns_rebuild_the_conversation_exactly(location: str) -> None:
    with open_store(location) as store:
        session = store.create_session(name=f"s-{uuid.uuid4()}", program="p.kedi")
        run = store.begin_run(session.id, program="p.kedi")
        first = [
            {"role": "user", "content": "a", "runId": "r1"},
            {"role": "assistant", "content": "b"},
        ]
        store.commit_turn(TurnRecord(session_id=session.id, run_no=run, lane=KEY, messages=first))
        # a processor's rewrite replaces the prior history and starts a new epoch
        store.commit_turn(
            TurnRecord(
                session_id=session.id,
                run_no=run,
                lane=KEY,
                epoch=1,
                rewritten=[{"role": "user", "content": "summary"}],
                messages=[{"role": "user", "content": "c"}],
            )
        )
        store.commit_turn(
            TurnRecord(
                session_id=session.id,
                run_no=run,
                lane=KEY,
                history=False,
                messages=[{"role": "user", "content": "stateless"}],
            )
        )
        store.finish_run(session.id, run, "ok")
        lane = store.load_conversation(session.id).lane(KEY)
        assert [m.content for m in lane.messages] == ["summary", "c"] and lane.epoch == 1
        assert store.load_conversation(session.id).conversation_id == session.id
        assert isinstance(lane.messages[0], Message)
        assert (
            store.session(session.name).turns == 3
            and store.session(session.id[:13]).id == session.id
        )
        fork = store.fork_session(session.id, name=f"f-{uuid.uuid4()}")
        assert fork.parent == session.id and [t.seq for t in store.turns(fork.id)] == [1, 2, 3]
        with pytest.raises(StoreError, match="already exists"):
            store.create_session(name=session.name)
        store.delete_session(session.id)
        assert store.find_session(session.id) is None and store.find_session(fork.id) is not None


def test_a_fork_of_a_session_that_lost_a_run_records_its_next_turn_after_the_copies(
    location: str,
) -> None:
    def turn(session_id: str, run_no: int, text: str) -> TurnRecord:
        messages = [{"role": "user", "content": text}]
        return TurnRecord(session_id=session_id, run_no=run_no, lane=KEY, messages=messages)

    with open_store(location) as store:
        session = store.create_session(name=f"s-{uuid.uuid4()}", program="p.kedi")
        first = store.begin_run(session.id, program="p.kedi")
        store.commit_turn(turn(session.id, first, "a"))
        store.finish_run(session.id, first, "ok")
        second = store.begin_run(session.id, program="p.kedi")
        store.commit_turn(turn(session.id, second, "b"))
        store.commit_turn(turn(session.id, second, "c"))
        store.finish_run(session.id, second, "ok")
        store.delete_run_turns(session.id, first)  # seq 1 gone: two turns left, seq 2 and 3
        fork = store.fork_session(session.id, name=f"f-{uuid.uuid4()}")
        assert [t.seq for t in store.turns(fork.id)] == [2, 3]
        run = store.begin_run(fork.id, program="p.kedi")
        assert store.commit_turn(turn(fork.id, run, "d")) == 4  # not 3, which the fork holds
        assert [(t.seq, t.messages[0]["content"]) for t in store.turns(fork.id)] == [
            (2, "b"),
            (3, "c"),
            (4, "d"),
        ]


def test_extra_rows_commit_in_the_same_transaction_or_not_at_all(location: str) -> None:
    with open_store(location) as store:
        store.extend_schema(
            "ledger-test", 1, ["CREATE TABLE IF NOT EXISTS ledger_test (item TEXT PRIMARY KEY)"]
        )
        session = store.create_session()
        item = str(uuid.uuid4())

        def failing(tx) -> None:  # type: ignore[no-untyped-def]
            tx.execute("INSERT INTO ledger_test (item) VALUES (?)", (item,))
            raise RuntimeError("caller failed after writing its row")

        with pytest.raises(RuntimeError):
            store.commit_turn(
                TurnRecord(session_id=session.id, lane=KEY, messages=[]), extra=failing
            )
        assert store.turns(session.id) == [] and store.session(session.id).turns == 0
        store.commit_turn(
            TurnRecord(session_id=session.id, lane=KEY, messages=[]),
            extra=lambda tx: tx.execute("INSERT INTO ledger_test (item) VALUES (?)", (item,)),
        )
        with store.transaction() as tx:
            assert tx.query("SELECT item FROM ledger_test WHERE item = ?", (item,)) == [(item,)]


def test_a_session_its_run_and_first_turn_commit_together_and_idempotently(location: str) -> None:
    """The transaction-level forms (`kedi batch` creates a row's session with its first write, every write)."""
    with open_store(location) as store:
        session_id, name = str(uuid.uuid4()), f"batch/j/{uuid.uuid4()}"
        for _ in range(
            2
        ):  # the second write of the same session leaves its session and run as they are
            with store.transaction() as tx:
                tx.create_session(session_id, name=name, program="p.kedi", if_absent=True)
                assert tx.begin_run(session_id, program="p.kedi", run_no=1) == 1
                tx.commit_turn(TurnRecord(session_id=session_id, run_no=1, lane=KEY, messages=[]))
        with pytest.raises(RuntimeError), store.transaction() as tx:  # all or nothing
            tx.create_session(str(uuid.uuid4()), name="rolled-back")
            raise RuntimeError
        assert store.find_session("rolled-back") is None
        assert store.session(name).turns == 2 and [
            run.run_no for run in store.runs(session_id)
        ] == [1]
        with store.transaction() as tx:
            tx.finish_run(session_id, 1, "failed", failure={"lane": "x", "messages": []})
        store.reopen_run(session_id, 1)
        [run] = store.runs(session_id)
        assert (
            run.status == "running" and run.failure is None
        )  # the resuming run holds the evidence it read
        assert store.begin_run(session_id) == 2  # the next number, as before
        with pytest.raises(StoreError), store.transaction() as tx:  # a name is one session's
            tx.create_session(str(uuid.uuid4()), name=name, if_absent=True)


def test_migrations_run_forward_once_and_a_newer_store_is_refused(location: str) -> None:
    component = f"c{uuid.uuid4().hex[:8]}"
    with open_store(location) as store:
        assert store.schema_version() == LATEST
        store.extend_schema(component, 1, [f"CREATE TABLE {component} (a TEXT)"])
        store.extend_schema(component, 1, [f"CREATE TABLE {component} (a TEXT)"])  # not run again
        store.extend_schema(component, 2, [f"ALTER TABLE {component} ADD COLUMN b TEXT"])
        assert store.schema_version(component) == 2
        with pytest.raises(
            StoreError,
            match=rf"written by a newer kedi \({component} schema version 2; this kedi knows up to 1\)",
        ):
            store.extend_schema(component, 1, [])
        with store.transaction() as tx:
            tx.execute(f"DROP TABLE {component}")


def test_a_store_from_a_newer_kedi_is_refused_on_open(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    with open_store(path) as store, store.transaction() as tx:
        tx.execute("UPDATE kedi_schema SET version = ? WHERE component = 'kedi'", (LATEST + 1,))
    with pytest.raises(StoreError, match="newer kedi"):
        open_store(path)


def test_locations(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEDI_HISTORY", "off")
    assert open_store() is None
    assert describe_location("postgresql://u:hunter2@h:5/db") == "postgresql://u:***@h:5/db"
    monkeypatch.delenv("KEDI_HISTORY")
    assert describe_location().endswith(os.path.join("kedi", "history.db"))
    (tmp_path / "junk.db").write_text("not a database at all" * 100)
    with pytest.raises(StoreError, match="not a kedi history store"):
        open_store(tmp_path / "junk.db")


def test_kedi_history_off_words_and_bare_words(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`disabled` means off; another bare word is refused instead of becoming a file of that name."""
    monkeypatch.chdir(tmp_path)
    for word in ("disabled", "Disabled", "off", "none"):
        monkeypatch.setenv("KEDI_HISTORY", word)
        assert open_store() is None and describe_location() == "off"
    monkeypatch.setenv("KEDI_HISTORY", "disabeld")
    with pytest.raises(StoreError) as refused:
        open_store()
    assert str(refused.value) == (
        "KEDI_HISTORY='disabeld' is neither `off` nor a store location: write `off` to keep "
        "nothing, a file such as ./disabeld.db, or a postgresql:// URL"
    )
    assert list(tmp_path.iterdir()) == []  # no SQLite file named after the word
    for location in ("runs.db", "runs.sqlite", "./runs", "sub/runs"):
        (tmp_path / "sub").mkdir(exist_ok=True)
        monkeypatch.setenv("KEDI_HISTORY", location)
        store = open_store()
        assert store is not None
        store.close()
        assert (tmp_path / location).exists()
    explicit = open_store("runs")  # a location given in Python is taken as written
    assert explicit is not None
    explicit.close()


def test_a_postgres_location_without_psycopg_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    from kedi.errors import ExtraNotInstalledError

    monkeypatch.setitem(sys.modules, "psycopg", None)
    with pytest.raises(ExtraNotInstalledError, match=r'pip install "kedi\[postgres\]"'):
        open_store("postgresql://kedi@127.0.0.1:1/x")


def test_an_unreachable_postgres_server_is_a_clear_error_with_no_password() -> None:
    pytest.importorskip("psycopg", reason="needs psycopg: pip install 'kedi[postgres]'")
    with pytest.raises(
        StoreError,
        match=r"cannot connect to the history store postgresql://(kedi:)?\*\*\*@127.0.0.1:1/x",
    ) as caught:
        open_store("postgresql://kedi:hunter2@127.0.0.1:1/x", busy_timeout=1)
    assert "hunter2" not in str(caught.value)


def test_threads_sharing_one_store_commit_every_turn(location: str) -> None:
    import threading

    with open_store(location) as store:
        session = store.create_session()

        def commit_fifty() -> None:
            for _ in range(50):
                store.commit_turn(TurnRecord(session_id=session.id, lane=KEY, messages=[]))

        threads = [threading.Thread(target=commit_fifty) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert [turn.seq for turn in store.turns(session.id)] == list(range(1, 201))


def test_summaries_are_the_records_shown_fields(location: str) -> None:
    """The listing's fast read path returns what the full records hold, on both backends."""
    name = f"s-{uuid.uuid4()}"
    fill(location, name)
    with open_store(location) as store:
        session = store.session(name)
        records = store.turns(session.id)
        assert [len(batch) for batch in store.turn_summaries(session.id, batch=2)] == [2, 1]
        summaries = [turn for batch in store.turn_summaries(session.id) for turn in batch]
        store.delete_session(session.id)
        assert list(store.turn_summaries(session.id)) == []
    assert len(summaries) == len(records) == 3
    for record, summary in zip(records, summaries, strict=True):
        assert summary == (
            record.seq,
            record.run_no,
            record.lane,
            record.lane.label(),
            record.history,
            record.origin,
            record.messages,
            record.value,
            record.usage,
        )
        assert summary.history is record.history and summary.lane_label == record.lane.label()
