"""`kedi chat`: an interactive conversation with a model, kept as history.

Each line read is one turn of a history-enabled program; the conversation is
bounded by `> history: max_messages: N` (whole groups, oldest first). Lines
starting with `/` are commands:

- `/exit` (or end of input, Ctrl-D) quits;
- `/reset` starts a new conversation;
- `/save NAME` stores the conversation in the history store as the session
  NAME (`kedi history show NAME`), one turn per prompt and its replies; a
  NAME ending in `.json` writes that file instead (`Conversation.save`).

The prompt (`you> `) is shown only when input is a terminal, so piping lines
in prints just the replies, one per turn. A failed turn prints its error and
commits nothing; the chat goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import IO, Any

from kedi.adapters import create_adapter
from kedi.errors import KediError, KediExecutionError
from kedi.history.lanes import Conversation
from kedi.runtime.program import Program, compile_program

PROMPT = "you> "
HELP = "commands: /exit, /reset, /save NAME"
DEFAULT_MAX_MESSAGES = 20


def chat_program(max_messages: int) -> Program:
    """The one-turn program every chat line runs: history on, bounded to `max_messages`."""
    source = (
        f"> history:\n    enabled: true\n    max_messages: {max_messages}\n"
        "[reply] << <`args.message`>\n= <reply>\n"
    )
    return compile_program(source, path="<chat>")


def chat_loop(
    *,
    read: IO[str],
    write: Callable[[str], None],
    notice: Callable[[str], None],
    interactive: bool,
    max_messages: int = DEFAULT_MAX_MESSAGES,
    **run_options: Any,
) -> None:
    """Read lines from `read` until `/exit` or end of input; answer each through the model.

    `write` prints replies (and the prompt), `notice` prints command
    feedback and errors; `run_options` go to `Program.run` (adapter, model,
    system, quiet, on_delta, ...).
    """
    program = chat_program(max_messages)
    conversation = Conversation()
    adapter, model = run_options.pop("adapter", None), run_options.pop("model", None)
    if adapter is not None or model is not None:
        # One adapter for the whole chat: a `script:` model's replies run on from turn to turn.
        run_options["adapter"] = create_adapter(adapter, model)
    if interactive:
        notice(f"kedi chat: one line per turn; {HELP}; Ctrl-D quits")
    while True:
        if interactive:
            write(PROMPT)
        line = read.readline()
        if not line:  # end of input (Ctrl-D)
            if interactive:
                write("\n")
            return
        text = line.strip()
        if not text:
            continue
        if text.startswith("/"):
            command, _, argument = text.partition(" ")
            if command == "/exit":
                return
            if command == "/reset":
                conversation = Conversation()
                notice("(new conversation)")
            elif command == "/save" and argument.strip():
                _save(conversation, argument.strip(), notice)
            else:
                notice(f"unknown command {text!r}; {HELP}")
            continue
        try:
            reply = program.run_sync(
                args={"message": text}, conversation=conversation, **run_options
            )
        except KediError as error:
            notice(_turn_failure(error))
            continue
        write(f"{reply}\n")
        run_options["quiet"] = True  # notices (such as the offline one) once per chat, not per turn


def _turn_failure(error: KediError) -> str:
    """A failed turn in the chat's terms: its cause and message.

    Not a Kedi stack trace: that would point into the one-line program kedi
    runs for each turn (`<chat>`, line 4), which the user never wrote.
    """
    if not isinstance(error, KediExecutionError):
        return error.render()
    cause = type(error.original or error).__name__
    return f"error: {cause}: {error.message} (the turn was not kept)"


def _save(conversation: Conversation, name: str, notice: Callable[[str], None]) -> None:
    try:
        if name.endswith(".json"):
            conversation.save(name)
            notice(f"(saved the conversation to {name})")
        else:
            notice(_store_session(conversation, name))
    except KediError as error:
        notice(error.render())


def _store_session(conversation: Conversation, name: str) -> str:
    """Store the chat as the session `name`: one turn per prompt (a user message) and what follows."""
    from kedi.history.lanes import PORTABLE
    from kedi.history.persistence import dump_lane_messages
    from kedi.history.store import StoreError, TurnRecord, open_store

    store = open_store()
    if store is None:
        return "(the history store is off: KEDI_HISTORY=off; /save NAME.json writes a file)"
    try:
        if store.find_session(name) is not None:
            raise StoreError(f"a session named {name!r} already exists; /save another name")
        session = store.create_session(name=name, program="kedi chat")
        run_no = store.begin_run(session.id, program="kedi chat")
        for key, lane in conversation.lanes.items():
            data = dump_lane_messages(key, lane.messages)
            turns: list[
                list[Any]
            ] = []  # a native lane (Pydantic AI, LangChain) is stored as one turn
            for message in data:
                if not turns or (key.format == PORTABLE and message.get("role") == "user"):
                    turns.append([])
                turns[-1].append(message)
            for messages in turns:
                store.commit_turn(
                    TurnRecord(
                        session_id=session.id,
                        lane=key,
                        messages=messages,
                        run_no=run_no,
                        epoch=lane.epoch,
                    )
                )
        store.finish_run(session.id, run_no, "ok")
    finally:
        store.close()
    return f"(stored the conversation as session {name!r}: kedi history show {name})"
