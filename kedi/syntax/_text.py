"""Text and code inside a parse: token positions, segments, Python code, docstrings.

The builder's helpers for everything that reads characters rather than grammar
structure: spans from tokens (through `SourceFile`), literal text (escapes,
boundary trimming, merging into `Text`), backtick and fence code, docstrings.

Tokens are Lark tokens, handled here as the `str` subclass they are, with
`type`, `start_pos` and `end_pos` attributes; nodes are `kedi.syntax.ast` nodes.
The file being parsed comes from a context variable that `building` sets
around one parse, because Lark binds the builder's callbacks once per process.
Offsets in tokens are offsets into the *fed* text, which has one extra leading
newline; `FEED_SHIFT` takes it back out.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kedi.source import SourceFile, Span
from kedi.syntax import ast
from kedi.syntax._postlex import indent_width
from kedi.syntax.diagnostics import FEED_SHIFT, SyntaxProblem

if TYPE_CHECKING:
    from lark import Token

_ESCAPE = re.compile(r"\\(.)|~~", re.DOTALL)
_ESCAPES = {**{char: char for char in "<>[](),=@#~`\\"}, "t": "\t", "n": "\n", "s": " "}
_STRING_ESCAPE = re.compile(r"\\(.)")
_STRING_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t"}
_BLOCK_COMMENT = re.compile(r"^[ \t]*###[ \t]*\n(.*?)^[ \t]*###[ \t]*$", re.MULTILINE | re.DOTALL)
_LITERAL_PIECES = frozenset({"TEXT", "ARG_TEXT", "FENCE_LIT", "LINE_CONT"})


@dataclass(frozen=True, slots=True)
class _File:
    source: SourceFile
    fed: str


_CURRENT: ContextVar[_File] = ContextVar("kedi_syntax_file")


@contextmanager
def building(source: SourceFile, fed: str) -> Iterator[None]:
    """Make `source` (fed to the parser as `fed`) the file the builder callbacks see."""
    reset = _CURRENT.set(_File(source, fed))
    try:
        yield
    finally:
        _CURRENT.reset(reset)


def current_source() -> SourceFile:
    """Return the file being parsed."""
    return _CURRENT.get().source


# ---------------------------------------------------------------------- positions


def span_of(children: list[Any]) -> Span:
    """Return the span from the first child's start to the last child's end."""
    source = _CURRENT.get().source
    first, last = children[0], children[-1]
    # Tokens are `str`s with offsets; the builder's own results (nodes and blocks) carry spans.
    if isinstance(first, str):
        line, column = source.location(first.start_pos - FEED_SHIFT)  # type: ignore[operator]
    else:
        line, column = first.span.line, first.span.column
    if isinstance(last, str):
        end_line, end_column = source.location(last.end_pos - FEED_SHIFT)  # type: ignore[operator]
    else:
        end_line, end_column = last.span.end_line, last.span.end_column
    return Span(source.path, line, column, end_line, end_column)


def offset_span(start: int, end: int) -> Span:
    """Return the span of fed-text offsets ``[start, end)``."""
    return _CURRENT.get().source.span(start - FEED_SHIFT, end - FEED_SHIFT)


# ---------------------------------------------------------------------- code and text


def inline_code(token: Token) -> ast.PythonCode:
    """Return the Python inside a backtick token, stripped, with its first `.kedi` line."""
    raw = str(token)[1:-1]
    code = raw.strip()
    if not code:
        raise SyntaxProblem(span_of([token]), "Inline Python expression cannot be empty")
    start = token.start_pos + 1 + len(raw) - len(raw.lstrip())  # type: ignore[operator]
    first_line = _CURRENT.get().source.location(start - FEED_SHIFT)[0]
    return ast.PythonCode(code=code, first_line=first_line, span=span_of([token]))


def fence_code(token: Token) -> ast.PythonCode:
    """Return a fence's body, dedented by the indentation of the line that opens it."""
    current = _CURRENT.get()
    start = token.start_pos
    assert start is not None
    line_start = current.fed.rfind("\n", 0, start) + 1
    line = current.fed[line_start:start]
    width = indent_width(line[: len(line) - len(line.lstrip(" \t"))])
    lines = [dedent_line(body, width) for body in str(token).split("\n")[1:-1]]
    first_line = current.source.location(start - FEED_SHIFT)[0] + 1
    return ast.PythonCode(code="\n".join(lines), first_line=first_line, span=span_of([token]))


def dedent_line(line: str, width: int) -> str:
    """Remove up to `width` columns of leading whitespace (a tab counts as 4)."""
    index = 0
    removed = 0
    while index < len(line) and line[index] in " \t" and removed < width:
        removed += 4 if line[index] == "\t" else 1
        index += 1
    return line[index:]


