"""Output and error failures of the `kedi` command (issue 18, acceptance 5).

Broken and full stdout, unencodable text, deep Python recursion, failures
logged once (and not at all under `quiet`), unknown capture types in `kedi check`.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kedi.cli import EXIT_OUTPUT_FAILED, main
from kedi.runtime.types import BUILTIN_TYPES
from kedi.syntax.checks import BUILTIN_TYPE_NAMES

ROOT = Path(__file__).resolve().parents[1]


def kedi(*args: str, stdout: int | None = subprocess.PIPE) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "kedi", *args],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        timeout=60,
    )


def test_a_closed_stdout_is_one_line_and_exit_74() -> None:
    read, write = os.pipe()
    os.close(read)  # nobody will ever read: every write is EPIPE
    try:
        result = kedi("run", "-c", "= `'x' * 100000`", stdout=write)
    finally:
        os.close(write)
    assert result.returncode == EXIT_OUTPUT_FAILED == 74
    assert result.stderr == "kedi: cannot write the output: Broken pipe\n"


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_a_full_device_is_one_line_and_exit_74() -> None:
    with open("/dev/full", "w") as full:
        result = kedi("run", "-c", "= `'hello'`", stdout=full.fileno())
    assert result.returncode == 74
    assert result.stderr == "kedi: cannot write the output: No space left on device\n"


def test_a_lone_surrogate_in_a_result_is_printed_as_its_escape() -> None:
    result = kedi("run", "-c", '= `"a\\ud800b"`')
    assert (result.returncode, result.stdout, result.stderr) == (0, "a\\ud800b\n", "")


def test_a_python_recursion_error_shows_the_first_and_last_frames() -> None:
    source = "```\ndef f(n):\n    return f(n + 1)\n```\n= `f(1)`\n"
    result = CliRunner().invoke(main, ["run", "-c", source])
    assert result.exit_code == 1
    err = result.stderr
    assert "Inline Python error: RecursionError" in err
    assert err.count("embedded Python line 2") == 5  # 2 after the first line, 3 at the end
    assert "more embedded Python lines ..." in err
    assert len(err) < 2_000  # was ~49 KB of identical frames


def test_a_short_python_chain_is_shown_whole() -> None:
    source = "```\ndef f(n):\n    return 1 / n if n == 0 else f(n - 1)\n```\n= `f(3)`\n"
    err = CliRunner().invoke(main, ["run", "-c", source]).stderr
    assert err.count("embedded Python line 2") == 4 and "more embedded" not in err


PARALLEL = "> history: enabled\n[a] << First\n[b] << Second\n[c] << Third\n= `a + b + c`\n"


def test_a_parallel_failure_is_logged_once_and_quiet_silences_the_log(tmp_path: Path) -> None:
    replies = tmp_path / "replies.json"
    replies.write_text('["one"]')  # the second call fails; the third is abandoned
    flow = tmp_path / "flow.kedi"
    flow.write_text(PARALLEL)
    run = ["run", str(flow), "--model", f"script:{replies}", "--parallel", "4"]

    loud = kedi(*run)
    assert loud.returncode == 1
    assert loud.stderr.count("TurnAbandoned") == 1  # was logged twice
    assert loud.stderr.count("ScriptExhaustedError") == 1  # the failure itself, rendered once

    quiet = kedi(*run, "--quiet")
    assert quiet.returncode == 1
    assert "TurnAbandoned" not in quiet.stderr
    assert quiet.stderr.count("ScriptExhaustedError") == 1


def test_kedi_check_reports_an_unknown_capture_type_at_its_line() -> None:
    source = "```\nclass Review:\n    pass\n```\n>> Rate [a: Review] [b: list[Reveiw] | None] [c: `Any`]\n"
    result = CliRunner().invoke(main, ["check", "-c", source])
    assert result.exit_code == 1
    assert "line 5, column 30" in result.stderr and "unknown type `Reveiw`" in result.stderr
    assert "did you mean `Review`?" in result.stderr
    assert (
        CliRunner()
        .invoke(main, ["check", "-c", ">> Rate [a: dict[str, Email]] [b: Literal['x']]\n"])
        .exit_code
        == 0
    )


def test_kedi_check_and_compile_reject_what_would_fail_at_run_time() -> None:
    """Unknown types outside captures and Python syntax errors were "Checked successfully"."""
    import kedi
    from kedi.errors import KediCheckError

    cases = {
        "[x: Foo] = `1`\n": ("line 1, column 5", "unknown type `Foo`"),
        "@f(a: Foo) -> int:\n  = `1`\n": ("line 1, column 7", "unknown type `Foo`"),
        "@f(a: int) -> Foo:\n  = `a`\n": ("line 1, column 15", "unknown type `Foo`"),
        "= `f(`\n": ("line 1, column 5", "invalid Python in backticks: '(' was never closed"),
        "```\nif x\n    y = 1\n```\n= ok\n": (
            "line 2, column 5",
            "invalid Python in a fence: expected ':'",
        ),
    }
    for source, (where, message) in cases.items():
        result = CliRunner().invoke(main, ["check", "-c", source])
        assert result.exit_code == 1, source
        assert where in result.stderr and message in result.stderr, result.stderr
        assert "Checked successfully" not in result.output
        with pytest.raises(KediCheckError, match=re.escape(message)):
            kedi.compile(source)


def test_the_checker_knows_every_builtin_type_the_runtime_resolves() -> None:
    assert set(BUILTIN_TYPES) == BUILTIN_TYPE_NAMES
