"""Every shipped example runs on its scripted replies and on the offline model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import kedi

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.kedi"))

EXPECTED_SCRIPTED = {
    "hello": "Hello, Ada! Lovely to meet you.",
    "support_triage": (
        " billing -> finance: Customer was billed twice for one month.\n"
        "     bug -> engineering (P1): Export crashes the app after the latest update."
    ),
    "code_review": "revise (80%): line 2: owners of archived projects can now delete them; check project.archived",
    "pipeline": "[docs] Pagination section of the API docs is unclear.\n[billing] Invoices apply an incorrect VAT rate.",
    "settings_lanes": "dotsync: Your dotfiles, everywhere, in one command. (alternatives: homebrewery, rc-raptor, tildeporter)",
}


def test_there_are_at_least_eight_examples() -> None:
    assert len(EXAMPLES) >= 8
    for path in EXAMPLES:
        assert path.with_suffix(".replies.json").exists(), f"{path.name} has no script"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_on_its_script(path: Path) -> None:
    program = kedi.compile(path.read_text(encoding="utf-8"), path=str(path))
    result = program.run_sync(
        model=f"script:{path.with_suffix('.replies.json')}", args={"name": "Ada"}
    )
    assert isinstance(result, str) and result
    if path.stem in EXPECTED_SCRIPTED:
        assert result == EXPECTED_SCRIPTED[path.stem]


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example_runs_on_the_offline_model(path: Path) -> None:
    program = kedi.compile(path.read_text(encoding="utf-8"), path=str(path))
    first = program.run_sync(model="offline")
    assert isinstance(first, str) and first
    assert program.run_sync(model="offline") == first  # deterministic


def test_incident_extraction_produces_the_nested_model() -> None:
    path = ROOT / "examples" / "incident_extraction.kedi"
    result = kedi.compile(path.read_text(), path=str(path)).run_sync(
        model=f"script:{path.with_suffix('.replies.json')}"
    )
    incident = json.loads(result)
    assert incident["owner"] == {"name": "Payments", "email": "payments@example.com"}
    assert incident["severity"] == "high"


def test_chat_example_keeps_the_aside_out_of_the_conversation() -> None:
    path = ROOT / "examples" / "chat_with_history.kedi"
    records: list[dict] = []
    kedi.compile(path.read_text(), path=str(path)).run_sync(
        model=f"script:{path.with_suffix('.replies.json')}", transcript=records.append
    )
    summary = next(
        r for r in records if "Summarise our whole conversation" in r["messages"][-1]["content"]
    )
    assert [m["role"] for m in summary["messages"]] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    aside = next(r for r in records if not r["history"])
    assert [m["role"] for m in aside["messages"]] == ["system", "user"]


def test_readme_command_runs_hello_from_the_cli() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "kedi", "run", "examples/hello.kedi", "--name", "Ada"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip()
    assert "offline model" in proc.stderr


def test_the_history_processor_example_drops_old_cycles_and_keeps_the_tool_loop() -> None:
    script = ROOT / "examples" / "history_processor.py"
    run = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=120, check=True
    )
    lines = run.stdout.splitlines()
    assert lines.count("  answer: lichens: answered from 2 lookups") == 1
    third = lines[lines.index("question 'lichens'") :]
    assert third[2].startswith("    before: user:tides call:lookup(tides#1)")
    assert third[3] == (
        "    after:  user:comets call:lookup(comets#1) result:comets-1 call:lookup(comets#2) result:comets-2"
        " text user:lichens"
    )
    # The tool loop in progress always goes out whole.
    assert third[-2].endswith(
        "user:lichens call:lookup(lichens#1) result:lichens-1 call:lookup(lichens#2) result:lichens-2"
    )
