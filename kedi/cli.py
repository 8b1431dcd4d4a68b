"""The `kedi` command line.

The only place that prints diagnostics and chooses exit codes: every
`KediError` is rendered to stderr with exit status 1; output that cannot be
written (a closed pipe, a full device) is one line on stderr and exit status
74 (`EX_IOERR`); anything else is a kedi bug and keeps its traceback. Text
the output encoding cannot hold (a lone surrogate) is written as its
backslash escape.

    kedi run FILE [OPTIONS] [PROGRAM_OPTIONS]     (also: kedi FILE ..., kedi -c SOURCE ...)
    kedi parse FILE | -c TEXT [--json]            (also: kedi -p FILE)
    kedi check FILE | -c TEXT
    kedi chat [--model M] [--system TEXT] [--max-messages N]
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import gc
import os
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import click

from kedi.cli_options import endpoint_options
from kedi.errors import KediError

if TYPE_CHECKING:
    from kedi.runtime.interrupts import KediInterrupted

_COMMANDS = (
    "run",
    "parse",
    "check",
    "package",
    "test",
    "eval",
    "transcript",
    "chat",
    "history",
    "serve-local",
    "batch",
)
EXIT_OUTPUT_FAILED = 74
"""The exit status when stdout cannot be written (`EX_IOERR` of sysexits.h)."""
_OUTPUT_ERRORS = frozenset(
    {errno.EPIPE, errno.ENOSPC, errno.EIO, errno.EDQUOT, errno.EFBIG, errno.EBADF}
)


class _KediGroup(click.Group):
    """Routes `kedi FILE`, `kedi -c SRC` and `kedi -p FILE` to the right subcommand."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Run the command line; in standalone mode (the `kedi` command) it exits the process."""
        if kwargs.get("standalone_mode", True):
            atexit.unregister(_skip_collections_at_exit)  # one registration per process
            atexit.register(_skip_collections_at_exit)
            for stream in (sys.stdout, sys.stderr):
                reconfigure = getattr(stream, "reconfigure", None)
                if reconfigure is not None:
                    reconfigure(errors="backslashreplace")
        return super().main(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; output that cannot be written ends it with one line and exit 74."""
        try:
            result = super().invoke(ctx)
            sys.stdout.flush()  # here, not at exit, where a failure would be a traceback
        except OSError as error:
            if error.errno not in _OUTPUT_ERRORS:
                raise
            _output_failed(error)
        return result

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


def _output_failed(error: OSError) -> NoReturn:
    # Point stdout at /dev/null: what is still buffered must not fail again at exit.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # not a real file (a test runner's buffer)
        pass
    reason = error.strerror or type(error).__name__
    with contextlib.suppress(OSError):  # stderr may be broken too
        print(f"kedi: cannot write the output: {reason}", file=sys.stderr, flush=True)
    sys.exit(EXIT_OUTPUT_FAILED)


def _fail(error: KediError, hints: Sequence[str] = ()) -> NoReturn:
    from kedi.cli_output import render_error

    render_error(error, hints)
    sys.exit(1)


def _stop(interrupt: KediInterrupted, hint: str = "") -> NoReturn:
    """Ctrl-C ended a run: one line on stderr (and how to resume it), status 130, no traceback."""
    from kedi.runtime.interrupts import EXIT_STATUS

    line = interrupt.describe()
    if hint:  # "kedi: run stopped at X; its partial is stored. Resume with: ..." -> one line
        line += "; " + hint.split("; ", 1)[-1]
    click.echo(line, err=True)
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
    ignored (`kedi run` refuses them first: see `stray_argument_error`).
    """
    return _split_arguments(tokens)[0]


def stray_argument_error(tokens: Sequence[str]) -> str | None:
    """The message refusing a token that is neither an option nor its value, or None.

    `--title Fix login` would silently run with args.title == "Fix".
    """
    strays = _split_arguments(tokens)[1]
    if not strays:
        return None
    token, after = strays[0]
    if after is None:
        return f"unexpected argument {token!r}: program options look like --name VALUE"
    option, value = after
    return (
        f"unexpected argument {token!r}: --{option} takes one value; quote a value "
        f'with spaces: --{option} "{value} {token}"'
    )


def _split_arguments(
    tokens: Sequence[str],
) -> tuple[dict[str, Any], list[tuple[str, tuple[str, str] | None]]]:
    """(options, strays): each stray with the (option, value) it follows, if any."""
    values: dict[str, Any] = {}
    strays: list[tuple[str, tuple[str, str] | None]] = []
    previous: tuple[str, str] | None = None
    index = 0
    while index < len(tokens):
        token = tokens[index]
        index += 1
        if not token.startswith("--") or token == "--":
            if token != "--":
                strays.append((token, previous))
            continue
        name, has_value, value = token[2:].partition("=")
        key = name.replace("-", "_")
        if not key:
            continue
        result: Any
        if has_value:
            result, previous = value, (name, value)
        elif index < len(tokens) and not tokens[index].startswith("--"):
            result = tokens[index]
            previous = (name, result)
            index += 1
        else:
            result, previous = True, None
        values.setdefault(key, result)
    return values, strays


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
@click.option(
    "-c", "--command", "command", metavar="SOURCE", help="Run SOURCE text instead of a file."
)
@click.option(
    "--adapter",
    envvar="KEDI_ADAPTER",
    help="Default adapter (offline, script, openai, pydantic, langchain).",
)
@click.option(
    "--model",
    "--adapter-model",
    "model",
    envvar="KEDI_MODEL",
    help="Default model (e.g. offline, script:replies.json).",
)
@click.option(
    "--transcript",
    type=click.Path(dir_okay=False),
    help="Write one JSON line per model request to PATH.",
)
@click.option(
    "--transcript-full",
    is_flag=True,
    help="Write every message of every request (no references to earlier records).",
)
@click.option(
    "--parallel",
    "parallel",
    envvar="KEDI_PARALLEL",
    metavar="N",
    help="Run independent model calls concurrently (N workers; 1/true/on = 8).",
)
@click.option("--quiet", is_flag=True, help="Hide notices (never results or errors).")
@click.option(
    "--stream",
    is_flag=True,
    help="Show reply text on stderr as it arrives (text calls and str captures).",
)
@click.option(
    "--session", metavar="NAME", help="Create or continue the named session in the history store."
)
@click.option(
    "-C", "--continue", "continue_last", is_flag=True, help="Continue the most recent session."
)
@click.option(
    "--fork",
    metavar="NAME",
    help="Branch the session into a copy named NAME (the parent is recorded).",
)
@click.option(
    "--no-store", "no_store", is_flag=True, help="Run without recording (also KEDI_HISTORY=off)."
)
@click.option(
    "--resume", metavar="SESSION", help="Continue the session's failed run from its partial."
)
@click.option(
    "--replay", metavar="SESSION", help="Serve every model call from the session's last run."
)
@click.option("--record", is_flag=True, help="With --replay: run live and re-record that run.")
@click.option("-v", "--verbose", count=True, help="Log tool failures and retries (-vv: debug).")
@endpoint_options
@click.pass_context
def run(
    ctx: click.Context,
    file: str | None,
    command: str | None,
    verbose: int,
    **options: Any,
) -> None:
    """Check and run a Kedi program; print its result to stdout.

    Options after FILE that kedi does not own become the program's `args`
    (`--title "x"` gives args.title == "x"; a bare `--flag` gives True).
    """
    from kedi.cli_output import logging_to_stderr

    source, path = _read_source(file, command)
    with logging_to_stderr(verbose):
        _run(ctx, source, path, **options)


def _run(
    ctx: click.Context,
    source: str,
    path: str,
    *,
    adapter: str | None,
    model: str | None,
    transcript: str | None,
    transcript_full: bool,
    parallel: str | None,
    quiet: bool,
    stream: bool,
    base_url: str | None,
    api_key_env: str | None,
    structured_mode: str | None,
    **session_options: Any,
) -> None:
    from functools import partial

    from kedi.adapters.endpoint import command_line_options
    from kedi.cli_history import SessionOptions, resume_arguments, run_session
    from kedi.cli_options import (
        check_default_model,
        kedi_mode_error,
        missing_option_hints,
        read_options,
        unknown_option_error,
    )
    from kedi.cli_output import end_streamed_line, stream_text
    from kedi.runtime.calls import Transcript
    from kedi.runtime.config import parse_parallel
    from kedi.runtime.interrupts import KediInterrupted
    from kedi.runtime.program import compile_program
    from kedi.runtime.values import render

    given = program_arguments(ctx.args)
    refused = kedi_mode_error(given) or stray_argument_error(ctx.args)
    if refused is not None:
        raise click.UsageError(refused)
    read = read_options(source)
    refused = unknown_option_error(given, read, path)
    if refused is not None:
        raise click.UsageError(refused)
    endpoint = partial(
        command_line_options,
        base_url=base_url,
        api_key_env=api_key_env,
        structured_mode=structured_mode,
    )
    stored = None
    try:
        workers = parse_parallel(parallel)
        program = compile_program(source, path=path)
        with endpoint():  # the adapter built now must see --base-url and --api-key-env too
            check_default_model(adapter, model)
        stored, conversation = run_session(SessionOptions(**session_options), program, path, model)
        try:
            with endpoint():
                result = program.run_sync(
                    args=given,
                    adapter=adapter,
                    model=model,
                    transcript=None
                    if transcript is None
                    else Transcript(transcript, full=transcript_full),
                    parallel=workers,
                    quiet=quiet,
                    on_delta=stream_text if stream else None,
                    conversation=conversation,
                    recorder=stored.recorder if stored else None,
                )
        except BaseException as error:
            hint = ""
            if stored is not None:
                rerun = resume_arguments(
                    ctx.args,
                    adapter=adapter,
                    model=model,
                    base_url=base_url,
                    api_key_env=api_key_env,
                    structured_mode=structured_mode,
                )
                hint = stored.finish(error, rerun)
            if isinstance(error, KediError):
                hints = missing_option_hints(given, read, path, error)
                _fail(error, [*hints, *([hint] if hint else [])])
            if isinstance(error, KediInterrupted):
                _stop(error, hint)
            if hint:
                click.echo(hint, err=True)
            raise
        if stored is not None:
            stored.finish(None)
    except KediError as error:
        _fail(error, missing_option_hints(given, read, path, error))
    except KediInterrupted as stop:
        _stop(stop)
    finally:
        end_streamed_line()
    if result is not None:
        click.echo(render(result))


@main.command()
@click.argument("file", required=False)
@click.option("-c", "--command", "command", metavar="TEXT", help="Parse TEXT instead of a file.")
@click.option(
    "--json", "as_json", is_flag=True, help="Print the AST as JSON (see docs/ast-json.md)."
)
def parse(file: str | None, command: str | None, as_json: bool) -> None:
    """Parse a Kedi program (no execution) and report syntax errors."""
    from kedi.syntax import parse as parse_source

    source, path = _read_source(file, command)
    try:
        module = parse_source(source, path)
        if as_json:  # as deep as `kedi check` allows (docs/ast-json.md)
            from kedi.source import SourceFile
            from kedi.syntax.checks import check_nesting

            check_nesting(module, SourceFile(source, path))
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


@main.group()
def package() -> None:
    """Check a Kedi package directory, or make it pip-installable."""


@package.command("check")
@click.argument("directory", type=click.Path(file_okay=False))
def package_check(directory: str) -> None:
    """Validate DIRECTORY/package.kedi and check every .kedi file of its source."""
    from kedi.cli_package import check_package

    try:
        checked = check_package(directory)
    except OSError as exc:  # no package.kedi, or a file that cannot be read
        raise click.UsageError(str(exc)) from None
    except KediError as error:
        _fail(error)
    click.echo(f"Package checked: {len(checked)} module(s).")


@package.command("pyproject")
@click.argument("directory", type=click.Path(file_okay=False))
@click.option(
    "--write", is_flag=True, help="Write DIRECTORY/pyproject.toml instead of printing it."
)
def package_pyproject(directory: str, write: bool) -> None:
    """Print (or --write) the pyproject.toml that lets `pip install DIRECTORY` install the package."""
    from kedi.cli_package import load_manifest
    from kedi.syntax.manifest import GENERATED_MARK, pyproject_toml

    try:
        manifest, _ = load_manifest(directory)
    except OSError as exc:
        raise click.UsageError(str(exc)) from None
    except KediError as error:
        _fail(error)
    text = pyproject_toml(manifest)
    if write:
        target = Path(directory) / "pyproject.toml"
        if target.exists() and not target.read_text(encoding="utf-8", errors="replace").startswith(
            GENERATED_MARK
        ):
            raise click.UsageError(
                f"{target} exists and was not written by kedi; move it away to regenerate it"
            )
        target.write_text(text, encoding="utf-8")
        click.echo(f"Wrote {target}")
    else:
        click.echo(text, nl=False)


@main.command("test")
@click.argument("targets", nargs=-1, required=True)
@click.option(
    "-k",
    "keyword",
    metavar="EXPR",
    help="Run only cases whose FILE::PROCEDURE::CASE matches EXPR (words, and/or/not).",
)
@click.option("--model", "model", help="Model for the cases (default: offline, deterministic).")
@click.option("--adapter", "adapter", envvar="KEDI_ADAPTER", help="Adapter, as for `kedi run`.")
def test_command(
    targets: tuple[str, ...], keyword: str | None, model: str | None, adapter: str | None
) -> None:
    """Run the @test: suites of FILE or of every .kedi file under DIR."""
    from kedi.cli_options import check_default_model
    from kedi.cli_suites import run_tests

    try:
        check_default_model(adapter, model)  # a model no case could use fails once, here
        status = run_tests(targets, keyword, model, click.echo, adapter=adapter)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    except KediError as error:
        _fail(error)
    sys.exit(status)


@main.command("eval")
@click.argument("file")
@click.option(
    "--model", "model", envvar="KEDI_MODEL", help="Model for the procedure (default: offline)."
)
@click.option("--adapter", "adapter", envvar="KEDI_ADAPTER", help="Adapter, as for `kedi run`.")
@click.option(
    "--parallel",
    "parallel",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Rows scored at once.",
)
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False),
    help="Write one JSON line per scored row to PATH.",
)
def eval_command(
    file: str, model: str | None, adapter: str | None, parallel: int, out: str | None
) -> None:
    """Score the @eval: suites of FILE over their datasets and print a table."""
    from kedi.cli_options import check_default_model
    from kedi.cli_suites import run_evals

    try:
        check_default_model(adapter, model)  # not one config error per row, scored 0.0
        status = run_evals(file, model, parallel, out, adapter=adapter)
    except KediError as error:
        _fail(error)
    sys.exit(status)


