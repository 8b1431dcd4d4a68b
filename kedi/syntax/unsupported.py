"""What this build parses and checks but cannot execute yet.

A program that uses any of it fails before it runs (`kedi check`, `kedi run`,
`kedi.compile`) with "<feature> is not supported yet" at the line that uses
it, never silently ignored (docs/language.md, "Not supported in this build").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kedi.errors import Diagnostic, KediCheckError
from kedi.source import SourceFile
from kedi.syntax import ast
from kedi.syntax.directives import NOT_YET_SUPPORTED, NOT_YET_SUPPORTED_ADAPTERS

UNSUPPORTED_STATEMENTS: dict[type, str] = {
    ast.Optimize: "`> optimize:` is not supported yet",
    ast.Auto: "`> auto:` is not supported yet",
}
"""Statements this build parses and checks but cannot execute, with their messages."""


def reject_unsupported(module: ast.Module, source: SourceFile) -> None:
    """Raise `KediCheckError` naming every use of a feature this build cannot execute."""
    problems = [
        Diagnostic(node.span, message, source_line=source.line_text(node.span.line))
        for node, message in _unsupported_nodes(module.body)
    ]
    if problems:
        raise KediCheckError(problems)


def _unsupported_nodes(body: Sequence[ast.Statement]) -> list[tuple[Any, str]]:
    found: list[tuple[Any, str]] = []
    for node in body:
        if type(node) in UNSUPPORTED_STATEMENTS:
            found.append((node, UNSUPPORTED_STATEMENTS[type(node)]))
        elif isinstance(node, ast.Directive) and node.name in NOT_YET_SUPPORTED:
            found.append((node, f"`> {node.name}:` is not supported yet"))
        elif isinstance(node, ast.Directive) and node.name == "adapter":
            adapter = _literal_value(node)
            if adapter in NOT_YET_SUPPORTED_ADAPTERS:
                found.append((node, f"`> adapter: {adapter}` is not supported yet"))
        elif isinstance(node, ast.Procedure):
            found.extend(_unsupported_nodes(node.body))
        elif isinstance(node, ast.ProfileDef):
            found.extend(_unsupported_nodes(node.members))
    return found


def _literal_value(directive: ast.Directive) -> str | None:
    """A one-line directive value written as plain text, else None."""
    segments = directive.value or ()
    if not all(isinstance(segment, ast.Text) for segment in segments):
        return None
    return "".join(segment.value for segment in segments).strip()  # type: ignore[union-attr]  # every segment was checked to be Text
