"""The stable JSON form of the AST (`kedi parse --json`, docs/ast-json.md)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any

import pytest

from kedi.errors import KediUsageError
from kedi.source import Span
from kedi.syntax import ast, parse
from kedi.syntax.dump import FORMAT_VERSION, dumps, to_json

DOC = Path(__file__).parents[2] / "docs" / "ast-json.md"

NODE_CLASSES = {
    value.__name__: value
    for value in vars(ast).values()
    if isinstance(value, type) and is_dataclass(value) and value.__module__ == ast.__name__
}

# One program that uses every node class of kedi.syntax.ast.
EVERYTHING = """\
```
import typing
```
~Ticket(title: str, tags: list[str] = `[]`, level: Literal["low", "high"] | None = `None`)
> import: helpers:
    tidy
> adapter: pydantic
> settings:
    temperature: 0.2
> system: Be <tone>.
> use: tidy
> profile: reviewer:
    ###
    Reviews changes.
    ###
    > model: m
@summarize(text: str, mode: `typing.Any` = `"short"`) -> str:
  ###
  Summarize text.
  ###
  > optimize: core:
    >> Summarize <text> as <tidy(<text>, `mode`)>: [summary: str]
  > auto:
    Keep it short.
  [tone] = calm <`mode.upper()`> `len(text)`
  [reply] << Rephrase <summary>
  `print(reply)`
  [block: int] = ```
  return 1
  ```
  = <summary>
@test: summarize:
  > case: short:
    `assert summarize("a")`
@eval: summarize:
  > data: rows:
    = `[("a", "a")]`
  > metric: exact(rows):
    = `summarize(rows) == expected`
> export:
    summarize
> package: demo:
    version: 1.0
