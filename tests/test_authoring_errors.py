"""Bad input to modules, packages, `kedi test`, `kedi eval` and the pytest plugin.

Each case is one a user hit while trying the feature from a fresh clone: the
answer must be a clear, located kedi error (file, line, source line and
caret), never a Python traceback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner, Result

from kedi.cli import main
from tests.kedi_pytest import run_pytest_with_the_kedi_plugin

REPO = Path(__file__).resolve().parents[1]

PROCEDURE = "@inc(n: int) -> int:\n  = `n + 1`\n"


def invoke(*args: str) -> Result:
    """Run the CLI the way a user does; a Python exception escaping it is a bug, not an error report."""
    result = CliRunner().invoke(main, list(args))
    assert not isinstance(result.exception, Exception) or isinstance(
        result.exception, SystemExit
    ), f"traceback instead of an error: {result.exception!r}\n{result.output}"
    assert "Traceback" not in result.output
    return result


# --------------------------------------------------------------------------- modules


def test_a_module_that_is_not_utf8_is_a_located_error_at_the_import(tmp_path: Path) -> None:
    (tmp_path / "latin.kedi").write_bytes(b"[x] = caf\xe9\n> export: *\n")
    (tmp_path / "main.kedi").write_text("> import: latin\n= <x>\n")
    result = invoke("check", str(tmp_path / "main.kedi"))
    assert result.exit_code == 1
    assert (
        'main.kedi", line 1, column 1' in result.output
        and "  > import: latin\n  ^^^" in result.output
    )
    assert f"module `latin`: cannot read {tmp_path / 'latin.kedi'}: not UTF-8 text" in result.output


# --------------------------------------------------------------------------- kedi test


def test_a_case_with_a_python_syntax_error_fails_that_case_at_its_kedi_line(tmp_path: Path) -> None:
    (tmp_path / "t.kedi").write_text(
        PROCEDURE
        + "@test: inc:\n  > case: broken:\n    `assert inc(1 == 2`\n  > case: fine:\n    `assert inc(1) == 2`\n"
    )
    result = invoke("test", str(tmp_path / "t.kedi"))
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert f"FAILED {tmp_path / 't.kedi'}::inc::broken" in lines
    assert f"  {tmp_path / 't.kedi'}:5: `assert inc(1 == 2`" in lines
    assert any(line.strip().startswith("SyntaxError:") for line in lines)
    assert f"PASSED {tmp_path / 't.kedi'}::inc::fine" in lines  # later cases still run


def test_kedi_test_on_a_directory_reports_unreadable_files_by_name_and_runs_the_rest(
    tmp_path: Path,
) -> None:
    (tmp_path / "bad.kedi").write_bytes(b"@test: x:\n  caf\xe9\n")
    (tmp_path / "folder.kedi").mkdir()  # a directory whose name ends in .kedi is not a program
    (tmp_path / "good.kedi").write_text(
        PROCEDURE + "@test: inc:\n  > case: ok:\n    `assert inc(1) == 2`\n"
    )
    result = invoke("test", str(tmp_path))
    assert result.exit_code == 1  # the unreadable file counts as an error
    assert f"cannot read {tmp_path / 'bad.kedi'}" in result.output
    assert f"PASSED {tmp_path / 'good.kedi'}::inc::ok" in result.output
    assert result.output.splitlines()[-1].startswith("1 passed, 1 errors")


def test_pytest_plugin_reports_a_failing_top_level_statement(tmp_path: Path) -> None:
    (tmp_path / "t.kedi").write_text(
        PROCEDURE
        + "[ratio: float] = `1 / 0`\n@test: inc:\n  > case: ok:\n    `assert inc(1) == 2`\n"
    )
    ran = run_pytest_with_the_kedi_plugin(tmp_path)
    assert ran.returncode == 1, ran.stdout  # `kedi test` fails this file too
    assert "setup error at line 3" in ran.stdout and "ZeroDivisionError" in ran.stdout


# --------------------------------------------------------------------------- kedi eval


def eval_source(dataset: str) -> str:
    return (
        PROCEDURE
        + f"@eval: inc:\n  > data: rows:\n    = `{dataset}`\n  > metric: exact(rows):\n    = `inc(rows) == expected`\n"
    )


def test_a_bad_dataset_aborts_the_eval_with_a_located_error(tmp_path: Path) -> None:
    for dataset, message in [
        ('"abc"', "must return a list of rows, not a string"),
        ("5", "must return an iterable, not int"),
        ("1 / 0", "division by zero"),
    ]:
        (tmp_path / "e.kedi").write_text(eval_source(dataset))
        result = invoke("eval", str(tmp_path / "e.kedi"))
        assert result.exit_code == 1, result.output
        assert 'e.kedi", line 4, column 3' in result.output, result.output
        assert "    > data: rows:\n    ^^^" in result.output
        assert message in result.output


def test_eval_out_in_a_missing_directory_fails_before_any_row_runs(tmp_path: Path) -> None:
    (tmp_path / "e.kedi").write_text(eval_source("[(1, 2)]"))
    result = invoke(
        "eval", str(tmp_path / "e.kedi"), "--out", str(tmp_path / "missing" / "r.jsonl")
    )
    assert result.exit_code == 2
    assert "cannot write" in result.output and "@eval: inc" not in result.output


def test_kedi_eval_of_a_directory_says_it_needs_a_file(tmp_path: Path) -> None:
    result = invoke("eval", str(tmp_path))
    assert result.exit_code == 2 and "is a directory" in result.output


# --------------------------------------------------------------------------- packages


def test_package_without_main_kedi_points_at_the_source_field(tmp_path: Path) -> None:
    (tmp_path / "package.kedi").write_text(
        "> package: demo:\n  version: 1.0.0\n  source: src/demo\n"
    )
    result = invoke("package", "check", str(tmp_path))
    assert result.exit_code == 1
    assert 'package.kedi", line 3, column 3' in result.output
    assert "    source: src/demo\n    ^^^" in result.output and "has no main.kedi" in result.output


def test_package_files_that_are_not_utf8_are_reported_by_name(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "package.kedi").write_text("> package: demo:\n  source: src\n")
    (tmp_path / "src" / "main.kedi").write_text("[x] = a\n> export: *\n")
    (tmp_path / "src" / "extra.kedi").write_bytes(b"[y] = caf\xe9\n")
    result = invoke("package", "check", str(tmp_path))
    assert (
        result.exit_code != 0 and f"cannot read {tmp_path / 'src' / 'extra.kedi'}" in result.output
    )
    (tmp_path / "package.kedi").write_bytes(b"> package: d\xe9mo:\n")
    result = invoke("package", "check", str(tmp_path))
    assert result.exit_code != 0 and f"cannot read {tmp_path / 'package.kedi'}" in result.output


def test_a_failing_assert_lists_the_names_it_reads_but_not_builtins(tmp_path: Path) -> None:
    (tmp_path / "t.kedi").write_text(
        PROCEDURE
        + "@test: inc:\n  > case: kind:\n    ```\n    x = inc(1)\n    assert isinstance(x, str) or x > 5\n    ```\n"
    )
    result = invoke("test", str(tmp_path / "t.kedi"))
    assert result.exit_code == 1
    assert "    x: 2" in result.output.splitlines()
    assert "str: <class 'str'>" not in result.output  # `str` is a builtin, not a value under test


def test_a_metric_with_empty_or_several_datasets_says_what_to_write(tmp_path: Path) -> None:
    for params, found in [("()", "found `)`"), ("(rows, more)", "found `,`")]:
        (tmp_path / "e.kedi").write_text(
            PROCEDURE + f"@eval: inc:\n  > metric: exact{params}:\n    = `inc(1) == 2`\n"
        )
        result = invoke("check", str(tmp_path / "e.kedi"))
        assert result.exit_code == 1
        assert (
            'e.kedi", line 4' in result.output
            and "must name the one dataset it scores, " + found in result.output
        )
        assert "needs a closing `)`, found `)`" not in result.output


def test_kedi_test_says_when_nothing_was_collected_or_k_deselected_everything(
    tmp_path: Path,
) -> None:
    (tmp_path / "plain.kedi").write_text(PROCEDURE)
    result = invoke("test", str(tmp_path))
    assert result.exit_code == 5 and f"no @test: cases found in {tmp_path}" in result.output
    (tmp_path / "t.kedi").write_text(
        PROCEDURE + "@test: inc:\n  > case: ok:\n    `assert inc(1) == 2`\n"
    )
    result = invoke("test", str(tmp_path), "-k", "nothing_matches")
    assert result.exit_code == 5 and result.output.splitlines()[-1].startswith(
        "0 passed, 1 deselected by -k in "
    )


def test_a_registered_package_whose_directory_is_missing_is_called_broken(tmp_path: Path) -> None:
    info = tmp_path / "site" / "ghost-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: ghost\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[kedi.packages]\nghost = ghost_gone\n")
    (tmp_path / "main.kedi").write_text("> import: ghost\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(tmp_path / "site")])}
    ran = subprocess.run(
        [sys.executable, "-m", "kedi", "check", str(tmp_path / "main.kedi")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert ran.returncode == 1 and "Traceback" not in ran.stderr
    assert "`ghost` is registered in `kedi.packages` as `ghost_gone`" in ran.stderr
    assert "no `ghost` in entry point group" not in ran.stderr


def test_package_pyproject_write_never_replaces_a_hand_written_pyproject(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "package.kedi").write_text("> package: demo:\n  version: 1.0.0\n  source: src\n")
    (tmp_path / "src" / "main.kedi").write_text("[x] = a\n> export: *\n")
    assert invoke("package", "pyproject", str(tmp_path), "--write").exit_code == 0
    assert (
        invoke("package", "pyproject", str(tmp_path), "--write").exit_code == 0
    )  # its own file: regenerated
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'mine'\n")
    result = invoke("package", "pyproject", str(tmp_path), "--write")
    assert result.exit_code == 2 and "was not written by kedi" in result.output
    assert (tmp_path / "pyproject.toml").read_text() == "[project]\nname = 'mine'\n"


def test_kedi_eval_prints_brackets_verbatim_and_fails_on_a_broken_top_level(tmp_path: Path) -> None:
    (tmp_path / "e.kedi").write_text(
        "@echo(text: str) -> str:\n  = `text`\n[limit: int] = `1 / 0`\n"
        "@eval: echo:\n  > data: rows:\n    = `[('[bold]x', '[bold]x')]`\n  > metric: same(rows):\n"
        "    = `(echo(rows) == expected, '[red]fine')`\n"
    )
    result = invoke("eval", str(tmp_path / "e.kedi"))
    assert result.exit_code == 1  # the top level failed, as `kedi test` counts it
    assert "[limit: int] = `1 / 0`" in result.output  # rich markup used to eat `[limit: int]`
    assert "[bold]x" in result.output and "[red]fine" in result.output


def test_an_export_left_unbound_by_a_top_level_return_names_the_return_line(tmp_path: Path) -> None:
    (tmp_path / "early.kedi").write_text("[x] = a\n= `x`\n[y] = b\n> export: *\n")
    (tmp_path / "main.kedi").write_text("> import: early\n= <y>\n")
    result = invoke("run", str(tmp_path / "main.kedi"))
    assert result.exit_code == 1
    assert (
        "exports `y`, but its top level never bound it: its top-level `=` at line 2 ended it first"
        in result.output
    )


def test_two_test_blocks_of_one_procedure_cannot_reuse_a_case_name(tmp_path: Path) -> None:
    (tmp_path / "t.kedi").write_text(
        PROCEDURE + "@test: inc:\n  > case: one:\n    `assert inc(0) == 1`\n"
        "@test: inc:\n  > case: one:\n    `assert inc(1) == 2`\n"
    )
    result = invoke("check", str(tmp_path / "t.kedi"))
    assert result.exit_code == 1  # both would report as t.kedi::inc::one
    assert (
        't.kedi", line 7, column 3' in result.output
        and "duplicate case `one` in `@test: inc`" in result.output
    )
