"""SIGKILL at random points: the resumed batch runs exactly the rows the ledger had not finished."""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest

from tests.batch.helpers import CountingServer, openai_batch, results, write_job

ROWS = 30
TRIALS = 20


def finished_keys(store: Path) -> set[str]:
    if not store.exists():
        return set()
    with sqlite3.connect(store) as db:
        try:
            return {key for (key,) in db.execute("SELECT key FROM batch_rows")}
        except sqlite3.OperationalError:  # killed before the tables existed
            return set()


def answered_keys(store: Path) -> set[str]:
    """Rows whose model call is recorded in the store (their session has a turn), finished or not."""
    with sqlite3.connect(store) as db:
        try:
            return {
                name.rsplit("/", 1)[-1]
                for (name,) in db.execute("SELECT name FROM sessions WHERE turns > 0")
            }
        except sqlite3.OperationalError:
            return set()


def job(folder: Path, server: CountingServer) -> tuple[dict[str, Path], list[str], dict[str, str]]:
    """A fresh job of ROWS rows against `server`: its paths, command line and environment."""
    folder.mkdir()
    paths = write_job(folder, ROWS)
    command, env = openai_batch(paths, server.base_url, "--parallel", "4")
    return paths, command, env


def time_to_run_the_rows(folder: Path, server: CountingServer) -> float:
    """Seconds from the first finished row to the end of an uninterrupted run (kill points fall in there)."""
    paths, command, env = job(folder, server)
    process = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    wait_until(paths["store"], process, "SELECT count(*) FROM batch_rows")
    opened = time.monotonic()
    assert process.wait(timeout=120) == 0
    return time.monotonic() - opened


def wait_until(store: Path, process: subprocess.Popen[bytes], count: str) -> None:
    """Block until the `count` query on the ledger is positive (or the process ended)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if store.exists():
            with sqlite3.connect(store) as db:
                try:
                    if db.execute(count).fetchone()[0]:
                        return
                except sqlite3.OperationalError:
                    pass
        time.sleep(0.01)


@pytest.mark.slow
def test_sigkill_at_random_points_then_resume(tmp_path: Path) -> None:
    rng = random.Random(19)
    kills_mid_run = 0
    with CountingServer("--latency-ms", "40") as server:
        span = time_to_run_the_rows(tmp_path / "calibration", server)
        for trial in range(TRIALS):
            folder = tmp_path / f"trial{trial}"
            paths, command, env = job(folder, server)
            victim = subprocess.Popen(
                command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            if trial % 4 == 0:  # during set-up and the first rows
                wait_until(paths["store"], victim, "SELECT count(*) FROM batch_jobs")
                time.sleep(rng.uniform(0.0, 0.3))
            else:  # anywhere among the rows
                wait_until(paths["store"], victim, "SELECT count(*) FROM batch_rows")
                time.sleep(rng.uniform(0.0, span))
            victim.send_signal(signal.SIGKILL)
            victim.wait(timeout=10)
            finished = finished_keys(paths["store"])
            answered = answered_keys(paths["store"]) if paths["store"].exists() else set()
            kills_mid_run += 0 < len(finished) < ROWS
            time.sleep(
                0.2
            )  # the killed run's requests in flight reach the server's record (40 ms) before the count
            before = len(server.stats()["prompts"])
            resumed = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
            assert resumed.returncode == 0, resumed.stderr
            assert (
                f"{ROWS - len(finished)} rows run, {len(finished)} already finished, 0 failed"
                in resumed.stderr
            )
            # The server saw exactly the rows whose call the store had not recorded, each once (a row
            # killed after its call returned, before its outcome, is served its call from the store).
            sent = sorted(server.stats()["prompts"][before:])
            expected = sorted(
                f"Label this ticket: <row-{n}> [label]."
                for n in range(ROWS)
                if str(n) not in answered
            )
            assert sent == expected
            lines = results(paths["out"])
            assert [line["key"] for line in lines] == [str(n) for n in range(ROWS)]
            assert [line["value"] for line in lines] == [f"<row-{n}>" for n in range(ROWS)]
    assert kills_mid_run >= TRIALS // 2, "most kills should land mid-run; retune the sleep range"
