"""Text and code inside a parse: token positions, segments, Python code, docstrings.

`FedText` is the builder's base class: everything that reads characters rather
than grammar structure. Spans come from the line and column base each token
carries (`kedi.syntax._postlex.Token`), so building a node looks up no offsets;
literal text is merged into `Text` nodes (escapes, boundary trimming); backtick
and fence code and docstrings are cut out of the text. Offsets in tokens are
offsets into the *fed* text, which has one extra leading newline (`FEED_SHIFT`).
"""

from __future__ import annotations

import re
import textwrap
from typing import Any

from kedi._frozen import constructor
from kedi.source import SourceFile, Span, new_span
from kedi.syntax import ast
from kedi.syntax._postlex import MULTILINE, Token, indent_width
from kedi.syntax.diagnostics import FEED_SHIFT, SyntaxProblem

# `_tuple_new(Span, (...))` is `new_span` without its call, on the paths that make most spans.
_tuple_new = tuple.__new__
_ESCAPE = re.compile(r"\\(.)|~~", re.DOTALL)
_ESCAPES = {**{char: char for char in "<>[](),=@#~`\\"}, "t": "\t", "n": "\n", "s": " "}
_STRING_ESCAPE = re.compile(r"\\(.)")
_STRING_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t"}
_BLOCK_COMMENT = re.compile(r"^[ \t]*###[ \t]*\n(.*?)^[ \t]*###[ \t]*$", re.MULTILINE | re.DOTALL)
_PLAIN_TEXT = frozenset({"TEXT", "ARG_TEXT"})
_TOKEN_SEGMENTS = frozenset({"SUBST", "CAPTURE"})
"""The segments that are one token in a row (see grammar/kedi.lark); the other tokens are literal."""

# The nodes made in this module, through their fast constructors.
Text = constructor(ast.Text)
PythonCode = constructor(ast.PythonCode)
Docstring = constructor(ast.Docstring)
Subst = constructor(ast.Subst)
Capture = constructor(ast.Capture)
TypeName = constructor(ast.TypeName)


