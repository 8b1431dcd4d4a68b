"""Embedded Python: evaluation, fences, write-back, line mapping, name analysis."""

from __future__ import annotations

import gc
import pickle
import sys
import traceback
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from kedi.runtime import python_bridge
from kedi.runtime.python_bridge import ExecResult, PythonBridge, PythonFailure
from kedi.syntax.ast import PythonCode


def code(text: str, line: int = 1) -> PythonCode:
    return PythonCode(code=text, first_line=line)


@pytest.fixture
def bridge() -> PythonBridge:
    return PythonBridge("flow.kedi")


def namespace(**values: Any) -> dict[str, Any]:
    return {"__builtins__": __builtins__, **values}


# --------------------------------------------------------------------------- expressions


def test_evaluate_expression(bridge: PythonBridge) -> None:
    assert bridge.evaluate(code("price * quantity"), namespace(price=3, quantity=4)) == 12


def test_evaluate_keeps_native_values(bridge: PythonBridge) -> None:
    items = [1, 2]
    assert bridge.evaluate(code("items"), namespace(items=items)) is items


def test_evaluate_multiline_expression(bridge: PythonBridge) -> None:
    text = "  [\n    n * 2\n    for n in items\n]\n  "
    assert bridge.evaluate(code(text), namespace(items=[1, 2])) == [2, 4]
    assert bridge.references(code(text)) == {"items"}


def test_evaluate_with_dict_subclass_namespace(bridge: PythonBridge) -> None:
    class Lazy(dict[str, Any]):
        def __missing__(self, key: str) -> Any:
            if key == "answer":
                return 42
            raise KeyError(key)

    scope = Lazy(__builtins__=__builtins__)
    assert bridge.evaluate(code("answer + 1"), scope) == 43
    # Nested scopes (comprehensions) read globals through the subclass too.
    assert bridge.evaluate(code("[answer for _ in range(2)]"), scope) == [42, 42]


def test_empty_expression_is_a_clear_error(bridge: PythonBridge) -> None:
    with pytest.raises(PythonFailure) as info:
        bridge.evaluate(code("   ", line=7), namespace())
    assert info.value.message == "Inline Python expression cannot be empty"
    assert info.value.trace is not None and info.value.trace.kedi_line == 7


def test_statement_in_expression_position_is_a_syntax_error(bridge: PythonBridge) -> None:
    with pytest.raises(PythonFailure) as info:
        bridge.evaluate(code("x = 5", line=4), namespace())
    assert isinstance(info.value.original, SyntaxError)
    assert info.value.message.startswith("invalid syntax")
    assert info.value.trace is not None
    assert (info.value.trace.kedi_line, info.value.trace.snippet) == (4, "x = 5")


