"""`kedi chat`: the interactive loop, driven through piped stdin."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from click.testing import CliRunner
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import kedi
from kedi.cli import main
from kedi.cli_chat import chat_loop


def chat(lines: str, *options: str) -> Any:
    return CliRunner().invoke(main, ["chat", "--quiet", *options], input=lines)


def test_each_line_is_a_turn_and_history_carries_over(tmp_path: Path) -> None:
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(["Hi Ada.", "You are Ada."]))
    transcript: list[dict[str, Any]] = []
    out, notices = io.StringIO(), []
    chat_loop(
        read=io.StringIO("My name is Ada.\nWho am I?\n"),
        write=out.write,
        notice=notices.append,
        interactive=False,
        model=f"script:{replies}",
        transcript=transcript.append,
    )
    assert out.getvalue() == "Hi Ada.\nYou are Ada.\n" and notices == []
    assert [m["content"] for m in transcript[1]["messages"]] == [
        "My name is Ada.",
        "Hi Ada.",
        "Who am I?",
    ]


def test_exit_reset_save_and_unknown_commands(tmp_path: Path) -> None:
    saved = tmp_path / "chat.json"
    result = chat(f"one\n/bogus\ntwo\n/save {saved}\n/reset\nthree\n/exit\nnever\n")
    assert result.exit_code == 0
    assert result.stdout == "[offline] one\n[offline] two\n[offline] three\n"
    assert "unknown command '/bogus'; commands: /exit, /reset, /save NAME" in result.stderr
    assert (
        f"(saved the conversation to {saved})" in result.stderr
        and "(new conversation)" in result.stderr
    )
    loaded = kedi.Conversation.load(saved)
    assert [m.content for m in loaded.messages()] == [
        "one",
        "[offline] one",
        "two",
        "[offline] two",
    ]


def test_end_of_input_quits_and_a_failed_turn_does_not_end_the_chat(tmp_path: Path) -> None:
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps(["first", {"error": "provider down"}, "third"]))
    result = chat("a\nb\nc\n", "--model", f"script:{replies}")
    assert result.exit_code == 0 and result.stdout == "first\nthird\n"
    assert "provider down" in result.stderr and "Traceback" not in result.stderr


def test_a_failed_turn_names_its_cause_not_the_internal_program(tmp_path: Path) -> None:
    # The user typed a line, not `[reply] << ...` at "<chat>" line 4: no Kedi trace.
    replies = tmp_path / "replies.json"
    replies.write_text(json.dumps([{"error": "provider down"}]))
    result = chat("hello\n", "--model", f"script:{replies}")
    assert result.exit_code == 0
    assert "error: ProviderError: " in result.stderr and "provider down" in result.stderr
    assert "<chat>" not in result.stderr and "stack trace" not in result.stderr


def test_history_is_bounded_by_max_messages() -> None:
    seen: list[list[str]] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompts = [
            str(p.content)
            for m in messages
            if isinstance(m, ModelRequest)
            for p in m.parts
            if isinstance(p, UserPromptPart)
        ]
        seen.append(prompts)
        return ModelResponse(parts=[TextPart("ok")])

    chat_loop(
        read=io.StringIO("1\n2\n3\n4\n"),
        write=lambda _: None,
        notice=lambda _: None,
        interactive=False,
        max_messages=3,
        model=FunctionModel(reply),
        system="Be brief.",
    )
    # Three messages: the previous turn (prompt and reply) and the new prompt.
    assert seen == [["1"], ["1", "2"], ["2", "3"], ["3", "4"]]


def test_save_keeps_every_turn_not_just_the_max_messages_window(tmp_path: Path) -> None:
    # The bound rewrites the lane to its window, so a 6-turn chat under --max-messages 4
    # was saved (file and session) as its last 2 turns.
    saved = tmp_path / "chat.json"
    lines = "".join(f"turn {n}\n" for n in range(1, 7))
    result = chat(f"{lines}/save {saved}\n/save talk\n", "--max-messages", "4")
    assert result.exit_code == 0, result.output
    loaded = kedi.Conversation.load(saved)
    assert [m.content for m in loaded.messages() if m.role == "user"] == [
        f"turn {n}" for n in range(1, 7)
    ]
    shown = json.loads(CliRunner().invoke(main, ["history", "show", "talk", "--json"]).stdout)
    assert len(shown["turns"]) == 6  # one turn per prompt, all of them


def test_piping_stdin_into_the_command(tmp_path: Path) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "kedi", "chat", "--max-messages", "4"],
        input="hello\nagain\n",
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert run.returncode == 0 and run.stdout == "[offline] hello\n[offline] again\n"
    assert run.stderr.count("no model configured") == 1  # once per chat, not per turn


def test_bad_max_messages_is_a_usage_error() -> None:
    result = chat("", "--max-messages", "0")
    assert result.exit_code == 2 and "0 is not in the range x>=1" in result.stderr


def test_save_stores_the_chat_as_a_session_of_the_history_store(tmp_path: Path) -> None:
    result = chat("one\ntwo\n/save talk\n/save talk\n")
    assert "(stored the conversation as session 'talk': kedi history show talk)" in result.stderr
    assert "a session named 'talk' already exists" in result.stderr
    shown = json.loads(CliRunner().invoke(main, ["history", "show", "talk", "--json"]).stdout)
    users = [
        m["content"] for turn in shown["turns"] for m in turn["messages"] if m["role"] == "user"
    ]
    assert users == ["one", "two"] and len(shown["turns"]) == 2  # one turn per prompt


def test_chat_takes_base_url_and_its_saved_session_names_the_model_and_tokens(
    monkeypatch: Any,
) -> None:
    """`--base-url` (as `kedi run` has it) reaches the server; `/save` keeps model and token counts."""
    from tests.adapters.openai_server import OpenAIServer, Reply, completion

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.delenv("KEDI_BASE_URL", raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with OpenAIServer() as server:
        server.add(
            Reply(body=completion("Hi.", usage=(10, 5))),
            Reply(body=completion("Ada.", usage=(30, 2))),
        )
        options = ["--adapter", "openai", "--model", "gpt-4o-mini", "--base-url", server.base_url]
        result = chat("hello\nwho am I?\n/save talk\n", *options)
        assert result.exit_code == 0, result.output
        assert result.stdout == "Hi.\nAda.\n"
        assert [body["model"] for body in server.bodies] == ["gpt-4o-mini", "gpt-4o-mini"]
    shown = json.loads(CliRunner().invoke(main, ["history", "show", "talk", "--json"]).stdout)
    assert shown["session"]["model"] == "openai:gpt-4o-mini"
    assert [(t["usage"]["input_tokens"], t["usage"]["output_tokens"]) for t in shown["turns"]] == [
        (10, 5),
        (30, 2),
    ]
    listed = CliRunner().invoke(main, ["history", "show", "talk"]).stdout
    assert "tokens 10→5" in listed and "tokens 30→2" in listed


def test_save_without_a_name_says_what_is_missing_not_unknown_command() -> None:
    result = chat("/save\n/save   \none\n")
    assert result.exit_code == 0
    assert "unknown command" not in result.stderr
    assert result.stderr.count("/save needs a NAME: /save NAME (a session) or /save FILE.json") == 2
    assert result.stdout == "[offline] one\n"


def test_a_model_no_adapter_can_build_fails_at_start_with_kedi_runs_hint() -> None:
    # Before, the chat started, read the first line, and then failed without the hint.
    result = chat("hello\n", "--model", "gpt-4o")
    assert result.exit_code == 1 and result.stdout == ""
    assert "Pydantic AI cannot use model 'gpt-4o'" in result.stderr
    assert "use `--adapter openai --model gpt-4o`" in result.stderr
