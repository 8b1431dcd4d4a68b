"""Call sites: what a `>>` / `<<` statement fixes about its model call, worked out once.

A statement's node never changes, so everything that depends on the node
alone is computed the first time it runs and kept for every later run of it
(in a procedure called many times, or in a program run many times): the
capture list, the prompt text when the rows substitute nothing, the origin
`flow.kedi:12`, the trace frame, and the output schema.

Capture types are the exception: a type name is looked up where the call
runs, every time (values are dynamic, B14), and may name something else on
the next run. A capture written as a plain name (`[n: int]`, `[x: Incident]`)
remembers what the name was bound to and what it resolved to; while the
lookup returns that very object, the resolution (a pure function of it) is
reused. The output schema is likewise rebuilt only when an annotation is not
the one it was built from.
"""

from __future__ import annotations

import operator
from typing import TYPE_CHECKING, Any

from kedi.adapters.base import OutputSpec
from kedi.errors import KediTraceFrame
from kedi.runtime.types import output_spec
from kedi.runtime.values import constant_text
from kedi.syntax import ast

if TYPE_CHECKING:
    from kedi.runtime.interpreter import Interpreter
    from kedi.runtime.scopes import Scope

_MAX_SITES = 100_000
"""Past this many sites the cache starts over, so a process compiling programs forever stays bounded."""

_NOT_YET: Any = object()
"""What a capture has seen before its first resolution (matches no lookup result)."""


class CaptureType:
    """One `[name: Type]` capture: its name and how its type resolves where the call runs."""

    __slots__ = ("name", "expr", "_type_name", "_last")

    def __init__(self, capture: ast.Capture) -> None:
        self.name = capture.name
        self.expr = capture.type
        plain = isinstance(capture.type, ast.TypeName) and "." not in capture.type.name
        self._type_name = capture.type.name if plain else None  # type: ignore[union-attr]  # `plain` checked it is a TypeName
        """The name to look up when the type is one plain name (the reusable case), else None."""
        self._last: tuple[Any, Any] = (_NOT_YET, None)
        """(what the name was bound to, the annotation it resolved to): one tuple, swapped atomically."""

    def resolve(self, interp: Interpreter, scope: Scope) -> Any:
        """The capture's annotation in `scope` (`str` when untyped); errors as `resolve_type_in` raises them."""
        if self.expr is None:
            return str
        if self._type_name is None:
            return interp.resolve_type_in(self.expr, scope)
        bound = interp.find(self._type_name, scope)
        seen, annotation = self._last
        if bound is not seen:
            annotation = interp.resolve_type_in(self.expr, scope)
            self._last = (bound, annotation)
        return annotation


class CallSite:
    """A `>>` / `<<` statement's node and what it fixes about the call (see the module docs)."""

    __slots__ = ("node", "rows", "target", "captures", "prompt", "origin", "trace", "_output")

    def __init__(self, node: ast.Template | ast.RawInvoke, rows: tuple[ast.Row, ...]) -> None:
        self.node = node
        self.rows = rows
        self.target = node.target if isinstance(node, ast.RawInvoke) else None
        """The name a raw invoke `[x] << ...` binds its reply to; None for a template."""
        self.captures = tuple(
            CaptureType(segment)
            for row in rows
            for segment in row.segments
            if isinstance(segment, ast.Capture)
        )
        """The output fields, in source order."""
        self.prompt = constant_text(rows)
        """The prompt when the rows substitute nothing, else None (rendered per call)."""
        self.origin = f"{node.span.path}:{node.span.line}"
        self.trace: KediTraceFrame | None = None
        """The statement's trace frame, built by the interpreter on first use (per procedure name)."""
        self._output: tuple[tuple[Any, ...], OutputSpec] | None = None

    def output_spec(self, annotations: tuple[Any, ...]) -> OutputSpec:
        """The output schema for these capture annotations (rebuilt only when one is a different object)."""
        cached = self._output
        if cached is None or not all(map(operator.is_, cached[0], annotations)):
            spec = output_spec(
                [
                    (capture.name, annotation)
                    for capture, annotation in zip(self.captures, annotations, strict=True)
                ]
            )
            cached = self._output = (annotations, spec)
        return cached[1]


_SITES: dict[int, CallSite] = {}
"""Call sites by `id` of their node; each site holds its node, so an id is never reused while cached."""


def call_site(node: ast.Template | ast.RawInvoke, rows: tuple[ast.Row, ...]) -> CallSite:
    """The call site of `node` (whose prompt is `rows`), made on its first run."""
    site = _SITES.get(id(node))
    if site is None or site.node is not node:
        if len(_SITES) >= _MAX_SITES:
            _SITES.clear()
        site = _SITES[id(node)] = CallSite(node, rows)
    return site


__all__ = ["CallSite", "CaptureType", "call_site"]
