"""Procedure calls from embedded Python at depth: no thread per level, a clean depth limit."""

from __future__ import annotations

import sys
import threading
import time

import pytest

import kedi
from kedi.errors import KediExecutionError
from kedi.runtime import procedures
from kedi.runtime.procedures import MAX_CALL_DEPTH
from tests.runtime.conftest import run

RECURSE_TO = """\
@f(n: int) -> int:
  = `n if n >= {depth} else f(n + 1)`
= `f(0)`
"""

UNBOUNDED = """\
@f(n: int) -> int:
  = `f(n + 1)`
= `f(0)`
"""


@pytest.mark.parametrize("parallel", [None, 8])
def test_depth_500_completes_without_a_thread_per_level(parallel: int | None) -> None:
    """Depth 39 used to hang: each level held one of anyio's 40 worker threads."""
    threads_before = threading.active_count()
    peak = threads_before

    def count_threads() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, threading.active_count())
            done.wait(0.01)

    done = threading.Event()
    watcher = threading.Thread(target=count_threads)
    watcher.start()
    try:
        assert run(RECURSE_TO.format(depth=500), parallel=parallel) == 500
    finally:
        done.set()
        watcher.join()
    assert peak - threads_before <= 2  # the watcher itself, and none per level


@pytest.mark.parametrize("parallel", [None, 8])
def test_unbounded_recursion_fails_cleanly_and_fast(parallel: int | None) -> None:
    started = time.process_time()  # CPU time: the test machine's other load does not count
    with pytest.raises(KediExecutionError) as caught:
        run(UNBOUNDED, parallel=parallel)
    elapsed = time.process_time() - started
    error = caught.value
    assert error.message == f"maximum call depth {MAX_CALL_DEPTH} exceeded at test.kedi:2"
    assert [frame.kind for frame in error.frames[:4]] == [
        "top-level program",
        "return",
        "inline python",
        "procedure",
    ]
    assert error.frames[-1].span is not None and error.frames[-1].span.line == 2
    rendered = error.render()
    assert "more frames" in rendered and rendered.count("in procedure f") < 20
    assert elapsed < 1.0


def test_calls_inside_lambdas_still_work_and_hit_the_same_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A call Python makes synchronously (inside a lambda) takes the thread hop, bounded by the depth limit.

    Past anyio's 40 default worker threads, which deadlocked at depth 39; the
    limit is lowered so that the test does not start a thousand threads.
    """
    monkeypatch.setattr(procedures, "MAX_CALL_DEPTH", 100)
    source = RECURSE_TO.replace("f(n + 1)", "(lambda: f(n + 1))()")
    assert run(source.format(depth=60)) == 60
    with pytest.raises(KediExecutionError) as caught:
        run(UNBOUNDED.replace("f(n + 1)", "(lambda: f(n + 1))()"))
    assert caught.value.message == "maximum call depth 100 exceeded at test.kedi:2"


def test_awaited_calls_keep_python_semantics() -> None:
    """Keyword arguments, comprehensions, fences with writes and returns all see awaited calls."""
    source = """\
@double(x: int, plus: int = `0`) -> int:
  = `x * 2 + plus`
[total: int] = `0`
= ```
values = [double(v, plus=1) for v in range(3)]
total = sum(values) + double(x=10)
return f"{values} {total}"
```
"""
    assert run(source) == "[1, 3, 5] 29"


def test_procedure_passed_as_a_value_runs_through_a_thread() -> None:
    source = """\
@inc(x: int) -> int:
  = `x + 1`
= `list(map(inc, [1, 2, 3]))`
"""
    assert run(source) == [2, 3, 4]


DEEP_PYTHON = "= `" + "+".join(["1"] * 5000) + "`\n"
"""Embedded Python nested deeper than CPython compiles at its default recursion limit."""


def _compile_verdict() -> str:
    try:
        kedi.compile(DEEP_PYTHON)
    except kedi.KediError as error:
        return str(error)
    return "compiled"


def test_a_deep_run_leaves_the_recursion_limit_as_it_found_it() -> None:
    """The limit is the process's: raised for the run's calls, it changed what compile accepted."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)  # a fresh process's (CPython's default)
    try:
        fresh = _compile_verdict()
        assert "too deeply nested for Python to compile" in fresh
        assert run(RECURSE_TO.format(depth=500)) == 500  # needs the limit raised past 20,000
        assert sys.getrecursionlimit() == 1000
        assert _compile_verdict() == fresh
    finally:
        sys.setrecursionlimit(limit)


def test_a_limit_someone_else_set_during_a_run_is_kept() -> None:
    limit = sys.getrecursionlimit()
    source = """\
@f(n: int) -> int:
  = `n if n >= 100 else f(n + 1)`
@g() -> int:
  = ```
  import sys
  value = f(0)
  sys.setrecursionlimit(123_456)
  return value
  ```
= `g()`
"""
    try:
        assert run(source) == 100
        assert sys.getrecursionlimit() == 123_456  # not kedi's to undo
    finally:
        sys.setrecursionlimit(limit)