def test_expressions_compile_once(bridge: PythonBridge, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = []
    real_compile = compile

    def counting(*args: Any, **kwargs: Any) -> Any:
        compiled.append(args[0])
        return real_compile(*args, **kwargs)

    monkeypatch.setattr(python_bridge, "compile", counting, raising=False)
    snippet = code("a + 1")
    results = [bridge.evaluate(snippet, namespace(a=n)) for n in range(5)]
    assert results == [1, 2, 3, 4, 5]
    assert len(compiled) == 1


# --------------------------------------------------------------------------- statements and fences


def test_augmented_assignment_writes_back(bridge: PythonBridge) -> None:
    result = bridge.execute(code("count += 1"), namespace(count=1))
    assert result == ExecResult(returned=False, value=None, writes={"count": 2})


def test_rebinding_with_a_method_result_writes_back(bridge: PythonBridge) -> None:
    result = bridge.execute(code("value = value.strip().lower()"), namespace(value="  Ready "))
    assert result.writes == {"value": "ready"}


def test_block_local_names_are_not_written_back(bridge: PythonBridge) -> None:
    fence = code("total = 0\nfor n in items:\n    total += n\nitems = [total]")
    result = bridge.execute(fence, namespace(items=[1, 2, 3]))
    assert result.writes == {"items": [6]}
    # A later block with its own namespace does not see `total`.
    with pytest.raises(PythonFailure) as info:
        bridge.execute(code("print(total)"), namespace())
    assert isinstance(info.value.original, NameError)


def test_in_place_mutation_is_not_a_write(bridge: PythonBridge) -> None:
    values: list[int] = []
    result = bridge.execute(code("values.append(1)"), namespace(values=values))
    assert values == [1]
    assert result.writes == {}


def test_global_in_nested_function_writes_back(bridge: PythonBridge) -> None:
    fence = code("def bump():\n    global count\n    count += 10\nbump()")
    assert bridge.execute(fence, namespace(count=1)).writes == {"count": 11}


def test_writes_through_globals_are_detected(bridge: PythonBridge) -> None:
    snippet = code('globals()["count"] = 5')
    assert bridge.reads_dynamically(snippet)
    assert bridge.execute(snippet, namespace(count=1)).writes == {"count": 5}


@pytest.mark.parametrize(
    "text",
    ["def bump():\n    nonlocal count\n    count = 1", "nonlocal count\ncount = 1"],
)
def test_nonlocal_on_a_kedi_binding_fails_clearly(bridge: PythonBridge, text: str) -> None:
    with pytest.raises(PythonFailure) as info:
        bridge.execute(code(text, line=20), namespace(count=0))
    assert info.value.message == "`nonlocal count` cannot rebind a Kedi binding; use `global count`"
    assert info.value.trace is not None
    assert info.value.trace.snippet == "nonlocal count"


def test_nonlocal_between_python_functions_is_fine(bridge: PythonBridge) -> None:
    fence = code(
        "def outer():\n    n = 0\n    def inc():\n        nonlocal n\n        n += 1\n"
        "    inc()\n    return n\nreturn outer()"
    )
    assert bridge.execute(fence, namespace()).value == 1


def test_fence_return(bridge: PythonBridge) -> None:
    fence = code("for n in items:\n    if n > 1:\n        return n * 10\nreturn None")
    result = bridge.execute(fence, namespace(items=[1, 2, 3]))
    assert (result.returned, result.value) == (True, 20)


def test_fence_without_return(bridge: PythonBridge) -> None:
    result = bridge.execute(code("x = 1"), namespace())
    assert (result.returned, result.value) == (False, None)


def test_bare_return_returns_none(bridge: PythonBridge) -> None:
    result = bridge.execute(code("return"), namespace())
    assert (result.returned, result.value) == (True, None)


def test_return_cannot_be_swallowed_by_except_exception(bridge: PythonBridge) -> None:
    fence = code(
        "try:\n    return 'done'\nexcept Exception:\n    log.append('swallowed')\n"
        "finally:\n    log.append('finally')"
    )
    log: list[str] = []
    result = bridge.execute(fence, namespace(log=log))
    assert (result.returned, result.value) == (True, "done")
    assert log == ["finally"]


def test_return_inside_a_function_belongs_to_it(bridge: PythonBridge) -> None:
    fence = code("def double(n):\n    return n * 2\nresult = double(4)")
    result = bridge.execute(fence, namespace(result=0))
    assert (result.returned, result.writes) == (False, {"result": 8})


def test_return_leaves_no_trace_in_the_namespace(bridge: PythonBridge) -> None:
    scope = namespace()
    bridge.execute(code("return 1"), scope)
    assert python_bridge.RETURN_NAME not in scope


def test_user_code_does_not_inherit_future_annotations(bridge: PythonBridge) -> None:
    # This module uses `from __future__ import annotations`; snippets must not.
    with pytest.raises(PythonFailure) as info:
        bridge.execute(code("def f(x: Undefined):\n    pass"), namespace())
    assert isinstance(info.value.original, NameError)


# --------------------------------------------------------------------------- failures


def test_exception_maps_to_the_kedi_line(bridge: PythonBridge) -> None:
    fence = code("a = 1\nb = 0\nc = a // b\n", line=10)
    with pytest.raises(PythonFailure) as info:
        bridge.execute(fence, namespace())
    failure = info.value
    assert isinstance(failure.original, ZeroDivisionError)
    assert failure.message == "integer division or modulo by zero"
    assert failure.trace is not None
    assert failure.trace.python_line == 3
    assert failure.trace.kedi_line == 12
    assert failure.trace.snippet == "c = a // b"
    assert failure.trace.path == "flow.kedi"
    assert failure.trace.filename == "<kedi:flow.kedi:10>"


def test_failure_inside_a_prelude_function(bridge: PythonBridge) -> None:
    bridge.run_prelude(code("def divide(n):\n    return 100 // n", line=2))
    scope = namespace(**{k: v for k, v in bridge.prelude.items() if not k.startswith("__")})
    with pytest.raises(PythonFailure) as info:
        bridge.evaluate(code("divide(0)", line=9), scope)
    failure = info.value
    assert failure.trace is not None and failure.trace.kedi_line == 9
    assert [(t.kedi_line, t.snippet) for t in failure.traces] == [
        (9, "divide(0)"),
        (3, "return 100 // n"),
    ]


def test_syntax_error_maps_to_the_kedi_line(bridge: PythonBridge) -> None:
    with pytest.raises(PythonFailure) as info:
        bridge.execute(code("x = 1\nif x\n    y = 2", line=5), namespace())
    assert isinstance(info.value.original, SyntaxError)
    assert info.value.message == "expected ':'"
    assert info.value.trace is not None
    assert (info.value.trace.kedi_line, info.value.trace.snippet) == (6, "if x")


def test_python_tracebacks_show_snippet_source(bridge: PythonBridge) -> None:
    with pytest.raises(PythonFailure) as info:
        bridge.execute(code("x = 1\nraise ValueError('bad input')", line=3), namespace())
    text = "".join(traceback.format_exception(info.value.original))
    assert 'File "<kedi:flow.kedi:3>", line 2' in text
    assert "raise ValueError('bad input')" in text


def test_snippets_on_the_same_line_keep_their_own_source(bridge: PythonBridge) -> None:
    with pytest.raises(PythonFailure) as first:
        bridge.evaluate(code("1 / 0", line=4), namespace())
    with pytest.raises(PythonFailure) as second:
        bridge.evaluate(code("[][1]", line=4), namespace())
    assert first.value.trace is not None and second.value.trace is not None
    assert first.value.trace.snippet == "1 / 0"
    assert second.value.trace.snippet == "[][1]"
    assert first.value.trace.filename != second.value.trace.filename


def test_python_failure_pickles(bridge: PythonBridge) -> None:
    with pytest.raises(PythonFailure) as info:
        bridge.evaluate(code("1 / 0"), namespace())
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.message, copy.trace) == (info.value.message, info.value.trace)
    assert isinstance(copy.original, ZeroDivisionError)


