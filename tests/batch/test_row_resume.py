"""A row cut off between its model calls resumes from the store: its finished calls are not sent again."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.batch.helpers import (
    CountingServer,
    batch_command,
    environment,
    openai_batch,
    results,
    write_job,
)

# Three calls per row, each depending on the last (history on): a row is "half finished" after one or two.
THREE_CALLS = """[text] = `args.text`
>> First look at <text> [label].
>> Now check <text> again [label].
>> Finally confirm <text> [label].
= <label>
"""


def row_job(
    folder: Path, server: CountingServer, rows: int
) -> tuple[dict[str, Path], list[str], dict[str, str]]:
    folder.mkdir()
    paths = write_job(folder, rows)
    paths["program"].write_text(THREE_CALLS, encoding="utf-8")
    command, env = openai_batch(paths, server.base_url, "--parallel", "1")
    return paths, command, env


def committed_turns(store: Path) -> int:
    with sqlite3.connect(store) as db:
        try:
            return int(db.execute("SELECT count(*) FROM turns").fetchone()[0])
        except sqlite3.OperationalError:
            return 0


@pytest.mark.slow
@pytest.mark.parametrize("calls_done", [1, 2])
def test_sigkill_mid_row_then_resume_sends_only_the_unfinished_calls(
    tmp_path: Path, calls_done: int
) -> None:
    with CountingServer("--latency-ms", "400") as server:
        paths, command, env = row_job(tmp_path / "job", server, rows=1)
        victim = subprocess.Popen(
            command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 60
        while (
            committed_turns(paths["store"]) < calls_done
            and time.monotonic() < deadline
            and victim.poll() is None
        ):
            time.sleep(0.01)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=10)
        assert committed_turns(paths["store"]) == calls_done, (
            "killed too late: the row must be cut off between its calls"
        )
        time.sleep(0.5)  # the call in flight when killed (if it was sent) reaches the server
        sent_before = len(server.stats()["arrivals"])
        assert sent_before in (calls_done, calls_done + 1)

        resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert resumed.returncode == 0, resumed.stderr
        stats = server.stats()

    # the resumed run sent only the calls the store had not recorded: the cut-off one and those after it
    remaining = 3 - calls_done
    assert len(stats["arrivals"]) - sent_before == remaining
    expected = ["First look", "Now check", "Finally confirm"][calls_done:]
    assert [prompt.split(" <")[0] for prompt in stats["prompts"][-remaining:]] == expected
    [line] = results(paths["out"])
    assert line["value"] == "<row-0>" and line["error"] is None
    # the row's usage is its three calls' once: served ones by their recorded usage
    assert line["usage"] == {
        "input_tokens": 30,
        "output_tokens": 15,
        "requests": 3,
        "tool_calls": 0,
    }
    with sqlite3.connect(paths["store"]) as db:
        turns = db.execute(
            "SELECT count(*) FROM turns WHERE session_id = ?", (line["session"],)
        ).fetchone()[0]
        [(status,)] = db.execute(
            "SELECT status FROM runs WHERE session_id = ?", (line["session"],)
        ).fetchall()
    assert turns == 3 and status == "ok"  # one run, resumed: its three calls recorded once each


def test_retry_errors_resumes_a_failed_row_from_its_store_record(tmp_path: Path) -> None:
    """A row whose second call failed: `--retry-errors` serves its first call from the store and sends the rest."""
    paths = write_job(tmp_path, 1)
    paths["program"].write_text(THREE_CALLS, encoding="utf-8")

    def script(second: dict[str, object]) -> None:
        entries = [
            {"outputs": {"label": "<row-0>"}, "when": {"prompt_contains": "First look"}},
            {**second, "when": {"prompt_contains": "Now check"}},
            {"outputs": {"label": "<row-0>"}, "when": {"prompt_contains": "Finally confirm"}},
        ]
        paths["script"].write_text(__import__("json").dumps(entries))

    script({"error": "the provider fell over"})
    command = batch_command(paths)
    env = environment(paths["store"])
    first = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    [failed] = results(paths["out"])
    assert failed["error"] is not None and "fell over" in failed["error"]["message"], first.stderr

    script({"outputs": {"label": "<row-0>"}})  # the provider is back
    again = subprocess.run(
        [*command, "--retry-errors"], env=env, capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 0, again.stderr
    [line] = results(paths["out"])
    assert (
        line["value"] == "<row-0>"
        and line["error"] is None
        and line["session"] == failed["session"]
    )
    with sqlite3.connect(paths["store"]) as db:
        origins = [
            origin
            for (origin,) in db.execute(
                "SELECT origin FROM turns WHERE session_id = ? ORDER BY seq", (line["session"],)
            )
        ]
        runs = db.execute(
            "SELECT run_no, status FROM runs WHERE session_id = ?", (line["session"],)
        ).fetchall()
    # the first call was served from its recorded turn (sent once, recorded once); the run was resumed, not redone
    assert [origin.rsplit(":", 1)[-1] for origin in origins] == ["2", "3", "4"] and runs == [
        (1, "ok")
    ]


def test_a_row_end_is_refused_when_a_turn_of_its_run_is_not_in_the_store(tmp_path: Path) -> None:
    """A row's turns are queued without waiting; its end checks them, so no outcome lacks its history."""
    from kedi.batch.ledger import JobInfo, Outcome, StoreLedger
    from kedi.history.store import StoreError

    ledger = StoreLedger(tmp_path / "store.db")
    ledger.open_job(JobInfo("j", "p.kedi", "a", "rows.jsonl", "b"), force=False)
    row = ledger.new_row("j", "7").session
    outcome = Outcome(key="7", position=7, value="v", session=row.session_id)
    with pytest.raises(StoreError, match="not recorded"), ledger.store.transaction() as tx:
        row.finish(tx, outcome, failure=None, opened=False, turns=1)
    assert ledger.outcome("j", "7") is None and ledger.store.find_session(row.session_id) is None
    with ledger.store.transaction() as tx:
        row.finish(tx, outcome, failure=None, opened=False, turns=0)
    assert ledger.outcome("j", "7") == outcome
    ledger.close()
