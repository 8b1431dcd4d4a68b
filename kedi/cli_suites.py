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

NO_TESTS_EXIT = 5
"""Exit status when nothing was collected (pytest's convention)."""


def suite_files(target: str) -> Iterator[Path]:
    """`.kedi` files under `target` (or `target` itself) whose text holds a `@test:` suite."""
    path = Path(target)
    files = [path] if path.is_file() else sorted(
        p for p in path.rglob("*.kedi") if not any(part.startswith(".") for part in p.relative_to(path).parts)
    )
    for file in files:
        if "@test:" in file.read_text(encoding="utf-8"):
            yield file


def run_tests(targets: tuple[str, ...], keyword: str | None, model: str | None, echo: Callable[[str], None]) -> int:
    """Run the selected cases of every suite under `targets`; return the exit status."""
    from kedi.adapters.resources import run_scope
    from kedi.runtime.program import compile_program
    from kedi.runtime.suites import SuiteRuntime, run_case, selector, suites_of

    matches = selector(keyword)
    started = time.perf_counter()
    passed = failed = errors = 0

    async def run_file(file: Path) -> None:
        nonlocal passed, failed, errors
        program = compile_program(file.read_text(encoding="utf-8"), path=str(file))
        cases = [
            (suite, case) for suite in suites_of(program.module) for case in suite.cases
            if matches(f"{file.name}::{suite.procedure}::{case.name}")
        ]
        if not cases:
            return
        async with run_scope():
            runtime = await SuiteRuntime.start(program, model=model)
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
                echo(f"  {result.path}:{result.failure_line}: {runtime.program.source.line_text(result.failure_line).strip()}")
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
    seconds = time.perf_counter() - started
    counts = [f"{passed} passed"] + ([f"{failed} failed"] if failed else []) + ([f"{errors} errors"] if errors else [])
    echo(f"{', '.join(counts)} in {seconds:.2f}s")
    if failed or errors:
        return 1
    return 0 if passed else NO_TESTS_EXIT