# --------------------------------------------------------------------------- references


def test_references_cover_nested_scopes(bridge: PythonBridge) -> None:
    text = (
        "def render(item):\n"
        "    local = item + suffix\n"
        "    return helper(local)\n"
        "rows = [render(r) for r in records if r not in skip]\n"
        "key = lambda row: weights[row]\n"
        "class Report:\n"
        "    title = heading\n"
        "count += 1\n"
        "return rows"
    )
    refs = bridge.references(code(text))
    assert {
        "suffix",
        "helper",
        "records",
        "skip",
        "weights",
        "heading",
        "count",
        "render",
        "rows",
    } <= refs
    assert refs.isdisjoint({"item", "local", "r", "row", python_bridge.RETURN_NAME})


def test_references_of_an_expression(bridge: PythonBridge) -> None:
    assert bridge.references(code("f(x) + {k: v for k, v in pairs}")) == {"f", "x", "pairs"}
    assert not bridge.reads_dynamically(code("f(x)"))


def test_references_of_bad_code_raise_a_mapped_failure(bridge: PythonBridge) -> None:
    with pytest.raises(PythonFailure) as info:
        bridge.references(code("x = (", line=3))
    assert info.value.trace is not None and info.value.trace.kedi_line == 3


# --------------------------------------------------------------------------- prelude


def test_prelude_names_persist(bridge: PythonBridge) -> None:
    bridge.run_prelude(code("RATE = 2\ndef scale(n):\n    return n * RATE"))
    assert bridge.prelude["scale"](5) == 10


def test_prelude_dataclasses_with_string_annotations(bridge: PythonBridge) -> None:
    prelude = (
        "from __future__ import annotations\n"
        "from dataclasses import dataclass\n"
        "@dataclass\n"
        "class Item:\n"
        "    name: str\n"
        "    qty: int = 1\n"
    )
    bridge.run_prelude(code(prelude))
    item = bridge.prelude["Item"]("pen")
    assert (item.name, item.qty) == ("pen", 1)
    assert pickle.loads(pickle.dumps(item)) == item


def test_prelude_module_is_released_with_the_bridge() -> None:
    bridge = PythonBridge("tmp.kedi")
    module_name = bridge.prelude["__name__"]
    assert sys.modules[module_name].__dict__ is bridge.prelude
    del bridge
    gc.collect()
    assert module_name not in sys.modules


def test_prelude_failure_is_mapped(bridge: PythonBridge) -> None:
    with pytest.raises(PythonFailure) as info:
        bridge.run_prelude(code("import json\nmissing_name", line=2))
    assert isinstance(info.value.original, NameError)
    assert info.value.trace is not None and info.value.trace.kedi_line == 3


def test_concurrent_use_from_threads(bridge: PythonBridge) -> None:
    snippets = [code(f"n * {k}", line=k) for k in range(1, 9)]

    def run(k: int) -> list[int]:
        return [bridge.evaluate(snippets[(k + i) % 8], namespace(n=i)) for i in range(50)]

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(run, range(8)))
    for k, values in enumerate(results):
        assert values == [i * (((k + i) % 8) + 1) for i in range(50)]


DEEP = " + ".join(["1"] * 700)
"""A sum Python compiles, nested deeper than a recursive walk of its tree can go."""


@pytest.mark.parametrize(
    "source",
    [
        f"= `{DEEP}`\n",  # an expression
        f"= ```\nx = {DEEP}\nreturn x\n```\n",  # a fence's return
        f"@one() -> int:\n  = `1`\n\n= `{DEEP} - 1 + one()`\n",  # a procedure call, awaited
    ],
    ids=["expression", "fence", "procedure-call"],
)
def test_code_nested_as_deep_as_python_compiles_runs(source: str) -> None:
    from tests.runtime.conftest import run

    assert run(source) == 700
