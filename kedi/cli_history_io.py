"""`kedi history import` and `kedi history explain`: the parts of `kedi history` that run code.

Import validates an exported session, sanitizes portable messages (spec C5:
system prompts and unsafe part URLs dropped, pairing repaired) and stores it
under a new id, so an imported file never overwrites or impersonates a
session. Explain runs the program up to its first model call against the
session's conversation and prints what that call would send instead of
sending it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kedi.errors import HistoryError, KediUsageError
from kedi.history.lanes import PORTABLE, LaneKey
from kedi.history.store import StoreError, TurnRecord
from kedi.history.store.base import Store, build_conversation

__all__ = ["explain_next", "import_session"]


def import_session(store: Store, path: Path, *, name: str | None = None) -> str:
    """Validate, sanitize and store the export at `path`; return a one-paragraph report."""
    from kedi.history.persistence import load_lane_messages
    from kedi.history.repair import sanitize_history

    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise StoreError(f"{path}: not a kedi session export ({error})") from None
    if not isinstance(document, dict) or document.get("kedi_session_export") != 1:
        raise StoreError(f"{path}: not a kedi session export (version 1 expected)")
    session = document.get("session") or {}
    turns = document.get("turns")
    if not isinstance(session, dict) or not isinstance(turns, list):
        raise StoreError(f"{path}: session and turns are missing")
    records: list[TurnRecord] = []
    dropped_system = dropped_parts = synthesized = 0
    for index, item in enumerate(turns):
        where = f"{path}: turns[{index}]"
        if not isinstance(item, dict):
            raise StoreError(f"{where}: expected an object")
        try:
            key = LaneKey(
                **{
                    field: str(item["lane"][field])
                    for field in ("adapter", "model", "settings", "mcp", "tools", "format")
                }
            )
            messages = item["messages"]
            if not isinstance(messages, list):
                raise TypeError("messages must be a list")
            if key.format == PORTABLE:
                clean, report = sanitize_history(messages)
                dropped_system += report.system_prompts
                dropped_parts += len(report.unsafe_parts)
                synthesized += len(report.repair.synthesized)
                messages = [message.to_json_dict() for message in clean]
            else:
                load_lane_messages(key, messages, (), where)
            records.append(
                TurnRecord(
                    session_id="",
                    lane=key,
                    messages=messages,
                    run_no=int(item.get("run_no", 1)),
                    history=bool(item.get("history", True)),
                    epoch=int(item.get("epoch", 0)),
                    rewritten=item.get("rewritten"),
                    run_id=str(item.get("run_id", "")),
                    origin=str(item.get("origin", "")),
                    request=dict(item.get("request") or {}),
                    value=item.get("value"),
                    usage=dict(item.get("usage") or {}),
                    exchanges=list(item.get("exchanges") or []),
                )
            )
        except HistoryError as error:  # says what is wrong, sometimes already where
            text = str(error)
            raise StoreError(text if text.startswith(where) else f"{where}: {text}") from None
        except KeyError as error:  # a field the export must have
            raise StoreError(f"{where}: the field {error.args[0]!r} is missing") from None
        except (TypeError, ValueError) as error:
            raise StoreError(f"{where}: {type(error).__name__}: {error}") from None
    wanted = name or session.get("name")
    taken = ""
    if wanted and store.find_session(wanted) is not None:
        if name:
            raise StoreError(f"a session named {name!r} already exists")
        taken = f" (the name {wanted!r} is taken here: import with --name NEW to name it)"
        wanted = None
    created = store.create_session(
        name=wanted,
        program=str(session.get("program", "")),
        model=str(session.get("model", "")),
        parent=None,
    )
    run_numbers = sorted({record.run_no for record in records}) or [1]
    with store.transaction() as tx:
        for run_no in run_numbers:
            tx.execute(
                "INSERT INTO runs (session_id, run_no, program, started, finished, status) VALUES (?, ?, ?, ?, ?, 'ok')",
                (created.id, run_no, created.program, created.created, created.created),
            )
        for record in records:
            from dataclasses import replace

            tx.commit_turn(replace(record, session_id=created.id))
    return (
        f"imported {len(records)} turns as session "
        f"{f'{created.name!r} (id {created.id})' if created.name else created.id}{taken}; "
        f"sanitized: {dropped_system} system prompts dropped, {dropped_parts} unsafe parts dropped, "
        f"{synthesized} unanswered tool calls closed"
    )


class _Explained(BaseException):
    """Stops the run at its first model call (a BaseException so program code cannot catch it)."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def explain_next(
    store: Store,
    file: str,
    session: str,
    args: dict[str, Any] | None = None,
    *,
    adapter: str | None = None,
    model: str | None = None,
) -> str:
    """What the first model call of `file`, continuing `session`, would send.

    `adapter` and `model` are the defaults `kedi run --adapter/--model` sets;
    neither given, those of the session's last call: the session was most
    likely run with them, and the offline model would explain another lane.
    """
    from kedi.runtime.program import compile_program
    from kedi.runtime.sessions import SessionRecorder, render_request

    info = store.session(session)
    try:
        source = Path(file).read_text(encoding="utf-8")
    except OSError as error:
        raise KediUsageError(f"cannot read {file}: {error.strerror or error}") from None
    program = compile_program(source, path=file)
    turns = store.turns(info.id, replay_data=False)  # read once: the lanes and the last model
    conversation = build_conversation(info.id, turns)

    class Explainer(SessionRecorder):
        async def send(self, adapter: Any, key: Any, request: Any, lane: Any, live: Any) -> Any:  # noqa: ARG002
            rendered = render_request(adapter, key, request)
            processor = request.history_processor
            messages, note = await _request_messages(adapter, key, request)
            lines = [
                f"next call: {request.origin}",
                f"lane: {key.label()} ({len(request.history)} messages in history, cache epoch {request.cache_epoch})",
                f"history processor: {getattr(processor, '__qualname__', repr(processor)) if processor else 'none'}",
                "instructions:"
                + (f"\n  {request.instructions}" if request.instructions else " (none)"),
                f"messages ({note}):",
                *(f"  {json.dumps(message, ensure_ascii=False)}" for message in messages),
                "output schema: " + json.dumps(rendered["output_schema"], ensure_ascii=False),
                "tools: " + (", ".join(rendered["tools"]) or "none"),
            ]
            raise _Explained("\n".join(lines))

    if adapter is None and model is None:
        if turns:
            adapter, model = turns[-1].lane.adapter, turns[-1].lane.model
    recorder = Explainer(None, info.id, 0, record=False)
    try:
        program.run_sync(
            args=args or {},
            conversation=conversation,
            recorder=recorder,
            quiet=True,
            adapter=adapter,
            model=model,
        )
    except _Explained as stop:
        return stop.text
    except BaseExceptionGroup as group:  # a parallel run wraps it
        found = group.subgroup(_Explained)
        if found is not None:
            return _leaf(found).text
        raise
    return f"{file} makes no model call after session {info.label}"


