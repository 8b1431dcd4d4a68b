"""`kedi run`'s session options and the `kedi history` command.

`kedi run` links each run to a session of the history store
(`kedi.history.store`): `--session NAME` creates or continues a named one,
`-C/--continue` the most recent, `--fork NAME` branches a copy, `--resume`
continues a failed run, `--replay` serves every call from the recording and
`--record` re-records it; `--no-store` (or `KEDI_HISTORY=off`) keeps nothing.
A run with none of these is still recorded, as an unnamed session.

`kedi history ls|show|diff|explain|export|import|rm|gc` inspects the store.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from kedi.errors import KediError, KediExecutionError, KediUsageError
from kedi.redaction import redact_text

if TYPE_CHECKING:
    from kedi.history.store import RunInfo, SessionInfo, TurnRecord, TurnSummary
    from kedi.history.store.base import Store
    from kedi.runtime.program import Program
    from kedi.runtime.sessions import SessionRecorder

__all__ = ["RunSession", "history", "run_session"]

EXPORT_VERSION = 1


@dataclass(frozen=True, slots=True)
class SessionOptions:
    """The session options of one `kedi run`."""

    session: str | None = None
    continue_last: bool = False
    fork: str | None = None
    no_store: bool = False
    resume: str | None = None
    replay: str | None = None
    record: bool = False

    def check(self) -> None:
        """Refuse combinations that mean nothing."""
        sources = [
            name
            for name, given in (
                ("--session", self.session),
                ("--continue", self.continue_last),
                ("--resume", self.resume),
                ("--replay", self.replay),
            )
            if given
        ]
        if len(sources) > 1:
            raise click.UsageError(f"give one of {', '.join(sources)}, not several")
        if self.fork and not (self.session or self.continue_last):
            raise click.UsageError(
                "--fork NAME branches a session: add --session SOURCE or --continue"
            )
        if self.record and not self.replay:
            raise click.UsageError("--record re-records a session: use it with --replay SESSION")
        if self.no_store and (sources or self.fork):
            raise click.UsageError(
                f"--no-store cannot be combined with {(sources or ['--fork'])[0]}"
            )


@dataclass
class RunSession:
    """A run's session: the store, the session, and the recorder passed to `Program.run`."""

    store: Store
    session: SessionInfo
    recorder: SessionRecorder
    program_label: str

    def finish(self, error: BaseException | None, rerun: Sequence[str] = ()) -> str:
        """Record how the run ended; for a stopped run, return the line saying where and how to resume.

        `rerun` is what the resume command repeats after the program: the
        options that chose the model and the program's own arguments (a
        resume without them would go on with another model, or miss `args`).
        """
        store, recorder = self.store, self.recorder
        if recorder.mode == "replay" and not recorder.record:
            store.close()
            return ""
        status = "ok"
        failure = None
        if (
            not isinstance(error, KeyboardInterrupt)  # Ctrl-C keeps its "Resume with" line
            and self.session.name is None
            and recorder.run_no == 1
            and self.session.turns == 0
            and recorder.sent == 0
            and recorder.failure is None
        ):
            # An unnamed run that reached no model leaves nothing worth listing, and a
            # failure before the first call nothing to resume: running again is the same.
            store.delete_session(self.session.id)
            store.close()
            return ""
        if error is not None:
            status = "failed" if isinstance(error, Exception) else "interrupted"
            failure = recorder.failure or {}
            failure.setdefault("error", _first_line(error))
            failure.setdefault("origin", _origin_of(error))
        try:
            store.finish_run(self.session.id, recorder.run_no, status, failure=failure)
            if recorder.model_label and recorder.model_label != self.session.model:
                with store.transaction() as tx:
                    tx.execute(
                        "UPDATE sessions SET model = ? WHERE id = ?",
                        (recorder.model_label, self.session.id),
                    )
        finally:
            store.close()
        if error is None:
            return ""
        where = failure.get("origin") if failure else ""
        stage = f" ({failure['stage']})" if failure and failure.get("stage") else ""
        program = (
            "-c SOURCE" if self.program_label == "<command>" else shlex.quote(self.program_label)
        )
        command = shlex.join(["--resume", self.session.name or self.session.id, *rerun])
        # A partial exists only when a model call completed something before it failed;
        # a program error (or a call that completed nothing) leaves the finished calls.
        partial = bool(failure and failure.get("messages"))
        kept = "its partial is stored" if partial else "its completed calls are stored"
        return redact_text(
            f"kedi: run stopped{' at ' + where if where else ''}{stage}; {kept}. "
            f"Resume with: kedi run {program} {command}"
        )


