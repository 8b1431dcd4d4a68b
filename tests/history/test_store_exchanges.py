"""The store keeps each turn's exchanges linear and gives every reader back the full exchanges.

Both backends: bytes per turn stay flat as the lane grows, references never
cross runs or name a deleted or rolled-back turn, old stores (full
exchanges) read as they are, export writes full exchanges and import stores
them linear again, and secrets are masked in the linear form.
"""

from __future__ import annotations

import json
import os
import random
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

import kedi  # noqa: F401
from kedi.history.lanes import LaneKey
from kedi.history.linear import REFERENCE, Expander, base_of, shorten
from kedi.history.store import StoreError, TurnRecord, open_store
from kedi.history.store.base import Store

ROOT = Path(__file__).resolve().parents[2]
KEY = LaneKey("offline", "offline", "digest")
OTHER = LaneKey("offline", "offline", "other")
SYSTEM = {"role": "system", "content": "Be brief."}
OLD_PROGRAM = (
    "> history: enabled\n> system: Be brief.\n>> Name a city [city].\n"
    ">> Name a river near <city> [river].\n[reply] << Say something about <river>.\n= <reply>\n"
)


def opened(location: str | Path) -> Store:
    store = open_store(location)
    assert store is not None
    return store


def chat(
    session_id: str, run_no: int, count: int, *, lane: list[Any] | None = None, key: LaneKey = KEY
) -> Iterator[TurnRecord]:
    """Turns as the recorder stores them with history on: each request resends the lane.

    Every fifth turn is a tool loop: two requests, the second resending the first.
    `lane` (the lane's messages so far) is extended as the turns go.
    """
    lane = [] if lane is None else lane
    for number in range(count):
        prompt = {"role": "user", "content": f"run {run_no} line {number}"}
        reply = {"role": "assistant", "content": f"reply {number}"}
        sent = [SYSTEM, *lane, prompt]
        if number % 5 == 4:
            call = {"role": "assistant", "tool_calls": [{"id": f"t{number}", "name": "add"}]}
            result = {"role": "tool", "tool_call_id": f"t{number}", "content": "2"}
            exchanges = [
                {"messages": sent, "response": call, "tools": ["add"], "call_id": f"c{number}"},
                {"messages": [*sent, call, result], "response": reply, "call_id": f"c{number}"},
            ]
            added = [prompt, call, result, reply]
        else:
            exchanges = [
                {"messages": sent, "response": reply, "tools": [], "call_id": f"c{number}"}
            ]
            added = [prompt, reply]
        lane.extend(added)
        yield TurnRecord(
            session_id=session_id, run_no=run_no, lane=key, messages=added, exchanges=exchanges
        )


def commit(store: Store, turns: Sequence[TurnRecord]) -> None:
    for turn in turns:
        store.commit_turn(turn)


def stored(store: Store, session_id: str) -> list[tuple[int, str]]:
    """Each turn's `exchanges` column as stored: (seq, JSON text)."""
    with store.transaction() as tx:
        rows = tx.query(
            "SELECT seq, exchanges FROM turns WHERE session_id = ? ORDER BY seq", (session_id,)
        )
    return [(int(seq), text) for seq, text in rows]


def read_exchanges(store: Store, session_id: str, **selection: Any) -> list[list[Any]]:
    return [turn.exchanges for turn in store.turns(session_id, **selection)]


def new_session(store: Store) -> str:
    return store.create_session(name=f"s-{uuid.uuid4()}").id


def test_a_long_lane_stores_what_each_turn_adds_and_reads_every_message_back(
    location: str,
) -> None:
    with opened(location) as store:
        session = new_session(store)
        run = store.begin_run(session)
        turns = list(chat(session, run, 60))
        commit(store, turns)
        sizes = [len(text) for _, text in stored(store, session)]
        # turn 60 resends 120+ messages; stored, it is the size of turn 2 (give or take the digits)
        assert sum(sizes[-10:]) < 1.3 * sum(sizes[1:11]), sizes
        assert all(REFERENCE in text for _, text in stored(store, session)[1:])
        assert read_exchanges(store, session) == [turn.exchanges for turn in turns]
        assert read_exchanges(store, session, run_no=run) == [turn.exchanges for turn in turns]
        fork = store.fork_session(session)  # rows copied as stored: references name the copies
        store.delete_session(session)
        assert read_exchanges(store, fork.id) == [turn.exchanges for turn in turns]


def test_a_reference_stays_inside_its_run_so_deleting_an_earlier_run_keeps_the_later_readable(
    location: str,
) -> None:
    with opened(location) as store:
        session = new_session(store)
        lane: list[Any] = []
        first = store.begin_run(session)
        commit(store, list(chat(session, first, 4, lane=lane)))
        second = store.begin_run(session)
        later = list(chat(session, second, 4, lane=lane))  # resends the first run's messages
        commit(store, later)
        rows = stored(store, session)
        assert REFERENCE not in rows[4][1]  # the run's first turn is stored whole
        assert all(REFERENCE in text for _, text in rows[5:])
        store.delete_run_turns(session, first)
        assert read_exchanges(store, session) == [turn.exchanges for turn in later]
        assert read_exchanges(store, session, run_no=second) == [turn.exchanges for turn in later]


