"""Kedi syntax: grammar, parser, AST, diagnostics, static checks."""

from kedi.syntax.parser import parse

__all__ = ["parse"]