@main.group()
def transcript() -> None:
    """Read transcripts written by `kedi run --transcript`."""


@transcript.command()
@click.argument("file")
def expand(file: str) -> None:
    """Print FILE's records with every message each request sent (JSON lines)."""
    from kedi.cli_transcript import expand as expand_transcript

    try:
        expand_transcript(file)
    except KediError as error:
        _fail(error)


@main.command()
@click.option(
    "--adapter",
    envvar="KEDI_ADAPTER",
    help="Adapter (offline, script, openai, pydantic, langchain).",
)
@click.option(
    "--model", "model", envvar="KEDI_MODEL", help="Model (e.g. offline, openai:gpt-4o-mini)."
)
@click.option(
    "--system", "system", metavar="TEXT", help="Instructions sent first in every request."
)
@click.option(
    "--max-messages",
    type=click.IntRange(min=1),
    default=20,
    show_default=True,
    help="History kept (whole turns).",
)
@click.option("--quiet", is_flag=True, help="Hide notices (never replies or errors).")
@endpoint_options
def chat(
    adapter: str | None,
    model: str | None,
    system: str | None,
    max_messages: int,
    quiet: bool,
    **endpoint: str | None,
) -> None:
    """Chat with a model, one line per turn (/exit, /reset, /save NAME; Ctrl-D quits)."""
    from kedi.adapters.endpoint import command_line_options
    from kedi.cli_chat import chat_loop
    from kedi.cli_options import check_default_model

    def write(text: str) -> None:
        click.echo(text, nl=False)

    try:
        with command_line_options(**endpoint):
            check_default_model(adapter, model)  # before the first line is typed
            chat_loop(
                read=sys.stdin,
                write=write,
                notice=lambda text: click.echo(text, err=True),
                interactive=sys.stdin.isatty(),
                max_messages=max_messages,
                adapter=adapter,
                model=model,
                system=system,
                quiet=quiet,
            )
    except KediError as error:
        _fail(error)
    except KeyboardInterrupt:
        sys.exit(130)


