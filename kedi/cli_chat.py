"""`kedi chat`: an interactive conversation with a model, kept as history.

Each line read is one turn of a history-enabled program; the conversation is
bounded by `> history: max_messages: N` (whole groups, oldest first). Lines
starting with `/` are commands:

- `/exit` (or end of input, Ctrl-D) quits;
- `/reset` starts a new conversation;
- `/save NAME` stores the conversation in the history store as the session
  NAME (`kedi history show NAME`), one turn per prompt and its replies; a
  NAME ending in `.json` writes that file instead (`Conversation.save`).
  Either way every turn of the chat is saved: `max_messages` bounds what is
  sent, and the lane it rewrites holds only that window, so the chat keeps
  its turns itself.

The prompt (`you> `) is shown only when input is a terminal, so piping lines
in prints just the replies, one per turn. A failed turn prints its error and
commits nothing; the chat goes on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict
from typing import IO, Any

from kedi.adapters import create_adapter
from kedi.adapters.base import Usage
from kedi.errors import KediError, KediExecutionError
from kedi.history.lanes import Conversation, LaneKey
from kedi.runtime.program import Program, compile_program
from kedi.runtime.sessions import model_label

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
    usages: list[Usage] = []
    """Each turn's token counts, oldest first (for `/save`)."""
    turns: dict[LaneKey, list[Any]] = {}
    """Every turn's messages by lane, oldest first (for `/save`): the lane keeps only the window."""
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
                conversation, usages, turns = Conversation(), [], {}
                notice("(new conversation)")
            elif command == "/save" and argument.strip():
                _save(_whole_chat(conversation, turns), usages, argument.strip(), notice)
            elif command == "/save":
                notice("/save needs a NAME: /save NAME (a session) or /save FILE.json")
            else:
                notice(f"unknown command {text!r}; {HELP}")
            continue
        try:
            ran = program.run_sync(
                args={"message": text}, conversation=conversation, result=True, **run_options
            )
        except KediError as error:
            notice(_turn_failure(error))
            continue
        usages.append(ran.usage)
        _keep_turn(conversation, ran.messages, turns)
        write(f"{ran.value}\n")
        run_options["quiet"] = True  # notices (such as the offline one) once per chat, not per turn


def _keep_turn(conversation: Conversation, added: Any, turns: dict[LaneKey, list[Any]]) -> None:
    """Add a turn's messages to `turns`, under the lane it committed to (the one ending with them)."""
    if not added:
        return
    for key, lane in conversation.lanes.items():
        if len(lane) and lane.messages[-1] is added[-1]:
            turns.setdefault(key, []).extend(added)
            return


def _whole_chat(conversation: Conversation, turns: dict[LaneKey, list[Any]]) -> Conversation:
    """The conversation with every turn of the chat, not just the `max_messages` window."""
    whole = Conversation(conversation.conversation_id)
    for key, messages in turns.items():
        whole.lane(key).seed(messages)
    return whole


def _turn_failure(error: KediError) -> str:
    """A failed turn in the chat's terms: its cause and message.

    Not a Kedi stack trace: that would point into the one-line program kedi
    runs for each turn (`<chat>`, line 4), which the user never wrote.
    """
    if not isinstance(error, KediExecutionError):
        return error.render()
    cause = type(error.original or error).__name__
    return f"error: {cause}: {error.message} (the turn was not kept)"


def _save(
    conversation: Conversation, usages: list[Usage], name: str, notice: Callable[[str], None]
) -> None:
    try:
        if name.endswith(".json"):
            conversation.save(name)
            notice(f"(saved the conversation to {name})")
        else:
            notice(_store_session(conversation, usages, name))
    except KediError as error:
        notice(error.render())


def _store_session(conversation: Conversation, usages: list[Usage], name: str) -> str:
    """Store the chat as the session `name`: one turn per prompt (a user message) and what follows.

    The session names the adapter and model of its lane, as a recorded run
    does; each turn carries its token counts (`usages`, one per chat turn, so
    they pair up from the end; a native lane, stored as one turn, gets their sum).
    """
    from kedi.history.lanes import PORTABLE
    from kedi.history.persistence import dump_lane_messages
    from kedi.history.store import StoreError, TurnRecord, open_store

    store = open_store()
    if store is None:
        return "(the history store is off: KEDI_HISTORY=off; /save NAME.json writes a file)"
    try:
        if store.find_session(name) is not None:
            raise StoreError(f"a session named {name!r} already exists; /save another name")
        keys = list(conversation.lanes)
        model = next((model_label(key) for key in keys), "")
        session = store.create_session(name=name, program="kedi chat", model=model)
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
            if key.format == PORTABLE:
                counts = usages[-len(turns) :]
                counts = [Usage()] * (len(turns) - len(counts)) + counts
            else:
                counts = [sum(usages, Usage())]
            for messages, usage in zip(turns, counts, strict=True):
                store.commit_turn(
                    TurnRecord(
                        session_id=session.id,
                        lane=key,
                        messages=messages,
                        run_no=run_no,
                        epoch=lane.epoch,
                        usage=asdict(usage),
                    )
                )
        store.finish_run(session.id, run_no, "ok")
    finally:
        store.close()
    return f"(stored the conversation as session {name!r}: kedi history show {name})"
