"""History-store growth with a session's length, side by side in one run: `python bench/store_growth.py`.

A session of N one-line turns on one lane with `> history: enabled` (offline
model, recorded through `SessionRecorder` into a SQLite store, as `kedi run`
records), at N = 50 and N = 800, with the `exchanges` column stored linear
(this code) and stored whole (the form before: every message each request
sent, reproduced by turning the shortening off). Per turn: bytes of the
`exchanges` column, bytes of the database file (WAL checkpointed), and the
CPU time of committing one turn (shortening, redaction, encoding, the SQL)
as the median of the session's last 20 calls, split into the shortening
(comparing the request with the previous exchange, O(lane) in C) and the
rest (redaction, JSON encoding, the SQL: what the form makes O(new messages)).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import kedi  # noqa: E402
from kedi.history.store import base, open_store  # noqa: E402
from kedi.runtime.sessions import SessionRecorder  # noqa: E402


@contextmanager
def stored_whole() -> Iterator[None]:
    """Store exchanges as the code before did: no references."""
    original = base.shorten_exchanges
    base.shorten_exchanges = lambda exchanges, seq, previous: (exchanges, None)  # type: ignore[assignment]
    try:
        yield
    finally:
        base.shorten_exchanges = original


@contextmanager
def commit_cpu(spent: list[float], shortening: list[float]) -> Iterator[None]:
    """Collect the CPU time of every `StoreTransaction.commit_turn`, and of the shortening in it."""
    commit, shorten = base.StoreTransaction.commit_turn, base.shorten_exchanges

    def timed_commit(self: Any, turn: Any) -> int:
        start = time.process_time()
        try:
            return commit(self, turn)
        finally:
            spent.append(time.process_time() - start)

    def timed_shorten(*args: Any) -> Any:
        start = time.process_time()
        try:
            return shorten(*args)
        finally:
            shortening.append(time.process_time() - start)

    base.StoreTransaction.commit_turn = timed_commit  # type: ignore[method-assign]
    base.shorten_exchanges = timed_shorten
    try:
        yield
    finally:
        base.StoreTransaction.commit_turn = commit  # type: ignore[method-assign]
        base.shorten_exchanges = shorten


def session(path: Path, turns: int) -> dict[str, float]:
    """Record one session of `turns` one-line turns into a fresh store at `path`; its figures per turn."""
    source = "> history: enabled\n" + "".join(f">> Say line {n} [x]\n" for n in range(turns))
    program = kedi.compile(source)
    store = open_store(path)
    assert store is not None
    info = store.create_session(program="bench", model="offline")
    run_no = store.begin_run(info.id)
    spent: list[float] = []
    shortening: list[float] = []
    with commit_cpu(spent, shortening):
        program.run_sync(
            model="offline",
            conversation=store.load_conversation(info.id),
            recorder=SessionRecorder(store, info.id, run_no),
            quiet=True,
        )
    store.finish_run(info.id, run_no, "ok")
    assert (
        len(store.turns(info.id)[-1].exchanges[0]["messages"]) == 2 * turns - 1
    )  # read back whole
    store.close()
    connection = sqlite3.connect(path)
    ((exchanges,),) = connection.execute("SELECT SUM(LENGTH(exchanges)) FROM turns")
    connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    connection.close()
    return {
        "exchanges": exchanges / turns,
        "file": path.stat().st_size / turns,
        "cpu": statistics.median(spent[-20:]),
        "shorten": statistics.median(shortening[-20:]),
        "rest": statistics.median(
            a - b for a, b in zip(spent[-20:], shortening[-20:], strict=True)
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--short", type=int, default=50, help="turns of the short session")
    parser.add_argument("--long", type=int, default=800, help="turns of the long session")
    options = parser.parse_args()
    results: dict[tuple[str, int], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as name:
        for form in ("linear", "whole"):
            for turns in (options.short, options.long):
                path = Path(name) / f"{form}-{turns}.db"
                if form == "whole":
                    with stored_whole():
                        results[form, turns] = session(path, turns)
                else:
                    results[form, turns] = session(path, turns)
    short, long = options.short, options.long
    print(f"per turn, {short} vs {long} one-line turns on one lane, history on (SQLite):")
    print(f"{'form':7} {'measure':27} {short:>10} {long:>10}  ratio {long}/{short}")
    for form in ("linear", "whole"):
        for measure, unit, scale in (
            ("exchanges", "bytes", 1.0),
            ("file", "bytes", 1.0),
            ("cpu", "µs", 1e6),
            ("shorten", "µs", 1e6),
            ("rest", "µs", 1e6),
        ):
            if form == "whole" and measure == "shorten":
                continue
            a, b = results[form, short][measure], results[form, long][measure]
            label = {
                "exchanges": "exchanges column",
                "file": "db file",
                "cpu": "commit CPU",
                "shorten": " of it: comparing",
                "rest": " the rest (encoding)",
            }[measure]
            print(
                f"{form:7} {label + ' (' + unit + ')':27} {a * scale:10.1f} {b * scale:10.1f}  {b / a:6.2f}x"
            )
    whole, linear = results["whole", long], results["linear", long]
    print(
        f"at {long} turns, whole/linear: exchanges {whole['exchanges'] / linear['exchanges']:.0f}x, "
        f"db file {whole['file'] / linear['file']:.0f}x, commit CPU {whole['cpu'] / linear['cpu']:.1f}x"
    )


if __name__ == "__main__":
    main()
