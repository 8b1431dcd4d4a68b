"""The Kedi body of a `@kedi.query` docstring."""

from __future__ import annotations

from kedi.errors import KediUsageError
from kedi.syntax._postlex import indent_width
from kedi.syntax._text import dedent_line

HEADER = "kedi"


def lines_before_body(docstring: str) -> int:
    """How many docstring lines come before the Kedi body: blank lines and the `kedi` line.

    Line `n` of `query_body_source(docstring)` is line `n + lines_before_body(...)`
    of the docstring (for error locations in the Python file).
    """
    lines = docstring.replace("\r\n", "\n").split("\n")
    blank = next((index for index, line in enumerate(lines) if line.strip()), len(lines))
    return blank + 1


def query_body_source(docstring: str | None) -> str:
    """Return the Kedi body of a `@kedi.query` docstring.

    The docstring must start with a line holding only `kedi`; that line is
    removed and the rest is dedented. The common indentation is measured on the
    rows that do not start with `>>`, so the documented column-0 `>>` rows stay
    body rows (see docs/syntax.md, "indentation anomaly").

    Raises:
        KediUsageError: The docstring is missing, has no standalone `kedi`
            header line, or has an empty body.
    """
    if not isinstance(docstring, str) or not docstring.strip():
        raise KediUsageError("@kedi.query needs a docstring whose first line is `kedi`")
    lines = docstring.replace("\r\n", "\n").split("\n")
    while not lines[0].strip():
        lines.pop(0)
    if lines[0].strip() != HEADER:
        raise KediUsageError(
            "the @kedi.query docstring must start with a line holding only `kedi`, "
            f"found {lines[0].strip()!r}"
        )
    body = lines[1:]
    rows = [line for line in body if line.strip()]
    if not rows:
        raise KediUsageError(
            "the @kedi.query docstring has an empty Kedi body after its `kedi` line"
        )
    measured = [row for row in rows if not row.lstrip().startswith(">>")] or rows
    common = min(indent_width(row[: len(row) - len(row.lstrip())]) for row in measured)
    dedented = [dedent_line(line, common) if line.strip() else "" for line in body]
    while not dedented[-1].strip():
        dedented.pop()
    return "\n".join(dedented) + "\n"
