"""The stable JSON form of the AST (`kedi parse --json`), documented in docs/ast-json.md.

Every node becomes an object whose first key is `"type"` (the class name in
`kedi.syntax.ast`), then `"span"` as `[line, column, end_line, end_column]`,
then the node's fields in declaration order (a field called `type`, the type
annotation of a capture, assignment, parameter or field, is written as
`"annotation"`, since `"type"` names the class). Tuples become lists. The file path
appears once, on the `Module`, which also carries the format `"version"`.
Embedded Python is `{"type": "PythonCode", "code": ..., "first_line": ...}`:
its position is already given by the node that holds it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, fields, is_dataclass
from typing import Any

from kedi.errors import KediUsageError
from kedi.source import Span
from kedi.syntax import ast

FORMAT_VERSION = 1
"""Bumped whenever a change could break a reader (see docs/ast-json.md)."""

_NODE_CLASSES = frozenset(
    value
    for value in vars(ast).values()
    if isinstance(value, type) and is_dataclass(value) and value.__module__ == ast.__name__
)


_RENAMED = {"type": "annotation"}
"""JSON keys that differ from field names: `"type"` already names the node class."""


def to_json(node: object) -> dict[str, Any]:
    """Return the JSON-ready dict of an AST node (see docs/ast-json.md)."""
    if type(node) not in _NODE_CLASSES:
        raise KediUsageError(f"to_json() expects a kedi AST node, not {type(node).__name__}")
    return _tree(node)


def dumps(module: ast.Module, indent: int | None = 2) -> str:
    """Return the stable JSON text of a whole module."""
    if not isinstance(module, ast.Module):
        raise KediUsageError(f"dumps() expects a Module, not {type(module).__name__}")
    return _encode(_tree(module), indent)


# Both walks below keep a stack of their own instead of recursing: the parser
# accepts any depth (`<f(<f(...)>)>` thousands deep, hundreds of nested
# procedures), and `kedi parse --json` prints every tree it parses.


def _tree(root: Any) -> dict[str, Any]:
    """The JSON-ready dicts of `root` and of every node below it."""
    top: dict[str, Any] = {}
    pending: list[tuple[Any, dict[str, Any]]] = [(root, top)]
    while pending:
        node, out = pending.pop()
        if isinstance(node, ast.PythonCode):
            out.update(type="PythonCode", code=node.code, first_line=node.first_line)
            continue
        if isinstance(node, ast.Module):
            out["version"] = FORMAT_VERSION
        out["type"] = type(node).__name__
        out["span"] = _span(node.span)
        for item in fields(node):
            if item.name != "span":
                out[_RENAMED.get(item.name, item.name)] = _value(getattr(node, item.name), pending)
    return top


def _span(span: Span) -> list[int]:
    return [span.line, span.column, span.end_line, span.end_column]


def _value(value: Any, pending: list[tuple[Any, dict[str, Any]]]) -> Any:
    """`value` as JSON data; a child node becomes a dict that is filled when `pending` reaches it."""
    if isinstance(value, tuple):  # AST tuples hold nodes or scalars, never tuples
        return [_value(item, pending) for item in value]
    if type(value) in _NODE_CLASSES:
        child: dict[str, Any] = {}
        pending.append((value, child))
        return child
    # The remaining field values are str, int, float, bool or None.
    return value


_scalar = json.JSONEncoder(ensure_ascii=False).encode


@dataclass
class _Open:
    """An object or array being written: its entries still to write and how it closes."""

    entries: Iterator[tuple[str | None, Any]]
    """(key, value), the key None in an array."""
    closing: str
    separator: str = ""
    """What goes before the next entry: nothing before the first."""


def _encode(root: dict[str, Any], indent: int | None) -> str:
    """The text of `json.dumps(root, indent=indent, ensure_ascii=False)`, each span on one line.

    A span stays on one line: four numbers stacked vertically drown the tree.
    """
    item_separator = "," if indent is not None else ", "
    pieces: list[str] = []
    opened: list[_Open] = []

    def new_line() -> str:
        return "" if indent is None else "\n" + " " * (indent * len(opened))

    def write(key: str | None, value: Any) -> None:
        if key is not None:
            pieces.append(_scalar(key) + ": ")
        if key == "span":  # a node's [line, column, end_line, end_column]
            pieces.append("[" + ", ".join(map(str, value)) + "]")
        elif isinstance(value, dict) and value:
            pieces.append("{")
            opened.append(_Open(iter(value.items()), "}"))
        elif isinstance(value, list) and value:
            pieces.append("[")
            opened.append(_Open(((None, item) for item in value), "]"))
        else:
            pieces.append(_scalar(value))

    write(None, root)
    while opened:
        current = opened[-1]
        entry = next(current.entries, None)
        if entry is None:
            opened.pop()
            pieces.append(new_line() + current.closing)
            continue
        pieces.append(current.separator + new_line())
        current.separator = item_separator
        write(*entry)
    return "".join(pieces)
