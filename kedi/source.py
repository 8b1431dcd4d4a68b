"""Source text and positions.

`SourceFile` owns a program's text and turns character offsets into 1-based
line/column positions (`Span`). Every AST node and every diagnostic carries a
`Span`; the parser builds the spans of nodes from its tokens' lines instead
(`kedi.syntax._text`), with `new_span`.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from itertools import accumulate, repeat
from operator import add
from typing import NamedTuple


class Span(NamedTuple):
    """A region of a source file: 1-based lines and columns, end exclusive.

    A named tuple rather than a frozen dataclass: the parser makes one per node,
    and `new_span` builds one in under half the instructions of a frozen
    dataclass's fastest constructor (spans were a tenth of the parse).
    """

    path: str
    """The file name shown to users (`<string>` or `<command>` for in-memory source)."""
    line: int
    column: int
    end_line: int
    end_column: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


_tuple_new = tuple.__new__


def new_span(path: str, line: int, column: int, end_line: int, end_column: int) -> Span:
    """Return ``Span(path, line, column, end_line, end_column)``, skipping the class call.

    Calling the class runs the named tuple's Python `__new__` through the type
    machinery; building the tuple directly is the same object for a third less.
    """
    return _tuple_new(Span, (path, line, column, end_line, end_column))


def read_source(path: str | os.PathLike[str]) -> str:
    """The UTF-8 text of a `.kedi` file.

    Raises `OSError` whose message names the file (`cannot read PATH: why`)
    when it cannot be opened or is not UTF-8, so every caller can report an
    unreadable program, module or manifest the same way.
    """
    try:
        with open(path, encoding="utf-8") as stream:
            return stream.read()
    except UnicodeDecodeError as exc:
        reason = f"not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
    except OSError as exc:
        reason = exc.strerror or str(exc)
    raise OSError(f"cannot read {os.fspath(path)}: {reason}")


class SourceFile:
    """A program's text plus an index of line starts."""

    __slots__ = ("path", "text", "_starts")

    def __init__(self, text: str, path: str | None = None) -> None:
        self.path = path if path is not None else "<string>"
        self.text = text
        self._starts: list[int] | None = None

    @property
    def _line_starts(self) -> list[int]:
        """The offset where each line starts, made on first use: most parses never need it."""
        if self._starts is None:
            # Each line starts one past the end of the previous line and its line break.
            # Summed in C (`accumulate`), this is 2x faster than a Python loop over `find`.
            lines_with_breaks = map(add, map(len, self.text.split("\n")[:-1]), repeat(1))
            self._starts = list(accumulate(lines_with_breaks, initial=0))
        return self._starts

    def location(self, offset: int) -> tuple[int, int]:
        """Return the 1-based (line, column) of a character offset."""
        offset = max(0, min(offset, len(self.text)))
        index = bisect_right(self._line_starts, offset) - 1
        return index + 1, offset - self._line_starts[index] + 1

    def span(self, start: int, end: int) -> Span:
        """Return the span covering the offsets ``[start, end)``."""
        line, column = self.location(start)
        end_line, end_column = self.location(max(start, end))
        return Span(self.path, line, column, end_line, end_column)

    def whole_span(self) -> Span:
        """Return the span of the whole text (`span(0, len(text))` without the line index)."""
        text = self.text
        return new_span(self.path, 1, 1, text.count("\n") + 1, len(text) - text.rfind("\n"))

    def line_text(self, line: int) -> str:
        """Return the text of a 1-based line, without its line break."""
        if line < 1 or line > len(self._line_starts):
            return ""
        start = self._line_starts[line - 1]
        end = self.text.find("\n", start)
        text = self.text[start:] if end == -1 else self.text[start:end]
        return text.rstrip("\r")

    @property
    def line_count(self) -> int:
        """Number of lines in the text."""
        return len(self._line_starts)
