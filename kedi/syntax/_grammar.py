"""Analyse `grammar/kedi.lark` with Lark once per process, and keep its tables.

Lark does the analysis: the LALR(1) parse table and, for the contextual lexer,
the terminals each parser state accepts (in Lark's own priority order). Lark's
runtime loop is not used: `kedi.syntax.parser` runs these tables itself, with
no per-token objects, which is several times faster. `ParseTables` holds
everything that loop needs as plain dicts, lists and compiled patterns.

The tables are cached on disk (`kedi.syntax._table_cache`), keyed by the
grammar text, this module's source and the Python version, so a start with a
warm cache neither analyses the grammar nor imports Lark: importing Lark and
loading Lark's own cached analysis took over 100 ms of every CLI start.
"""

from __future__ import annotations

import hashlib
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kedi.syntax import _table_cache
from kedi.syntax._builder import Builder
from kedi.syntax._postlex import Token
from kedi.syntax.diagnostics import FUSED

if TYPE_CHECKING:
    from lark import Lark

GRAMMAR_NAME = "kedi.lark"
IGNORED = "WS"
"""The one ignored terminal: spaces between tokens."""

Match = Callable[[str, int], "re.Match[str] | None"]
"""A compiled pattern's `match(text, pos)`: one lexer, for one set of parser states."""

PASS, APPEND, LIST, BUILD, TAKE = 0, 1, 2, 3, 4
"""What a reduction does with its children (`RuleShape.mode`).

`TAKE` is no rule of the grammar: it shifts the token into the list on the stack
(see `_take_appends`)."""


def grammar_path() -> Path:
    """Return the grammar file: in the installed package first, then the source checkout."""
    package_dir = Path(__file__).resolve().parent.parent
    candidates = (
        package_dir / "grammar" / GRAMMAR_NAME,
        package_dir.parent / "grammar" / GRAMMAR_NAME,
    )
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    # Only a broken installation gets here; name both places so it is easy to fix.
    raise FileNotFoundError(f"kedi grammar not found; looked in {', '.join(map(str, candidates))}")


def lark_options() -> dict[str, object]:
    """Return the Lark options kedi's grammar is analysed with."""
    return {
        "parser": "lalr",
        "lexer": "contextual",
        "maybe_placeholders": False,
        "keep_all_tokens": True,
    }


@lru_cache(maxsize=1)
def lark_parser() -> Lark:
    """Return the process-wide Lark parser, loaded from Lark's cache when possible."""
    from lark import Lark  # only a cold table cache needs Lark (see the module docs)

    text = grammar_path().read_text(encoding="utf-8")
    return Lark(text, cache=True, **lark_options())


RuleShape = tuple[int, str, int, tuple[int, ...] | None, Callable[..., Any] | None]
"""One grammar rule as the parse loop uses it: ``(size, origin, mode, splice, build)``.

* `size`: how many symbols the rule pops;
* `origin`: the nonterminal it produces (the goto key);
* `mode`: `PASS` (the single child is the value: `?type: type_atom`), `LIST`
  (a `_rule` or a Lark `*`/`+` helper: the value is the list of children,
  spliced into the parent), `APPEND` (the `LIST` case
  ``x: x item``, which appends to the list on the stack), `BUILD` (a
  `Builder` method) or `TAKE` (the one rule that is no grammar rule:
  `_take_appends`);
* `splice`: the positions of the children that are `LIST` values to splice in,
  last first (None: none is);
* `build`: the `Builder` method for `BUILD` rules.
"""


@dataclass(slots=True)
class ParseTables:
    """Lark's LALR(1) tables for kedi's grammar, as plain data."""

    start_state: int
    actions: list[dict[str, int]]
    """Per state: terminal -> shift target (>= 0) or ``~index`` of the rule to reduce.

    Accepting the program is the shift of `$END` into Lark's end state."""
    gotos: list[dict[str, int]]
    """Per state: nonterminal -> the state after reducing to it (past renames: `_skip_renames`)."""
    rules: list[RuleShape]
    lexer_terminals: list[tuple[str, ...]]
    """Per state: the terminal names its contextual lexer tries, in Lark's order."""
    patterns: dict[str, str]
    """Terminal name -> regular expression."""
    root_terminals: tuple[str, ...]
    """Every terminal in Lark's order: the lexer that names what an unexpected character starts."""
    lexers: list[Match | None]
    """Per state: its lexer's `match`, or None until `lexer` builds it."""
    _compiled: dict[tuple[str, ...], Match] = field(default_factory=dict)

    def lexer(self, state: int) -> Match:
        """Return (and keep in `lexers`) the `match` of the contextual lexer for `state`."""
        match = self.lexers[state] = self.compile(self.lexer_terminals[state])
        return match

    def compile(self, names: tuple[str, ...]) -> Match:
        """Return one pattern trying `names` in order, each as a named group (built once)."""
        match = self._compiled.get(names)
        if match is None:
            # Lark's own lexer: alternatives in priority order, the first that matches wins.
            # The name is an empty group after each alternative, not a group around it:
            # `re` can then reject an alternative on its first character (-2.8% instructions).
            pattern = "|".join(f"(?:{self.patterns[name]})(?P<{name}>)" for name in names)
            match = self._compiled[names] = re.compile(pattern).match
        return match


