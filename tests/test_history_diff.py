"""`kedi history diff A B` compares what two sessions said, not the ids kedi stamped on them.

Every run stamps its messages with its own run and conversation ids, and a
history digest covers them, so two separate sessions that asked and answered
exactly the same things were reported to "diverge at turn 1", the diff showing
only ids.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.cli_process import run_kedi

TWO_CALLS = "> history: enabled\n[a] << Say one word.\n[b] << Say another.\n= <b>\n"


def kedi(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_kedi(*args, history=tmp_path / "h.db")


def test_two_sessions_that_said_the_same_things_do_not_diverge(tmp_path: Path) -> None:
    flow = tmp_path / "flow.kedi"
    flow.write_text(TWO_CALLS)
    for name in ("one", "two"):
        assert kedi(tmp_path, "run", str(flow), "--quiet", "--session", name).returncode == 0
    same = kedi(tmp_path, "history", "diff", "one", "two")
    assert (same.returncode, same.stdout) == (0, "no divergence: both have the same 2 turns\n")


def test_a_different_reply_is_shown_without_the_ids(tmp_path: Path) -> None:
    flow = tmp_path / "flow.kedi"
    flow.write_text(TWO_CALLS)
    assert kedi(tmp_path, "run", str(flow), "--quiet", "--session", "one").returncode == 0
    flow.write_text(TWO_CALLS.replace("Say another.", "Say a third."))
    assert kedi(tmp_path, "run", str(flow), "--quiet", "--session", "two").returncode == 0
    differs = kedi(tmp_path, "history", "diff", "one", "two")
    assert differs.returncode == 1
    assert differs.stdout.startswith("first divergence at turn 2 ")
    assert '-      "content": "Say another."' in differs.stdout
    assert '+      "content": "Say a third."' in differs.stdout
    assert "runId" not in differs.stdout and "conversationId" not in differs.stdout
