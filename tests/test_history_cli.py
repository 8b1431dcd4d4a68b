"""Conversation history proven through `kedi run`, scripted models and transcripts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from click.testing import CliRunner

from kedi.cli import main
from kedi.runtime.transcripts import expand_records, read_transcript


def run_program(
    tmp_path: Path, source: str, replies: list[Any]
) -> tuple[str, list[dict[str, Any]]]:
    """Run `source` with `kedi run` on a script model; return (stdout, transcript records)."""
    program = tmp_path / "flow.kedi"
    program.write_text(source, encoding="utf-8")
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies), encoding="utf-8")
    transcript = tmp_path / "calls.jsonl"
    result = CliRunner().invoke(
        main, ["run", str(program), "--model", f"script:{script}", "--transcript", str(transcript)]
    )
    assert result.exit_code == 0, result.output
    # Linear records (references to earlier ones) expanded back to every message sent.
    return result.stdout, list(expand_records(read_transcript(transcript).records))


def roles(record: dict[str, Any]) -> list[str]:
    return [m["role"] for m in record["messages"]]


def contents(record: dict[str, Any]) -> list[str]:
    return [m.get("content", "") for m in record["messages"]]


def test_history_on_versus_off(tmp_path: Path) -> None:
    replies = [{"outputs": {"name": "Atlas"}}, {"outputs": {"tagline": "Maps for teams"}}]
    body = ">> Remember [name].\n>> A tagline for <name>: [tagline].\n= <tagline>\n"
    out, on = run_program(tmp_path, "> history: enabled\n" + body, replies)
    assert out == "Maps for teams\n"
    assert roles(on[0]) == ["user"]
    assert roles(on[1]) == ["user", "assistant", "user"]
    assert contents(on[1])[0] == "Remember [name]."
    assert json.loads(contents(on[1])[1]) == {"name": "Atlas"}
    assert on[0]["history"] is True and on[0]["run_id"] == on[1]["run_id"]
    assert on[0]["call_id"] != on[1]["call_id"]
    assert on[0]["conversation_id"] == on[1]["conversation_id"]
    _, off = run_program(tmp_path, body, replies)
    assert [roles(r) for r in off] == [["user"], ["user"]]
    assert off[0]["history"] is False


def test_nested_disabled_scope_neither_reads_nor_writes(tmp_path: Path) -> None:
    source = (
        "> history: enabled\n"
        ">> First [a].\n"
        "@aside() -> str:\n"
        "  > history: disabled\n"
        "  >> Aside [b].\n"
        "  = <b>\n"
        "[x] = <aside()>\n"
        ">> Third [c].\n"
        "= <c>\n"
    )
    replies = [{"outputs": {"a": "1"}}, {"outputs": {"b": "2"}}, {"outputs": {"c": "3"}}]
    _, records = run_program(tmp_path, source, replies)
    assert roles(records[1]) == ["user"]  # the aside sees nothing
    assert contents(records[2]) == ["First [a].", '{"a":"1"}', "Third [c]."]  # and leaves no trace


def test_procedure_shares_the_run_conversation(tmp_path: Path) -> None:
    source = (
        "> history: enabled\n"
        ">> Top [a].\n"
        "@inner() -> str:\n"
        "  >> Inner [b].\n"
        "  = <b>\n"
        "[x] = <inner()>\n"
        ">> After [c].\n"
        "= <c>\n"
    )
    replies = [{"outputs": {"a": "1"}}, {"outputs": {"b": "2"}}, {"outputs": {"c": "3"}}]
    _, records = run_program(tmp_path, source, replies)
    assert contents(records[1]) == ["Top [a].", '{"a":"1"}', "Inner [b]."]
    assert contents(records[2])[-1] == "After [c]." and len(records[2]["messages"]) == 5


def test_lane_switch_by_settings_and_resumption(tmp_path: Path) -> None:
    source = (
        "> history: enabled\n"
        ">> One [a].\n"
        "@hot() -> str:\n"
        "  > settings:\n"
        "      temperature: 1.5\n"
        "  >> Hot [b].\n"
        "  >> Hotter [c].\n"
        "  = <c>\n"
        "[x] = <hot()>\n"
        ">> Two [d].\n"
        "= <d>\n"
    )
    replies = [{"outputs": {k: k.upper()}} for k in "abcd"]
    _, records = run_program(tmp_path, source, replies)
    assert records[1]["lane"] != records[0]["lane"]
    assert records[1]["settings"] == {"temperature": 1.5}
    assert contents(records[1]) == ["Hot [b]."]  # a new lane starts empty
    assert contents(records[2]) == ["Hot [b].", '{"b":"B"}', "Hotter [c]."]
    assert records[3]["lane"] == records[0]["lane"]  # back on the first lane, which resumes
    assert contents(records[3]) == ["One [a].", '{"a":"A"}', "Two [d]."]


def test_failed_call_leaves_no_trace(tmp_path: Path) -> None:
    source = (
        "> history: enabled\n"
        ">> Before [a].\n"
        "@risky() -> str:\n"
        "  >> Risky [b].\n"
        "  = <b>\n"
        "[status] = ```\n"
        "try:\n"
        "    risky()\n"
        "except Exception as error:\n"
        "    return 'failed'\n"
        "return 'ok'\n"
        "```\n"
        ">> After [c].\n"
        "= <status> <c>\n"
    )
    replies = [{"outputs": {"a": "1"}}, {"error": "provider exploded"}, {"outputs": {"c": "3"}}]
    out, records = run_program(tmp_path, source, replies)
    assert out == "failed 3\n"
    assert contents(records[-1]) == ["Before [a].", '{"a":"1"}', "After [c]."]


def test_instructions_are_replaced_and_never_stored(tmp_path: Path) -> None:
    source = (
        "> history: enabled\n"
        "> system: Be brief.\n"
        ">> One [a].\n"
        "[audience] = maintainers\n"
        "> system:\n"
        "    Write for <audience>.\n"
        "    Cite evidence.\n"
        ">> Two [b].\n"
        "= <b>\n"
    )
    replies = [{"outputs": {"a": "1"}}, {"outputs": {"b": "2"}}]
    _, records = run_program(tmp_path, source, replies)
    assert records[0]["messages"][0] == {"role": "system", "content": "Be brief."}
    assert roles(records[1]) == ["system", "user", "assistant", "user"]
    assert records[1]["messages"][0]["content"] == "Write for maintainers.\nCite evidence."
    assert "Be brief." not in json.dumps(records[1]["messages"][1:])


def test_raw_invoke_turns_have_exact_roles(tmp_path: Path) -> None:
    source = (
        "> history: enabled\n[first] << Say hello.\n[second] << And again.\n= <first> / <second>\n"
    )
    out, records = run_program(tmp_path, source, ["hello", "hello again"])
    assert out == "hello / hello again\n"
    assert [(m["role"], m["content"]) for m in records[1]["messages"]] == [
        ("user", "Say hello."),
        ("assistant", "hello"),
        ("user", "And again."),
    ]
    assert records[1]["output_schema"] is None
