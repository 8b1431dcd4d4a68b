"""What the `kedi` command writes to stderr: rendered errors and kedi's log records.

Errors are rendered with rich (the heading in bold red on a terminal, plain
text otherwise, never wrapped) after redaction. Log records of the `kedi`
logger (tool failures, retries, notices) go to stderr through one handler
that `kedi run` installs for the command's duration: warnings always, INFO
with `-v`, DEBUG with `-vv`. Library code only logs; this module prints.
`kedi run --stream` writes reply text to stderr too (`stream_text`); an error
or a log record that follows it starts on a line of its own.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import click

from kedi.errors import KediError
from kedi.redaction import logger, redact_text

_LEVELS = {0: logging.WARNING, 1: logging.INFO}


class _StreamedLine:
    unfinished = False
    """Whether streamed text on stderr ended without a line break."""


def stream_text(text: str) -> None:
    """Write a piece of streamed reply text to stderr (stdout stays the program's result)."""
    if text:
        click.echo(text, nl=False, err=True)
        _StreamedLine.unfinished = not text.endswith("\n")


def end_streamed_line() -> None:
    """End the streamed text's line, if one is unfinished, so what follows starts on its own."""
    if _StreamedLine.unfinished:
        _StreamedLine.unfinished = False
        click.echo(err=True)


def render_error(error: KediError, hints: Sequence[str] = ()) -> None:
    """Print `error` (and `hints`, one per line) to stderr as kedi renders it, secrets masked."""
    from rich.console import Console
    from rich.text import Text

    end_streamed_line()
    console = Console(stderr=True, soft_wrap=True, highlight=False)
    for line in redact_text("\n".join([error.render(), *hints])).splitlines():
        style = "bold red" if line.startswith(("Kedi error", "Inline Python error")) else None
        console.print(Text(line, style=style or ""))


class _ClickStderr(logging.Handler):
    """Writes each record to the current stderr (looked up per record, as click does)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            end_streamed_line()
            click.echo(self.format(record), err=True)
        except Exception:
            self.handleError(record)


@contextmanager
def logging_to_stderr(verbose: int) -> Iterator[None]:
    """Show kedi's log records on stderr while the command runs (`-v`: INFO, `-vv`: DEBUG)."""
    handler = _ClickStderr()
    handler.setFormatter(logging.Formatter("%(message)s"))
    level = _LEVELS.get(verbose, logging.DEBUG)
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
