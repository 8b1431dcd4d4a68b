"""`parse`: Kedi source text to a `kedi.syntax.ast.Module`.

The text is fed to the grammar with one leading newline, so the first line is
lexed like every other line (its indentation, comments and block comments sit in
a `_NL` token), and with a final newline. CRLF line breaks are fed as
space + LF and a leading byte-order mark as a line break, which keeps every
offset the same as in the user's text.
"""

from __future__ import annotations

from kedi.errors import KediUsageError
from kedi.source import SourceFile
from kedi.syntax import ast
from kedi.syntax._grammar import parse_fed
from kedi.syntax._text import building
from kedi.syntax.diagnostics import PARSE_ERRORS, syntax_error


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
    fed = "\n" + source.replace("\r\n", " \n")
    if fed.startswith("\ufeff", 1):
        # A byte-order mark is fed as an empty first line, which keeps every offset.
        fed = "\n\n" + fed[2:]
    if not fed.endswith("\n"):
        fed += "\n"
    try:
        with building(file, fed):
            return parse_fed(fed)
    except PARSE_ERRORS as error:
        raise syntax_error(error, file, fed) from error