def test_a_turn_deleted_since_is_never_referred_to(location: str) -> None:
    with opened(location) as store:  # one store object: it remembers the deleted turns' bases
        session = new_session(store)
        run = store.begin_run(session)
        commit(store, list(chat(session, run, 3)))
        store.delete_run_turns(session, run)  # re-recording the run
        again = list(chat(session, run, 3))
        commit(store, again)
        assert read_exchanges(store, session) == [turn.exchanges for turn in again]


def test_a_rolled_back_turn_is_never_referred_to(location: str) -> None:
    """A rolled-back turn's seq goes to the next turn, here on another lane."""
    with opened(location) as store:
        session = new_session(store)
        run = store.begin_run(session)
        lane: list[Any] = []
        kept = list(chat(session, run, 2, lane=lane))
        commit(store, kept)
        (dropped,) = chat(session, run, 1, lane=list(lane))
        with pytest.raises(RuntimeError), store.transaction() as tx:
            tx.commit_turn(dropped)
            raise RuntimeError("the caller's own write failed")
        elsewhere = list(chat(session, run, 1, key=OTHER))  # takes the dropped turn's seq
        commit(store, elsewhere)
        after = list(chat(session, run, 2, lane=lane))
        commit(store, after)
        assert read_exchanges(store, session) == [t.exchanges for t in [*kept, *elsewhere, *after]]


def test_a_store_written_with_full_exchanges_reads_replays_and_continues(tmp_path: Path) -> None:
    database = tmp_path / "old.db"
    connection = sqlite3.connect(database)
    connection.executescript((Path(__file__).parent / "store_full_exchanges.sql").read_text())
    connection.close()
    columns = [json.loads(text) for _, text in sqlite3.connect(database).execute(
        "SELECT seq, exchanges FROM turns ORDER BY seq"
    )]  # fmt: skip
    assert columns and not any(REFERENCE in json.dumps(column) for column in columns)
    (tmp_path / "old.kedi").write_text(OLD_PROGRAM)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KEDI_HISTORY": str(database)}
    env.pop("KEDI_MODEL", None)

    def run_kedi(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "kedi", *args],
            capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env,
        )  # fmt: skip

    shown = run_kedi("history", "show", "old", "--json")
    assert shown.returncode == 0, shown.stderr
    assert [turn["exchanges"] for turn in json.loads(shown.stdout)["turns"]] == columns
    replayed = run_kedi("run", "old.kedi", "--replay", "old", "--transcript", "t.jsonl")
    assert replayed.returncode == 0, replayed.stderr
    sent = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert len(sent) == 3 and REFERENCE in sent[1]  # the transcript itself is linear, as always
    continued = run_kedi("run", "old.kedi", "--session", "old")
    assert continued.returncode == 0, continued.stderr
    turns = json.loads(run_kedi("history", "show", "old", "--json").stdout)["turns"]
    assert [turn["exchanges"] for turn in turns[:3]] == columns
    assert len(turns) == 6 and len(turns[5]["exchanges"][0]["messages"]) == 12


