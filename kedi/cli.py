"""The `kedi` command line.

The only place that prints diagnostics and chooses exit codes: every
`KediError` is rendered to stderr with exit status 1; anything else is a kedi
bug and keeps its traceback.

    kedi run FILE [OPTIONS] [PROGRAM_OPTIONS]     (also: kedi FILE ..., kedi -c SOURCE ...)
    kedi parse FILE | -c TEXT [--json]            (also: kedi -p FILE)
    kedi check FILE | -c TEXT
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from kedi.errors import KediError

if TYPE_CHECKING:
    from kedi.runtime.interrupts import KediInterrupted

_COMMANDS = ("run", "parse", "check")


class _KediGroup(click.Group):
    """Routes `kedi FILE`, `kedi -c SRC` and `kedi -p FILE` to the right subcommand."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run the command line; in standalone mode (the `kedi` command) it exits the process."""
        if kwargs.get("standalone_mode", True):
            atexit.unregister(_skip_collections_at_exit)  # one registration per process
            atexit.register(_skip_collections_at_exit)
        return super().main(*args, **kwargs)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in _COMMANDS and args[0] not in ("--help", "-h", "--version"):
            if args[0] in ("-p", "--parse"):
                args = ["parse", *args[1:]]
            else:
                args = ["run", *args]
        return super().parse_args(ctx, args)


def _skip_collections_at_exit() -> None:
    """Spare the interpreter's shutdown its garbage collections over every live object.

    At exit Python runs full collections while it tears the modules down;
    the process is ending, so they only free memory the OS takes back anyway.
    Registered as the command starts, this runs after the `atexit` handlers
    of the run itself. Objects still die by reference counting as the modules
    are cleared (open files are flushed); only garbage in reference cycles is
    left to the OS, whose finalizers Python never promises at exit. Measured:
    `kedi run` exits about 100 ms sooner on the 2-core bench machine
    (bench/README.md, "Start-up").
    """
    gc.freeze()


def _fail(error: KediError) -> NoReturn:
    click.echo(error.render(), err=True)
    sys.exit(1)


def _stop(interrupt: KediInterrupted) -> NoReturn:
    """Ctrl-C ended a run: one line on stderr, status 130, no traceback."""
    from kedi.runtime.interrupts import EXIT_STATUS

    click.echo(interrupt.describe(), err=True)
    if any(thread.is_alive() and not thread.daemon for thread in threading.enumerate()[1:]):
        # Embedded Python still running in a worker thread would hold the exit until it ends.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(EXIT_STATUS)
    sys.exit(EXIT_STATUS)


def _read_source(file: str | None, command: str | None) -> tuple[str, str]:
    """Return (source text, path label) from FILE or -c TEXT."""
    if command is not None:
        if file is not None:
            raise click.UsageError("give either FILE or -c/--command, not both")
        return command, "<command>"
    if file is None:
        raise click.UsageError("missing FILE (or -c/--command SOURCE)")
    path = Path(file)
    try:
        return path.read_text(encoding="utf-8"), str(file)
    except FileNotFoundError:
        raise click.UsageError(f"file not found: {file}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise click.UsageError(f"cannot read {file}: {exc}") from None


def program_arguments(tokens: Sequence[str]) -> dict[str, Any]:
    """Turn leftover CLI tokens into the reserved `args` binding.

    `--key value` gives a str, a bare flag gives True, hyphens become
    underscores, the first duplicate wins, and tokens that are not options are
    ignored.
    """
    values: dict[str, Any] = {}
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if not token.startswith("--") or token == "--":
            continue
        name, has_value, value = token[2:].partition("=")
        key = name.replace("-", "_")
        if not key:
            continue
        if has_value:
            result: Any = value
        elif index < len(tokens) and not tokens[index].startswith("--"):
            result = tokens[index]
            index += 1
        else:
            result = True
        values.setdefault(key, result)
    return values


@click.group(cls=_KediGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="kedi")
def main() -> None:
    """Run, parse and check Kedi programs.

    `kedi FILE` is short for `kedi run FILE`.
    """


@main.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
@click.argument("file", required=False)
@click.option("-c", "--command", "command", metavar="SOURCE", help="Run SOURCE text instead of a file.")
@click.option("--adapter", envvar="KEDI_ADAPTER", help="Default adapter (offline, script, openai, pydantic, langchain).")
@click.option("--model", "--adapter-model", "model", envvar="KEDI_MODEL", help="Default model (e.g. offline, script:replies.json).")
@click.option("--transcript", type=click.Path(dir_okay=False), help="Write one JSON line per model request to PATH.")
@click.option("--parallel", "parallel", envvar="KEDI_PARALLEL", metavar="N", help="Run independent model calls concurrently (N workers; 1/true/on = 8).")
@click.option("--quiet", is_flag=True, help="Hide notices (never results or errors).")
@click.pass_context
def run(
    ctx: click.Context,
    file: str | None,
    command: str | None,
    adapter: str | None,
    model: str | None,
    transcript: str | None,
    parallel: str | None,
    quiet: bool,
) -> None:
    """Check and run a Kedi program; print its result to stdout.

    Options after FILE that kedi does not own become the program's `args`
    (`--title "x"` gives args.title == "x"; a bare `--flag` gives True).
    """
    from kedi.runtime.config import parse_parallel
    from kedi.runtime.interrupts import KediInterrupted
    from kedi.runtime.program import compile_program
    from kedi.runtime.values import render

    source, path = _read_source(file, command)
    try:
        workers = parse_parallel(parallel)
        program = compile_program(source, path=path)
        result = program.run_sync(
            args=program_arguments(ctx.args),
            adapter=adapter,
            model=model,
            transcript=transcript,
            parallel=workers,
            quiet=quiet,
        )
    except KediError as error:
        _fail(error)
    except KediInterrupted as stop:
        _stop(stop)
    if result is not None:
        click.echo(render(result))


@main.command()
@click.argument("file", required=False)
@click.option("-c", "--command", "command", metavar="TEXT", help="Parse TEXT instead of a file.")
@click.option("--json", "as_json", is_flag=True, help="Print the AST as JSON (see docs/ast-json.md).")
def parse(file: str | None, command: str | None, as_json: bool) -> None:
    """Parse a Kedi program (no execution) and report syntax errors."""
    from kedi.syntax import parse as parse_source

    source, path = _read_source(file, command)
    try:
        module = parse_source(source, path)
    except KediError as error:
        _fail(error)
    if as_json:
        from kedi.syntax.dump import dumps

        click.echo(dumps(module))
    else:
        click.echo("Parsed successfully.")


@main.command()
@click.argument("file", required=False)
@click.option("-c", "--command", "command", metavar="TEXT", help="Check TEXT instead of a file.")
def check(file: str | None, command: str | None) -> None:
    """Parse a program and run the static checks that need no execution."""
    from kedi.syntax.checks import check_source

    source, path = _read_source(file, command)
    try:
        check_source(source, path)
    except KediError as error:
        _fail(error)
    click.echo("Checked successfully.")
