"""The layout pass between the lexer and the parser: newlines, indentation, backticks.

The lexer produces one `_NL` token per newline run (the line break, any blank,
comment and block-comment lines, and the next line's indentation). This pass:

* retypes `_NL` as `_BNL` when the run crossed a blank line (a blank line always
  ends a `>>` template);
* adds `INDENT` and `_DEDENT` tokens from the indentation, a tab counting as 4
  columns; `INDENT` carries the newline run as its value, because a block's
  docstring lives there;
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

from lark import Token

from kedi.syntax.diagnostics import SyntaxProblem

TAB_WIDTH = 4

_SIGNATURE_OPENERS = frozenset({"PROC_HEAD", "TYPE_HEAD"})
_INLINE_CODE = frozenset({"CODE", "STMT_CODE"})
# The first content line after a `>>` row, skipping blank and comment lines.
_NEXT_ROW_INDENT = re.compile(r"[^\n]*\n(?:[ \t]*(?:#[^\n]*)?\n)*([ \t]*)\S")


def indent_width(indentation: str) -> int:
    """Return the width of leading whitespace, a tab counting as 4 columns."""
    return len(indentation) + (TAB_WIDTH - 1) * indentation.count("\t")


def layout(tokens: Iterable[Token], text: str) -> Iterator[Token]:
    """Yield the parser's token stream for the lexer's `tokens` over `text`."""
    levels = [0]
    in_signature = False
    first = True
    last_line_end = 0
    for token in tokens:
        kind = token.type
        if kind != "_NL":
            if kind in _INLINE_CODE and "\n" in token:
                _check_multiline_code(token)
            elif kind in _SIGNATURE_OPENERS:
                in_signature = True
            elif kind == "_RPAR":
                in_signature = False
            elif kind == "FENCE" and token[0] != "`":
                token = _without_leading_space(token)
            yield token
            continue

        line_end = _content_end(text, token.start_pos)
        last_line_end = line_end
        blank = _crosses_blank_line(token)
        if in_signature:
            yield _layout_token("_BNL" if blank else "_NL", token, line_end)
            continue
        # The fed text's leading line break only carries the first line's indentation.
        yield _layout_token("_BNL" if blank and not first else "_NL", token, line_end)
        first = False
        next_row = token.end_pos
        if next_row >= len(text):
            break
        width = indent_width(token[token.rfind("\n") + 1 :])
        if width < levels[-1] and text.startswith(">>", next_row):
            width = _anomaly_width(text, next_row, width, levels)
        if width > levels[-1]:
            levels.append(width)
            yield _layout_token("INDENT", token, next_row)
            continue
        open_levels = tuple(levels)
        while width < levels[-1]:
            levels.pop()
            yield _layout_token("_DEDENT", token, line_end)
        if width != levels[-1]:
            raise SyntaxProblem(
                (next_row - len(token) + token.rfind("\n") + 1, next_row),
                f"Unexpected dedent: an indentation of {_columns(width)} matches no enclosing block",
                f"indent this line like one of the enclosing blocks ({', '.join(map(_columns, open_levels))})",
            )
    for _ in levels[1:]:
        yield _layout_token("_DEDENT", None, last_line_end)


def _columns(width: int) -> str:
    return f"{width} column" if width == 1 else f"{width} columns"


def _content_end(text: str, position: int) -> int:
    """Step back over the trailing spaces of a line, so spans end at its last character."""
    while position > 0 and text[position - 1] in " \t":
        position -= 1
    return position


def _without_leading_space(token: Token) -> Token:
    """Start a fence token at its backticks (the lexer lets it absorb the spaces after `=`)."""
    value = token.lstrip(" \t")
    start = token.end_pos - len(value)  # type: ignore[operator]
    return Token(
        token.type,
        value,
        start,
        token.line,
        token.column,
        token.end_line,
        token.end_column,
        token.end_pos,
    )


def _layout_token(kind: str, newline: Token | None, position: int) -> Token:
    value = str(newline) if newline is not None else ""
    return Token(kind, value, position, 0, 0, 0, 0, position)


def _crosses_blank_line(newline: Token) -> bool:
    """Tell whether a newline run holds a whitespace-only line outside block comments."""
    if newline.count("\n") < 2:
        return False
    in_block = False
    for line in newline.split("\n")[1:-1]:
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


def _check_multiline_code(token: Token) -> None:
    """Reject inline Python whose line break is not inside brackets or a triple-quoted string."""
    if not _breaks_inside_brackets(str(token)[1:-1]):
        assert token.start_pos is not None
        raise SyntaxProblem(
            (token.start_pos, token.start_pos + 1),
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
