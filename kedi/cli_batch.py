"""`kedi batch`: one program over a dataset (the command's implementation; cli.py registers it).

    kedi batch PROGRAM INPUTS --out RESULTS [--parallel N] [--job NAME] ...
    kedi batch status JOB | export JOB [--out FILE] | rm JOB | ls

See docs/batch.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from kedi.errors import KediError

_SUBCOMMANDS = ("run", "status", "export", "rm", "ls")


class _BatchGroup(click.Group):
    """`kedi batch PROGRAM ...` is short for `kedi batch run PROGRAM ...`."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in _SUBCOMMANDS and args[0] not in ("--help", "-h"):
            args = ["run", *args]
        return super().parse_args(ctx, args)


def _fail(error: KediError) -> NoReturn:
    click.echo(error.render(), err=True)
    sys.exit(1)


@click.group(cls=_BatchGroup, context_settings={"help_option_names": ["-h", "--help"]})
def batch() -> None:
    """Run one program over every row of a dataset, resumably (see docs/batch.md).

    `kedi batch PROGRAM INPUTS --out RESULTS` is short for `kedi batch run ...`.
    """


@batch.command("run")
@click.argument("program", type=click.Path(dir_okay=False))
@click.argument("inputs")
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(dir_okay=False),
    help="RESULTS: JSONL, one line per row in input order.",
)
@click.option(
    "--parallel",
    default=8,
    show_default=True,
    type=click.IntRange(1),
    help="Rows in flight at once.",
)
@click.option(
    "--job", help="Job name in the ledger (default: from the program's and inputs' fingerprint)."
)
@click.option("--id-field", help="The row field that keys each row (default: the row number).")
@click.option(
    "--format",
    "input_format",
    type=click.Choice(["jsonl", "csv"]),
    help="INPUTS format (default: from the suffix; stdin is JSONL).",
)
@click.option(
    "--rpm",
    type=click.FloatRange(min=0, min_open=True),
    help="Requests per minute for the whole job.",
)
@click.option(
    "--tpm",
    type=click.FloatRange(min=0, min_open=True),
    help="Tokens per minute for the whole job.",
)
@click.option("--max-errors", type=click.IntRange(1), help="Stop after N failed rows.")
@click.option(
    "--retry-errors", is_flag=True, help="Re-run rows that failed in an earlier run of the job."
)
@click.option(
    "--force",
    is_flag=True,
    help="Continue a job whose program or inputs changed (finished rows are kept).",
)
@click.option("--adapter", envvar="KEDI_ADAPTER", help="Default adapter, as for `kedi run`.")
@click.option("--model", envvar="KEDI_MODEL", help="Default model, as for `kedi run`.")
@click.option("--base-url", help="Endpoint of the openai adapter (default: OPENAI_BASE_URL).")
@click.option(
    "--engine",
    type=click.Choice(["local", "ray"]),
    default="local",
    show_default=True,
    help="Run rows in this process or on Ray actors (kedi[ray]).",
)
@click.option(
    "--address", default="local", show_default=True, help="Ray cluster: auto, local, or HOST:PORT."
)
@click.option(
    "--actors",
    type=click.IntRange(1),
    default=2,
    show_default=True,
    help="Ray actors (each runs --parallel/actors rows at once).",
)
@click.option("--quiet", is_flag=True, help="No progress display.")
def run(program: str, inputs: str, out: str, input_format: str | None, **options: Any) -> None:
    """Run PROGRAM once per row of INPUTS (JSONL or CSV, `-` for stdin)."""
    from kedi.batch.command import BatchCommand

    try:
        command = BatchCommand.prepare(
            program, inputs, Path(out), input_format=input_format, reads=_fields_read, **options
        )
        summary = command.execute()
    except KediError as error:
        _fail(error)
    except KeyboardInterrupt:
        click.echo(
            "interrupted: finished rows are recorded; run the same command again to resume",
            err=True,
        )
        sys.exit(130)
    counts = summary.counts
    click.echo(
        f"job {command.job}: {counts.ran} rows run, {counts.skipped} already finished, "
        f"{counts.failed} failed; results in {summary.results}",
        err=True,
    )
    if summary.stopped:
        click.echo(f"{summary.stopped}; run the same command again to continue", err=True)
    sys.exit(1 if summary.stopped or counts.failed else 0)


def _fields_read(source: str) -> dict[str, int]:
    """The row fields a program reads (`args.text`), when its source shows all of them."""
    from kedi.cli_options import read_options

    read = read_options(source)
    return read.lines if read.complete else {}


@batch.command()
@click.argument("job")
def status(job: str) -> None:
    """Show a job's counts: finished, failed."""
    from kedi.batch.ledger import StoreLedger

    try:
        ledger = StoreLedger()
        info = ledger.job(job)
    except KediError as error:
        _fail(error)
    if info is None:
        click.echo(f"no batch job named {job!r} (kedi batch ls lists them)", err=True)
        sys.exit(1)
    click.echo(
        f"job {info.name}: {info.succeeded + info.failed} rows finished ({info.succeeded} ok, {info.failed} failed)"
    )
    click.echo(
        f"program {info.program} ({info.program_digest[:12]}), inputs {info.inputs} ({info.inputs_digest[:12]})"
    )


@batch.command("ls")
def list_jobs() -> None:
    """List the jobs in the ledger."""
    from kedi.batch.ledger import StoreLedger

    try:
        jobs = StoreLedger().jobs()
    except KediError as error:
        _fail(error)
    for info in jobs:
        click.echo(
            f"{info.name}\t{info.succeeded} ok\t{info.failed} failed\t{info.program}\t{info.inputs}"
        )


@batch.command()
@click.argument("job")
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False),
    help="Write to FILE (atomically) instead of stdout.",
)
def export(job: str, out: str | None) -> None:
    """Rebuild a job's RESULTS from the ledger (input order)."""
    import json

    from kedi.batch.engine import write_results
    from kedi.batch.ledger import StoreLedger

    try:
        ledger = StoreLedger()
        if ledger.job(job) is None:
            click.echo(f"no batch job named {job!r} (kedi batch ls lists them)", err=True)
            sys.exit(1)
        if out is not None:
            count = write_results(ledger.outcomes(job), Path(out))
            click.echo(f"{count} rows written to {out}", err=True)
            return
        for outcome in ledger.outcomes(job):
            click.echo(json.dumps(outcome.result_line(), ensure_ascii=False))
    except KediError as error:
        _fail(error)


@batch.command()
@click.argument("job")
def rm(job: str) -> None:
    """Remove a job and its rows from the ledger."""
    from kedi.batch.ledger import StoreLedger

    try:
        removed = StoreLedger().remove(job)
    except KediError as error:
        _fail(error)
    if not removed:
        click.echo(f"no batch job named {job!r}", err=True)
        sys.exit(1)
    click.echo(f"removed job {job}")
