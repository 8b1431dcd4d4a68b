"""`@eval:` suites (spec §6.5, §10): score a procedure over a dataset, row by row.

The suite's metric `> metric: fn(dataset):` names the dataset it reads; the
eval scores the `> test_data:` of that name when the suite has one, else its
`> data:`. The dataset expression is evaluated once against the file's
runtime (`SuiteRuntime`) and materialised to a list (a string, or a value
that is not iterable, is an error that aborts the eval). Each row binds the
dataset name to its input and `expected` to its expected value:

- a 2-tuple row is `(input, expected)`; `expected` is left unbound when None;
- any other row binds the dataset name only;
- a dict dataset iterates over its items: a pair whose value is a dict is
  `(input, expected)`, other pairs stay raw tuples.

The metric's value scores the row: a bool is 1.0 or 0.0, a number a float,
a `(score, feedback)` pair both (scores are not clamped). An error in a row
scores 0.0 with feedback `error: ...`; an empty dataset scores 0.0 with
feedback `no examples`. A legacy metric with no dataset runs once.

Rows run concurrently under `parallel`: each row is a task of the
scheduler parallel runs use (`kedi.runtime.scheduler.Scheduler`), at most
`parallel` at a time, and a runtime started with `parallel` bounds model
calls with its capacity limiter as `kedi run --parallel` does. The results
are always in dataset order.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from kedi.adapters.base import Usage
from kedi.errors import Diagnostic, KediDiagnosticError, KediError
from kedi.runtime.scheduler import Scheduler
from kedi.runtime.scopes import Frame, Scope
from kedi.runtime.suites import USAGE, SuiteRuntime
from kedi.syntax import ast


@dataclass(frozen=True)
class RowResult:
    """One scored row."""

    index: int
    input: Any
    expected: Any
    score: float
    feedback: str | None
    tokens: int
    seconds: float

    @property
    def failed(self) -> bool:
        return self.score < 1.0

    def record(self) -> dict[str, Any]:
        """The row as one JSON-ready line of `--out results.jsonl`."""
        return {
            "index": self.index,
            "input": _jsonable(self.input),
            "expected": _jsonable(self.expected),
            "score": self.score,
            "feedback": self.feedback,
            "tokens": self.tokens,
            "seconds": round(self.seconds, 6),
        }


@dataclass
class EvalReport:
    """The rows of one suite, in dataset order, and their mean score."""

    procedure: str
    dataset: str
    kind: str
    rows: list[RowResult] = field(default_factory=list)
    feedback: str | None = None

    @property
    def mean(self) -> float:
        return sum(r.score for r in self.rows) / len(self.rows) if self.rows else 0.0


class EvalDataError(KediDiagnosticError):
    """The dataset could not be loaded (the whole eval stops); points at its `> data:` line."""

    title = "Kedi eval error"
    kind = "EvalDataError"


def _data_error(
    runtime: SuiteRuntime, node: ast.EvalSuite | ast.EvalData, message: str
) -> EvalDataError:
    source = runtime.program.source
    return EvalDataError(
        [Diagnostic(node.span, message, source_line=source.line_text(node.span.line))]
    )


def evals_of(module: ast.Module) -> list[ast.EvalSuite]:
    """The module's `@eval:` suites, in source order."""
    return [s for s in module.body if isinstance(s, ast.EvalSuite)]


def chosen_dataset(suite: ast.EvalSuite) -> ast.EvalData | None:
    """The metric's `test_data` if the suite has one of that name, else its `data`."""
    if suite.metric is None or suite.metric.dataset is None:
        return None
    named = [d for d in suite.datasets if d.name == suite.metric.dataset]
    return next((d for d in named if d.kind == "test_data"), None) or next(iter(named), None)


