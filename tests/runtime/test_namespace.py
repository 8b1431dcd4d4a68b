"""Embedded Python's globals are loaded lazily: an expression costs what it reads, not the program's size."""

from __future__ import annotations

import kedi
from kedi.runtime.interpreter import Interpreter
from kedi.runtime.scopes import AgentState, Frame, Scope
from kedi.source import SourceFile
from tests.runtime.conftest import run


def test_an_expression_loads_only_the_names_it_reads() -> None:
    """The namespace used to be a copy of every binding, for every backtick expression (quadratic runs)."""
    module = kedi.parse("= `1`", "t.kedi")
    interpreter = Interpreter(module, SourceFile("= `1`", "t.kedi"))
    scope = Scope()
    scope.vars.update({f"v{i}": i for i in range(50_000)})
    namespace = interpreter.namespace(Frame(Scope(scope), AgentState(), None))
    assert eval("v49999 + v1", namespace) == 50_000
    assert sorted(name for name in namespace if name != "__builtins__") == ["v1", "v49999"]


def test_code_that_lists_its_globals_still_sees_every_binding() -> None:
    source = """\
[a: int] = `1`
[b: int] = `2`
= `sorted(name for name in globals() if name in ("a", "b"))`
"""
    assert run(source) == ["a", "b"]


def test_writes_to_bindings_not_read_before_still_sync_back() -> None:
    source = """\
[count: int] = `1`
```
count = 41
count += 1
```
= `count`
"""
    assert run(source) == 42