class ParseFailure(Exception):
    """The parse loop's state where it failed.

    `token` is the token the parser could not take, or the one an unexpected
    character starts (None when no terminal at all matches at `pos`).
    """

    def __init__(
        self, token: Token | None, states: list[int], values: list[Any], pos: int = -1
    ) -> None:
        super().__init__(f"parse failure at offset {token[1] if token else pos}")
        self.token = token
        self.states = list(states)
        self.values = list(values)
        self.pos = pos

    @classmethod
    def lexical(
        cls,
        tables: ParseTables,
        fed: str,
        pos: int,
        location: tuple[int, int],
        states: list[int],
        values: list[Any],
    ) -> ParseFailure:
        """Return the failure for a `pos` where no terminal of the current state matches.

        Like Lark's contextual lexer, try every terminal (skipping spaces): what the
        text starts there is a better report than "no terminal matches". The fused
        terminals (`FUSED`) are left out, so that report is the same as without them.
        """
        match = tables.compile(tuple(name for name in tables.root_terminals if name not in FUSED))
        start = pos
        while (found := match(fed, start)) is not None and found.lastgroup == IGNORED:
            start = found.end()
        if found is None:
            return cls(None, states, values, pos)
        token = (found.lastgroup or "", start, found.end(), *location)
        return cls(token, states, values, pos)


StoredRule = tuple[int, str, int, tuple[int, ...] | None, str | None]
"""A `RuleShape` as the table cache stores it: the `Builder` method by name."""


@lru_cache(maxsize=1)
def parse_tables() -> ParseTables:
    """Return the process-wide tables: from kedi's table cache, else analysed by Lark and cached."""
    key = tables_key(grammar_path().read_text(encoding="utf-8"))
    tables = _cached_tables(key)
    if tables is None:
        stored = analyse_grammar()
        _table_cache.write_tables(key, stored)
        tables = tables_from_stored(stored)
    return tables


def tables_key(grammar: str) -> str:
    """Return the key the tables of `grammar` are cached under.

    The tables depend on the grammar text and on the code in this module that
    derives them: hashing this module's own source means a changed derivation
    never reads an old file, in a release or a checkout. The Python version
    guards the `marshal` format. Lark's version is left out on purpose: an
    analysis is read back whole, so an old one stays consistent.
    """
    digest = hashlib.sha256()
    for part in (grammar.encode(), Path(__file__).read_bytes(), sys.version.encode()):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.hexdigest()[:32]


def _cached_tables(key: str) -> ParseTables | None:
    """Return the tables the cache holds under `key`, or None: missing, corrupt or stale."""
    stored = _table_cache.read_tables(key)
    if stored is None:
        return None
    try:
        return tables_from_stored(stored)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        # A damaged file, or one naming a Builder method that is gone: analyse again.
        return None


def tables_from_stored(stored: dict[str, Any]) -> ParseTables:
    """Return the `ParseTables` of the plain data `analyse_grammar` returned."""
    rules: list[RuleShape] = [
        (size, origin, mode, splice, None if build is None else getattr(Builder, build))
        for size, origin, mode, splice, build in stored["rules"]
    ]
    return ParseTables(
        start_state=stored["start_state"],
        actions=stored["actions"],
        gotos=stored["gotos"],
        rules=rules,
        lexer_terminals=stored["lexer_terminals"],
        patterns=stored["patterns"],
        root_terminals=stored["root_terminals"],
        lexers=[None] * len(stored["actions"]),
    )


def analyse_grammar() -> dict[str, Any]:
    """Have Lark analyse the grammar; return the tables as plain data the cache can store."""
    parser = lark_parser()
    interactive = parser.parse_interactive("")
    conf = interactive.parser_state.parse_conf
    contextual = interactive.lexer_thread.lexer
    count = max(conf.states) + 1
    actions: list[dict[str, int]] = [{} for _ in range(count)]
    gotos: list[dict[str, int]] = [{} for _ in range(count)]
    rule_index: dict[Any, int] = {}
    for state, row in conf.states.items():
        for symbol, (action, target) in row.items():
            if action.name == "Shift" and symbol.isupper():
                actions[state][symbol] = target
            elif action.name == "Shift":
                gotos[state][symbol] = target
            else:
                actions[state][symbol] = ~rule_index.setdefault(target, len(rule_index))
    # Accepting is a shift of `$END` into the end state: the parse loop then needs no
    # check for the end state after each reduction (`$END` is the last token).
    actions[conf.end_state]["$END"] = conf.end_state
    lexers = contextual.lexers  # type: ignore[attr-defined]  # Lark's ContextualLexer attributes are untyped
    rules = _rule_shapes(list(rule_index))
    _skip_renames(actions, gotos, rules)
    lexer_terminals = [
        tuple(terminal.name for terminal in lexers[state].terminals) for state in range(count)
    ]
    _take_appends(actions, rules, lexer_terminals)
    return _plain(
        {
            "start_state": conf.start_state,
            "actions": actions,
            "gotos": gotos,
            "rules": rules,
            "lexer_terminals": lexer_terminals,
            "patterns": {
                terminal.name: terminal.pattern.to_regexp() for terminal in parser.terminals
            },
            "root_terminals": tuple(t.name for t in contextual.root_lexer.terminals),  # type: ignore[attr-defined]  # Lark's ContextualLexer attributes are untyped
        }
    )


