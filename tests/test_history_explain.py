"""`kedi history explain FILE --session S` explains the call on the session's own model.

A session recorded with `--model` (a real model, or a script) was explained
on the offline model: another lane, "0 messages in history", although the
session held the conversation the next call would continue.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.cli_process import run_kedi

CHAT = "> history: enabled\n[reply] << <`args.message`>\n= <reply>\n"


def kedi(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_kedi(*args, history=tmp_path / "h.db")


def test_explain_uses_the_model_the_session_was_recorded_with(tmp_path: Path) -> None:
    flow = tmp_path / "chat.kedi"
    flow.write_text(CHAT)
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(["Noted."]))
    model = f"script:{replies}"
    recorded = kedi(
        tmp_path, "run", str(flow), "--model", model, "--session", "s", "--message", "hi"
    )
    assert recorded.returncode == 0, recorded.stderr
    explained = kedi(tmp_path, "history", "explain", str(flow), "--session", "s", "--message", "x")
    assert explained.returncode == 0, explained.stderr
    lane = next(line for line in explained.stdout.splitlines() if line.startswith("lane: "))
    assert lane.startswith("lane: script/") and "(2 messages in history" in lane, lane
    # --model still chooses another, as for `kedi run`.
    offline = kedi(
        tmp_path,
        "history",
        "explain",
        str(flow),
        "--session",
        "s",
        "--model",
        "offline",
        "--message",
        "x",
    )
    assert offline.returncode == 0, offline.stderr
    assert "lane: offline/offline" in offline.stdout and "(0 messages in history" in offline.stdout
