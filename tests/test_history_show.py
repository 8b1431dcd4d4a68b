"""`kedi history show`: what it prints, and that it starts light.

The listing reads `TurnSummary` tuples in batches (`Store.turn_summaries`)
instead of full `TurnRecord`s and never imports pydantic: that is what makes a
10,000-turn session print in well under half a second (`bench/store.py`).
`tests/history/test_store.py` checks the summaries against the full records.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kedi.cli import main
from kedi.history.lanes import LaneKey
from kedi.history.store import Store, StoreError, TurnRecord, open_store

ROOT = Path(__file__).resolve().parents[1]
PORTABLE_LANE = LaneKey("offline", "offline", "digest", tools="weather-v1")
NATIVE_LANE = LaneKey("pydantic-ai", "test", "digest", format="pydantic-ai")

TOOL_TURN = [
    {"role": "user", "content": "Weather in Paris?"},
    {
        "role": "assistant",
        "content": "",
        "toolCalls": [{"id": "c1", "name": "weather", "args": {"city": "Paris"}}],
    },
    {"role": "tool", "content": "sunny", "toolName": "weather", "toolCallId": "c1"},
    {
        "role": "tool",
        "content": "no such city",
        "toolName": "weather",
        "toolCallId": "c2",
        "failed": True,
    },
    {"role": "assistant", "content": "It is sunny."},
]
NATIVE_TURN = [{"kind": "request", "parts": [{"part_kind": "user-prompt", "content": "hi"}]}]


def opened(location: Path | str) -> Store:
    store = open_store(location)
    assert store is not None, "KEDI_HISTORY=off"
    return store


def fill(location: Path | str, name: str) -> None:
    """A session with a tool-using turn, a stateless turn, a native-lane turn and a failed run."""
    with opened(location) as store:
        session = store.create_session(name=name, program="flow.kedi", model="offline")
        run = store.begin_run(session.id, program="flow.kedi")
        store.commit_turn(
            TurnRecord(
                session_id=session.id,
                run_no=run,
                lane=PORTABLE_LANE,
                origin="flow.kedi:3",
                messages=TOOL_TURN,
                value={"forecast": "sunny", "degrees": 21},
                usage={"input_tokens": 12, "output_tokens": 5},
                request={"prompt": "Weather in Paris?"},
            )
        )
        store.commit_turn(
            TurnRecord(
                session_id=session.id,
                run_no=run,
                lane=PORTABLE_LANE,
                origin="flow.kedi:5",
                history=False,
                messages=[{"role": "user", "content": "\x1b[31mred\x1b[0m text"}],
                value="a plain reply",
            )
        )
        store.commit_turn(
            TurnRecord(
                session_id=session.id,
                run_no=run,
                lane=NATIVE_LANE,
                origin="flow.kedi:7",
                messages=NATIVE_TURN,
            )
        )
        store.finish_run(
            session.id,
            run,
            "failed",
            failure={"origin": "flow.kedi:9", "error": "ProviderError: boom"},
        )


@pytest.fixture
def store_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "history.db"
    monkeypatch.setenv("KEDI_HISTORY", str(path))
    fill(path, "trip")
    return path


def show(*args: str, color: bool = False) -> str:
    result = CliRunner().invoke(main, ["history", "show", *args], color=color)
    assert result.exit_code == 0, result.output
    return result.output


def test_show_prints_roles_tool_calls_captures_usage_and_the_failed_run(store_file: Path) -> None:
    with opened(store_file) as store:
        session_id = store.session("trip").id
    portable, native = PORTABLE_LANE.label(), NATIVE_LANE.label()
    assert show("trip").splitlines() == [
        f"session trip  id {session_id}  program flow.kedi  model offline  turns 3",
        "",
        f"turn 1 run 1  flow.kedi:3  lane {portable}  tokens 12→5",
        "  user: Weather in Paris?",
        "  assistant:",
        '    → weather({"city": "Paris"})',
        "  tool: sunny  [weather]",
        "  tool: no such city  [weather, failed]",
        "  assistant: It is sunny.",
        '  captures forecast="sunny", degrees=21',
        "",
        # a model's escape codes are shown escaped, never sent to the terminal
        f"turn 2 run 1  flow.kedi:5  lane {portable}  (no history)  tokens 0→0",
        "  user: \\x1b[31mred\\x1b[0m text",
        "",
        f"turn 3 run 1  flow.kedi:7  lane {native}  tokens 0→0",
        f"  {json.dumps(NATIVE_TURN[0])}",
        "",
        "run 1 failed at flow.kedi:9: ProviderError: boom",
    ]


def test_lane_filter_and_colour(store_file: Path) -> None:
    native_only = show("trip", "--lane", "pydantic-ai")
    assert (
        "turn 3 " in native_only and "turn 1 " not in native_only and "turn 2 " not in native_only
    )
    coloured = show("trip", color=True)
    assert "\x1b[36m\x1b[1mturn 1\x1b[0m" in coloured and "\x1b[31mred" not in coloured
    assert "\x1b" not in show("trip")


def test_a_models_escape_sequences_never_reach_the_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On a terminal a stored reply's escapes went out raw (an OSC sequence retitles the
    # terminal or writes its clipboard; cursor moves can hide earlier turns), and piped
    # output kept the OSC ones (click strips colour codes only).
    path = tmp_path / "history.db"
    monkeypatch.setenv("KEDI_HISTORY", str(path))
    with opened(path) as store:
        session = store.create_session(name="evil", program="flow.kedi", model="offline")
        run = store.begin_run(session.id, program="flow.kedi")
        reply = "ok\x1b]52;c;cm0gLXJmIH4=\x07\x1b[1A\x1b[2K\x9b done"
        store.commit_turn(
            TurnRecord(
                session_id=session.id,
                run_no=run,
                lane=PORTABLE_LANE,
                messages=[
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": reply},
                ],
            )
        )
        store.finish_run(session.id, run, "failed", failure={"error": "Bad: \x1b]0;title\x07"})
    for color in (True, False):
        shown = show("evil", color=color)
        assert "\x07" not in shown and "\x9b" not in shown and "\x1b]" not in shown
        assert "\x1b[1A" not in shown and "\x1b[2K" not in shown
        assert ": ok\\x1b]52;c;cm0gLXJmIH4=\\x07\\x1b[1A\\x1b[2K\\x9b done" in shown
        assert "Bad: \\x1b]0;title\\x07" in shown


@pytest.mark.parametrize("as_json", [(), ("--json",)])
def test_a_lane_filter_matching_nothing_says_so(store_file: Path, as_json: tuple[str, ...]) -> None:
    # A typo'd --lane printed the header and no turn, with exit status 0; then the
    # header and the failed run's line before the error. The error comes alone.
    result = CliRunner().invoke(main, ["history", "show", "trip", "--lane", "nosuch", *as_json])
    assert result.exit_code == 1 and result.stdout == ""
    assert "no turn of session 'trip' is on a lane whose label contains 'nosuch'" in result.stderr
    assert PORTABLE_LANE.label() in result.stderr and NATIVE_LANE.label() in result.stderr


def test_json_is_the_full_records(store_file: Path) -> None:
    data = json.loads(show("trip", "--json"))
    first = data["turns"][0]
    assert first["messages"] == TOOL_TURN and first["request"] == {"prompt": "Weather in Paris?"}
    assert first["lane"] == {
        "label": PORTABLE_LANE.label(),
        **{
            k: getattr(PORTABLE_LANE, k)
            for k in ("adapter", "model", "settings", "mcp", "tools", "format")
        },
    }
    assert [turn["seq"] for turn in data["turns"]] == [1, 2, 3]
    assert data["runs"][0]["failure"]["error"] == "ProviderError: boom"
    assert [
        t["seq"] for t in json.loads(show("trip", "--json", "--lane", "pydantic-ai"))["turns"]
    ] == [3]


def test_a_long_session_prints_every_turn_in_order_across_batches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "long.db"
    monkeypatch.setenv("KEDI_HISTORY", str(path))
    with opened(path) as store:
        session = store.create_session(name="long")
        with store.transaction() as tx:
            for index in range(1, 1202):
                lane = NATIVE_LANE if index % 400 == 0 else PORTABLE_LANE
                tx.commit_turn(
                    TurnRecord(
                        session_id=session.id,
                        lane=lane,
                        messages=[{"role": "user", "content": f"m{index}"}],
                    )
                )
    lines = show("long").splitlines()
    assert [line.split()[1] for line in lines if line.startswith("turn ")] == [
        str(n) for n in range(1, 1202)
    ]
    assert [line for line in lines if line.startswith("  user: ")] == [
        f"  user: m{n}" for n in range(1, 1202)
    ]
    native = [
        line.split()[1]
        for line in show("long", "--lane", "pydantic-ai").splitlines()
        if line.startswith("turn ")
    ]
    assert native == ["400", "800", "1200"]


def test_a_damaged_turn_is_a_store_error_not_a_traceback(store_file: Path) -> None:
    import sqlite3

    with sqlite3.connect(store_file) as connection:
        connection.execute("UPDATE turns SET messages = '[{broken' WHERE seq = 2")
    with opened(store_file) as store, pytest.raises(StoreError, match="not valid JSON"):
        list(store.turn_summaries(store.session("trip").id))
    result = CliRunner().invoke(main, ["history", "show", "trip"])
    assert result.exit_code == 1 and "not valid JSON" in result.output


# --------------------------------------------------------------------------- start-up imports

PROBE = """
import json, sys
from kedi.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    print(json.dumps(sorted(sys.modules)))
"""

HEAVY = ("pydantic", "pydantic_core", "rich", "lark", "platformdirs")
"""Packages `kedi history show` has no use for (platformdirs only finds the default store)."""


def loaded(*args: str, store: Path) -> set[str]:
    """The modules a fresh `kedi ARGS` loads."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
        env={**os.environ, "KEDI_HISTORY": str(store), "PYTHONPATH": str(ROOT)},
    )
    return set(json.loads(proc.stdout.strip().splitlines()[-1]))


