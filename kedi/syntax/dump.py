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
import re
from dataclasses import fields, is_dataclass
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
    return _node(node)


def dumps(module: ast.Module, indent: int | None = 2) -> str:
    """Return the stable JSON text of a whole module."""
    if not isinstance(module, ast.Module):
        raise KediUsageError(f"dumps() expects a Module, not {type(module).__name__}")
    text = json.dumps(_node(module), indent=indent, ensure_ascii=False)
    # Keep each span on one line: four numbers stacked vertically drown the tree.
    # The pattern cannot match inside a JSON string, where `"` is always escaped.
    return _STACKED_SPAN.sub(r'"span": [\1, \2, \3, \4]', text)


_STACKED_SPAN = re.compile(r'"span": \[\s*(\d+),\s*(\d+),\s*(\d+),\s*(\d+)\s*\]')


def _node(node: Any) -> dict[str, Any]:
    if isinstance(node, ast.PythonCode):
        return {"type": "PythonCode", "code": node.code, "first_line": node.first_line}
    out: dict[str, Any] = {}
    if isinstance(node, ast.Module):
        out["version"] = FORMAT_VERSION
    out["type"] = type(node).__name__
    out["span"] = _span(node.span)
    for item in fields(node):
        if item.name != "span":
            out[_RENAMED.get(item.name, item.name)] = _value(getattr(node, item.name))
    return out


def _span(span: Span) -> list[int]:
    return [span.line, span.column, span.end_line, span.end_column]


def _value(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_value(item) for item in value]
    if type(value) in _NODE_CLASSES:
        return _node(value)
    # The remaining field values are str, int, float, bool or None.
    return value
