"""`kedi run` sessions, `kedi history`, failed-run resume and deterministic replay, as a user runs them."""

from __future__ import annotations

import json
import os
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from kedi.cli_options import read_options

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((ROOT / "examples").glob("*.kedi"))
SECRET = "sk-proj-abcdefghijklmnopqrstuvwx"
CHAT = "> history: enabled\n[reply] << <`args.message`>\n= <reply>\n"


def kedi(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kedi", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd or ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )


def sessions() -> list[dict]:
    done = kedi("history", "ls", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def chat(tmp_path: Path) -> Path:
    path = tmp_path / "chat.kedi"
    path.write_text(CHAT)
    return path


def test_a_named_session_continues_in_the_next_run(chat: Path, tmp_path: Path) -> None:
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(["first reply", "second reply"]))
    model = f"script:{script}"
    assert (
        kedi("run", str(chat), "--model", model, "--session", "s1", "--message", "hi").returncode
        == 0
    )
    second = kedi(
        "run",
        str(chat),
        "--model",
        model,
        "--session",
        "s1",
        "--message",
        "again",
        "--transcript",
        str(tmp_path / "t.jsonl"),
    )
    assert second.returncode == 0, second.stderr
    sent = json.loads((tmp_path / "t.jsonl").read_text().splitlines()[0])["messages"]
    assert [m["content"] for m in sent] == [
        "hi",
        "first reply",
        "again",
    ]  # the earlier run's turn came back
    (listed,) = sessions()
    assert listed["name"] == "s1" and listed["turns"] == 2 and listed["program"] == str(chat)


def test_continue_fork_and_no_store(chat: Path, tmp_path: Path) -> None:
    assert kedi("run", str(chat), "--message", "one").returncode == 0
    assert len(sessions()) == 1  # a run without --session is still recorded
    assert kedi("run", str(chat), "-C", "--message", "two").returncode == 0
    (only,) = sessions()
    assert only["turns"] == 2
    assert kedi("run", str(chat), "-C", "--fork", "branch", "--message", "three").returncode == 0
    forked = {s["name"]: s for s in sessions()}["branch"]
    assert forked["parent"] == only["id"] and forked["id"] != only["id"] and forked["turns"] == 3
    assert kedi("run", str(chat), "--no-store", "--message", "x").returncode == 0
    assert kedi("run", str(chat), "--message", "x", env={"KEDI_HISTORY": "off"}).returncode == 0
    assert len(sessions()) == 2
    assert kedi("-c", "= `1 + 1`").stdout.strip() == "2"
    assert len(sessions()) == 2  # an unnamed run that called no model leaves no session
    off = kedi("run", str(chat), "--session", "s", env={"KEDI_HISTORY": "off"})
    assert off.returncode == 1 and "history store is off" in off.stderr


def test_a_run_that_fails_before_any_model_call_leaves_no_session(tmp_path: Path) -> None:
    # Each typo'd run added a "0 turns, failed" row to `kedi history ls` and a
    # "Resume with" line, though resuming it is just running it again.
    flow = tmp_path / "flow.kedi"
    flow.write_text("[n: int] = `1 // 0`\n>> never sent [x]\n= `x`\n")
    failed = kedi("run", str(flow))
    assert failed.returncode == 1 and "ZeroDivisionError" in failed.stderr
    assert "Resume with" not in failed.stderr
    assert sessions() == []
    named = kedi("run", str(flow), "--session", "mine")  # asked for by name: kept, resumable
    assert named.returncode == 1 and "Resume with: " in named.stderr
    assert [s["name"] for s in sessions()] == ["mine"]


def test_a_run_failing_outside_a_model_call_names_its_line_and_error(tmp_path: Path) -> None:
    # `history show` said "run 1 failed at : KediNameError: Kedi stack trace" (the first
    # line of the rendered trace, no location) and the resume line had no "at" either.
    flow = tmp_path / "flow.kedi"
    flow.write_text("> history: enabled\n[a] << first\n[b] << <`undefined_name`>\n= <b>\n")
    failed = kedi("run", str(flow), "--session", "typo")
    assert failed.returncode == 1
    # no model call failed, so there is no partial: the completed first call is what is kept
    assert f"kedi: run stopped at {flow}:3; its completed calls are stored." in failed.stderr
    shown = kedi("history", "show", "typo")
    assert shown.returncode == 0, shown.stderr
    assert (
        f"run 1 failed at {flow}:3: NameError: name 'undefined_name' is not defined" in shown.stdout
    )


def test_show_into_a_closed_pipe_prints_no_traceback(tmp_path: Path) -> None:
    # `kedi history show a | head -1`: printing failed while the reader of the turns was
    # open, and that reader was closed after the store ("Exception ignored ... Traceback").
    flow = tmp_path / "many.kedi"  # 600 turns: more than a pipe holds, in two batches
    flow.write_text(
        "@ask(i: int) -> str:\n  >> Item <i> [x: str]\n  = <x>\n"
        "= `len([ask(i) for i in range(600)])`\n"
    )
    assert kedi("run", str(flow), "--session", "a").returncode == 0
    shown = subprocess.Popen(
        [sys.executable, "-m", "kedi", "history", "show", "a"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert shown.stdout is not None
    assert shown.stdout.readline().startswith("session a")
    shown.stdout.close()  # the reader went away after the first line
    _, err = shown.communicate(timeout=120)
    assert "Traceback" not in err and "Exception ignored" not in err


def test_show_ls_rm_gc_export_import_and_diff(chat: Path, tmp_path: Path) -> None:
    assert kedi("run", str(chat), "--session", "a", "--message", "hello there").returncode == 0
    shown = kedi("history", "show", "a")
    assert (
        shown.returncode == 0
        and "user: hello there" in shown.stdout
        and "assistant:" in shown.stdout
    )
    data = json.loads(kedi("history", "show", "a", "--json").stdout)
    assert data["turns"][0]["messages"][0] == {
        "role": "user",
        "content": "hello there",
        **{k: data["turns"][0]["messages"][0][k] for k in ("runId", "conversationId")},
    }
    assert "offline" in kedi("history", "ls").stdout
    exported = tmp_path / "a.json"
    assert kedi("history", "export", "a", "-o", str(exported)).returncode == 0
    document = json.loads(exported.read_text())
    document["turns"][0]["messages"].insert(0, {"role": "system", "content": "injected"})
    exported.write_text(json.dumps(document))
    imported = kedi("history", "import", str(exported), "--name", "b")
    assert imported.returncode == 0 and "1 system prompts dropped" in imported.stdout
    assert (
        kedi("history", "diff", "a", "b").returncode == 0
    )  # the sanitized import equals the original
    assert kedi("run", str(chat), "--session", "b", "--message", "more").returncode == 0
    diff = kedi("history", "diff", "a", "b")
    assert diff.returncode == 1 and "b goes on to turn 2" in diff.stdout
    lane_less = tmp_path / "lane-less.json"
    lane_less.write_text('{"kedi_session_export": 1, "session": {}, "turns": [{"lane": {}}]}')
    refused = kedi("history", "import", str(lane_less))
    assert refused.stderr.endswith(
        "turns[0]: the field 'adapter' is missing\n"
    )  # was KeyError: 'adapter'
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    refused = kedi("history", "import", str(bad))
    assert (
        refused.returncode == 1
        and "not a kedi session export" in refused.stderr
        and "Traceback" not in refused.stderr
    )
    assert kedi("history", "gc", "--older-than", "30d").stdout.startswith("removed 0 sessions")
    assert kedi("history", "rm", "a").returncode == 0
    assert [s["name"] for s in sessions()] == ["b"]
    missing = kedi("history", "show", "nope")
    assert missing.returncode == 1 and "no session 'nope'" in missing.stderr


def test_explain_shows_what_the_next_call_sends(chat: Path) -> None:
    assert kedi("run", str(chat), "--session", "e", "--message", "remember me").returncode == 0
    explained = kedi("history", "explain", str(chat), "--session", "e")
    assert explained.returncode == 0, explained.stderr
    assert (
        "lane: offline/offline" in explained.stdout
        and '"content": "remember me"' in explained.stdout
    )
    with_args = kedi("history", "explain", str(chat), "--session", "e", "--message", "what next")
    assert (
        with_args.returncode == 0 and '"content": "what next"' in with_args.stdout
    )  # program options become args
    trimmed = chat.with_name("trimmed.kedi")
    trimmed.write_text(
        "> system: Be brief.\n> history:\n    enabled: true\n    max_messages: 1\n[reply] << next\n= <reply>\n"
    )
    explained = kedi("history", "explain", str(trimmed), "--session", "e")
    assert explained.returncode == 0, explained.stderr
    shown = [
        json.loads(line)
        for line in explained.stdout.split("messages (as sent: after processors and repair):\n")[1]
        .split("\noutput schema")[0]
        .splitlines()
    ]
    assert [(m["role"], m["content"]) for m in shown] == [
        ("system", "Be brief."),
        ("user", "next"),
    ]  # the bound dropped the old turn


TOOL_PROGRAM = (
    '```\ndef lookup(q: str) -> str:\n    """Look q up."""\n    return \'found \' + q\n```\n'
    "> history: enabled\n[first] << Say hi\n> use: lookup\n[a] << Look it up\n= `first + ' / ' + a`\n"
)


def test_a_failed_tool_call_is_stored_and_resumed_without_repeating_completed_calls(
    tmp_path: Path,
) -> None:
    program = tmp_path / "tools.kedi"
    program.write_text(TOOL_PROGRAM)
    replies = [
        "hi",
        {"tool_calls": [{"id": "c1", "name": "lookup", "args": {"q": "x"}}]},
        {"error": "overloaded"},
    ]
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies))
    failed = kedi("run", str(program), "--model", f"script:{script}", "--session", "t")
    assert failed.returncode == 1
    # The resume command repeats the option that chose the model: run as printed, it resumes.
    resume_command = failed.stderr.split("Resume with: ")[1].splitlines()[0]
    assert resume_command == f"kedi run {program} --resume t --model=script:{script}"
    assert f"{program}:" in failed.stderr.splitlines()[-1]
    runs = json.loads(kedi("history", "show", "t", "--json").stdout)["runs"]
    assert runs[-1]["status"] == "failed" and '"tools":""' not in runs[-1]["failure"]["lane"]
    assert [m["role"] for m in runs[-1]["failure"]["messages"]][-3:] == [
        "user",
        "assistant",
        "tool",
    ]
    # Resume: "Say hi" is served from the store (the script's "hi" is not asked again), the tool
    # call continues on the lane of the same tool contract from its partial.
    # (the same model: a script's path is its model name, so the file keeps its name)
    script.write_text(json.dumps(["done"]))
    resumed = kedi(*shlex.split(resume_command)[1:], "--transcript", str(tmp_path / "t.jsonl"))
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == "hi / done"
    sent = [json.loads(line) for line in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert len(sent) == 2  # the served call's transcript line, then the one live request
    contents = [m.get("content", "") for m in sent[1]["messages"]]
    # the tool lane's own history: the partial (prompt, tool call, its result), then the prompt again
    assert contents == ["Look it up", "", "found x", "Look it up"]
    shown = json.loads(kedi("history", "show", "t", "--json").stdout)
    assert shown["runs"][-1]["status"] == "ok" and len(shown["runs"]) == 1


def test_the_resume_command_repeats_the_programs_arguments_and_masks_secrets(
    tmp_path: Path,
) -> None:
    program = tmp_path / "greet.kedi"
    program.write_text(
        "[greeting] << Greet <`args.name`>\n= `f'{greeting}, {args.name} ({len(args.token)})'`\n"
    )
    script = tmp_path / "replies.json"
    script.write_text(json.dumps([{"error": "overloaded"}]))
    secret = SECRET
    failed = kedi(
        "run", str(program), "--model", f"script:{script}", "--name", "Ada Lovelace",
        "--token", secret, "--session", "g",
    )  # fmt: skip
    assert failed.returncode == 1
    resume_command = failed.stderr.split("Resume with: ")[1].splitlines()[0]
    assert secret not in failed.stderr
    assert resume_command.startswith(
        f"kedi run {program} --resume g --model=script:{script} --name 'Ada Lovelace' --token "
    )
    script.write_text(json.dumps(["Hello"]))
    arguments = shlex.split(resume_command)[1:]
    arguments[-1] = secret  # the user types the secret again
    resumed = kedi(*arguments)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.strip() == f"Hello, Ada Lovelace ({len(secret)})"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_replay_reproduces_every_example_exactly(path: Path, tmp_path: Path) -> None:
    replies = tmp_path / "replies.json"
    replies.write_bytes(path.with_suffix(".replies.json").read_bytes())
    model = f"script:{replies}"
    # kedi refuses options a program does not read: pass --name only to the examples that read it
    name = (
        ["--name", "Ada"] if "name" in read_options(path.read_text(encoding="utf-8")).lines else []
    )
    live = kedi(
        "run",
        str(path),
        "--model",
        model,
        "--session",
        "r",
        *name,
        "--transcript",
        str(tmp_path / "live.jsonl"),
    )
    assert live.returncode == 0, live.stderr
    before = kedi("history", "show", "r", "--json").stdout
    # an emptied script proves nothing reaches the model: every call is served from the store
    replies.write_text("[]")
    replayed = kedi(
        "run",
        str(path),
        "--model",
        model,
        "--replay",
        "r",
        *name,
        "--transcript",
        str(tmp_path / "replay.jsonl"),
    )
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == live.stdout
    assert (tmp_path / "replay.jsonl").read_text() == (tmp_path / "live.jsonl").read_text()
    assert kedi("history", "show", "r", "--json").stdout == before  # replay writes nothing


def test_replay_stops_on_prompt_drift_with_a_readable_diff(chat: Path) -> None:
    assert kedi("run", str(chat), "--session", "d", "--message", "old wording").returncode == 0
    drift = kedi("run", str(chat), "--replay", "d", "--message", "new wording")
    assert drift.returncode == 1
    assert (
        '-  "prompt": "old wording"' in drift.stderr
        and '+  "prompt": "new wording"' in drift.stderr
    )
    assert (
        kedi("run", str(chat), "--replay", "d", "--record", "--message", "new wording").returncode
        == 0
    )
    assert kedi("run", str(chat), "--replay", "d", "--message", "new wording").returncode == 0


def test_replay_names_a_missing_option_only_when_its_none_made_the_difference(
    tmp_path: Path,
) -> None:
    edited = tmp_path / "edited.kedi"
    edited.write_text('[reply] << Describe <`args.product or "anything"`>\n= <reply>\n')
    assert kedi("run", str(edited), "--session", "edited").returncode == 0
    edited.write_text('[reply] << Please describe <`args.product or "anything"`>\n= <reply>\n')
    drift = kedi("run", str(edited), "--replay", "edited")
    assert drift.returncode == 1 and '+  "prompt": "Please describe anything"' in drift.stderr
    assert "was not given" not in drift.stderr  # the edit explains it, not --product

    dropped = tmp_path / "dropped.kedi"
    dropped.write_text("[reply] << Describe <`args.product`>\n= <reply>\n")
    assert kedi("run", str(dropped), "--session", "dropped", "--product", "Widget").returncode == 0
    drift = kedi("run", str(dropped), "--replay", "dropped")
    assert drift.returncode == 1 and '+  "prompt": "Describe None"' in drift.stderr
    assert f"option --product was not given, so args.product is None (read at {dropped}:1)" in (
        drift.stderr
    )


def test_history_list_is_another_name_for_ls(chat: Path) -> None:
    assert kedi("run", str(chat), "--session", "named", "--message", "hi").returncode == 0
    listed = kedi("history", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == sessions() and sessions()[0]["name"] == "named"
    commands = kedi("history", "--help").stdout
    assert "(also: list)" in commands and "\n  list " not in commands  # listed once, as ls


def test_secrets_never_reach_the_store(chat: Path, _private_history_store: Path) -> None:
    planted = "sk-plantedSECRETvalue1234567890"
    program = chat.with_name("secret.kedi")
    program.write_text(
        "> history: enabled\n[reply] << key <`args.message`> and <`__import__('os').environ['MY_API_KEY']`>\n= <reply>\n"
    )
    done = kedi(
        "run",
        str(program),
        "--session",
        "k",
        "--message",
        planted,
        env={"MY_API_KEY": "env-secret-abcdef123"},
    )
    assert done.returncode == 0, done.stderr
    raw = b"".join(p.read_bytes() for p in _private_history_store.parent.glob("history.db*"))
    assert planted.encode() not in raw and b"env-secret-abcdef123" not in raw
    with sqlite3.connect(_private_history_store) as db:
        assert db.execute("SELECT COUNT(*) FROM turns").fetchone()[0] == 1


def test_conversation_load_works_in_a_fresh_process_after_import_kedi(tmp_path: Path) -> None:
    saved = tmp_path / "c.json"
    code = (
        "import kedi\n"
        f"c = kedi.Conversation.load({str(saved)!r})\n"
        "lane = c.lane_for(model='offline')\n"
        "c.seed([*c.messages(model='offline'), {'role': 'user', 'content': 'more'}], model='offline')\n"
        "print(len(c.messages(model='offline')), lane.key.adapter)\n"
    )
    setup = (
        "import kedi\nc = kedi.Conversation()\nc.seed([{'role': 'user', 'content': 'a'}], model='offline')\n"
        f"c.save({str(saved)!r})\n"
    )
    for source in (setup, code):
        done = subprocess.run(
            [sys.executable, "-c", source],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "offline"]


def test_trim_and_budget_history_work_directly_as_history_processor() -> None:
    import kedi

    program = kedi.compile("> history: enabled\n>> hi [a]\n>> again [b]\n>> more [c]\n= <c>")
    for processor, sizes in (
        (kedi.trim_history(3), [1, 3, 3]),
        (kedi.budget_history(lambda m: 10 * len(m), 35), [1, 3, 3]),
    ):
        records: list[dict] = []
        program.run_sync(history_processor=processor, transcript=records.append)
        assert [
            len(record["messages"]) for record in records
        ] == sizes  # whole turns dropped, current kept


def test_an_interrupted_run_is_stored_and_resumed(tmp_path: Path) -> None:
    import signal
    import time

    program = tmp_path / "slow.kedi"
    marker = tmp_path / "reached"
    program.write_text(
        "> history: enabled\n>> first [a]\n"
        f"```\nimport os, pathlib, time\ntoken = args.token\nif not os.environ.get('FAST'):\n    pathlib.Path({str(marker)!r}).write_text('x')\n    time.sleep(60)\n```\n"
        ">> second [b]\n= <b>\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-m", "kedi", "run", str(program), "--session", "slow", "--token", SECRET],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    # the first Ctrl-C asks the event loop to cancel; the fence blocks it, so a second one
    # interrupts the fence itself (Ctrl-C mechanics belong to the runtime, not the store)
    child.send_signal(signal.SIGINT)
    try:
        _, stderr = child.communicate(timeout=1)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGINT)
        _, stderr = child.communicate(timeout=60)
    assert child.returncode != 0
    # The resume command repeats the program's arguments, a secret masked (Ctrl-C's own line).
    assert f"Resume with: kedi run {program} --resume slow --token ***" in stderr
    assert SECRET not in stderr
    shown = json.loads(kedi("history", "show", "slow", "--json").stdout)
    assert shown["runs"][-1]["status"] == "interrupted" and len(shown["turns"]) == 1
    resumed = kedi(
        "run",
        str(program),
        "--resume",
        "slow",
        "--token",
        SECRET,
        "--transcript",
        str(tmp_path / "t.jsonl"),
        env={"FAST": "1"},
    )
    assert resumed.returncode == 0, resumed.stderr
    shown = json.loads(kedi("history", "show", "slow", "--json").stdout)
    assert shown["runs"][-1]["status"] == "ok" and [
        t["request"]["prompt"] for t in shown["turns"]
    ] == ["first [a]", "second [b]"]


def test_an_unusable_store_does_not_stop_a_plain_run(chat: Path, tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_text("not a database" * 200)
    plain = kedi("run", str(chat), "--message", "hi", env={"KEDI_HISTORY": str(junk)})
    assert plain.returncode == 0 and plain.stdout.strip()
    assert "not recording this run" in plain.stderr and "not a kedi history store" in plain.stderr
    asked = kedi("run", str(chat), "--session", "s", env={"KEDI_HISTORY": str(junk)})
    assert (
        asked.returncode == 1
        and "not a kedi history store" in asked.stderr
        and "Traceback" not in asked.stderr
    )


def test_session_names_match_exactly_when_creating(chat: Path) -> None:
    assert kedi("run", str(chat), "--message", "one").returncode == 0
    (first,) = sessions()
    assert kedi("run", str(chat), "--session", first["id"][:8], "--message", "two").returncode == 0
    assert len(sessions()) == 2  # a new session named like an id prefix, not a continuation
    assert (
        kedi("history", "show", first["id"][:13]).returncode == 0
    )  # prefixes still find sessions to show


def test_an_id_prefix_under_4_characters_is_asked_for_more_by_show_and_rm(chat: Path) -> None:
    assert kedi("run", str(chat), "--message", "hi").returncode == 0
    (listed,) = sessions()
    short = listed["id"][:3]
    for command in ("show", "rm"):
        refused = kedi("history", command, short)
        assert refused.returncode == 1, refused.stderr
        assert f"no session named '{short}'" in refused.stderr
        assert "an id prefix needs at least 4 characters: give more of the id" in refused.stderr
    assert kedi("history", "show", listed["id"][:4]).returncode == 0
    assert kedi("history", "rm", listed["id"][:4]).returncode == 0
    assert sessions() == []


def test_a_failed_import_names_the_file_once(tmp_path: Path) -> None:
    lane = {"adapter": "pydantic", "model": "m", "settings": "", "mcp": "", "tools": ""}
    bad = {
        "native.json": {**lane, "format": "pydantic"},
        "portable.json": {**lane, "adapter": "offline", "format": "portable"},
    }
    for file, key in bad.items():
        path = tmp_path / file
        turn = {"lane": key, "messages": [{"role": "bogus", "kind": "nonsense"}]}
        path.write_text(json.dumps({"kedi_session_export": 1, "session": {}, "turns": [turn]}))
        refused = kedi("history", "import", str(path))
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert refused.stderr.count(str(path)) == 1, refused.stderr
        assert f"{path}: turns[0]: " in refused.stderr
        assert "HistoryError:" not in refused.stderr


def test_explain_takes_the_model_options_of_the_run_it_continues(
    chat: Path, tmp_path: Path
) -> None:
    # Before, `--model` after FILE became args.model, and the call was explained
    # on the offline model's empty lane instead of the session's.
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(["noted"]))
    model = f"script:{script}"
    ran = kedi("run", str(chat), "--model", model, "--session", "x", "--message", "remember me")
    assert ran.returncode == 0, ran.stderr
    for options in (["--model", model], ["--adapter", "script", "--model", model]):
        explained = kedi("history", "explain", str(chat), "--session", "x", *options)
        assert explained.returncode == 0, explained.stderr
        assert f"lane: script/{script}#" in explained.stdout
        assert "(2 messages in history" in explained.stdout
        assert '"content": "noted"' in explained.stdout


def test_a_session_whose_first_call_failed_is_labelled_by_that_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It was labelled by the command line's bare model name ("test-model"), as no turn was recorded.
    from click.testing import CliRunner

    from kedi.cli import main
    from kedi.history.store import open_store
    from tests.adapters.openai_server import MODEL, OpenAIServer, Reply, error_body

    monkeypatch.setenv("KEDI_HISTORY", str(tmp_path / "history.db"))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    flow = tmp_path / "flow.kedi"
    flow.write_text("[x] << Say hello.\n= <x>\n")
    with OpenAIServer() as server:
        server.add(Reply(400, error_body("the prompt is not allowed")))
        command = ["run", str(flow), "--adapter", "openai", "--model", MODEL]
        result = CliRunner().invoke(main, [*command, "--base-url", server.base_url])
    assert result.exit_code == 1 and "the prompt is not allowed" in result.stderr
    store = open_store(str(tmp_path / "history.db"))
    assert store is not None
    with store:
        assert [session.model for session in store.sessions()] == [f"openai:{MODEL}"]
