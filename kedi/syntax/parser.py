"""`parse`: Kedi source text to a `kedi.syntax.ast.Module`.

The text is fed to the grammar with one leading newline, so the first line is
lexed like every other line (its indentation, comments and block comments sit in
a `_NL` token), and with a final newline. CRLF line breaks are fed as
space + LF and a leading byte-order mark as a line break, which keeps every
offset the same as in the user's text.

`run` is the parse loop: it lexes with the contextual lexer of the current
parser state, passes newlines and a few other tokens through the layout pass,
and shifts and reduces over Lark's LALR(1) tables, calling the builder on each
reduction. Tokens are plain tuples (`kedi.syntax._postlex.Token`), and the
loop tracks each token's line as it goes, so spans need no offset lookups.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from kedi.errors import KediUsageError
from kedi.source import SourceFile
from kedi.syntax import ast
from kedi.syntax._builder import Builder
from kedi.syntax._grammar import (
    APPEND,
    BUILD,
    IGNORED,
    PASS,
    TAKE,
    ParseFailure,
    ParseTables,
    parse_tables,
)
from kedi.syntax._postlex import MULTILINE, Layout, Token
from kedi.syntax.diagnostics import SyntaxProblem, syntax_error

_SPECIAL = Layout.SPECIAL | MULTILINE | {IGNORED, "_NL"}
"""The terminals the lexer loop does more with than make a token."""


def parse(source: str, path: str | None = None) -> ast.Module:
    """Parse Kedi source text into a `Module`.

    Args:
        source: The program text.
        path: The file name shown in diagnostics and spans (default `<string>`).

    Raises:
        KediSyntaxError: The source does not parse; it carries a located diagnostic.
        KediUsageError: `source` is not a string.
    """
    if not isinstance(source, str):
        raise KediUsageError(f"kedi.parse expects source text (str), not {type(source).__name__}")
    file = SourceFile(source, path)
    fed, added = feed(source)
    tables = parse_tables()
    try:
        return run(tables, Builder(file, fed), fed, added)
    except (ParseFailure, SyntaxProblem) as error:
        raise syntax_error(error, tables, file, fed) from error


def feed(source: str) -> tuple[str, int]:
    """Return the text the lexer reads for `source`, and how many line breaks it adds in front."""
    fed = "\n" + source.replace("\r\n", " \n")
    added = 1
    if fed.startswith("\ufeff", 1):
        # A byte-order mark is fed as an empty first line, which keeps every offset.
        fed = "\n\n" + fed[2:]
        added = 2
    if not fed.endswith("\n"):
        fed += "\n"
    return fed, added


def run(tables: ParseTables, builder: Builder, fed: str, added: int) -> Any:
    """Parse `fed`, whose first `added` line breaks are not in the source; return the start value.

    Raises:
        ParseFailure: No terminal matches, or the parser cannot take a token.
        SyntaxProblem: The layout pass or the builder rejected the program.
    """
    actions, gotos, rules = tables.actions, tables.gotos, tables.rules
    # `state` mirrors `states[-1]`: the loop reads it for every token and reduction.
    state = tables.start_state
    states = [state]
    values: list[Any] = []
    for token in _tokens(tables, fed, added, states, values):
        kind = token[0]
        while True:
            try:
                action = actions[state][kind]
            except KeyError:
                raise ParseFailure(token, states, values) from None
            if action >= 0:
                states.append(action)
                values.append(token)
                state = action
                break
            count, origin, mode, splice, build = rules[~action]
            if mode == TAKE:
                # A text or one-token segment goes straight into the row's list (see
                # `_grammar._take_appends`): the state stays.
                values[-1].append(token)
                break
            if mode == APPEND:
                # `x: x item` appends the item to the list below it. The state below is
                # already the goto on `x` from the state under it, the one this reduction
                # would compute: it went there from the same state on the same symbol.
                values[-2].append(values.pop())
                states.pop()
                state = states[-1]
                continue
            if count == 1:
                # One symbol (every PASS rule): its value and state are replaced in place.
                if mode != PASS:
                    child = values[-1]
                    # a spliced child is an inline rule's list: the children themselves
                    children = child if splice else [child]
                    values[-1] = build(builder, children) if mode == BUILD else children  # type: ignore[misc]  # builder callbacks return nodes or child lists
                state = states[-1] = gotos[states[-2]][origin]
                continue
            if not count:
                children = []
            else:
                children = values[-count:] if splice is None else _spliced(values[-count:], splice)
                del values[-count:]
                del states[-count:]
            values.append(build(builder, children) if mode == BUILD else children)  # type: ignore[misc]  # builder callbacks return nodes or child lists
            state = gotos[states[-1]][origin]
            states.append(state)
    # `$END` was shifted into the end state (see `_grammar.analyse_grammar`) after `start`.
    return values[0]


def _tokens(
    tables: ParseTables, fed: str, added: int, states: list[int], values: list[Any]
) -> Iterator[Token]:
    """Lex `fed` and yield the parser's tokens, layout tokens included.

    The lexer reads `states` to lex each token with the current state's terminals;
    `values` is only read to report a failure.
    """
    lexers = tables.lexers
    layout = Layout(fed)
    size = len(fed)
    pos = 0
    # The source line of `pos`, and the offset its columns count from.
    line, base = 1 - added, 0
    while pos < size:
        state = states[-1]
        match = (lexers[state] or tables.lexer(state))(fed, pos)
        if match is None:
            raise ParseFailure.lexical(tables, fed, pos, (line, base), states, values)
        kind: str = match.lastgroup  # type: ignore[assignment]  # the scanner's pattern has a named group per alternative
        end = match.end()
        if kind not in _SPECIAL:
            yield (kind, pos, end, line, base)
        elif kind == "_NL":
            # The closing newline is parsed (and the row it ends built) before the next
            # row's indentation is judged, so errors come in source order.
            breaks = fed.count("\n", pos, end)
            yield layout.newline(pos, end, breaks, line, base)
            line += breaks
            # Most runs are one line break and the next line's indentation: no search.
            last_break = pos if breaks == 1 and fed[pos] == "\n" else fed.rfind("\n", pos, end)
            # The fed text's own leading line breaks start no source line.
            base = last_break if line > 1 else 0
            if end >= size:
                break
            # Most rows keep the indentation: no call to find that out (`Layout.keeps`).
            if end - last_break - 1 != layout.keeps:
                yield from layout.indentation(pos, last_break + 1, end, (line, base))
        elif kind != IGNORED:
            start = layout.token(kind, pos, end)
            yield (kind, start, end, line, base)
            if kind in MULTILINE and (breaks := fed.count("\n", start, end)):
                line += breaks
                base = fed.rfind("\n", start, end)
        pos = end
    yield from layout.finish()
    yield ("$END", size - 1, size - 1, line, base)


def _spliced(children: list[Any], splice: tuple[int, ...]) -> list[Any]:
    """Splice the list values of inline rules, at positions `splice` (last first), into `children`.

    `children` is the parse loop's own copy, so it is spliced in place, each list by one
    slice assignment; a leading list (a left-recursive helper, such as
    `__params_star: __params_star _COMMA param`) grows instead of being copied.
    """
    for position in splice:
        if position:
            children[position : position + 1] = children[position]
    if splice[-1]:
        return children
    grown: list[Any] = children[0]
    grown += children[1:]
    return grown
