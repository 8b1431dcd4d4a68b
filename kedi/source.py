"""Source text and positions.

`SourceFile` owns a program's text and is the only place that turns character
offsets into 1-based line/column positions (`Span`). Every AST node and every
diagnostic carries a `Span` built here.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Span:
    """A region of a source file: 1-based lines and columns, end exclusive."""

    path: str
    """The file name shown to users (`<string>` or `<command>` for in-memory source)."""
    line: int
    column: int
    end_line: int
    end_column: int

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.column}"


class SourceFile:
    """A program's text plus an index of line starts."""

    __slots__ = ("path", "text", "_line_starts")

    def __init__(self, text: str, path: str | None = None) -> None:
        self.path = path if path is not None else "<string>"
        self.text = text
        starts = [0]
        find = text.find
        pos = find("\n")
        while pos != -1:
            starts.append(pos + 1)
            pos = find("\n", pos + 1)
        self._line_starts = starts

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
