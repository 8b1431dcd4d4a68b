"""First use: each mistake a new user made in trials gets a clear error, or works (issue 17)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

import kedi
from kedi.cli import main
from kedi.cli_options import read_options
from kedi.runtime.tools import ToolBuilder

TITLE = ">> Title in capitals: `args.title.upper()` [caps]\n= `caps`\n"


def run(*arguments: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(arguments))
    return result.exit_code, result.stdout, result.stderr


# --------------------------------------------------------------------------- program options


def test_an_option_the_program_does_not_read_is_refused_with_a_guess(tmp_path: Path) -> None:
    flow = tmp_path / "flow.kedi"
    flow.write_text(TITLE)
    code, out, err = run("run", str(flow), "--titel", "Fix login")
    assert code == 2 and out == ""
    assert f"{flow} does not read the option --titel; did you mean --title?" in err


MODE = "is kedi's mode, not a program option:"


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--test"], f"--test {MODE} run its `@test:` suites with `kedi test FILE`"),
        (["--eval"], f"--eval {MODE} score its `@eval:` suites with `kedi eval FILE`"),
        (
            ["--eval", "--test"],
            "--test and --eval are kedi's modes, not program options: "
            "run `kedi test FILE`, then `kedi eval FILE`",
        ),
        (["--parse"], f"--parse {MODE} check its syntax with `kedi parse FILE`"),
        (
            ["--optimize"],
            f"--optimize {MODE} prompt optimization (`> optimize:`) is not supported yet",
        ),
    ],
)
def test_the_languages_run_modes_point_to_kedis_commands_and_run_nothing(
    tmp_path: Path, flags: list[str], message: str
) -> None:
    """Spec B27: `kedi FILE --test --eval` neither runs the top level nor hands the flags to `args`."""
    flow = tmp_path / "flow.kedi"
    flow.write_text("= `vars(args)`\n")  # reads any option, so nothing else refuses them
    code, out, err = run(str(flow), *flags)
    assert (code, out) == (2, "")
    assert message in err


def test_an_unquoted_value_with_spaces_is_refused_not_cut(tmp_path: Path) -> None:
    # The shell splits `--title Fix login`: running with args.title == "Fix" loses words.
    flow = tmp_path / "flow.kedi"
    flow.write_text(TITLE)
    code, out, err = run("run", str(flow), "--title", "Fix", "login", "--quiet")
    assert code == 2 and out == ""
    assert "unexpected argument 'login': --title takes one value" in err
    assert '--title "Fix login"' in err
    code, _, err = run("run", str(flow), "extra", "--title", "x")
    assert code == 2 and "unexpected argument 'extra'" in err


def test_a_missing_option_is_named_with_the_line_that_reads_it(tmp_path: Path) -> None:
    flow = tmp_path / "flow.kedi"
    flow.write_text(TITLE)
    code, _, err = run("run", str(flow))
    assert code == 1 and "Traceback" not in err
    assert f"option --title was not given, so args.title is None (read at {flow}:1)" in err


def test_a_failed_model_call_gets_no_missing_option_hint(tmp_path: Path) -> None:
    # The endpoint is down: blaming the option not given would send the user after the wrong cause.
    flow = tmp_path / "flow.kedi"
    flow.write_text(">> Greet <`args.name`>: [greeting]\n= `greeting`\n")
    code, _, err = run("run", str(flow), "--model", f"script:{tmp_path / 'missing.json'}")
    assert code == 1 and "cannot read script" in err
    assert "was not given" not in err
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    code, _, err = run("run", str(flow), "--model", f"script:{empty}")
    assert code == 1 and "ScriptExhaustedError" in err
    assert "was not given" not in err


def test_a_failure_that_shows_no_none_gets_no_missing_option_hint(tmp_path: Path) -> None:
    # The option has a fallback and the failure is elsewhere: it cannot be the cause.
    flow = tmp_path / "flow.kedi"
    flow.write_text("[title] = `args.title or 'untitled'`\n= `len(title) / 0`\n")
    code, _, err = run("run", str(flow))
    assert code == 1 and "ZeroDivisionError" in err
    assert "was not given" not in err


def test_a_given_option_gets_no_hint_and_the_program_runs(tmp_path: Path) -> None:
    flow = tmp_path / "flow.kedi"
    flow.write_text(TITLE)
    code, out, err = run("run", str(flow), "--title", "fix login", "--quiet")
    assert (code, err) == (0, "")
    assert out.strip()


@pytest.mark.parametrize(
    ("source", "names", "complete"),
    [
        (
            "= `args.name or 'x'` <args.count> `args['dry-run']`",
            {"name": 1, "count": 1, "dry_run": 1},
            True,
        ),
        ("= `vars(args)`", {}, False),
        ("= `args.as_dict()`", {"as_dict": 1}, False),
        ("Mention args in prose\n= `args.name`", {"name": 2}, False),
    ],
)
def test_the_options_a_program_reads_come_from_its_source(
    source: str, names: dict[str, int], complete: bool
) -> None:
    read = read_options(source)
    assert (read.lines, read.complete) == (names, complete)


def test_a_program_that_reads_args_dynamically_accepts_any_option(tmp_path: Path) -> None:
    flow = tmp_path / "flow.kedi"
    flow.write_text("= `sorted(args.as_dict())`\n")
    code, out, _ = run("run", str(flow), "--anything", "x")
    assert (code, out) == (0, '["anything"]\n')


# --------------------------------------------------------------------------- models


def test_an_unknown_default_model_fails_at_start_up_pointing_at_the_openai_adapter() -> None:
    source = "= `'ran'`\n>> never sent\n"
    code, out, err = run("run", "-c", source, "--model", "gpt-4o")
    assert code == 1 and out == ""
    assert "--adapter openai --model gpt-4o" in err
    assert "stack trace" not in err  # before the program ran, not at its first call


def test_a_provider_prefixed_model_is_not_prefixed_again_in_the_hint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # No key: Pydantic AI cannot build `openai:` models (a core install lacks the extra).
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    code, _, err = run("run", "-c", "= `1`", "--model", "openai:gpt-4o")
    assert code == 1
    assert "`--adapter openai --model gpt-4o`" in err  # the openai adapter takes the bare name
    assert "openai:openai:" not in err


def test_a_kedi_model_error_gets_no_hint_toward_another_adapter(tmp_path: Path) -> None:
    code, _, err = run("run", "-c", "= `1`", "--model", f"script:{tmp_path / 'missing.json'}")
    assert code == 1 and "cannot read script" in err
    assert "hint" not in err


def test_an_unknown_adapter_fails_at_start_up() -> None:
    code, out, err = run("run", "-c", ">> Say hi [greeting]\n= `greeting`", "--adapter", "nosuch")
    assert code == 1 and out == ""
    assert "unknown adapter 'nosuch'" in err
    assert "stack trace" not in err and "Resume with" not in err  # before the run started


# --------------------------------------------------------------------------- Python API


def test_bind_without_parentheses_says_how_to_write_it() -> None:
    with pytest.raises(kedi.KediUsageError, match=r'write @kedi.bind\("flow.kedi"\)'):

        @kedi.bind  # type: ignore[arg-type]  # the mistake under test
        def summarize(text: str) -> str: ...


# --------------------------------------------------------------------------- check and run agree


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("[v0] = `0 + 1`", "int"),
        ("[v0] = `1 / 2`", "float"),
        ("[v0] = `[1, 2]`", "list"),
        ("[v0] = `None`", "None"),
    ],
)
def test_check_rejects_what_the_run_would_reject(source: str, kind: str) -> None:
    code, _, err = run("check", "-c", source)
    assert code == 1
    assert (
        f"assignment to `v0`: the expression gives {kind}, but an untyped assignment holds a str"
        in err
    )
    assert run("run", "-c", source)[0] == 1


@pytest.mark.parametrize("source", ["[v0: int] = `0 + 1`", "[v0] = `'a' + 'b'`", "[v0] = `str(1)`"])
def test_check_and_run_accept_the_same_assignments(source: str) -> None:
    assert run("check", "-c", source)[0] == 0
    assert run("run", "-c", source + "\n= `v0`")[0] == 0


# --------------------------------------------------------------------------- tools


def test_a_tool_hint_that_does_not_resolve_fails_naming_the_parameter() -> None:
    namespace: dict[str, object] = {}
    exec(
        "from __future__ import annotations\n"
        "def lookup(city: str, when: Missing) -> str:\n"
        "    return city\n",
        namespace,
    )
    builder = ToolBuilder(lambda procedure, expr: expr)
    with pytest.raises(
        kedi.KediConfigError,
        match=r"tool 'lookup': the type hint of parameter 'when' \('Missing'\)",
    ):
        builder.spec("lookup", namespace["lookup"])


def test_tool_failures_are_logged_and_shown_by_run_v(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "tools.py").write_text(
        "def explode(reason: str) -> str:\n"
        "    '''Fail on purpose.'''\n"
        "    raise RuntimeError('boom: ' + reason)\n"
    )
    replies = tmp_path / "replies.json"
    replies.write_text(
        '[{"tool_calls": [{"id": "c1", "name": "explode", "args": {"reason": "test"}}]}, "done"]'
    )
    flow = tmp_path / "flow.kedi"
    prelude = (
        f"```\nimport sys\nsys.path.insert(0, {str(tmp_path)!r})\nfrom tools import explode\n```\n"
    )
    flow.write_text(prelude + "> use: explode\n[x] << go\n= `x`\n")
    code, out, err = run("run", str(flow), "-v", "--model", f"script:{replies}", "--quiet")
    assert (code, out) == (0, "done\n"), err
    assert (
        "kedi: tool explode failed (attempt 1 of 1; the model gets the error): RuntimeError: boom: test"
        in err
    )
    code, out, err = run("run", str(flow), "--model", f"script:{replies}", "--quiet")
    assert (code, err) == (0, "")  # without -v: not shown
    assert logging.getLogger("kedi").handlers == []  # the command removed its handler


# --------------------------------------------------------------------------- replies files


def test_a_text_reply_for_typed_captures_explains_the_outputs_form(tmp_path: Path) -> None:
    replies = tmp_path / "replies.json"
    replies.write_text('["hello"]')
    source = ">> Name a city [city: str] and its size [size: int].\n= `city`\n"
    code, _, err = run("run", "-c", source, "--model", f"script:{replies}")
    assert code == 1
    assert "entry 1 (a text reply) did not validate for the typed captures (city, size)" in err
    assert '{"outputs": {"<capture>": <value>, ...}} (see docs/replies.md)' in err
