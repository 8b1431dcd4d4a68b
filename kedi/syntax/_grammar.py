"""Build the Lark parser for `grammar/kedi.lark`, once per process.

The parser is LALR(1) with the contextual lexer, so each parser state lexes only
the terminals it can accept (text after `>>`, names after `<`, ...). Lark's
`cache=True` stores the analysed grammar in a temporary file, so a CLI start
loads it instead of rebuilding the parse table.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from lark import Lark, Token

from kedi.syntax import ast
from kedi.syntax._builder import Builder
from kedi.syntax._postlex import layout

GRAMMAR_NAME = "kedi.lark"


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
    """Return the Lark options kedi's parser is built with.

    Every token reaches the builder (`keep_all_tokens`), which computes spans
    from the punctuation and layout tokens itself.
    """
    return {
        "parser": "lalr",
        "lexer": "contextual",
        "maybe_placeholders": False,
        "keep_all_tokens": True,
    }


@lru_cache(maxsize=1)
def lark_parser() -> Lark:
    """Return the process-wide parser, loading it from Lark's cache when possible.

    The `Builder` runs as Lark's inline transformer: nodes are built while the
    parser reduces, with no intermediate tree.
    """
    text = grammar_path().read_text(encoding="utf-8")
    return Lark(text, cache=True, transformer=Builder(), **lark_options())  # type: ignore[arg-type]


def parse_fed(fed: str) -> ast.Module:
    """Parse `fed` (the source with one leading newline) into a `Module`.

    The caller sets the file the builder sees (`kedi.syntax._builder.building`).

    The parser is driven token by token so that the layout pass can read the text
    (it needs the row after a newline to recognise the indentation anomaly).
    """
    interactive = lark_parser().parse_interactive(fed)
    state = interactive.parser_state
    feed = state.feed_token
    for token in layout(interactive.lexer_thread.lex(state), fed):
        feed(token)
    end = len(fed) - 1
    return feed(Token("$END", "", end, 0, 0, 0, 0, end), True)  # type: ignore[no-any-return]
