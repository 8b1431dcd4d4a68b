"""`kedi test` and `kedi eval`: run a program's `@test:` and `@eval:` suites.

`kedi test FILE|DIR` finds the `.kedi` files holding `@test:` suites, runs
each file's cases in source order against one runtime of that file
(`kedi.runtime.suites`), prints one line per case and, for each failure, the
assertion with its values and its `.kedi` line. `kedi eval FILE` scores each
`@eval:` suite over its dataset (`kedi.runtime.evals`) and prints a table.
Both default to the offline model, so their results are deterministic.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import click

from kedi.errors import KediError
from kedi.source import read_source

NO_TESTS_EXIT = 5
"""Exit status when nothing was collected (pytest's convention)."""


def suite_files(target: str) -> Iterator[Path]:
    """`.kedi` files under `target` (or `target` itself) whose text holds a `@test:` suite.

    A file that cannot be read is yielded too, so that running it reports why.
    """
    path = Path(target)
    files = (
        [path]
        if path.is_file()
        else sorted(
            p
            for p in path.rglob("*.kedi")
            if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
    )
    for file in files:
        try:
            text = read_source(file)
        except OSError:
            yield file
            continue
        if "@test:" in text:
            yield file


def run_tests(
    targets: tuple[str, ...],
    keyword: str | None,
    model: str | None,
    echo: Callable[[str], None],
    *,
    adapter: str | None = None,
) -> int:
    """Run the selected cases of every suite under `targets`; return the exit status."""
    from kedi.adapters.resources import run_scope
    from kedi.runtime.program import compile_program
    from kedi.runtime.suites import SuiteRuntime, run_case, selector, suites_of

    matches = selector(keyword)
    started = time.perf_counter()
    passed = failed = errors = deselected = 0

    async def run_file(file: Path) -> None:
        nonlocal passed, failed, errors, deselected
        program = compile_program(read_source(file), path=str(file))
        every = [(suite, case) for suite in suites_of(program.module) for case in suite.cases]
        cases = [
            (suite, case)
            for suite, case in every
            if matches(f"{file.name}::{suite.procedure}::{case.name}")
        ]
        deselected += len(every) - len(cases)
        if not cases:
            return
        async with run_scope():
            runtime = await SuiteRuntime.start(program, model=model, adapter=adapter)
            for problem in runtime.setup_errors:
                echo(f"{file}: setup error at {problem}")
                errors += 1
            for suite, case in cases:
                result = await run_case(runtime, suite, case)
                if result.passed:
                    passed += 1
                    echo(f"PASSED {result.id}")
                    continue
                failed += 1
                echo(f"FAILED {result.id}")
                echo(
                    f"  {result.path}:{result.failure_line}: {runtime.program.source.line_text(result.failure_line).strip()}"
                )
                echo("\n".join("  " + line for line in result.failure.splitlines()))

    for target in targets:
        if not Path(target).exists():
            raise click.UsageError(f"no such file or directory: {target}")
        for file in suite_files(target):
            try:
                anyio.run(run_file, file, backend="asyncio")
            except KediError as error:
                echo(error.render())
                errors += 1
            except OSError as error:  # unreadable or not UTF-8 (`read_source` names the file)
                echo(str(error))
                errors += 1
    seconds = time.perf_counter() - started
    counts = (
        [f"{passed} passed"]
        + ([f"{failed} failed"] if failed else [])
        + ([f"{errors} errors"] if errors else [])
    )
    counts += [f"{deselected} deselected by -k"] if deselected else []
    if not (passed or failed or errors or deselected):
        echo(f"no @test: cases found in {', '.join(targets)}")
    echo(f"{', '.join(counts)} in {seconds:.2f}s")
    if failed or errors:
        return 1
    return 0 if passed else NO_TESTS_EXIT


def run_evals(
    file: str, model: str | None, parallel: int, out: str | None, *, adapter: str | None = None
) -> int:
    """Score every `@eval:` suite of `file`, print a table per suite, write `out` as JSON lines."""
    import json

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from kedi.adapters.resources import run_scope
    from kedi.runtime.evals import EvalDataError, EvalReport, chosen_dataset, evals_of, run_eval
    from kedi.runtime.program import compile_program
    from kedi.runtime.suites import SuiteRuntime

    path = Path(file)
    if path.is_dir():
        raise click.UsageError(
            f"{file} is a directory; `kedi eval` scores the suites of one .kedi file"
        )
    if not path.is_file():
        raise click.UsageError(f"file not found: {file}")
    try:
        text = read_source(path)
    except OSError as error:
        raise click.UsageError(str(error)) from None
    console = Console(
        highlight=False, markup=False
    )  # `[name: T]` in Kedi source and data is not markup
    program = compile_program(text, path=str(path))
    suites = evals_of(program.module)
    if not suites:
        console.print(f"no @eval: suites in {file}")
        return NO_TESTS_EXIT
    try:  # open --out first: a bad path must not cost a whole eval run
        stream = open(out, "w", encoding="utf-8") if out is not None else None
    except OSError as error:
        raise click.UsageError(f"cannot write --out {out}: {error.strerror or error}") from None
    reports: list[EvalReport] = []
    aborted: list[EvalDataError] = []
    setup_errors: list[str] = []
    started = time.perf_counter()
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )

    async def main() -> None:
        async with run_scope():
            runtime = await SuiteRuntime.start(
                program, model=model, adapter=adapter, parallel=parallel if parallel > 1 else 0
            )
            setup_errors.extend(runtime.setup_errors)
            for problem in runtime.setup_errors:
                console.print(f"setup error at {problem}", style="yellow")
            async with anyio.create_task_group() as group:
                group.start_soon(_show_progress_after, progress, 2.0)
                for suite in suites:
                    task = progress.add_task(f"@eval: {suite.procedure}", total=None)

                    def advance(_row: Any, task: Any = task) -> None:
                        progress.advance(task)

                    try:
                        reports.append(
                            await run_eval(runtime, suite, parallel=parallel, on_row=advance)
                        )
                    except (
                        EvalDataError
                    ) as error:  # caught here: the task group would wrap it in a group
                        aborted.append(error)
                        break
                group.cancel_scope.cancel()
        progress.stop()

    try:
        anyio.run(main, backend="asyncio")
    except BaseException:
        if stream is not None:
            stream.close()
        raise
    for report, suite in zip(reports, suites[: len(reports)], strict=True):
        console.print(_table(report, Table))
        dataset = chosen_dataset(suite)
        where = f"{dataset.kind} `{dataset.name}`" if dataset else "no dataset"
        failed = sum(1 for r in report.rows if r.failed)
        tokens = sum(r.tokens for r in report.rows)
        extra = f" ({report.feedback})" if report.feedback else ""
        console.print(
            f"@eval: {report.procedure} on {where}: mean score {report.mean:.3f} over {len(report.rows)} rows{extra}, "
            f"{failed} below 1.0, {tokens} tokens, {sum(r.seconds for r in report.rows):.2f}s of row time"
        )
    if stream is not None:
        with stream:
            for report in reports:
                for row in report.rows:
                    stream.write(
                        json.dumps(
                            {"suite": report.procedure, "dataset": report.dataset, **row.record()}
                        )
                        + "\n"
                    )
    console.print(f"{len(reports)} suite(s) in {time.perf_counter() - started:.2f}s")
    if aborted:  # after the suites scored before it are shown and written
        raise aborted[0]
    return (
        1 if setup_errors else 0
    )  # scores never fail the run; a broken top level does, as in `kedi test`


async def _show_progress_after(progress: Any, seconds: float) -> None:
    """Start the progress bar only on runs that last longer than `seconds`."""
    await anyio.sleep(seconds)
    progress.start()


def _table(report: Any, table_class: Any) -> Any:
    table = table_class(title=f"@eval: {report.procedure}")
    for column in ("#", "input", "expected", "score", "feedback", "tokens", "time"):
        table.add_column(
            column, justify="right" if column in ("#", "score", "tokens", "time") else "left"
        )
    for row in report.rows:
        style = "red" if row.failed else None
        table.add_row(
            str(row.index),
            _short(row.input),
            _short(row.expected),
            f"{row.score:.3f}",
            row.feedback or "",
            str(row.tokens),
            f"{row.seconds * 1000:.0f} ms",
            style=style,
        )
    return table


def _short(value: Any) -> str:
    text = repr(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."