def string_literal(token: Token) -> str:
    """Return the value of a one-line string literal inside a type."""
    inner = str(token)[1:-1]
    if "\\" not in inner:
        return inner
    parts = []
    for index, piece in enumerate(_STRING_ESCAPE.split(inner)):
        if index % 2 == 0:
            parts.append(piece)
        elif piece in _STRING_ESCAPES:
            parts.append(_STRING_ESCAPES[piece])
        else:
            raise SyntaxProblem(
                span_of([token]), f"Unsupported escape `\\{piece}` in a string literal"
            )
    return "".join(parts)


def raw_line(token: Token) -> str:
    """Return a raw line (a dependency, `> auto:` text) with `\\#` written as `#`."""
    return str(token).rstrip().replace("\\#", "#")


def docstring(indent: Token) -> ast.Docstring | None:
    """The first `###` block in the newline run before a block's first line, if any."""
    run = str(indent)
    # The run starts with the header line's own trailing comment, which is never a docstring.
    match = _BLOCK_COMMENT.search(run, run.find("\n") + 1)
    if match is None:
        return None
    base = indent.start_pos - len(run)  # type: ignore[operator]
    opening = match.group(0)
    start = base + match.start() + len(opening) - len(opening.lstrip(" \t"))
    text = textwrap.dedent(match.group(1)).strip("\n")
    return ast.Docstring(
        text="\n".join(line.rstrip() for line in text.split("\n")),
        span=offset_span(start, base + match.end()),
    )


class _Literal:
    """Consecutive literal pieces as `(text, protected)` chunks; escapes are protected from trimming."""

    __slots__ = ("chunks", "tokens", "lead", "trail")

    def __init__(self) -> None:
        self.chunks: list[tuple[str, bool]] = []
        self.tokens: list[Token] = []
        self.lead = 0
        self.trail = 0

    def add(self, token: Token) -> None:
        self.tokens.append(token)
        kind = token.type
        if kind == "LINE_CONT":
            # The backslash, the line break and the spaces around them join as one space.
            self.strip_end()
            self.trail = 0
            self.chunks.append((" ", False))
        elif kind == "FENCE_LIT":
            self.chunks.append(("```", True))
        elif "\\" not in token and "~~" not in token:
            self.chunks.append((str(token), False))
        else:
            self._resolve_escapes(token)

    def _resolve_escapes(self, token: Token) -> None:
        text = str(token)
        done = 0
        for match in _ESCAPE.finditer(text):
            if match.start() > done:
                self.chunks.append((text[done : match.start()], False))
            done = match.end()
            char = match.group(1)
            resolved = "~" if char is None else _ESCAPES.get(char)
            if resolved is None:
                start = token.start_pos + match.start()  # type: ignore[operator]
                raise SyntaxProblem(
                    offset_span(start, start + 2),
                    f"Unsupported escape `\\{char}`",
                    "write `\\\\` for a literal backslash",
                )
            self.chunks.append((resolved, True))
        if done < len(text):
            self.chunks.append((text[done:], False))

    def strip_start(self) -> None:
        while self.chunks and not self.chunks[0][1]:
            text = self.chunks[0][0]
            stripped = text.lstrip(" \t")
            self.lead += len(text) - len(stripped)
            if stripped:
                self.chunks[0] = (stripped, False)
                return
            self.chunks.pop(0)

    def strip_end(self) -> None:
        while self.chunks and not self.chunks[-1][1]:
            text = self.chunks[-1][0]
            stripped = text.rstrip(" \t")
            self.trail += len(text) - len(stripped)
            if stripped:
                self.chunks[-1] = (stripped, False)
                return
            self.chunks.pop()

    def node(self) -> ast.Text:
        start = self.tokens[0].start_pos + self.lead  # type: ignore[operator]
        end = self.tokens[-1].end_pos - self.trail  # type: ignore[operator]
        return ast.Text(
            value="".join(text for text, _ in self.chunks),
            span=offset_span(start, max(start, end)),
        )


def segments(pieces: list[Any]) -> tuple[ast.Segment, ...]:
    """Merge literal pieces into `Text`, resolve escapes and trim the boundaries."""
    groups: list[Any] = []
    for piece in pieces:
        if isinstance(piece, str):  # a token
            if piece.type not in _LITERAL_PIECES:
                continue
            if not groups or not isinstance(groups[-1], _Literal):
                groups.append(_Literal())
            groups[-1].add(piece)
        else:
            groups.append(piece)
    if groups and isinstance(groups[0], _Literal):
        groups[0].strip_start()
    if groups and isinstance(groups[-1], _Literal):
        groups[-1].strip_end()
    return tuple(
        group.node() if isinstance(group, _Literal) else group
        for group in groups
        if not isinstance(group, _Literal) or group.chunks
    )
