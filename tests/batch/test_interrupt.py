"""Ctrl-C during `kedi batch`: RESULTS holds every row the ledger recorded as finished."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.batch.helpers import environment, results

# Blocking Python in the row (as user code often is): the event loop stalls 0.5 s per row.
SLOW_PROGRAM = '= `__import__("time").sleep(0.5) or args.text`\n'


def ledger_rows(store: Path) -> list[str]:
    """The keys the ledger has finished, in input order."""
    if not store.exists():
        return []
    with sqlite3.connect(store) as db:
        try:
            return [key for (key,) in db.execute("SELECT key FROM batch_rows ORDER BY position")]
        except sqlite3.OperationalError:  # the tables do not exist yet
            return []


def test_ctrl_c_writes_every_row_the_ledger_finished(tmp_path: Path) -> None:
    program = tmp_path / "slow.kedi"
    program.write_text(SLOW_PROGRAM, encoding="utf-8")
    inputs = tmp_path / "rows.csv"
    rows = 40
    inputs.write_text("id,text\n" + "".join(f"r{n},hello {n}\n" for n in range(rows)))
    out, store = tmp_path / "out.jsonl", tmp_path / "history.db"
    process = subprocess.Popen(
        [sys.executable, "-m", "kedi", "batch", str(program), str(inputs), "--out", str(out),
         "--parallel", "2", "--quiet", "--model", "echo"],
        env=environment(store),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        # Ctrl-C at a terminal: the default disposition. Run from a shell's background job
        # (`pytest &`) the child inherits SIGINT ignored, and `kedi batch` rightly ignores it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while len(ledger_rows(store)) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=60) == 130
    finally:
        process.kill()
        process.wait()
    finished = ledger_rows(store)
    assert 4 <= len(finished) < rows
    assert [line["key"] for line in results(out)] == finished