def test_export_writes_full_exchanges_and_import_stores_them_linear(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kedi.cli import main

    location = tmp_path / "store.db"
    with opened(location) as store:
        session = store.create_session(name="long").id
        run = store.begin_run(session)
        turns = list(chat(session, run, 12))
        commit(store, turns)
        store.finish_run(session, run, "ok")
    runner = CliRunner()
    env = {"KEDI_HISTORY": str(location)}
    exported = tmp_path / "long.json"
    done = runner.invoke(main, ["history", "export", "long", "-o", str(exported)], env=env)
    assert done.exit_code == 0, done.output
    document = json.loads(exported.read_text())
    assert REFERENCE not in exported.read_text()
    assert [turn["exchanges"] for turn in document["turns"]] == [turn.exchanges for turn in turns]
    done = runner.invoke(main, ["history", "import", str(exported), "--name", "copy"], env=env)
    assert done.exit_code == 0, done.output
    with opened(location) as store:
        copy = store.session("copy").id
        assert all(REFERENCE in text for _, text in stored(store, copy)[1:])
        assert read_exchanges(store, copy) == [turn.exchanges for turn in turns]


def test_a_secret_in_a_linear_exchange_is_masked(tmp_path: Path) -> None:
    secret = "sk-proj-" + "q" * 32
    location = tmp_path / "store.db"
    with opened(location) as store:
        session = new_session(store)
        run = store.begin_run(session)
        lane: list[Any] = []
        commit(store, list(chat(session, run, 2, lane=lane)))
        prompt = {"role": "user", "content": f"my key is {secret}", "api_key": "plain-value-1"}
        store.commit_turn(
            TurnRecord(
                session_id=session,
                run_no=run,
                lane=KEY,
                messages=[prompt],
                exchanges=[{"messages": [SYSTEM, *lane, prompt], "response": None}],
            )
        )
        last = stored(store, session)[-1][1]
        assert REFERENCE in last and secret not in last and "plain-value-1" not in last
        instructions, message = json.loads(last)[0]["messages"]  # the instructions stay in each
        assert instructions == SYSTEM
        assert message["api_key"] == "***" and "***" in message["content"]
        assert read_exchanges(store, session)[-1][0]["messages"][-1] == message
    for path in tmp_path.iterdir():
        assert secret.encode() not in path.read_bytes(), path


def test_kedi_run_stores_the_same_bytes_per_turn_at_80_turns_as_at_20(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KEDI_HISTORY": str(tmp_path / "h.db")}
    env.pop("KEDI_MODEL", None)
    per_turn = {}
    for count in (20, 80):
        program = tmp_path / f"chat{count}.kedi"
        lines = "".join(f">> Say line {number} [x]\n" for number in range(count))
        program.write_text("> history: enabled\n" + lines)
        done = subprocess.run(
            [sys.executable, "-m", "kedi", "run", str(program), "--session", f"c{count}"],
            capture_output=True, text=True, timeout=300, env=env,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        ((total,),) = sqlite3.connect(tmp_path / "h.db").execute(
            "SELECT SUM(LENGTH(t.exchanges)) FROM turns t JOIN sessions s ON s.id = t.session_id "
            "WHERE s.name = ?",
            (f"c{count}",),
        )
        per_turn[count] = total / count
    assert per_turn[80] < 1.1 * per_turn[20], per_turn


def test_shorten_and_expand_round_trip_on_any_prefix() -> None:
    """Shortening against any earlier base (a full or a partial repeat, instructions or not) expands back."""
    rng = random.Random(7)
    for _ in range(300):
        pool = [{"role": rng.choice(["user", "assistant"]), "content": str(n)} for n in range(6)]
        earlier = {
            "messages": rng.choices(pool, k=rng.randint(0, 5)),
            "response": rng.choice([pool[0], None]),
        }
        prefix = base_of(earlier)[: rng.randint(0, len(base_of(earlier)))]
        head = [SYSTEM] if rng.random() < 0.5 else []
        later = {"messages": [*head, *prefix, *rng.choices(pool, k=rng.randint(0, 3))]}
        linear = shorten(later, ("e", base_of(earlier)))
        expander = Expander()
        expander.expand(earlier, "e")
        assert expander.expand(linear, "l") == later
        if REFERENCE in linear:
            assert len(linear["messages"]) < len(later["messages"])


def test_a_reference_to_a_missing_turn_is_a_clear_store_error(tmp_path: Path) -> None:
    location = tmp_path / "store.db"
    with opened(location) as store:
        session = new_session(store)
        run = store.begin_run(session)
        commit(store, list(chat(session, run, 3)))
    connection = sqlite3.connect(location)
    connection.execute("DELETE FROM turns WHERE seq = 2")  # by hand: kedi deletes whole runs
    connection.commit()
    connection.close()
    with opened(location) as store, pytest.raises(StoreError, match=r"turn 3 refer to \[2, 0\]"):
        store.turns(session)


def test_kedi_batch_rows_store_linear_exchanges_and_read_back_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from kedi.cli import main

    location = tmp_path / "history.db"
    monkeypatch.setenv("KEDI_HISTORY", str(location))
    program = tmp_path / "steps.kedi"
    program.write_text(
        "> history: enabled\n[text] = `args.text`\n"
        + "".join(f">> Step {n} for <text> [x]\n" for n in range(4))
    )
    inputs = tmp_path / "rows.jsonl"
    inputs.write_text("".join(json.dumps({"text": f"row {n}"}) + "\n" for n in range(3)))
    done = CliRunner().invoke(
        main,
        ["batch", str(program), str(inputs), "--out", str(tmp_path / "out.jsonl")]
        + ["--model", "offline", "--parallel", "2", "--quiet"],
        catch_exceptions=False,
    )
    assert done.exit_code == 0, done.output
    with opened(location) as store:
        rows = [info for info in store.sessions() if info.turns]
        assert len(rows) == 3
        for info in rows:
            columns = stored(store, info.id)
            assert len(columns) == 4 and all(REFERENCE in text for _, text in columns[1:])
            sent = [exchanges[0]["messages"] for exchanges in read_exchanges(store, info.id)]
            assert [len(messages) for messages in sent] == [1, 3, 5, 7]
            assert sent[3][:6] == sent[2] + [json.loads(columns[2][1])[0]["response"]]
