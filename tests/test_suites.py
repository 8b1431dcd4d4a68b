"""`@test:` / `@eval:` suites: `kedi test`, the pytest plugin, `kedi eval` (spec §6.5, §10)."""

from __future__ import annotations

import json
import time
import tomllib
from pathlib import Path

import anyio
from click.testing import CliRunner

import kedi
from kedi.cli import main
from kedi.runtime.evals import evals_of, run_eval
from kedi.runtime.suites import SuiteRuntime
from tests.kedi_pytest import run_pytest_with_the_kedi_plugin

REPO = Path(__file__).resolve().parents[1]

SUITE = """\
[prefix] = docs

@add(a: int, b: int) -> int:
  = `a + b`

@label(name: str) -> str:
  = `prefix + ":" + name`

@test: add:
  > case: adds:
    `assert add(2, 3) == 5`
  > case: wrong_total:
    ```
    total = add(2, 2)
    assert total == 5, "two and two"
    ```
  > case: raises:
    `add(1, "x")`
  > case: sees_top_level_values:
    `assert label("a") == "docs:a"`
"""


def test_kedi_test_reports_each_case_with_values_and_kedi_line(tmp_path: Path) -> None:
    (tmp_path / "calc.kedi").write_text(SUITE)
    result = CliRunner().invoke(main, ["test", str(tmp_path)])
    assert result.exit_code == 1
    lines = result.output.splitlines()
    assert [line.split("::")[-1] for line in lines if line.startswith(("PASSED", "FAILED"))] == [
        "adds",
        "wrong_total",
        "raises",
        "sees_top_level_values",
    ]  # source order, and a failing case does not stop the later ones
    assert f"FAILED {tmp_path / 'calc.kedi'}::add::wrong_total" in lines
    assert f'  {tmp_path / "calc.kedi"}:15: assert total == 5, "two and two"' in lines
    assert "    left  (total): 4" in lines and "    right (5): 5" in lines
    assert any(
        "KediTypeExecutionError: argument `b` of `add`: expected int" in line for line in lines
    )
    assert lines[-1].startswith("2 passed, 2 failed in ")


def test_kedi_test_selects_cases_with_k_and_exits_zero_when_they_pass(tmp_path: Path) -> None:
    (tmp_path / "calc.kedi").write_text(SUITE)
    result = CliRunner().invoke(
        main, ["test", str(tmp_path / "calc.kedi"), "-k", "adds or top_level"]
    )
    assert result.exit_code == 0, result.output
    assert result.output.count("PASSED") == 2 and "FAILED" not in result.output
    assert CliRunner().invoke(main, ["test", str(tmp_path), "-k", "nothing_matches"]).exit_code == 5


def test_suites_never_run_during_kedi_run(tmp_path: Path) -> None:
    (tmp_path / "calc.kedi").write_text(SUITE + "= <add(`1`, `1`)>\n")
    result = CliRunner().invoke(main, ["run", str(tmp_path / "calc.kedi")])
    assert result.exit_code == 0 and result.output.strip() == "2"


def test_pytest_plugin_collects_kedi_suites_beside_python_tests(tmp_path: Path) -> None:
    entry_points = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"][
        "pytest11"
    ]
    assert entry_points == {"kedi": "kedi.pytest_plugin"}
    (tmp_path / "calc.kedi").write_text(SUITE)
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    assert True\n")
    ran = run_pytest_with_the_kedi_plugin(tmp_path)
    assert ran.returncode == 1, ran.stdout
    assert "2 failed, 3 passed" in ran.stdout
    assert "calc.kedi:15: assert total == 5" in ran.stdout and "left  (total): 4" in ran.stdout


EVAL_TEST_DATA = "  > test_data: rows:\n    = `[(0.9, 0.9), (0.6, 0.6), (0.3, 0.3), (0.0, 1.0)]`\n"
"""Rows whose metric sleeps its input's seconds (see the concurrency test)."""

EVAL = f"""\
```
import time
```

@echo(text: str) -> str:
  = `text`

@eval: echo:
  > data: rows:
    = `[("a", "a"), ("b", "x"), ("c", None), "d"]`
{EVAL_TEST_DATA}  > metric: slow_match(rows):
    = `(time.sleep(rows), float(list(map(echo, [str(rows)]))[0]) == expected)[1]`
"""


def test_eval_rows_run_concurrently_and_come_back_in_dataset_order(tmp_path: Path) -> None:
    # The metric calls `echo` through `map`, so its blocking sleep runs in a worker thread
    # (docs/language.md, "Scale, limits and Ctrl-C"): rows overlap while they wait.
    program = kedi.compile(EVAL, path=str(tmp_path / "e.kedi"))
    finished: list[int] = []

    async def go(parallel: int) -> tuple[list[int], float, float]:
        runtime = await SuiteRuntime.start(program)
        started = time.perf_counter()
        report = await run_eval(
            runtime,
            evals_of(program.module)[0],
            parallel=parallel,
            on_row=lambda r: finished.append(r.index),
        )
        return [r.index for r in report.rows], report.mean, time.perf_counter() - started

    order, mean, seconds = anyio.run(go, 4)
    assert order == [0, 1, 2, 3] and finished == [
        3,
        2,
        1,
        0,
    ]  # test_data scored; finished fastest first
    # Four rows of 1.8 s of sleep in all overlap. The gaps are 0.3 s so that a
    # loaded machine's scheduling jitter cannot reorder the rows' ends.
    assert mean == 0.75 and seconds < 1.5
    finished.clear()
    order, _, seconds = anyio.run(go, 1)
    assert finished == [0, 1, 2, 3] and seconds >= 1.8