def resume_arguments(program_args: Sequence[str], **model_options: str | None) -> list[str]:
    """What a resume command repeats: the options given that choose the model
    (`model="x"` gives `--model x`), then the program's own arguments."""
    flags = [
        f"--{name.replace('_', '-')}={value}" for name, value in model_options.items() if value
    ]
    return [*flags, *program_args]


def _first_line(error: BaseException) -> str:
    if isinstance(error, KediExecutionError) and error.original is not None:
        # its str is the whole rendered stack trace; what failed is the original error
        error = error.original
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


_LOCATION = re.compile(r"([^\s:]+\.kedi:\d+)")


def _origin_of(error: BaseException) -> str:
    if isinstance(error, KediExecutionError) and error.where:
        return error.where
    found = _LOCATION.search(error.render() if isinstance(error, KediError) else str(error))
    return found.group(1) if found else ""


def run_session(
    options: SessionOptions, program: Program, program_label: str, model: str | None
) -> tuple[RunSession | None, Any]:
    """Open the store and the session a run uses; return it and the conversation to run in.

    Returns `(None, None)` when nothing is stored (`--no-store`, `KEDI_HISTORY=off`).
    """
    from kedi.history.store import describe_location, open_store
    from kedi.runtime.sessions import SessionRecorder

    options.check()
    asked = bool(
        options.session or options.continue_last or options.resume or options.replay or options.fork
    )
    try:
        store = None if options.no_store else open_store()
    except KediError as error:
        if asked:
            raise
        # plain runs are recorded as a convenience: an unusable store must not stop the program
        click.echo(
            f"kedi: not recording this run: {error} (KEDI_HISTORY=off silences this)", err=True
        )
        return None, None
    if store is None:
        if options.session or options.continue_last or options.resume or options.replay:
            raise KediUsageError(
                f"the history store is off (KEDI_HISTORY={describe_location()}); "
                "session options need it"
            )
        return None, None
    try:
        if options.replay or options.resume:
            ref = options.replay or options.resume
            session = store.session(ref)  # type: ignore[arg-type]  # a non-None id was checked above
            if options.resume or options.record:
                store.hold_session(session.id)  # before reading the runs it goes on from
            runs = store.runs(session.id)
            if not runs:
                raise KediUsageError(f"session {session.label!r} has no recorded run")
            last = runs[-1]
            if options.resume and last.status not in ("failed", "interrupted", "running"):
                raise KediUsageError(
                    f"session {session.label!r}: its last run ended {last.status}; there is nothing to resume "
                    f"(continue it with --session {session.label})"
                )
            conversation = store.load_conversation(session.id, before_run=last.run_no)
            recorded = store.turns(session.id, run_no=last.run_no)
            if options.record:
                store.delete_run_turns(session.id, last.run_no)
                store.reopen_run(session.id, last.run_no)
                recorder = SessionRecorder(store, session.id, last.run_no)
            elif options.replay:
                recorder = SessionRecorder(
                    store, session.id, last.run_no, mode="replay", record=False, recorded=recorded
                )
            else:
                store.reopen_run(session.id, last.run_no)
                recorder = SessionRecorder(
                    store,
                    session.id,
                    last.run_no,
                    mode="resume",
                    recorded=recorded,
                    failure=last.failure,
                )
            return RunSession(store, session, recorder, program_label), conversation
        if options.continue_last:
            found = store.latest_session()
            if found is None:
                raise KediUsageError(f"--continue: no session in {store.location} yet")
            session = found
        elif options.session:
            # exact name or id only: `--session 0196` must not continue a session whose id starts so
            session = store.find_session(options.session, prefix=False) or store.create_session(
                name=options.session, program=program_label, model=model or ""
            )
        else:
            session = store.create_session(program=program_label, model=model or "")
        if options.fork:
            session = store.fork_session(session.id, name=options.fork)
        # one run at a time appends to a session: it must hold the session before loading its view
        store.hold_session(session.id)
        conversation = store.load_conversation(session.id)
        run_no = store.begin_run(session.id, program=program_label)
        return RunSession(
            store, session, SessionRecorder(store, session.id, run_no), program_label
        ), conversation
    except BaseException:
        store.close()
        raise