>> Done: [ok: bool]
"""


def _objects(data: Any) -> list[dict[str, Any]]:
    """Every JSON object in `data`, depth first."""
    if isinstance(data, list):
        return [found for item in data for found in _objects(item)]
    if isinstance(data, dict):
        return [data] + [found for value in data.values() for found in _objects(value)]
    return []


def _walk(node: Any) -> list[Any]:
    """`node` and every node below it (PythonCode has no span, so it is left out)."""
    found = [] if isinstance(node, ast.PythonCode) else [node]
    for item in fields(node):
        value = getattr(node, item.name)
        for child in value if isinstance(value, tuple) else (value,):
            if type(child) in NODE_CLASSES.values():
                found += _walk(child)
    return found


def _rebuild(data: Any, path: str) -> Any:
    """Turn dumped JSON back into AST nodes: proof that the dump loses nothing."""
    if isinstance(data, list):
        return tuple(_rebuild(item, path) for item in data)
    if not isinstance(data, dict):
        return data
    cls = NODE_CLASSES[data["type"]]
    values = {}
    for item in fields(cls):
        key = "annotation" if item.name == "type" else item.name
        if item.name == "span" and "span" in data:
            values["span"] = Span(path, *data["span"])
        elif key in data:
            values[item.name] = _rebuild(data[key], path)
    return cls(**values)


@pytest.fixture(scope="module")
def everything() -> ast.Module:
    return parse(EVERYTHING, "everything.kedi")


def test_every_node_class_appears_in_the_dump(everything: ast.Module) -> None:
    types = {obj["type"] for obj in _objects(to_json(everything))}
    assert types == set(NODE_CLASSES)
    assert len(types) == 44


def test_the_dump_rebuilds_the_same_tree(everything: ast.Module) -> None:
    rebuilt = _rebuild(json.loads(dumps(everything)), "everything.kedi")
    assert rebuilt == everything
    # Spans take no part in node equality, so compare them separately.
    spans = [node.span for node in _walk(rebuilt)]
    assert spans == [node.span for node in _walk(everything)]


def test_keys_come_in_a_fixed_order(everything: ast.Module) -> None:
    data = to_json(everything)
    assert list(data)[:3] == ["version", "type", "span"]
    assert data["version"] == FORMAT_VERSION == 1
    for obj in _objects(data)[1:]:
        cls = NODE_CLASSES[obj["type"]]
        names = ["annotation" if f.name == "type" else f.name for f in fields(cls)]
        expected = [name for name in names if name != "span"]
        if obj["type"] != "PythonCode":
            expected = ["span", *expected]
        assert list(obj) == ["type", *expected]


def test_every_node_but_python_code_has_a_real_span(everything: ast.Module) -> None:
    for obj in _objects(to_json(everything)):
        if obj["type"] == "PythonCode":
            assert "span" not in obj
            continue
        line, column, end_line, end_column = obj["span"]
        assert line >= 1 and column >= 1, obj
        assert (end_line, end_column) >= (line, column), obj


def test_the_path_appears_once_on_the_module(everything: ast.Module) -> None:
    text = dumps(everything)
    assert text.count("everything.kedi") == 1
    assert json.loads(text)["path"] == "everything.kedi"


def test_the_json_is_byte_for_byte_deterministic(everything: ast.Module) -> None:
    assert dumps(everything) == dumps(parse(EVERYTHING, "everything.kedi"))
    script = (
        "import sys; from kedi.syntax import parse; from kedi.syntax.dump import dumps; "
        "sys.stdout.write(dumps(parse(sys.stdin.read(), 'everything.kedi')))"
    )
    # This process hashes with a random seed; the child with a fixed one.
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=EVERYTHING,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        check=True,
        cwd=Path(__file__).parents[2],
    )
    assert done.stdout == dumps(everything)


@pytest.mark.parametrize("indent", [2, None, 4])
def test_the_text_is_what_json_dumps_writes_with_spans_on_one_line(
    everything: ast.Module, indent: int | None
) -> None:
    text = json.dumps(to_json(everything), indent=indent, ensure_ascii=False)
    one_line_spans = re.sub(
        r'"span": \[\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+)\s*\]', r'"span": [\1, \2, \3, \4]', text
    )
    assert dumps(everything, indent=indent) == one_line_spans


def test_spans_are_written_on_one_line_and_one_line_output() -> None:
    module = parse("= Hi\n")
    assert '"span": [1, 1, 1, 5]' in dumps(module)
    compact = dumps(module, indent=None)
    assert "\n" not in compact
    assert json.loads(compact) == json.loads(dumps(module))


def test_a_span_lookalike_inside_a_string_is_left_alone() -> None:
    tricky = '"span": [\n1,\n2,\n3,\n4]'
    module = ast.Module(body=(ast.Auto(spec=tricky),))
    assert json.loads(dumps(module))["body"][0]["spec"] == tricky


def test_non_ascii_text_is_written_as_is() -> None:
    assert '"value": "Grüße 🐈"' in dumps(parse("= Grüße 🐈\n"))


def test_a_hand_built_node_has_the_zero_span() -> None:
    assert to_json(ast.Subst(name="x")) == {"type": "Subst", "span": [0, 0, 0, 0], "name": "x"}


def test_literals_keep_their_json_types() -> None:
    module = parse('[x: Literal["a", 1, 2.5, True, None]] = `"a"`\n')
    args = to_json(module)["body"][0]["annotation"]["args"]
    assert [arg["value"] for arg in args] == ["a", 1, 2.5, True, None]


@pytest.mark.parametrize("value", [42, "text", Span("p", 1, 1, 1, 1), None])
def test_to_json_rejects_what_is_not_a_node(value: object) -> None:
    with pytest.raises(KediUsageError, match="to_json\\(\\) expects a kedi AST node, not "):
        to_json(value)


def test_dumps_takes_a_module() -> None:
    with pytest.raises(KediUsageError, match=r"^dumps\(\) expects a Module, not Subst$"):
        dumps(ast.Subst(name="x"))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- the documentation


def _doc_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(), flags=re.DOTALL)


def test_the_documented_example_is_what_kedi_prints() -> None:
    [source] = _doc_blocks("kedi")
    [printed] = _doc_blocks("json")
    assert dumps(parse(source, "hello.kedi")) + "\n" == printed


def test_the_node_reference_matches_the_ast() -> None:
    rows = re.findall(r"^\| `(\w+)` \| (.+?) \|$", DOC.read_text(), flags=re.MULTILINE)
    documented = {name: re.findall(r"`(\w+)`", cells) for name, cells in rows}
    actual = {
        name: [
            "annotation" if f.name == "type" else f.name for f in fields(cls) if f.name != "span"
        ]
        for name, cls in NODE_CLASSES.items()
    }
    assert documented == actual