class FedText:
    """The text of one parse, and the helpers that read characters out of its tokens.

    `source` is the user's file and `fed` the text the lexer read (see
    `kedi.syntax.parser`); tokens hold offsets into `fed`.
    """

    __slots__ = ("source", "fed", "path")

    def __init__(self, source: SourceFile, fed: str) -> None:
        self.source = source
        self.fed = fed
        self.path = source.path

    def text(self, token: Token) -> str:
        """Return a token's text."""
        return self.fed[token[1] : token[2]]

    # ------------------------------------------------------------------ positions

    def location(self, token: Token, offset: int) -> tuple[int, int]:
        """Return the 1-based (line, column) of an `offset` at or after `token`'s start."""
        if offset > token[2] or token[0] in MULTILINE:
            breaks = self.fed.count("\n", token[1], offset)
            if breaks:
                return token[3] + breaks, offset - self.fed.rfind("\n", token[1], offset)
        return token[3], offset - token[4]

    def location_before(self, token: Token, offset: int) -> tuple[int, int]:
        """Return the 1-based (line, column) of an `offset` at or before `token`'s start."""
        fed = self.fed
        return token[3] - fed.count("\n", offset, token[1]), offset - fed.rfind("\n", 0, offset)

    def span_of(self, children: list[Any]) -> Span:
        """Return the span from the first child's start to the last child's end."""
        first, last = children[0], children[-1]
        # Tokens are tuples; the builder's own results (nodes and blocks) carry spans.
        if type(first) is tuple:
            line, column = first[3], first[1] - first[4]
        else:
            _, line, column, _, _ = first.span
        if type(last) is not tuple:
            _, _, _, end_line, end_column = last.span
        elif last[0] in MULTILINE:
            end_line, end_column = self.location(last, last[2])
        else:
            end_line, end_column = last[3], last[2] - last[4]
        # `new_span` without its call: this is where most nodes get their span
        return _tuple_new(Span, (self.path, line, column, end_line, end_column))

    def token_span(self, token: Token) -> Span:
        """Return the span of one token."""
        end_line, end_column = self.location(token, token[2])
        return new_span(self.path, token[3], token[1] - token[4], end_line, end_column)

    def line_span(self, token: Token) -> Span:
        """Return the span of a token that holds no line break (faster than `token_span`)."""
        _, start, end, line, base = token
        return new_span(self.path, line, start - base, line, end - base)

    def offset_span(self, start: int, end: int) -> Span:
        """Return the span of fed-text offsets ``[start, end)``."""
        return self.source.span(start - FEED_SHIFT, end - FEED_SHIFT)

    # ------------------------------------------------------------------ code and text

    def written(self, start: int, end: int) -> str:
        """Return the source text of the fed offsets ``[start, end)``, with CRLF line breaks as LF.

        The fed text has a space where a CRLF's CR was; Python code must see neither
        (after a `\\` line continuation, either is a syntax error).
        """
        return self.source.text[start - FEED_SHIFT : end - FEED_SHIFT].replace("\r\n", "\n")

    def inline_code(self, token: Token) -> ast.PythonCode:
        """Return the Python inside a backtick token, stripped, with its first `.kedi` line."""
        raw = self.fed[token[1] + 1 : token[2] - 1]
        code = raw.strip()
        if not code:
            raise SyntaxProblem(self.token_span(token), "Inline Python expression cannot be empty")
        _, start, end, first_line, base = token
        if "\n" not in raw:  # nearly always: the token's span is on its line
            span = _tuple_new(Span, (self.path, first_line, start - base, first_line, end - base))
            return PythonCode(code=code, first_line=first_line, span=span)
        # the code may start on a later line than its backtick
        first_line += raw.count("\n", 0, len(raw) - len(raw.lstrip()))
        code = self.written(start + 1, end - 1).strip()
        return PythonCode(code=code, first_line=first_line, span=self.token_span(token))

    def fence_code(self, token: Token) -> ast.PythonCode:
        """Return a fence's body, dedented by the indentation of the line that opens it."""
        fed = self.fed
        start = token[1]
        line = fed[fed.rfind("\n", 0, start) + 1 : start]
        width = indent_width(line[: len(line) - len(line.lstrip(" \t"))])
        lines = self.written(start, token[2]).split("\n")[1:-1]
        if width:  # (a fence at the start of its line keeps its body as it is)
            lines = [dedent_line(row, width) for row in lines]
        return PythonCode(
            code="\n".join(lines), first_line=token[3] + 1, span=self.span_of([token])
        )

    def string_literal(self, token: Token) -> str:
        """Return the value of a one-line string literal inside a type."""
        inner = self.fed[token[1] + 1 : token[2] - 1]
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
                    self.span_of([token]), f"Unsupported escape `\\{piece}` in a string literal"
                )
        return "".join(parts)

    def raw_line(self, token: Token) -> str:
        """Return a raw line (a dependency, `> auto:` text) with `\\#` written as `#`."""
        return self.text(token).rstrip().replace("\\#", "#")

    def docstring(self, indent: Token) -> ast.Docstring | None:
        """The first `###` block in the newline run before a block's first line, if any."""
        base: int = indent[5]  # type: ignore[misc]  # a token tuple's slot 5 is its indentation width
        run = self.fed[base : indent[1]]
        # The run starts with the header line's own trailing comment, which is never a docstring.
        match = _BLOCK_COMMENT.search(run, run.find("\n") + 1)
        if match is None:
            return None
        comment = match.group(0)
        # from the opening `###` to the end of the closing one (a CRLF's CR is fed as a space)
        start = base + match.start() + len(comment) - len(comment.lstrip(" \t"))
        end = base + match.start() + len(comment.rstrip(" \t"))
        text = textwrap.dedent(match.group(1)).strip("\n")
        # the block comment lies before the block's first row, the `INDENT` token
        first_line, column = self.location_before(indent, start)
        end_line, end_column = self.location_before(indent, end)
        return Docstring(
            text="\n".join(line.rstrip() for line in text.split("\n")),
            span=new_span(self.path, first_line, column, end_line, end_column),
        )

    def segments(self, pieces: list[Any]) -> tuple[ast.Segment, ...]:
        """Merge literal pieces into `Text`, resolve escapes and trim the boundaries.

        `pieces` are the children of a row, a rendered value or an argument:
        nodes, and literal tokens (text, `<``>`, line continuations). The nodes of
        the one-token segments and of a lone text token are made here, without a
        helper call each: these are most of the parse's nodes.
        """
        segments: list[Any] = []
        fed, path = self.fed, self.path
        last = len(pieces) - 1
        index = 0
        while index <= last:
            piece = pieces[index]
            if type(piece) is not tuple:
                segments.append(piece)
                index += 1
                continue
            kind, start, end, line, base = piece
            if kind in _TOKEN_SEGMENTS:  # one line, and its span is the token's
                span = _tuple_new(Span, (path, line, start - base, line, end - base))
                if kind == "SUBST":  # `<`, the name with any spaces around it, `>`
                    segments.append(Subst(name=fed[start + 1 : end - 1].strip(), span=span))
                else:  # `[name]` or `[name: Dotted]`
                    name, type_ = self.name_and_type(piece, start + 1, end - 1)
                    segments.append(Capture(name=name, type=type_, span=span))
                index += 1
                continue
            run = index + 1
            while (
                run <= last and type(pieces[run]) is tuple and pieces[run][0] not in _TOKEN_SEGMENTS
            ):
                run += 1
            text = fed[start:end]
            if run == index + 1 and kind in _PLAIN_TEXT and "\\" not in text and "~~" not in text:
                # The common case: one piece of text without escapes (so on one line),
                # trimmed at the ends of the row.
                if not index:
                    stripped = text.lstrip(" \t")
                    start += len(text) - len(stripped)
                    text = stripped
                if run > last:
                    stripped = text.rstrip(" \t")
                    end -= len(text) - len(stripped)
                    text = stripped
                if text:
                    span = _tuple_new(Span, (path, line, start - base, line, end - base))
                    segments.append(Text(value=text, span=span))
            else:
                literal = _Literal(self, pieces[index:run])
                if not index:
                    literal.strip_start()
                if run > last:
                    literal.strip_end()
                if literal.chunks:
                    segments.append(literal.node())
            index = run
        return tuple(segments)

    def name_and_type(self, token: Token, start: int, stop: int) -> tuple[str, ast.TypeName | None]:
        """Read `name` or `name: Dotted`, spaces around each part, at ``[start, stop)`` in a token.

        The token is a CAPTURE, TARGET or PARAM, which stands for the name, type and
        punctuation tokens of the same text, and holds no line break.
        """
        name, colon, type_text = self.fed[start:stop].partition(":")
        if not colon:
            return name.strip(), None
        dotted = type_text.strip()
        # the type starts after the name part, `:` and the spaces before the type
        column = start + len(name) + 1 + len(type_text) - len(type_text.lstrip()) - token[4]
        line = token[3]
        span = _tuple_new(Span, (self.path, line, column, line, column + len(dotted)))
        return name.strip(), TypeName(name=dotted, span=span)


