"""Turn every parse failure into a `KediSyntaxError` written in the user's words.

Three things can fail while parsing: the lexer (no terminal matches here), the
parser (a token is not allowed here), both reported as a `ParseFailure`, and
kedi's own checks in the layout pass and the builder (`SyntaxProblem`).
`syntax_error` is the only place that converts them. Parse failures are
classified by what is at the error position and by the construct still open on
the parser's stack (an unclosed `<`, a signature, a statement start...);
`PHRASES` names every terminal in the user's words, so no terminal name or
"Expected one of" reaches a message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kedi.errors import Diagnostic, KediSyntaxError
from kedi.source import SourceFile, Span

if TYPE_CHECKING:
    from kedi.syntax._grammar import ParseFailure, ParseTables
    from kedi.syntax._postlex import Token

FEED_SHIFT = 1
"""How many characters `kedi.syntax.parser` puts in front of the source."""


class SyntaxProblem(Exception):
    """A syntax error found by kedi's own code.

    `where` is a ``(start, end)`` pair of offsets into the fed text, or the span of
    a node that is already built.
    """

    def __init__(
        self, where: tuple[int, int] | Span, message: str, hint: str | None = None
    ) -> None:
        super().__init__(message)
        self.where = where
        self.message = message
        self.hint = hint


PHRASES = {
    "_NL": "end of line",
    "_BNL": "end of line",
    "$END": "end of file",
    "INDENT": "an indented block",
    "_DEDENT": "the end of the block",
    "TPL": "`>>`",
    "_EQ": "`=`",
    "_RAW": "`<<`",
    "_LT": "`<`",
    "SUBST": "`<`",
    "CAPTURE": "`[`",
    "_GT": "closing `>`",
    "_LSQB": "`[`",
    "_RSQB": "closing `]`",
    "_LPAR": "`(`",
    "_RPAR": "closing `)`",
    "_COMMA": "`,`",
    "_COLON": "`:`",
    "_PIPE": "`|`",
    "_ARROW": "`->`",
    "STAR": "`*`",
    "NAME": "a name",
    "PARAM": "a name",
    "DOTTED": "a type",
    "STRING": "a string",
    "NUMBER": "a number",
    "ELLIPSIS": "`...`",
    "CODE": "a `` `expression` ``",
    "STMT_CODE": "a `` `statement` `` line",
    "FENCE": "a ``` fence",
    "FENCE_LIT": "`<``>`",
    "TEXT": "text",
    "ARG_TEXT": "argument text",
    "RAW_LINE": "a line of text",
    "LINE_CONT": "a line-ending `\\`",
    "CONFIG_KEY": "a `key: value` setting",
    "MODULE_PATH": "a module path",
    "ASSIGN_OPEN": "an assignment `[name] =`",
    "TARGET": "an assignment `[name] =`",
    "PROC_HEAD": "a procedure `@name(`",
    "TYPE_HEAD": "a custom type `~Name(`",
    "TEST_HEAD": "`@test:`",
    "EVAL_HEAD": "`@eval:`",
    "SYSTEM": "`> system:`",
    "USE": "`> use:`",
    "PROFILE": "`> profile:`",
    "IMPORT": "`> import:`",
    "EXPORT": "`> export:`",
    "PACKAGE": "`> package:`",
    "OPTIMIZE": "`> optimize:`",
    "AUTO": "`> auto:`",
    "CASE": "`> case:`",
    "DATA": "`> data:`",
    "METRIC": "`> metric:`",
    "DIRECTIVE": "a `> name:` directive",
    "WS": "a space",
}
"""Every terminal of grammar/kedi.lark, in the words a Kedi user knows."""

_STATEMENT_STARTS = frozenset(
    {
        "TPL",
        "_EQ",
        "ASSIGN_OPEN",
        "TARGET",
        "STMT_CODE",
        "FENCE",
        "PROC_HEAD",
        "TYPE_HEAD",
        "TEST_HEAD",
        "EVAL_HEAD",
    }
)
_DIRECTIVE_HEADS = frozenset(
    {
        "DIRECTIVE",
        "SYSTEM",
        "USE",
        "PROFILE",
        "IMPORT",
        "EXPORT",
        "PACKAGE",
        "OPTIMIZE",
        "AUTO",
        "CASE",
        "DATA",
        "METRIC",
    }
)
_LAYOUT = frozenset({"_NL", "_BNL", "$END"})
_ZERO_WIDTH = _LAYOUT | {"INDENT", "_DEDENT"}
_INLINE_CODE = frozenset({"CODE", "STMT_CODE", "FENCE", "FENCE_LIT"})
_CONSTRUCTS = {
    "PROC_HEAD": "the header of `@{}`",
    "TYPE_HEAD": "the custom type `~{}`",
    "TEST_HEAD": "`@test:`",
    "EVAL_HEAD": "`@eval:`",
    **{head: "`> {}:`" for head in _DIRECTIVE_HEADS},
}
_OPENERS = {
    "_LT": "_GT",
    "_LSQB": "_RSQB",
    "ASSIGN_OPEN": "_RSQB",
    "_LPAR": "_RPAR",
    "PROC_HEAD": "_RPAR",
    "TYPE_HEAD": "_RPAR",
}
_CLOSERS = frozenset(_OPENERS.values())
TRAILING_SPACES = frozenset(
    {"TPL", "_RAW", "_EQ", "_COLON", "_COMMA", "_ARROW", "_RPAR"}
    | {"DIRECTIVE", "SYSTEM", "USE", "PROFILE", "IMPORT", "EXPORT", "PACKAGE", "OPTIMIZE"}
    | {"AUTO", "CASE", "DATA", "METRIC", "TEST_HEAD", "EVAL_HEAD"}
)
"""Terminals whose token takes the spaces after it (`->` also those before it).