def test_history_show_loads_the_store_but_not_pydantic(store_file: Path) -> None:
    modules = loaded("history", "show", "trip", store=store_file)
    assert "kedi.history.store.sqlite" in modules  # the probe really showed the session
    assert not {m.split(".")[0] for m in modules} & set(HEAVY)
    kedi_modules = {m for m in modules if m.startswith("kedi.")}
    assert not {
        m for m in kedi_modules if m.startswith(("kedi.runtime", "kedi.adapters", "kedi.syntax"))
    }
    assert not kedi_modules & {
        "kedi.history.messages",
        "kedi.history.repair",
        "kedi.history.processors",
        "kedi.history.persistence",
    }  # the pydantic side of history


@pytest.mark.parametrize("args", [("--version",), ("history", "--help")])
def test_version_and_history_help_load_no_store(args: tuple[str, ...], store_file: Path) -> None:
    modules = loaded(*args, store=store_file)
    assert not {m for m in modules if m.startswith("kedi.history")}
    assert not {m.split(".")[0] for m in modules} & {*HEAVY, "anyio", "sqlite3"}


HISTORY_PROBE = """
import importlib, json, sys
import kedi.history as history
at_import = sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic", "anyio") or m.startswith("kedi.history."))
wrong = [name for name, (module, attribute) in history._LAZY.items()  # no aliases: each name is its module's
         if attribute != name or getattr(history, name) is not getattr(importlib.import_module(module), name)]
helpers = [name for name in ("annotations", "importlib", "typing") if hasattr(history, name)]
print(json.dumps([at_import, "pydantic" in sys.modules, wrong, helpers]))
"""