async def run_eval(
    runtime: SuiteRuntime,
    suite: ast.EvalSuite,
    *,
    parallel: int = 1,
    on_row: Callable[[RowResult], None] | None = None,
) -> EvalReport:
    """Score every row of the suite's dataset; `on_row` hears of each row as it finishes."""
    metric = suite.metric
    if metric is None:
        raise _data_error(runtime, suite, f"`@eval: {suite.procedure}` has no `> metric:`")
    dataset = chosen_dataset(suite)
    report = EvalReport(
        suite.procedure, dataset.name if dataset else "", dataset.kind if dataset else ""
    )
    rows: list[tuple[Any, Any, bool]] = [(None, None, False)]
    if dataset is not None:
        rows = await _load_rows(runtime, dataset)
        if not rows:
            report.feedback = "no examples"
            return report
    results: list[RowResult | None] = [None] * len(rows)
    slots = anyio.Semaphore(max(1, parallel))
    limiter = runtime.interpreter.limiter or anyio.CapacityLimiter(1)

    async def score(index: int) -> RowResult:
        async with slots:
            value, expected, has_expected = rows[index]
            result = results[index] = await _score_row(
                runtime, metric, index, value, expected, has_expected
            )
            if on_row is not None:
                on_row(result)
            return result

    async with Scheduler(limiter) as scheduler:
        for index in range(len(rows)):
            await scheduler.spawn(
                index, f"{runtime.program.path}:{suite.span.line}", functools.partial(score, index)
            )
    report.rows = [r for r in results if r is not None]
    return report


async def _load_rows(runtime: SuiteRuntime, dataset: ast.EvalData) -> list[tuple[Any, Any, bool]]:
    """The dataset as (input, expected, has_expected) rows."""
    try:
        value = await runtime.interpreter.evaluate_value(
            dataset.value, runtime.frame(), native_call=False
        )
    except KediError as error:
        message = (
            f"loading `> {dataset.kind}: {dataset.name}` failed: {getattr(error, 'message', error)}"
        )
        raise _data_error(runtime, dataset, message) from None
    if isinstance(value, str | bytes):
        raise _data_error(
            runtime,
            dataset,
            f"`> {dataset.kind}: {dataset.name}` must return a list of rows, not a string",
        )
    if isinstance(value, dict):
        return [
            (k, v, True) if isinstance(v, dict) else ((k, v), None, False) for k, v in value.items()
        ]
    try:
        items = list(value)
    except TypeError:
        message = f"`> {dataset.kind}: {dataset.name}` must return an iterable, not {type(value).__name__}"
        raise _data_error(runtime, dataset, message) from None
    return [
        (row[0], row[1], row[1] is not None)
        if isinstance(row, tuple) and len(row) == 2
        else (row, None, False)
        for row in items
    ]


async def _score_row(
    runtime: SuiteRuntime,
    metric: ast.EvalMetric,
    index: int,
    value: Any,
    expected: Any,
    has_expected: bool,
) -> RowResult:
    scope = Scope(runtime.interpreter.module_scope)
    if metric.dataset is not None:
        scope.vars[metric.dataset] = value
    if has_expected:
        scope.vars["expected"] = expected
    usage: list[Usage] = []
    USAGE.set(usage)  # this task's own context: its calls add here
    started = time.perf_counter()
    try:
        outcome = await runtime.interpreter.evaluate_value(
            metric.value, Frame(scope, runtime.agent, None), native_call=False
        )
        score, feedback = metric_score(outcome)
    except Exception as exc:  # an error in one row scores 0.0 (spec §10)
        message = getattr(exc, "message", None) or str(exc)
        score, feedback = 0.0, f"error: {type(exc).__name__}: {message}"
    seconds = time.perf_counter() - started
    tokens = sum(u.input_tokens + u.output_tokens for u in usage)
    return RowResult(
        index, value, expected if has_expected else None, score, feedback, tokens, seconds
    )


def metric_score(outcome: Any) -> tuple[float, str | None]:
    """A metric's value as (score, feedback): bool → 1.0/0.0, number → float, or a (score, feedback) pair."""
    if isinstance(outcome, tuple):
        if len(outcome) != 2:
            raise ValueError(f"a metric tuple must be (score, feedback), got {len(outcome)} items")
        score, _ = metric_score(outcome[0])
        return score, None if outcome[1] is None else str(outcome[1])
    if isinstance(outcome, bool):
        return (1.0 if outcome else 0.0), None
    if isinstance(outcome, int | float):
        return float(outcome), None
    raise TypeError(
        f"a metric must return a bool, a number or (score, feedback), not {type(outcome).__name__}"
    )


def _jsonable(value: Any) -> Any:
    import json

    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value