Whatever follows them never needs those spaces (text is trimmed at its start),
so taking them spares the lexer a token (grammar/kedi.lark). A diagnostic that
marks such a token marks its text without them (`unspaced`)."""


def unspaced(fed: str, start: int, end: int) -> tuple[int, int]:
    """Return the offsets of a `TRAILING_SPACES` token's text, without its spaces."""
    text = fed[start:end]
    start += len(text) - len(text.lstrip(" \t"))
    return start, start + len(text.strip(" \t"))


FUSED = {"SUBST": "_LT", "CAPTURE": "_LSQB", "TARGET": "ASSIGN_OPEN", "PARAM": "NAME"}
"""Terminals that spell a whole construct (`<name>`, `[name]`) in one token -> the token it opens with.

They only make well-formed input cheaper to parse (docs/syntax.md, "One-token
forms"); errors read as if they did not exist: a failure at one is reported at
its opening token, and the lexer that names what an unexpected character
starts leaves them out."""
_CODE = re.compile(r"`[^`\n]*`?")
_WORD = re.compile(r"[^\s<>\[\](),:=|`#\\]+")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
"""A Kedi identifier: procedure, output, field, parameter and type names."""
NAME_HINT = "names start with a letter or `_` and hold only letters, digits and `_`"
"""The hint of every invalid-identifier diagnostic."""
DEFAULT_HINT = "defaults are one-line backtick expressions: name: Type = `value`"
"""The hint of every fenced-default diagnostic."""


def syntax_error(
    error: ParseFailure | SyntaxProblem, tables: ParseTables, source: SourceFile, fed: str
) -> KediSyntaxError:
    """Return the `KediSyntaxError` for a failure while parsing `fed` (the shifted source)."""
    if isinstance(error, SyntaxProblem):
        where = error.where
        span = where if isinstance(where, Span) else _span(source, *where)
        return _error(source, span, error.message, error.hint)
    start, end, message, hint = _Failure.of(error, tables, fed).describe()
    return _error(source, _span(source, start, end), message, hint)


def _span(source: SourceFile, start: int, end: int) -> Span:
    return source.span(max(0, start - FEED_SHIFT), max(0, end - FEED_SHIFT))


def _error(source: SourceFile, span: Span, message: str, hint: str | None) -> KediSyntaxError:
    return KediSyntaxError([Diagnostic(span, message, hint, source.line_text(span.line))])


def _acceptable(tables: ParseTables, states: list[int]) -> frozenset[str]:
    """Return the terminals the parser can really shift on the state stack `states`.

    LALR merges lookahead sets, so the terminals listed for a state can include
    some that only a reduction would reject. Replaying the reductions on a copy
    of the state stack, without running the builder, keeps only the terminals
    that lead to a shift (accepting the program is a shift of `$END`).
    """
    from kedi.syntax._grammar import TAKE  # (`_grammar` imports this module)

    actions = tables.actions
    accepted = set()
    for name in actions[states[-1]]:
        stack = list(states)
        while True:
            action = actions[stack[-1]].get(name)
            if action is None:
                break
            if action >= 0 or tables.rules[~action][2] == TAKE:  # TAKE shifts into a list
                accepted.add(name)
                break
            count, origin = tables.rules[~action][:2]
            if count:
                del stack[-count:]
            stack.append(tables.gotos[stack[-1]][origin])
    return frozenset(accepted)