# =========================================================================== kedi history


@contextmanager
def _opened() -> Iterator[Store]:
    from kedi.history.store import describe_location, open_store

    store = open_store()
    if store is None:
        raise KediUsageError(f"the history store is off (KEDI_HISTORY={describe_location()})")
    try:
        yield store
    finally:
        store.close()


def _fail(error: KediError) -> None:
    click.echo(error.render(), err=True)
    sys.exit(1)


def _console() -> Any:
    from rich.console import Console

    # piped output (tests, `| less`) gets wide rows instead of rich's 80 columns
    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)


def _when(seconds: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(seconds))


class _HistoryCommands(click.Group):
    """The `kedi history` subcommands, with `list` as another name for `ls`.

    The group's help begins "List, show, ...", so `kedi history list` is what a
    user types first; the alias stays out of the listing so each command shows once.
    """

    ALIASES = {"list": "ls"}

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, self.ALIASES.get(cmd_name, cmd_name))


@click.group(cls=_HistoryCommands)
def history() -> None:
    """List, show, compare, export and clean up stored sessions (KEDI_HISTORY)."""


def _guard(function: Any) -> Any:
    """Render a `KediError` as kedi does (exit 1), never a traceback."""

    @functools.wraps(function)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return function(*args, **kwargs)
        except KediError as error:
            _fail(error)

    return wrapper


@history.command("ls", short_help="Sessions, most recently used first (also: list).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per session.")
@click.option("--limit", type=int, default=None, help="Show at most N sessions.")
@_guard
def list_sessions(as_json: bool, limit: int | None) -> None:
    """Sessions, most recently used first: id, name, program, model, turns, last used."""
    with _opened() as store:
        sessions = store.sessions(limit=limit)
    if as_json:
        click.echo(json.dumps([asdict(session) for session in sessions], ensure_ascii=False))
        return
    from rich.table import Table

    table = Table(box=None, pad_edge=False)
    for column in ("id", "name", "program", "model", "turns", "status", "last used"):
        table.add_column(column, justify="right" if column == "turns" else "left")
    for session in sessions:
        table.add_row(
            session.id,
            session.name or "",
            session.program,
            session.model,
            str(session.turns),
            session.status,
            _when(session.updated),
        )
    _console().print(table)


@history.command("show")
@click.argument("session")
@click.option(
    "--lane", "lane_filter", metavar="KEY", help="Only turns of lanes whose label contains KEY."
)
@click.option("--json", "as_json", is_flag=True, help="The turns as JSON.")
@_guard
def show(session: str, lane_filter: str | None, as_json: bool) -> None:
    """A session's turns: roles, captures, tool calls, usage."""
    with _opened() as store:
        info = store.session(session)
        runs = store.runs(info.id)
        if as_json:
            _show_json(info, runs, store.turns(info.id), lane_filter)
        else:
            # the listing reads only what it shows (no replay data), a batch at a time; the
            # reader is closed before the store even when printing fails (`| head`)
            with closing(store.turn_summaries(info.id)) as batches:
                _show_text(info, runs, batches, lane_filter)