async def _request_messages(adapter: Any, key: LaneKey, request: Any) -> tuple[list[Any], str]:
    """The messages the call would send: after the history processor, repaired, instructions first.

    Portable lanes are built exactly as their adapters build them (C2); a
    native lane shows its stored history and the prompt (its framework builds
    the wire messages).
    """
    from kedi.history.grouping import PORTABLE as PORTABLE_MESSAGES
    from kedi.history.messages import Message
    from kedi.history.persistence import dump_lane_messages
    from kedi.history.processors import run_history_processor
    from kedi.history.repair import build_request_messages

    if key.format != PORTABLE:
        history = dump_lane_messages(key, request.history, [adapter])
        return [
            *history,
            {"role": "user", "content": request.prompt},
        ], f"{key.format} lane, before processors"
    history = list(request.history)
    if request.history_processor is not None:
        outcome = await run_history_processor(
            request.history_processor,
            [*history, Message(role="user", content=request.prompt)],
            PORTABLE_MESSAGES,
            adapter_shortname=adapter.shortname,
            model_id=adapter.model_name,
            request_index=1,
            cache_epoch=request.cache_epoch,
        )
        history = list(outcome.messages)[:-1]
    built = build_request_messages(
        request.instructions,
        history,
        request.prompt,
        run_id=request.run_id,
        conversation_id=request.conversation_id,
    )
    return [message.to_json_dict() for message in built], "as sent: after processors and repair"


def _leaf(group: BaseExceptionGroup[Any]) -> Any:
    item = group.exceptions[0]
    return _leaf(item) if isinstance(item, BaseExceptionGroup) else item