def test_kedi_eval_prints_the_table_and_writes_jsonl(tmp_path: Path) -> None:
    source = EVAL.replace(EVAL_TEST_DATA, "")
    source = source.replace(
        "(time.sleep(rows), float(list(map(echo, [str(rows)]))[0]) == expected)[1]",
        "echo(rows) == expected",
    )
    (tmp_path / "e.kedi").write_text(source)
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(
        main, ["eval", str(tmp_path / "e.kedi"), "--out", str(out), "--parallel", "2"]
    )
    assert result.exit_code == 0, result.output
    assert "mean score 0.250 over 4 rows" in " ".join(result.output.split())
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["index"], r["input"], r["expected"], r["score"]) for r in rows] == [
        (0, "a", "a", 1.0),
        (1, "b", "x", 0.0),
        (2, "c", None, 0.0),
        (3, "d", None, 0.0),
    ]
    assert rows[2]["feedback"].startswith(
        "error: "
    )  # `expected` is unbound for a None expected value


def test_metric_values_become_scores() -> None:
    from kedi.runtime.evals import metric_score

    assert metric_score(True) == (1.0, None) and metric_score(3) == (3.0, None)
    assert metric_score((0.5, "half")) == (0.5, "half")


def test_library_example_runs_and_its_suite_passes() -> None:
    library = REPO / "examples" / "library"
    ran = CliRunner().invoke(
        main, ["run", str(library / "main.kedi"), "--quiet", "--topic", "Release 2.0"]
    )
    assert ran.exit_code == 0, ran.output
    assert ran.output.splitlines() == ["- release-2-0", "- True"]
    tested = CliRunner().invoke(main, ["test", str(library)])
    assert tested.exit_code == 0, tested.output
    assert tested.output.count("PASSED") == 3 and tested.output.splitlines()[-1].startswith(
        "3 passed"
    )


def test_eval_progress_bar_starts_only_after_two_seconds() -> None:
    from kedi.cli_suites import _show_progress_after

    class Bar:
        started_at: float | None = None

        def start(self) -> None:
            self.started_at = time.perf_counter()

    async def quick_run(bar: Bar, run_seconds: float) -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(_show_progress_after, bar, 0.2)
            await anyio.sleep(run_seconds)
            group.cancel_scope.cancel()

    short, long = Bar(), Bar()
    anyio.run(quick_run, short, 0.05)
    begun = time.perf_counter()
    anyio.run(quick_run, long, 0.4)
    assert short.started_at is None
    assert long.started_at is not None and long.started_at - begun >= 0.2


def test_a_model_no_adapter_can_build_stops_kedi_test_and_eval_at_start(tmp_path: Path) -> None:
    # Before, `kedi eval` scored every row 0.0 with the config error as its
    # feedback and exited 0, and `--adapter openai` (the hint's fix) was refused.
    (tmp_path / "e.kedi").write_text(EVAL)
    (tmp_path / "t.kedi").write_text(SUITE)
    for command in (["eval", str(tmp_path / "e.kedi")], ["test", str(tmp_path / "t.kedi")]):
        result = CliRunner().invoke(main, [*command, "--model", "gpt-4o-mini"])
        assert result.exit_code == 1, result.output
        assert "Kedi error: KediConfigError" in result.output
        assert "Pydantic AI cannot use model 'gpt-4o-mini'" in result.output
        assert "use `--adapter openai --model gpt-4o-mini`" in result.output
        assert "PASSED" not in result.output and "mean score" not in result.output
    scripted = tmp_path / "r.json"
    scripted.write_text("[]")
    for command in (["eval", str(tmp_path / "e.kedi")], ["test", str(tmp_path / "t.kedi")]):
        result = CliRunner().invoke(
            main, [*command, "--adapter", "script", "--model", f"script:{scripted}"]
        )
        # `--adapter` is taken (click refuses an unknown option with exit 2) and the run goes on.
        assert result.exit_code != 2 and "No such option" not in result.output, result.output
        assert "KediConfigError" not in result.output, result.output
        assert ("mean score" if command[0] == "eval" else "passed") in result.output


def test_a_dataset_that_fails_to_load_keeps_the_suites_scored_before_it(tmp_path: Path) -> None:
    # Before, the first suite's table was never printed and --out was left empty.
    broken = (
        "\n@eval: echo:\n  > data: count:\n    = `42`\n  > metric: same(count):\n    = `True`\n"
    )
    source = EVAL.replace(EVAL_TEST_DATA, "").replace(
        "(time.sleep(rows), float(list(map(echo, [str(rows)]))[0]) == expected)[1]",
        "echo(rows) == expected",
    )
    (tmp_path / "e.kedi").write_text(source + broken)
    out = tmp_path / "results.jsonl"
    result = CliRunner().invoke(main, ["eval", str(tmp_path / "e.kedi"), "--out", str(out)])
    assert result.exit_code == 1, result.output
    assert "mean score 0.250 over 4 rows" in " ".join(result.output.split())
    assert "`> data: count` must return an iterable, not int" in result.output
    assert [json.loads(line)["input"] for line in out.read_text().splitlines()] == list("abcd")