def _show_json(
    info: SessionInfo, runs: list[RunInfo], turns: list[TurnRecord], lane_filter: str | None
) -> None:
    if lane_filter:
        from kedi.history.lanes import LaneKey

        label = functools.cache(LaneKey.label)  # a session names a handful of lanes
        labels = {label(turn.lane) for turn in turns}
        turns = [turn for turn in turns if lane_filter in label(turn.lane)]
        if not turns:
            raise _no_lane_matches(info, lane_filter, labels)
    click.echo(
        json.dumps(
            {
                "session": asdict(info),
                "runs": [asdict(run) for run in runs],
                "turns": [_turn_json(turn) for turn in turns],
            },
            ensure_ascii=False,
        )
    )


def _show_text(
    info: SessionInfo,
    runs: list[RunInfo],
    batches: Iterable[list[TurnSummary]],
    lane_filter: str | None,
) -> None:
    # click.style, not rich markup: a 10,000-turn session prints in a fraction of a second
    # (rich parsed every line's markup: 9 s); piped output is not styled at all.
    style = click.style if _colored() else _unstyled
    bold_role = functools.cache(functools.partial(style, bold=True))
    # Printed with the first turn shown, so a `--lane` that matches nothing prints its error alone.
    header = [
        f"{style('session', bold=True)} {info.label}  id {info.id}  program {info.program}  model {info.model}  "
        f"turns {info.turns}" + (f"  forked from {info.parent}" if info.parent else "")
    ]
    labels: set[str] = set()
    shown = 0
    for batch in batches:
        out: list[str] = []
        for turn in batch:
            labels.add(turn.lane_label)
            if lane_filter and lane_filter not in turn.lane_label:
                continue
            shown += 1
            usage = turn.usage or {}
            out.append(
                f"\n{style(f'turn {turn.seq}', fg='cyan', bold=True)} run {turn.run_no}  {turn.origin}  "
                f"lane {turn.lane_label}{'' if turn.history else '  (no history)'}  "
                f"tokens {usage.get('input_tokens', 0)}→{usage.get('output_tokens', 0)}"
            )
            for message in turn.messages:
                _message_lines(message, out, style, bold_role)
            if isinstance(turn.value, dict):
                captures = ", ".join(
                    f"{name}={json.dumps(value, ensure_ascii=False)}"
                    for name, value in turn.value.items()
                )
                out.append(f"  {style('captures', fg='green')} {captures}")
        if out:
            _echo([*header, *out])
            header = []
    if lane_filter and not shown:
        raise _no_lane_matches(info, lane_filter, labels)
    failures = [
        "\n"
        + style(f"run {run.run_no} {run.status}", fg="red", bold=True)
        + f" at {run.failure.get('origin', '')}"
        + _failure_text(run.failure.get("error", ""))
        for run in runs
        if run.failure
    ]
    _echo([*header, *failures])


_CANCELLATIONS = ("CancelledError", "KeyboardInterrupt", "KediInterrupted")
"""How a cancelled call's exception is named: a Ctrl-C, which "interrupted" already says."""


def _failure_text(error: object) -> str:
    """`: ` and a run's stored error for display, or nothing for a bare cancellation."""
    text = str(error)
    if text.rstrip(": ") in _CANCELLATIONS:
        return ""
    return ": " + text.translate(_SHOWN_CONTROLS)


def _no_lane_matches(info: SessionInfo, lane_filter: str, labels: set[str]) -> KediUsageError:
    """`--lane KEY` matched no turn: say so, with the lanes the session has (not a silent blank)."""
    lanes = ", ".join(sorted(labels)) or "none: it has no turns"
    return KediUsageError(
        f"no turn of session {info.label!r} is on a lane whose label contains {lane_filter!r} "
        f"(its lanes: {lanes})"
    )


def _echo(lines: list[str]) -> None:
    """Print `lines`, if any. click strips escape codes (a model's too) from piped output with a
    regex over every byte; a text with none has nothing to strip."""
    if lines:
        text = "\n".join(lines)
        click.echo(text, color=None if "\x1b" in text else True)


