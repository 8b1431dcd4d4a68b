"""Run results and identity, offline: chained runs, a supplied run id, and a fork.

    python examples/run_ids.py

`program.run_sync(..., result=True)` returns a `kedi.RunResult`: the value,
the run's id (a fresh UUIDv7 per run unless you pass `run_id=`), the
conversation's id, the messages the run added (each stamped with both ids)
and the usage. Runs that share a `Conversation` chain; passing a new
`conversation_id=` with it forks the conversation, and the fork goes on alone.
"""

from __future__ import annotations

import kedi

CHAT = kedi.compile("> history: enabled\n[reply] << <`args.message`>\n= <reply>")


def show(label: str, result: kedi.RunResult) -> None:
    """Print a run's identity and the stamps of the messages it added."""
    stamps = {(m.run_id == result.run_id, m.conversation_id == result.conversation_id) for m in result.messages}
    print(f"{label}: {result.value!r}")
    print(f"  run {result.run_id}  conversation {result.conversation_id}")
    print(f"  {len(result.messages)} new messages, all stamped with both ids: {stamps == {(True, True)}}")
    print(f"  history now {len(result.conversation.messages())} messages")


def main() -> None:
    """Two chained runs, one with a caller-chosen run id, then a fork."""
    conversation = kedi.Conversation()
    first = CHAT.run_sync(args={"message": "My name is Ada."}, conversation=conversation, result=True)
    show("first", first)
    second = CHAT.run_sync(
        args={"message": "What is my name?"}, conversation=conversation, result=True, run_id="request-42"
    )
    show("second (run_id supplied)", second)
    print(f"  same conversation: {second.conversation_id == first.conversation_id}")
    fork = CHAT.run_sync(
        args={"message": "Only in the fork."},
        conversation=conversation,
        conversation_id=kedi.new_id(),
        result=True,
    )
    show("fork", fork)
    print(f"  forked from the first two: {fork.conversation_id != first.conversation_id}")
    print(f"  the original still has {len(conversation.messages())} messages")


if __name__ == "__main__":
    main()
