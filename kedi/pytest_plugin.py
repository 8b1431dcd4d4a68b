"""The pytest plugin (entry point `pytest11`): `@test:` suites of `.kedi` files as pytest items.

With kedi installed, `pytest` collects every `.kedi` file under its paths
whose text holds `@test:`; each `> case:` becomes one item, run in source
order against one runtime per file (`kedi.runtime.suites`) on the offline
model (`--kedi-model` chooses another). A failing case shows the assertion
with its values and its `.kedi` line. Importing this module imports only
pytest: kedi's runtime loads when a `.kedi` file is collected.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kedi")
    group.addoption(
        "--kedi-model", default=None, help="model for .kedi @test: cases (default: offline)"
    )


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> KediFile | None:
    if file_path.suffix == ".kedi" and "@test:" in file_path.read_text(
        encoding="utf-8", errors="replace"
    ):
        return KediFile.from_parent(parent, path=file_path)
    return None


class KediFile(pytest.File):
    """One `.kedi` file: its cases share one runtime, started by the first case that runs."""

    def collect(self) -> Iterator[KediCase]:
        from kedi.errors import KediError
        from kedi.runtime.program import compile_program
        from kedi.runtime.suites import suites_of
        from kedi.source import read_source

        try:
            self.program = compile_program(read_source(self.path), path=str(self.path))
        except KediError as error:
            raise self.CollectError(error.render()) from None
        except OSError as error:
            raise self.CollectError(str(error)) from None
        self.runtime: Any = None
        self.setup_reported = False
        for suite in suites_of(self.program.module):
            for case in suite.cases:
                yield KediCase.from_parent(
                    self, name=f"{suite.procedure}::{case.name}", suite=suite, case=case
                )

    def runtime_for(self, model: str | None) -> Any:
        import anyio

        from kedi.runtime.suites import SuiteRuntime

        if self.runtime is None:
            self.runtime = anyio.run(
                lambda: SuiteRuntime.start(self.program, model=model), backend="asyncio"
            )
        return self.runtime


class _KediCaseFailed(Exception):
    """A `.kedi` case failed; its message is the report."""


class KediCase(pytest.Item):
    """One `> case:` of a `@test:` suite."""

    def __init__(self, *, suite: Any, case: Any, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.suite = suite
        self.case = case

    def setup(self) -> None:
        """Start the file's runtime; a top-level statement that failed is this first case's setup error.

        `kedi test` counts such a statement as an error beside the cases; here
        pytest shows it as "ERROR at setup of" the first case that runs, and
        the file's other cases still run.
        """
        parent: KediFile = self.parent  # type: ignore[assignment]  # pytest types parent as Node; ours is always a KediFile
        runtime = parent.runtime_for(self.config.getoption("--kedi-model"))
        if runtime.setup_errors and not parent.setup_reported:
            parent.setup_reported = True
            pytest.fail(
                "\n".join(f"{self.path}: setup error at {p}" for p in runtime.setup_errors),
                pytrace=False,
            )

    def runtest(self) -> None:
        import anyio

        from kedi.adapters.resources import run_scope
        from kedi.runtime.suites import run_case

        parent: KediFile = self.parent  # type: ignore[assignment]  # pytest types parent as Node; ours is always a KediFile
        runtime = parent.runtime

        async def run() -> Any:
            async with run_scope():
                return await run_case(runtime, self.suite, self.case)

        result = anyio.run(run, backend="asyncio")
        if not result.passed:
            line = runtime.program.source.line_text(result.failure_line).strip()
            raise _KediCaseFailed(f"{result.path}:{result.failure_line}: {line}\n{result.failure}")

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> str:
        if isinstance(excinfo.value, _KediCaseFailed):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, self.case.span.line - 1, f"{self.suite.procedure}::{self.case.name}"
