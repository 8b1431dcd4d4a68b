"""The layout pass between the lexer and the parser: newlines, indentation, backticks.

`Layout` keeps the state of one parse; the parse loop (`kedi.syntax.parser`)
calls it for each newline run and for the few terminals in `Layout.SPECIAL`.
The lexer produces one `_NL` token per newline run (the line break, any blank,
comment and block-comment lines, and the next line's indentation). This pass:

* retypes `_NL` as `_BNL` when the run crossed a blank line (a blank line always
  ends a `>>` template);
* adds `INDENT` and `_DEDENT` tokens from the indentation, a tab counting as 4
  columns; `INDENT` carries where its newline run starts, because a block's
  docstring lives in that run;
* keeps line breaks inside a procedure or custom-type signature as plain `_NL`
  tokens, with no indentation meaning (signatures may span lines);
* accepts the documented indentation anomaly: a `>>` row written left of the
  current block, whose next row returns to an open deeper level, belongs to
  that level (see docs/syntax.md);
* rejects an inline backtick span that runs onto another line outside brackets
  (almost always a missing closing backtick);
* starts a fence token at its backticks (the lexer lets it absorb the spaces
  between `=` and the fence, so that free text does not claim them).

Layout tokens are zero-width: `_NL` and `_DEDENT` sit at the end of the line
they close and `INDENT` at the start of the first indented line, so node
positions never swallow comments or the next line's indentation.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

from kedi.syntax.diagnostics import SyntaxProblem

TAB_WIDTH = 4

Token = tuple[str, int, int, int, int]
"""A token: ``(kind, start, end, line, base)``.

`start` and `end` are offsets into the fed text; `line` is the 1-based source
line of `start` and `base` the offset that makes its column: ``column = start -
base``. An `INDENT` token carries a sixth item, the start of its newline run.
"""

MULTILINE = frozenset({"FENCE", "CODE", "STMT_CODE", "LINE_CONT"})
"""The terminals, besides `_NL`, whose text may hold a line break (see grammar/kedi.lark)."""

_SIGNATURE_OPENERS = frozenset({"PROC_HEAD", "TYPE_HEAD"})
_INLINE_CODE = frozenset({"CODE", "STMT_CODE"})
# The first content line after a `>>` row, skipping blank and comment lines.
_NEXT_ROW_INDENT = re.compile(r"[^\n]*\n(?:[ \t]*(?:#[^\n]*)?\n)*([ \t]*)\S")


def indent_width(indentation: str) -> int:
    """Return the width of leading whitespace, a tab counting as 4 columns."""
    return len(indentation) + (TAB_WIDTH - 1) * indentation.count("\t")


class Layout:
    """The layout state of one parse: open indentation levels and signature mode."""

    __slots__ = ("text", "levels", "in_signature", "last_line_end", "tabs", "keeps")

    SPECIAL = _SIGNATURE_OPENERS | _INLINE_CODE | {"FENCE", "_RPAR"}
    """The terminals, other than `_NL`, that `token` must see."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.levels = [0]
        self.in_signature = False
        self.last_line_end: Token = ("_DEDENT", 0, 0, 1, 0)
        self.tabs = "\t" in text
        # `keeps`: how many characters of indentation keep the current level, or -1 when
        # `indentation` must judge every row (the text holds a tab, or a signature is
        # open): the parse loop does not call `indentation` for a row that keeps it.
        self._judge()

    def token(self, kind: str, start: int, end: int) -> int:
        """Check a `SPECIAL` token and return where it starts (a fence drops its leading spaces)."""
        if kind in _INLINE_CODE:
            if self.text.find("\n", start, end) != -1:
                _check_multiline_code(self.text, start, end)
        elif kind in _SIGNATURE_OPENERS:
            self.in_signature = True
            self._judge()
        elif kind == "_RPAR" and self.in_signature:  # (a `)` that closes a call changes nothing)
            self.in_signature = False
            self._judge()
        elif kind == "FENCE":
            # The lexer lets a fence absorb the spaces after `=`, so that free text does not.
            while self.text[start] != "`":
                start += 1
        return start

    def newline(self, start: int, end: int, breaks: int, line: int, base: int) -> Token:
        """Return the `_NL` or `_BNL` token for the newline run ``[start, end)``.

        `breaks` is how many line breaks the run holds; `line` and `base` are
        those of the line the run closes (see `Token`).
        """
        text = self.text
        # Step back over the line's trailing spaces, so spans end at its last character.
        line_end = start
        while line_end > 0 and text[line_end - 1] in " \t":
            line_end -= 1
        self.last_line_end = ("_DEDENT", line_end, line_end, line, base)
        # The fed text's leading line break (it closes line 0, or -1 before a byte-order
        # mark) only carries the first line's indentation: it never makes a blank line.
        blank = breaks > 1 and line > 0 and _crosses_blank_line(text, start, end)
        return ("_BNL" if blank else "_NL", line_end, line_end, line, base)

    def indentation(
        self, start: int, indent: int, end: int, after: tuple[int, int]
    ) -> Iterable[Token]:
        """Return the `INDENT` or `_DEDENT` tokens for the row after the newline run ``[start, end)``.

        The row's indentation is ``[indent, end)`` and `after` its ``(line, base)``.
        Inside a signature, line breaks have no indentation meaning. Most rows keep
        the indentation: they get an empty tuple, not a generator.
        """
        if self.in_signature:
            return ()
        text = self.text
        levels = self.levels
        width = indent_width(text[indent:end])
        if width == levels[-1]:
            return ()
        if width < levels[-1] and text.startswith(">>", end):
            width = _anomaly_width(text, end, width, levels)
        if width > levels[-1]:
            levels.append(width)
            self._judge()
            return (("INDENT", end, end, *after, start),)  # type: ignore[return-value]  # a token tuple of the lexer's shape
        return self._dedents(width, indent, end)

    def _judge(self) -> None:
        """Set `keeps` for the current level and mode."""
        self.keeps = -1 if self.tabs or self.in_signature else self.levels[-1]

    def _dedents(self, width: int, indent: int, end: int) -> Iterator[Token]:
        """Yield the `_DEDENT` tokens down to `width` for the row indented by ``[indent, end)``.

        A dedent to no enclosing level is reported after the `_DEDENT` tokens,
        whose reductions may fail first.
        """
        levels = self.levels
        open_levels = tuple(levels)
        while width < levels[-1]:
            levels.pop()
            self._judge()
            yield self.last_line_end
        if width != levels[-1]:
            raise SyntaxProblem(
                (indent, end),
                f"Unexpected dedent: an indentation of {_columns(width)} matches no enclosing block",
                f"indent this line like one of the enclosing blocks ({', '.join(map(_columns, open_levels))})",
            )

    def finish(self) -> list[Token]:
        """Return the `_DEDENT` tokens that close the blocks still open at the end."""
        return [self.last_line_end] * (len(self.levels) - 1)