def describe_expected(names: Iterable[str]) -> str:
    """Return "a, b or c" for a set of terminal names, grouping statement starts."""
    names = set(names) - {"WS"}
    phrases: list[str] = []
    if names & _STATEMENT_STARTS and "TPL" in names:
        phrases.append("a statement")
        names -= _STATEMENT_STARTS | _DIRECTIVE_HEADS
    if len(names & _DIRECTIVE_HEADS) > 1:
        phrases.append("a `> name:` directive")
        names -= _DIRECTIVE_HEADS
    if "TEXT" in names or "ARG_TEXT" in names:
        names -= {"CODE", "FENCE_LIT", "_LT", "SUBST", "_LSQB", "CAPTURE", "LINE_CONT"}
    if "_BNL" in names:
        names.discard("_NL")
    if "DOTTED" in names:
        names.discard("ELLIPSIS")  # "a type" covers `tuple[int, ...]`'s `...`
    phrases += sorted({PHRASES[name] for name in names})
    if len(phrases) > 1:
        return ", ".join(phrases[:-1]) + " or " + phrases[-1]
    return phrases[0] if phrases else "nothing more"


@dataclass
class _Failure:
    """What Lark saw where it failed: position, found token kind, expected terminals, stack."""

    fed: str
    pos: int
    kind: str | None
    """The unexpected token's terminal, or None when no terminal matched."""
    length: int
    expected: frozenset[str]
    stack: list[Any]

    @classmethod
    def of(cls, failure: ParseFailure, tables: ParseTables, fed: str) -> _Failure:
        """Read a `ParseFailure` of the parse of `fed`."""
        expected = _acceptable(tables, failure.states)
        token = failure.token
        if token is not None:
            kind, start, end = token[:3]
            if kind in FUSED:
                kind = FUSED[kind]
                end = re.compile(tables.patterns[kind]).match(fed, start).end()  # type: ignore[union-attr]  # the fused terminal's pattern matched here while lexing
            elif kind in TRAILING_SPACES:
                start, end = unspaced(fed, start, end)
            length = 0 if kind in _ZERO_WIDTH else end - start
            return cls(fed, start, kind, length, expected, failure.values)
        return cls(fed, failure.pos, None, 1, expected, failure.values)

    def text(self, token: Token) -> str:
        """Return the text of a token on the stack."""
        return self.fed[token[1] : token[2]]

    # ------------------------------------------------------------------ description

    def describe(self) -> tuple[int, int, str, str | None]:
        """Return ``(start, end, message, hint)`` for this failure."""
        for rule in (
            self._lexical,
            self._layout,
            self._open_construct,
            self._statement_start,
            self._body_row,
        ):
            found = rule()
            if found is not None:
                return found
        construct = self._construct()
        where = f" in {construct}" if construct else ""
        return self._at(f"Expected {describe_expected(self.expected)}{where}, found {self.found}")

    @property
    def found(self) -> str:
        """The unexpected input in the user's words: quoted text, or a phrase for layout."""
        if self.kind in _LAYOUT or self.kind in ("INDENT", "_DEDENT"):
            return PHRASES[self.kind]
        rest = self.fed[self.pos : self.fed.find("\n", self.pos)]
        word = _WORD.match(rest) or _CODE.match(rest)
        text = (word.group(0) if word else rest[:1])[:30]
        if not text.strip():
            return "end of line"
        return f"`` {text} ``" if "`" in text else f"`{text}`"

    def _at(
        self,
        message: str,
        hint: str | None = None,
        start: int | None = None,
        end: int | None = None,
    ) -> tuple[int, int, str, str | None]:
        start = self.pos if start is None else start
        return start, max(start, self.pos + self.length) if end is None else end, message, hint

    def _line(self) -> str:
        end = self.fed.find("\n", self.pos)
        return self.fed[self.pos : end if end != -1 else len(self.fed)]

    def _lexical(self) -> tuple[int, int, str, str | None] | None:
        """Problems visible in the text itself: fences, backticks, block comments, backslashes."""
        rest = self._line()
        stripped = rest.lstrip(" \t")
        start = self.pos + len(rest) - len(stripped)
        if stripped.startswith("```"):
            opener, _ = self._innermost_opener()
            if opener is not None and opener[0] in ("PROC_HEAD", "TYPE_HEAD"):
                return self._at(
                    "A default cannot be a fenced block", DEFAULT_HINT, start, start + 3
                )
            label = stripped[3:].strip()
            if label and not label.startswith("`"):
                return self._at(
                    f"A ``` fence must be alone on its line; remove `{label}`",
                    "write the Python code on the lines after ```",
                    start,
                    start + 3,
                )
            return self._at(
                "Unclosed fence: no line holds the closing ```",
                "end the block with ``` alone on its own line",
                start,
                start + 3,
            )
        if stripped.startswith("`") and self.kind not in _INLINE_CODE:
            return self._at(
                "Unbalanced backtick: this `` ` `` is never closed",
                "close the Python expression with a backtick",
                start,
                start + 1,
            )
        if stripped.rstrip() == "###":
            return self._at(
                "Unclosed block comment: no `###` line closes it",
                "a block comment ends with a line holding only `###`",
                start,
                start + 3,
            )
        if stripped.startswith("\\"):
            after = stripped[1:2]
            if not stripped[1:].strip():
                return self._at(
                    "A line-ending `\\` continues only a rendered `=` value",
                    "template rows continue on the next row without `\\`; write `\\\\` "
                    "for a literal backslash",
                    start,
                    start + 1,
                )
            return self._at(
                f"Unsupported escape `\\{after}`",
                "write `\\\\` for a literal backslash",
                start,
                start + 2,
            )
        return None

    def _layout(self) -> tuple[int, int, str, str | None] | None:
        if self.kind == "INDENT":
            if self._open_statement() in ("TPL", "_RAW"):
                hint = "continuation rows of a template use the same indentation as its first row"
            else:
                hint = "only a header ending in `:` (procedure, directive block, suite) opens an indented block"
            return self._at("Unexpected indentation", hint)
        if self.kind == "_DEDENT":
            newline = self.fed.find("\n", self.pos)
            row = len(self.fed[newline:]) - len(self.fed[newline:].lstrip())
            return self._at(
                "Unexpected dedent",
                "this block is not finished; indent the line like the block",
                newline + row,
                newline + row + 1,
            )
        return None

    def _open_construct(self) -> tuple[int, int, str, str | None] | None:
        """Report the innermost bracket or signature that is still open."""
        opener, index = self._innermost_opener()
        if opener is None:
            if self.kind is None and "NAME" in self.expected:
                return self._bad_name()
            return None
        start, end = opener[1], opener[1] + 1
        bad_name = self._bad_name() if self.expected & {"NAME", "DOTTED"} else None
        if bad_name is not None:
            return bad_name
        kind = opener[0]
        if kind == "_LT":
            return self._at(
                f"Unbalanced `<`: expected `>` to close it, found {self.found}",
                "write `\\<` for a literal `<`",
                start,
                end,
            )
        before = self.stack[index - 1] if index > 0 else None
        if kind == "_LSQB" and type(before) is tuple and before[0] == "DOTTED":
            return self._at(
                f"Malformed type `{self.text(before)}[...]`: expected {describe_expected(self.expected)}, "
                f"found {self.found}",
                "for example `list[str]` or `dict[str, int]`",
            )
        if kind in ("_LSQB", "ASSIGN_OPEN") and self._last_token_type() == "_COLON":
            return self._at(
                f"Expected a type after `:`, found {self.found}", "for example `[name: str]`"
            )
        if kind in ("_LSQB", "ASSIGN_OPEN") and self.kind in _LAYOUT:
            return self._at(
                f"Unbalanced `[`: expected `]` to close it, found {self.found}",
                "write `\\[` for a literal `[`",
                start,
                end,
            )
        if kind in ("_LSQB", "ASSIGN_OPEN"):
            return self._at(
                f"Expected {describe_expected(self.expected)} in the output field `[`, "
                f"found {self.found}",
                "write `\\[` for a literal `[`",
            )
        if kind in ("PROC_HEAD", "TYPE_HEAD"):
            what = "signature" if kind == "PROC_HEAD" else "custom type"
            name = self.text(opener).rstrip("( \t")
            expected = describe_expected(self.expected - {"_NL", "_BNL"})
            return self._at(
                f"Malformed {what} `{name}(...)`: expected {expected}, found {self.found}",
                "parameters look like `name: Type = `default``",
            )
        callee = self.stack[index - 1] if index > 0 else None
        name = f" to `{self.text(callee)}`" if type(callee) is tuple and callee[0] == "NAME" else ""
        header = self.stack[index - 2] if index > 1 else None
        if type(header) is tuple and header[0] == "METRIC" and name and type(callee) is tuple:
            return self._at(  # `> metric: fn():` names no dataset
                f"`> metric: {self.text(callee)}(...)` must name the one dataset it scores, found {self.found}",
                f"write `> metric: {self.text(callee)}(dataset):`, or `> metric: {self.text(callee)}:` for a metric that runs once",
                start,
                end,
            )
        if self.fed.startswith("(", self.pos):
            return self._at(
                f"Unescaped `(` in an argument of the call{name}",
                "write `\\(` for a literal `(`",
                end=self.pos + 1,
            )
        return self._at(
            f"Unbalanced `(`: the call{name} needs a closing `)`, found {self.found}",
            "write `\\,` `\\(` `\\)` for a literal comma or parenthesis",
            start,
            end,
        )

    def _last_token_type(self) -> str | None:
        last = self.stack[-1] if self.stack else None
        return last[0] if type(last) is tuple else None

    def _innermost_opener(self) -> tuple[Token | None, int]:
        depth = 0
        for index in range(len(self.stack) - 1, -1, -1):
            item = self.stack[index]
            if type(item) is not tuple:
                continue  # a node or an inline rule's list
            if item[0] in _CLOSERS:
                depth += 1
            elif item[0] in _OPENERS:
                if depth == 0:
                    return item, index
                depth -= 1
        return None, -1

    def _bad_name(self) -> tuple[int, int, str, str | None] | None:
        word = _WORD.match(self.fed, self.pos)
        if word is None or IDENTIFIER.match(word.group(0)):
            return None
        return self._at(f"Invalid identifier `{word.group(0)}`", NAME_HINT, self.pos, word.end())

    def _construct(self) -> str | None:
        """Name the statement or directive whose head is the last one on the stack."""
        for item in reversed(self.stack):
            if type(item) is tuple and item[0] in _CONSTRUCTS:
                name = re.sub(r"^[@~>][ \t]*|[ \t]*[:(][ \t]*$", "", self.text(item))
                return _CONSTRUCTS[item[0]].format(name)
        return None

    def _open_statement(self) -> str | None:
        for item in reversed(self.stack):
            if type(item) is tuple and (item[0] in _STATEMENT_STARTS or item[0] == "_RAW"):
                return item[0]
        return None

    def _statement_start(self) -> tuple[int, int, str, str | None] | None:
        """Report a row that starts no statement (prose outside `>>`, malformed markers)."""
        if (
            "TPL" not in self.expected
            or self.kind in _STATEMENT_STARTS | _DIRECTIVE_HEADS | _LAYOUT
        ):
            return None
        line = self._line()
        end = self.pos + len(line.rstrip())
        if line.startswith(">"):
            return self._at(
                "Malformed directive: expected `> name:`",
                "a directive is `> name: value`; a template row starts with `>>`",
                end=end,
            )
        if line.startswith("@"):
            return self._at(
                "Malformed procedure header: expected `@name(...)`",
                "a procedure starts with `@name(params) -> Type:`",
                end=end,
            )
        if line.startswith("~"):
            return self._at(
                "Malformed custom type: expected `~Name(...)`",
                "write `~~` or `\\~` for a literal `~`",
                end=end,
            )
        if line.startswith("[") and re.search(r"\][ \t]*(=|<<)", line):
            return self._at(
                "Unbalanced `[` in an assignment target: expected `]` before `=` or `<<`",
                "an assignment is `[name] = value` or `[name: Type] = value`",
                end=self.pos + 1,
            )
        if line.startswith("<<"):
            return self._at("A raw invoke needs a target: `[name] << prompt`", end=end)
        return self._at(
            "Template text must start with `>>`",
            "start the row with `>> `; prompt text is only allowed in a `>>` template",
            end=end,
        )

    def _body_row(self) -> tuple[int, int, str, str | None] | None:
        if "CONFIG_KEY" not in self.expected or self.kind in _LAYOUT:
            return None
        line = self._line()
        return self._at(
            "Expected a `key: value` setting or a `> name:` directive",
            "a configuration row is `key: value`, and a profile member is `> name: value`",
            end=self.pos + len(line.rstrip()),
        )
