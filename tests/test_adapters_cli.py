"""Real adapters selected from the command line, with history across turns."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from kedi.cli import main
from kedi.runtime.transcripts import expand_records, read_transcript
from tests.adapters.openai_server import OpenAIServer, Reply, completion

PROGRAM = (
    "> history: enabled\n>> Name a colour: [colour].\n[why] << Why that one?\n= <colour> / <why>\n"
)


def run(tmp_path: Path, *options: str, env: dict[str, str] | None = None):
    path = tmp_path / "flow.kedi"
    path.write_text(PROGRAM, encoding="utf-8")
    transcript = tmp_path / "t.jsonl"
    result = CliRunner().invoke(
        main, ["run", str(path), "--transcript", str(transcript), *options], env=env
    )
    # Linear records (references to earlier ones) expanded back to every message sent.
    records = (
        list(expand_records(read_transcript(transcript).records)) if transcript.exists() else []
    )
    return result, records


def test_openai_adapter_from_the_cli_keeps_history(tmp_path: Path) -> None:
    with OpenAIServer() as server:
        server.add(
            Reply(body=completion('{"colour":"teal"}')), Reply(body=completion("It is calm."))
        )
        env = {"OPENAI_BASE_URL": server.base_url, "OPENAI_API_KEY": "sk-secret-test"}
        result, records = run(tmp_path, "--adapter", "openai", "--model", "gpt-test", env=env)
        assert result.exit_code == 0, result.output
        assert result.stdout == "teal / It is calm.\n"
        second = server.bodies[1]["messages"]
        assert [m["role"] for m in second] == ["user", "assistant", "user"]
        assert second[1]["content"] == '{"colour":"teal"}'
    assert "sk-secret-test" not in (tmp_path / "t.jsonl").read_text()
    assert records[0]["adapter"] == "openai" and records[0]["model"] == "gpt-test"


def test_pydantic_adapter_from_the_cli_keeps_history(tmp_path: Path) -> None:
    result, records = run(tmp_path, "--adapter", "pydantic", "--model", "test")
    assert result.exit_code == 0, result.output
    assert records[0]["adapter"] == "pydantic"
    second = [m["role"] for m in records[-1]["messages"]]
    assert second[0] == "user" and "assistant" in second and second[-1] == "user"
    assert len(records[-1]["messages"]) > len(records[0]["messages"])


def test_unknown_adapter_is_a_clear_error(tmp_path: Path) -> None:
    result, _ = run(tmp_path, "--adapter", "nonsense", "--model", "x")
    assert result.exit_code == 1
    assert "unknown adapter 'nonsense'" in result.stderr
