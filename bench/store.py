"""History-store figures, side by side in one run: `python bench/store.py [--turns N]`.

1. Commit latency per turn vs a bare INSERT of the same bytes in the same
   transaction mode (SQLite always; PostgreSQL when KEDI_TEST_POSTGRES_DSN is set).
2. `kedi history show` of a 10,000-turn session (wall and CPU of a real process,
   the whole session printed) vs the `sqlite3` CLI dumping the same rows, with
   `show --json`, `kedi --version` and a bare `python -c pass` beside it.
3. `kedi run --replay` vs the live offline run of the same program.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import kedi  # noqa: E402,F401
from kedi.history.lanes import LaneKey  # noqa: E402
from kedi.history.store import TurnRecord, open_store  # noqa: E402

KEY = LaneKey("offline", "offline", "digest")
MESSAGES = [
    {"role": "user", "content": "Name a city " * 10},
    {"role": "assistant", "content": '{"city": "Paris"}'},
]


def commit_latency(location: str, turns: int) -> tuple[float, float]:
    store = open_store(location)
    assert store is not None
    store.extend_schema(
        "bench", 1, ["CREATE TABLE IF NOT EXISTS bench_rows (id BIGINT PRIMARY KEY, body TEXT)"]
    )
    session = store.create_session()
    record = TurnRecord(
        session_id=session.id, lane=KEY, messages=MESSAGES, request={"prompt": "Name a city"}
    )
    body = json.dumps(MESSAGES) + json.dumps(
        record.request
    )  # the same bytes, one bare INSERT per transaction
    base = int(time.time() * 1000) * 1000
    kedi_times, bare_times = [], []
    # interleaved, medians: on a shared machine, load drifts between two back-to-back loops
    for index in range(turns):
        start = time.perf_counter()
        store.commit_turn(record)
        kedi_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        with store.transaction() as tx:
            tx.execute("INSERT INTO bench_rows (id, body) VALUES (?, ?)", (base + index, body))
        bare_times.append(time.perf_counter() - start)
    kedi_each, bare_each = statistics.median(kedi_times), statistics.median(bare_times)
    store.delete_session(session.id)
    with store.transaction() as tx:
        tx.execute("DELETE FROM bench_rows")
    store.close()
    return kedi_each, bare_each


@dataclass(frozen=True)
class Timing:
    """Runs of one command: best and median wall seconds, best CPU seconds (user + system)."""

    best: float
    median: float
    cpu: float

    def __str__(self) -> str:
        return f"{self.best:.3f} s (median {self.median:.3f}, cpu {self.cpu:.3f})"


def timed_run(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """One run of `command`, output discarded: (wall seconds, CPU seconds of user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def show_big_session(directory: Path, turns: int, runs: int) -> dict[str, Timing]:
    """`kedi history show` of a `turns`-turn session, next to its floors and the sqlite3 CLI."""
    location = directory / "big.db"
    store = open_store(location)
    assert store is not None
    session = store.create_session(name="big")
    with store.transaction() as tx:
        for _ in range(turns):
            tx.commit_turn(TurnRecord(session_id=session.id, lane=KEY, messages=MESSAGES))
    store.close()
    env = {**os.environ, "KEDI_HISTORY": str(location), "PYTHONPATH": str(ROOT)}
    show = [sys.executable, "-m", "kedi", "history", "show", "big"]
    printed = subprocess.run(show, env=env, check=True, capture_output=True, text=True).stdout
    shown = sum(line.startswith("turn ") for line in printed.splitlines())
    assert shown == turns, f"show printed {shown} of {turns} turns"  # the whole session, no paging
    # interleaved rounds: on a shared machine, load drifts between back-to-back loops
    commands = {
        "show": show,
        "show --json": [*show, "--json"],
        "kedi --version": [sys.executable, "-m", "kedi", "--version"],
        "python -c pass": [sys.executable, "-c", "pass"],
    }
    if shutil.which("sqlite3"):
        commands["sqlite3 CLI"] = ["sqlite3", str(location), "SELECT * FROM turns ORDER BY seq"]
    rounds = [
        {name: timed_run(command, env) for name, command in commands.items()} for _ in range(runs)
    ]
    return {
        name: Timing(
            min(r[name][0] for r in rounds),
            statistics.median(r[name][0] for r in rounds),
            min(r[name][1] for r in rounds),
        )
        for name in commands
    }


def replay_overhead(directory: Path) -> tuple[float, float, float]:
    """Best CPU time (user + system, of the child process) of `kedi run --replay`, of the
    live run as users run it (recorded to the store, the default), and of the live run with
    `--no-store`: rounds interleaved, best of 7. CPU time, not wall: on this shared 2-core
    machine the wall time of a sub-second process moves by 2x between runs."""
    program = ROOT / "examples" / "chat_with_history.kedi"
    env = {**os.environ, "KEDI_HISTORY": str(directory / "replay.db"), "PYTHONPATH": str(ROOT)}
    base = [sys.executable, "-m", "kedi", "run", str(program), "--model", "offline"]
    subprocess.run([*base, "--session", "rec"], env=env, check=True, stdout=subprocess.DEVNULL)
    sides = {"replay": ["--replay", "rec"], "live": [], "live --no-store": ["--no-store"]}
    best = dict.fromkeys(sides, float("inf"))
    for _ in range(7):
        for name, args in sides.items():
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            subprocess.run(
                [*base, *args],
                env=env,
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            spent = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            best[name] = min(best[name], spent)
    return best["replay"], best["live"], best["live --no-store"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--turns", type=int, default=300, help="turns per commit-latency measurement"
    )
    parser.add_argument(
        "--runs", type=int, default=5, help="runs of each `kedi history show` measurement"
    )
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        locations = [("sqlite", str(directory / "latency.db"))]
        if os.environ.get("KEDI_TEST_POSTGRES_DSN"):
            locations.append(("postgresql", os.environ["KEDI_TEST_POSTGRES_DSN"]))
        for kind, location in locations:
            kedi_each, bare_each = commit_latency(location, options.turns)
            print(
                f"commit per turn, {kind:10}: kedi {kedi_each * 1e3:7.3f} ms  bare INSERT {bare_each * 1e3:7.3f} ms  "
                f"ratio {kedi_each / bare_each:.2f}x"
            )
        timings = show_big_session(directory, 10_000, options.runs)
        show = timings["show"]
        print(f"kedi history show, 10,000 turns (best of {options.runs}): {show}")
        for name, timing in timings.items():
            if name != "show":
                print(
                    f"  {name:15} {timing}"
                    + (
                        f"  ratio show/{name} {show.best / timing.best:.1f}x"
                        if name == "sqlite3 CLI"
                        else ""
                    )
                )
        replayed, live, unrecorded = replay_overhead(directory)
        print(
            f"kedi run (chat example, CPU): replay {replayed:.3f} s  live {live:.3f} s  ratio {replayed / live:.2f}x "
            f"(target <= 1.2x);  live --no-store {unrecorded:.3f} s  ratio {replayed / unrecorded:.2f}x"
        )


if __name__ == "__main__":
    main()