def test_kedi_history_loads_each_name_from_its_module_on_first_use() -> None:
    """`import kedi.history` loads only the errors; its names (pydantic models among them) load when used."""
    proc = subprocess.run(
        [sys.executable, "-c", HISTORY_PROBE],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    at_import, pydantic_after_use, wrong, helpers = json.loads(proc.stdout)
    assert at_import == [] and pydantic_after_use and wrong == [] and helpers == []
    import kedi.history

    eager = {name for name in vars(kedi.history) if name in kedi.history.__all__} - set(
        kedi.history._LAZY
    )
    assert eager | set(kedi.history._LAZY) == set(kedi.history.__all__)
    assert all(getattr(kedi.history, name).__module__ == "kedi.errors" for name in eager)


def test_an_import_whose_name_is_taken_says_so(store_file: Path, tmp_path: Path) -> None:
    # The report read "as session 01a... (id 01a...)": the id twice, and no word on the name.
    runner = CliRunner()
    source = ">> Hello [greeting]\n= `greeting`\n"
    assert runner.invoke(main, ["run", "-c", source, "--session", "hi", "--quiet"]).exit_code == 0
    exported = tmp_path / "hi.json"
    assert runner.invoke(main, ["history", "export", "hi", "-o", str(exported)]).exit_code == 0
    renamed = runner.invoke(main, ["history", "import", str(exported), "--name", "hi-2"])
    assert renamed.exit_code == 0 and "as session 'hi-2' (id " in renamed.stdout
    unnamed = runner.invoke(main, ["history", "import", str(exported)])
    assert unnamed.exit_code == 0
    assert "the name 'hi' is taken here: import with --name NEW to name it" in unnamed.stdout


def test_an_interrupted_run_says_so_without_pythons_cancellation_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A Ctrl-C'd run is stored with the cancellation as its error: it showed as
    # "run 1 interrupted at slow.kedi:2: CancelledError: ".
    path = tmp_path / "history.db"
    monkeypatch.setenv("KEDI_HISTORY", str(path))
    with opened(path) as store:
        session = store.create_session(name="cut", program="slow.kedi", model="offline")
        for error in ("CancelledError: ", "KeyboardInterrupt", "ProviderError: boom"):
            run = store.begin_run(session.id, program="slow.kedi")
            failure = {"origin": "slow.kedi:2", "error": error}
            store.finish_run(session.id, run, "interrupted", failure=failure)
    assert [line for line in show("cut").splitlines() if line.startswith("run ")] == [
        "run 1 interrupted at slow.kedi:2",
        "run 2 interrupted at slow.kedi:2",
        "run 3 interrupted at slow.kedi:2: ProviderError: boom",
    ]