def _columns(width: int) -> str:
    return f"{width} column" if width == 1 else f"{width} columns"


def _crosses_blank_line(text: str, start: int, end: int) -> bool:
    """Tell whether a newline run (of two or more line breaks) holds a whitespace-only line.

    Lines inside block comments do not count.
    """
    in_block = False
    for line in text[start:end].split("\n")[1:-1]:
        stripped = line.strip()
        if stripped == "###":
            in_block = not in_block
        elif not stripped and not in_block:
            return True
    return False


def _anomaly_width(text: str, row: int, width: int, levels: list[int]) -> int:
    """Return the width a left-shifted `>>` row really belongs to (or its own width)."""
    match = _NEXT_ROW_INDENT.match(text, row)
    if match is None:
        return width
    next_width = indent_width(match.group(1))
    return next_width if next_width > width and next_width in levels else width


def _check_multiline_code(text: str, start: int, end: int) -> None:
    """Reject inline Python whose line break is not inside brackets or a triple-quoted string."""
    if not _breaks_inside_brackets(text[start + 1 : end - 1]):
        raise SyntaxProblem(
            (start, start + 1),
            "Unclosed backtick: inline Python runs onto the next line",
            "close the backtick on this line; inline Python may continue on the next "
            "line only inside brackets, and a ``` fence holds a block",
        )


def _breaks_inside_brackets(code: str) -> bool:
    depth = 0
    quote = ""
    index = 0
    size = len(code)
    while index < size:
        char = code[index]
        if quote:
            if char == "\\":
                index += 2
                continue
            if code.startswith(quote, index):
                index += len(quote)
                quote = ""
                continue
            if char == "\n" and len(quote) == 1:
                return False
        elif char in "\"'":
            quote = code[index : index + 3] if code[index : index + 3] in ('"""', "'''") else char
            index += len(quote)
            continue
        elif char == "#":
            end = code.find("\n", index)
            index = size if end == -1 else end
            continue
        elif char in "([{":
            depth += 1
        elif char in ")]}":
            depth = max(0, depth - 1)
        elif char == "\n" and depth == 0:
            return False
        index += 1
    return True