class _HistoryGroup(click.Group):
    """`kedi history`: its subcommands live in `kedi.cli_history`, imported only when used."""

    def _real(self) -> click.Group:
        from kedi.cli_history import history

        return history

    def list_commands(self, ctx: click.Context) -> list[str]:
        return self._real().list_commands(ctx)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self._real().get_command(ctx, cmd_name)


@main.group(cls=_HistoryGroup)
def history() -> None:
    """List, show, compare, export and clean up stored sessions (KEDI_HISTORY)."""


@main.command("serve-local")
@click.option("--port", type=int, default=8765, show_default=True, help="Port on 127.0.0.1.")
@click.option("--host", default="127.0.0.1", show_default=True, help="Interface to listen on.")
@click.option(
    "--model-path",
    metavar="GGUF",
    help="GGUF model file (default: the model kedi[local] installs).",
)
def serve_local(port: int, host: str, model_path: str | None) -> None:
    """Serve the local model over an OpenAI-compatible API (llama.cpp), until interrupted."""
    from kedi.cli_local import serve_local as serve

    try:
        serve(host=host, port=port, model_path=model_path)
    except KediError as error:
        _fail(error)


@main.command(
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    add_help_option=False,
)
@click.pass_context
def batch(ctx: click.Context) -> None:
    """Run one program over every row of a dataset, resumably (kedi batch --help)."""
    # Loaded only when used: `kedi --help` must stay light.
    from kedi.cli_batch import batch as batch_group

    batch_group.main(ctx.args, prog_name=ctx.command_path)