def _colored() -> bool:
    """Whether `click.echo` would keep styles on stdout (a terminal, or `color=True`): the same test it makes."""
    from click import globals as click_globals
    from click import utils as click_utils

    return not click_utils.should_strip_ansi(sys.stdout, click_globals.resolve_color_default())


def _unstyled(text: str, **_: Any) -> str:
    return text


def _message_lines(
    message: Any, out: list[str], style: Callable[..., str], role_style: Callable[[str], str]
) -> None:
    """Append one message as indented lines to `out`: `role: content`, then each tool call as `→ name(args)`."""
    if not isinstance(message, dict) or "role" not in message:  # a native lane's own serialization
        out.append(f"  {json.dumps(message, ensure_ascii=False)[:500]}")
        return
    role = str(message["role"])
    text = str(message.get("content", "")).translate(_SHOWN_CONTROLS)
    out.append(f"  {role_style(role)}: {text}" if text else f"  {role_style(role)}:")
    for call in message.get("toolCalls", ()):
        out.append(
            "    "
            + style(f"→ {call.get('name', '')}", fg="magenta")
            + f"({json.dumps(call.get('args'), ensure_ascii=False)})"
        )
    if role == "tool" and message.get("toolName"):
        name = str(message["toolName"]).translate(_SHOWN_CONTROLS)
        out[-1] += f"  [{name}{', failed' if message.get('failed') else ''}]"


_SHOWN_CONTROLS = {
    code: f"\\x{code:02x}" for code in (*range(0x20), *range(0x7F, 0xA0)) if code not in (9, 10)
}
"""Control characters of stored text, shown escaped (`\\x1b`): a model's reply holding
escape sequences must not restyle, retitle or write the clipboard of the terminal that
`kedi history show` prints to (click strips only colour codes, and only from pipes)."""


def _turn_json(turn: TurnRecord) -> dict[str, Any]:
    # shallow: the fields hold decoded JSON already, which `asdict` would deep-copy (most of --json's time)
    data = {field.name: getattr(turn, field.name) for field in fields(turn)}
    data["lane"] = {"label": turn.lane.label(), **asdict(turn.lane)}
    return data


@history.command("diff")
@click.argument("first")
@click.argument("second")
@_guard
def diff(first: str, second: str) -> None:
    """Where two sessions (or a session and its fork) first diverge."""
    import difflib

    from kedi.runtime.sessions import request_text

    with _opened() as store:
        a, b = store.session(first), store.session(second)
        left, right = store.turns(a.id), store.turns(b.id)
    for index, (x, y) in enumerate(zip(left, right, strict=False)):
        said_x, said_y = _what_was_said(x), _what_was_said(y)
        if said_x != said_y:
            click.echo(
                f"first divergence at turn {index + 1} ({x.origin or '?'} vs {y.origin or '?'}):"
            )
            show_a, show_b = request_text(said_x), request_text(said_y)
            click.echo(
                "\n".join(difflib.unified_diff(show_a, show_b, a.label, b.label, lineterm=""))
            )
            sys.exit(1)
    if len(left) != len(right):
        longer, n = (a, len(left)) if len(left) > len(right) else (b, len(right))
        click.echo(
            f"the first {min(len(left), len(right))} turns agree; {longer.label} goes on to turn {n}"
        )
        sys.exit(1)
    click.echo(f"no divergence: both have the same {len(left)} turns")


_STAMPS = frozenset(
    {"runId", "conversationId", "run_id", "conversation_id", "timestamp", "metadata"}
)
"""Keys kedi or a framework stamps on each message: the run's ids, the time (and kedi's
ids in Pydantic AI's `metadata`); they differ between any two sessions."""


