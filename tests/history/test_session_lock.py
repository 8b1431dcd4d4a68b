"""One run at a time continues a stored session (SQLite and PostgreSQL).

Two `kedi run --session S` started together used to append to the same lane,
each from its own view of it: the stored conversation became a mix no request
ever sent. The first run now holds the session; a second is refused at once.
The first run here waits in a Python fence (after its first turn is stored)
until the test opens a gate file, so it is really mid-run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.cli_process import run_kedi

ROOT = Path(__file__).resolve().parents[2]
WAIT = 60.0
"""Bound of every wait: a run that is not where it should be by then fails the test."""


def _env(location: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "KEDI_HISTORY": location}


def kedi(location: str, *args: str) -> subprocess.CompletedProcess[str]:
    return run_kedi(*args, history=location, timeout=WAIT)


def gated_program(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A program that stores one turn, signals `reached`, waits for `gate`, then makes a second call."""
    program, reached, gate = tmp_path / "gated.kedi", tmp_path / "reached", tmp_path / "gate"
    program.write_text(
        "> history: enabled\n>> first [a]\n"
        "```\nimport pathlib, time\n"
        f"pathlib.Path({str(reached)!r}).write_text('x')\n"
        f"deadline = time.monotonic() + {WAIT}\n"
        f"while not pathlib.Path({str(gate)!r}).exists() and time.monotonic() < deadline:\n"
        "    time.sleep(0.02)\n```\n"
        ">> second [b]\n= <b>\n"
    )
    return program, reached, gate


def start_gated(location: str, tmp_path: Path, session: str) -> tuple[subprocess.Popen[str], Path]:
    """Start the gated program on `session`; return it, mid-run, and its gate file."""
    program, reached, gate = gated_program(tmp_path)
    child = subprocess.Popen(
        [sys.executable, "-m", "kedi", "run", str(program), "--session", session],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_env(location),
    )
    deadline = time.monotonic() + WAIT
    while not reached.exists():
        if child.poll() is not None or time.monotonic() > deadline:
            child.kill()
            pytest.fail(f"the first run never reached its gate: {child.communicate()[1]}")
        time.sleep(0.02)
    return child, gate


def quick_program(tmp_path: Path) -> Path:
    program = tmp_path / "quick.kedi"
    program.write_text("> history: enabled\n>> other [c]\n= <c>\n")
    return program


def shown(location: str, session: str) -> dict:
    done = kedi(location, "history", "show", session, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_second_run_on_a_held_session_is_refused_and_the_turns_do_not_interleave(
    location: str, tmp_path: Path
) -> None:
    session = f"held-{uuid.uuid4().hex[:8]}"
    first, gate = start_gated(location, tmp_path, session)
    try:
        second = kedi(location, "run", str(quick_program(tmp_path)), "--session", session)
        # refused before any model call, naming the holder
        assert second.returncode == 1, second.stderr
        assert f"session {session!r} has a run in progress (run 1, started at " in second.stderr
        assert f"pid {first.pid} on " in second.stderr
        assert "wait for it or continue another session" in second.stderr
        assert "Traceback" not in second.stderr
        # --resume of a session whose run is still going is refused the same way
        resumed = kedi(location, "run", str(quick_program(tmp_path)), "--resume", session)
        assert "has a run in progress" in resumed.stderr and resumed.returncode == 1
    finally:
        gate.write_text("open")
        _, stderr = first.communicate(timeout=WAIT)
    assert first.returncode == 0, stderr
    # the session holds the first run alone: its two turns, nothing of the refused runs
    stored = shown(location, session)
    assert [run["status"] for run in stored["runs"]] == ["ok"]
    assert [turn["run_no"] for turn in stored["turns"]] == [1, 1]
    # once the first run has ended, the session can be continued
    later = kedi(location, "run", str(quick_program(tmp_path)), "--session", session)
    assert later.returncode == 0, later.stderr
    assert [run["status"] for run in shown(location, session)["runs"]] == ["ok", "ok"]


def test_a_killed_run_leaves_no_stale_lock(location: str, tmp_path: Path) -> None:
    session = f"killed-{uuid.uuid4().hex[:8]}"
    first, gate = start_gated(location, tmp_path, session)
    first.send_signal(signal.SIGKILL)
    first.communicate(timeout=WAIT)
    gate.write_text("open")  # the resumed run passes the fence at once
    started = time.monotonic()
    resumed = kedi(location, "run", str(gated_program(tmp_path)[0]), "--resume", session)
    assert resumed.returncode == 0, resumed.stderr
    assert "in progress" not in resumed.stderr
    assert time.monotonic() - started < WAIT / 2  # at once: nothing waited for a timeout
    assert [run["status"] for run in shown(location, session)["runs"]] == ["ok"]


def test_runs_on_other_sessions_and_readers_are_not_blocked(location: str, tmp_path: Path) -> None:
    session = f"busy-{uuid.uuid4().hex[:8]}"
    first, gate = start_gated(location, tmp_path, session)
    try:
        other = kedi(location, "run", str(quick_program(tmp_path)), "--session", f"other-{session}")
        assert other.returncode == 0, other.stderr
        fresh = kedi(location, "run", str(quick_program(tmp_path)))  # a new, unnamed session
        assert fresh.returncode == 0, fresh.stderr
        assert shown(location, session)["runs"][0]["status"] == "running"
        listed = kedi(location, "history", "ls", "--json")
        assert listed.returncode == 0 and session in listed.stdout, listed.stderr
    finally:
        gate.write_text("open")
        _, stderr = first.communicate(timeout=WAIT)
    assert first.returncode == 0, stderr


def test_the_store_api_refuses_a_held_session_and_releases_it_on_close(
    location: str, tmp_path: Path
) -> None:
    from kedi.errors import KediUsageError
    from kedi.history.store import SessionBusyError, open_store

    with open_store(location) as first, open_store(location) as second:
        session = first.create_session(name=f"api-{uuid.uuid4().hex[:8]}")
        first.hold_session(session.id)
        first.begin_run(session.id)
        first.hold_session(session.id)  # holding it again from the same store is a no-op
        with pytest.raises(
            SessionBusyError, match="has a run in progress \\(run 1, started at "
        ) as busy:
            second.hold_session(session.id)
        assert isinstance(busy.value, KediUsageError)
        assert f"pid {os.getpid()} on " in str(busy.value)
        first.close()
        second.hold_session(session.id)  # closing the holder released it
        second.delete_session(session.id)
    if not location.startswith("postgresql"):  # a deleted session leaves no lock file behind
        assert list((tmp_path / ".store.db.locks").iterdir()) == []