def _sole_reduction(row: dict[str, int]) -> int | None:
    """The action of a state that reduces one and the same rule on every lookahead, else None."""
    distinct = set(row.values())
    if len(distinct) != 1:
        return None
    action = distinct.pop()
    return action if action < 0 else None


def _skip_renames(
    actions: list[dict[str, int]], gotos: list[dict[str, int]], rules: list[StoredRule]
) -> None:
    """Point every goto into a state that only renames its symbol to where the rename leads.

    A state whose every action reduces one `PASS` rule of one symbol (the state after
    `template` in a module: `_statement: template`) only changes the state: the goto
    can go straight to the state after the renamed symbol. That saves the parse loop
    one reduction per statement. Parsing is the same: no token is lexed in such a
    state (it is entered by a goto, after the lookahead is read), and the state after
    the rename acts on a subset of its lookaheads (LALR computes them as the follow
    set of that very goto), so the same tokens are accepted and the same fail.
    """
    renames: dict[int, str] = {}
    for state, row in enumerate(actions):
        action = _sole_reduction(row)
        if action is None:
            continue
        size, origin, mode, _, _ = rules[~action]
        if mode == PASS and size == 1:
            renames[state] = origin
    for row in gotos:
        for symbol, target in list(row.items()):
            while target in renames:
                target = row[renames[target]]
            row[symbol] = target


def _take_appends(
    actions: list[dict[str, int]], rules: list[StoredRule], lexer_terminals: list[tuple[str, ...]]
) -> None:
    """Make every shift of a token that is then always appended (`x: x TEXT`) a `TAKE`.

    Shifting the token into the state whose every action is that `APPEND`, then
    appending it to the list below and going back to the state below, is the same as
    appending it to the list on the stack and staying in the state it was lexed in,
    when that state takes the same lookaheads (so the same tokens are accepted and the
    same fail) and lexes with the same terminals. That spares the parse loop one push
    and one reduction per text, `<name>` and `[name]` segment of a row.
    """
    take = len(rules)
    rules.append((0, "", TAKE, None, None))
    for state, row in enumerate(actions):
        for terminal, target in row.items():
            if target < 0 or target == state:  # a reduction, or accepting (`$END`)
                continue
            action = _sole_reduction(actions[target])
            if action is None:
                continue
            if (
                rules[~action][2] == APPEND
                and actions[target].keys() == row.keys()
                and lexer_terminals[target] == lexer_terminals[state]
            ):
                row[terminal] = ~take


def _plain(data: Any) -> Any:
    """`data` with every string a plain `str`, as `marshal` needs.

    A grammar Lark has just analysed (not read back from Lark's own cache)
    names symbols with `Token`s, a `str` subclass that `marshal` refuses.
    """
    if isinstance(data, str):
        return str(data)
    if isinstance(data, dict):
        return {_plain(key): _plain(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return type(data)(_plain(item) for item in data)
    return data


def _rule_shapes(rules: list[Any]) -> list[StoredRule]:
    """Turn Lark's rules into `StoredRule`s, following Lark's tree-shaping conventions."""
    inline = {rule.origin.name for rule in rules if rule.origin.name.startswith("_")}
    # An inline rule whose every expansion is one non-list symbol passes that symbol's
    # value through; the others are lists. A rule is a list as soon as one expansion is.
    listed: set[str] = set()
    changed = True
    while changed:
        changed = False
        for rule in rules:
            name = rule.origin.name
            if (
                name in inline
                and name not in listed
                and (rule.alias or len(rule.expansion) != 1 or rule.expansion[0].name in listed)
            ):
                listed.add(name)
                changed = True
    shapes: list[StoredRule] = []
    for rule in rules:
        name = rule.alias or rule.origin.name
        size = len(rule.expansion)
        # last first: `parser._spliced` splices from the right, so the positions still hold
        splice = tuple(i for i in reversed(range(size)) if rule.expansion[i].name in listed) or None
        if rule.alias is None and (
            (name in inline and name not in listed)
            or (rule.options.expand1 and size == 1 and not splice)
        ):
            shapes.append((size, rule.origin.name, PASS, None, None))
        elif rule.alias is None and name in inline:
            mode = APPEND if size == 2 and splice == (0,) else LIST
            shapes.append((size, rule.origin.name, mode, splice, None))
        else:
            shapes.append((size, rule.origin.name, BUILD, splice, name))
    return shapes