def _what_was_said(turn: TurnRecord) -> dict[str, Any]:
    """A turn's lane, request and messages without what differs between any two runs.

    The ids and times stamped on messages, the history digest (it covers those
    ids; the turns before agree, so the history does) and the request's
    source line (moved code is no divergence, as for `--replay`).
    """
    from kedi.runtime.sessions import without_origin

    request = without_origin(turn.request)
    if isinstance(request.get("history"), dict):
        request["history"] = {k: v for k, v in request["history"].items() if k != "digest"}
    return {
        "lane": turn.lane.label(),
        "request": request,
        "messages": _unstamped(turn.messages),
    }


def _unstamped(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _unstamped(v) for k, v in value.items() if k not in _STAMPS}
    if isinstance(value, list):
        return [_unstamped(item) for item in value]
    return value


@history.command("rm")
@click.argument("sessions", nargs=-1, required=True)
@_guard
def remove(sessions: tuple[str, ...]) -> None:
    """Remove sessions (by name, id or id prefix)."""
    with _opened() as store:
        for ref in sessions:
            info = store.session(ref)
            store.delete_session(info.id)
            click.echo(f"removed {info.label}")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


@history.command("gc")
@click.option(
    "--older-than", "older_than", required=True, metavar="AGE", help="Like 30d, 12h, 90m, 2w."
)
@_guard
def collect(older_than: str) -> None:
    """Remove sessions not used for AGE."""
    match = _DURATION.match(older_than)
    if match is None:
        raise click.BadParameter(
            f"{older_than!r}: give a number and a unit s/m/h/d/w, e.g. 30d",
            param_hint="--older-than",
        )
    with _opened() as store:
        removed = store.gc(float(match.group(1)) * _UNIT[match.group(2)])
    click.echo(
        f"removed {len(removed)} session{'s' if len(removed) != 1 else ''} unused for {older_than}"
    )


@history.command("export")
@click.argument("session")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False), help="Write to PATH instead of stdout."
)
@_guard
def export(session: str, output: str | None) -> None:
    """A session as portable JSON (runs and turns; no secrets)."""
    with _opened() as store:
        info = store.session(session)
        document = {
            "kedi_session_export": EXPORT_VERSION,
            "session": asdict(info),
            "runs": [asdict(run) for run in store.runs(info.id)],
            "turns": [{**asdict(turn), "lane": asdict(turn.lane)} for turn in store.turns(info.id)],
        }
    text = json.dumps(document, ensure_ascii=False)
    if output:
        from kedi.history.persistence import write_atomic

        write_atomic(output, text + "\n")
    else:
        click.echo(text)


@history.command("import")
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@click.option("--name", help="Name the imported session (default: its exported name, if free).")
@_guard
def import_(file: str, name: str | None) -> None:
    """Import an exported session: validated, sanitized (C5), under a new id; prints a report."""
    from kedi.cli_history_io import import_session

    with _opened() as store:
        report = import_session(store, Path(file), name=name)
    click.echo(report)


@history.command(
    "explain", context_settings={"ignore_unknown_options": True, "allow_extra_args": True}
)
@click.argument("file")
@click.option("--session", "session", required=True, help="The session whose next call to explain.")
@click.option(
    "--adapter",
    envvar="KEDI_ADAPTER",
    help="Adapter, as for `kedi run` (default: the session's last call's).",
)
@click.option(
    "--model",
    envvar="KEDI_MODEL",
    help="Model, as for `kedi run` (default: the session's last call's).",
)
@click.pass_context
@_guard
def explain(
    ctx: click.Context, file: str, session: str, adapter: str | None, model: str | None
) -> None:
    """What FILE's next model call, continuing SESSION, would send: lane, messages after processors, instructions.

    Options after FILE that kedi does not own become the program's `args`, as with `kedi run`;
    give the `--adapter`/`--model` the session ran with to see its lane.
    """
    from kedi.cli import program_arguments
    from kedi.cli_history_io import explain_next

    with _opened() as store:
        click.echo(
            explain_next(
                store, file, session, program_arguments(ctx.args), adapter=adapter, model=model
            )
        )