def dedent_line(line: str, width: int) -> str:
    """Remove up to `width` columns of leading whitespace (a tab counts as 4)."""
    index = 0
    removed = 0
    while index < len(line) and line[index] in " \t" and removed < width:
        removed += 4 if line[index] == "\t" else 1
        index += 1
    return line[index:]


class _Literal:
    """Consecutive literal pieces as `(text, protected)` chunks; escapes are protected from trimming."""

    __slots__ = ("file", "chunks", "tokens", "lead", "trail")

    def __init__(self, file: FedText, tokens: list[Token]) -> None:
        self.file = file
        self.chunks: list[tuple[str, bool]] = []
        self.tokens = tokens
        self.lead = 0
        self.trail = 0
        for token in tokens:
            self.add(token)

    def add(self, token: Token) -> None:
        kind = token[0]
        if kind == "LINE_CONT":
            # The backslash, the line break and the spaces around them join as one space.
            self.strip_end()
            self.trail = 0
            self.chunks.append((" ", False))
        elif kind == "FENCE_LIT":
            self.chunks.append(("```", True))
        else:
            text = self.file.text(token)
            if "\\" not in text and "~~" not in text:
                self.chunks.append((text, False))
            else:
                self._resolve_escapes(text, token[1])

    def _resolve_escapes(self, text: str, offset: int) -> None:
        done = 0
        for match in _ESCAPE.finditer(text):
            if match.start() > done:
                self.chunks.append((text[done : match.start()], False))
            done = match.end()
            char = match.group(1)
            resolved = "~" if char is None else _ESCAPES.get(char)
            if resolved is None:
                start = offset + match.start()
                raise SyntaxProblem(
                    self.file.offset_span(start, start + 2),
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
        first = self.tokens[0]
        start = first[1] + self.lead
        line, column = self.file.location(first, start)
        end_line, end_column = self.file.location(
            first, max(start, self.tokens[-1][2] - self.trail)
        )
        return Text(
            value="".join(text for text, _ in self.chunks),
            span=new_span(self.file.path, line, column, end_line, end_column),
        )
