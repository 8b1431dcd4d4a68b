"""The `kedi` command line: exit codes, streams, program arguments."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kedi.cli import main, program_arguments

REPO = Path(__file__).resolve().parents[1]


def invoke(*args: str):
    return CliRunner().invoke(main, list(args))


def test_help_lists_commands() -> None:
    result = invoke("--help")
    assert result.exit_code == 0
    for command in ("run", "parse", "check"):
        assert command in result.output


def test_parse_success_and_failure(tmp_path: Path) -> None:
    good = tmp_path / "good.kedi"
    good.write_text(">> Hello [x].\n= <x>\n")
    result = invoke("parse", str(good))
    assert (result.exit_code, result.stdout) == (0, "Parsed successfully.\n")
    bad = tmp_path / "bad.kedi"
    bad.write_text("Hello there\n")
    result = invoke("parse", str(bad))
    assert result.exit_code == 1
    assert result.stdout == ""
    assert 'File "' in result.stderr and "line 1, column 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_parse_inline_and_short_forms(tmp_path: Path) -> None:
    assert invoke("parse", "-c", "= `1`").stdout == "Parsed successfully.\n"
    path = tmp_path / "p.kedi"
    path.write_text("= ok\n")
    assert invoke("-p", str(path)).stdout == "Parsed successfully.\n"


def test_parse_json_outputs_the_ast() -> None:
    result = invoke("parse", "-c", "= ok", "--json")
    assert result.exit_code == 0
    data = json.loads(result.stdout)
    assert data["type"] == "Module"


def test_run_prints_result_and_takes_program_arguments(tmp_path: Path) -> None:
    path = tmp_path / "greet.kedi"
    path.write_text("= Hello <`args.name`> <`args.loud`> <`args.dry_run`>\n")
    result = invoke(
        "run", str(path), "--name", "Ada", "--loud", "--dry-run", "--name", "Bob", "--quiet"
    )
    assert result.exit_code == 0, result.output
    assert result.stdout == "Hello Ada True True\n"


def test_file_shortcut_and_inline_source() -> None:
    assert invoke("-c", "= `1 + 1`").stdout == "2\n"


def test_usage_errors_are_helpful() -> None:
    result = invoke("run", "does-not-exist.kedi")
    assert result.exit_code == 2
    assert "file not found" in result.output


def test_program_arguments_rules() -> None:
    assert program_arguments(
        ["--title", "x", "--flag", "--two-words", "v", "--title", "y", "stray"]
    ) == {
        "title": "x",
        "flag": True,
        "two_words": "v",
    }
    assert program_arguments(["--k=v"]) == {"k": "v"}


def test_runtime_error_has_kedi_trace_and_no_python_traceback(tmp_path: Path) -> None:
    path = tmp_path / "math.kedi"
    path.write_text("@divide(value: int) -> int:\n  = `100 // value`\n\n= `divide(0)`\n")
    proc = subprocess.run(
        [sys.executable, "-m", "kedi", "run", str(path)], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 1
    assert "Kedi stack trace:" in proc.stderr
    assert "line 2" in proc.stderr and "ZeroDivisionError" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_offline_default_prints_one_notice(tmp_path: Path) -> None:
    path = tmp_path / "two.kedi"
    path.write_text(">> First [a].\n>> Second [b].\n= done\n")
    proc = subprocess.run(
        [sys.executable, "-m", "kedi", str(path)], capture_output=True, text=True, cwd=REPO
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "done\n"
    assert proc.stderr.count("offline model") == 1


@pytest.mark.parametrize("value", ["maybe", "-x"])
def test_bad_parallel_value_is_a_config_error(value: str) -> None:
    result = invoke("-c", "= ok", "--parallel", value)
    assert result.exit_code == 1
    assert "invalid parallel setting" in result.stderr


def test_unwritable_transcript_is_a_clear_error() -> None:
    result = invoke("-c", "= ok", "--transcript", "/nonexistent-dir/calls.jsonl")
    assert result.exit_code == 1
    assert "cannot write the transcript" in result.stderr
    assert "Traceback" not in result.output


def test_stream_on_the_offline_and_script_models_shows_the_reply_in_one_piece(
    tmp_path: Path,
) -> None:
    """They cannot stream; `--stream` still shows what a streaming model would have, at once."""
    flow = tmp_path / "flow.kedi"
    flow.write_text("[reply] << Hello there\n>> Describe [summary] in [words: int]\n= <reply>\n")
    offline = CliRunner().invoke(main, ["run", str(flow), "--quiet", "--stream"])
    assert offline.exit_code == 0, offline.output
    assert offline.stdout == "[offline] Hello there\n"
    assert offline.stderr.startswith("[offline] Hello there")  # the text call, then the str capture
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(["Hi!", {"outputs": {"summary": "short", "words": 1}}]))
    scripted = CliRunner().invoke(
        main, ["run", str(flow), "--quiet", "--stream", "--model", f"script:{script}"]
    )
    assert scripted.exit_code == 0, scripted.output
    assert (scripted.stdout, scripted.stderr) == ("Hi!\n", "Hi!\nshort\n")  # one line per call
    plain = CliRunner().invoke(main, ["run", str(flow), "--quiet", "--model", f"script:{script}"])
    assert (plain.stdout, plain.stderr) == ("Hi!\n", "")
