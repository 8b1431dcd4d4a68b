"""One `Conversation` shared by runs in several threads (each with its own event loop)."""

from __future__ import annotations

import threading
import time

import kedi
from kedi import Conversation

THREADS = 8
RUNS = 20

PROGRAM = """\
> history: enabled
[who] = `args.who`
[n] = `args.n`
>> <who> says <n> [reply]
>> <who> again <n> [again]
= `reply`
"""


def test_eight_threads_times_twenty_runs_commit_whole_turns_in_ticket_order() -> None:
    """Two threads were enough to deadlock: an anyio.Event set from another loop never woke its waiter."""
    conversation = Conversation()
    program = kedi.compile(PROGRAM, path="chat.kedi")
    failures: list[BaseException] = []

    def worker(who: str) -> None:
        try:
            for n in range(RUNS):
                program.run_sync(
                    args={"who": who, "n": str(n)}, model="offline", conversation=conversation
                )
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    threads = [threading.Thread(target=worker, args=(f"t{i}",)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    for thread in threads:
        thread.join(timeout=max(0.0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "a thread is stuck"
    assert failures == []

    (lane,) = conversation.lanes.values()
    messages = list(lane.messages)
    assert len(messages) == THREADS * RUNS * 2 * 2
    # Every turn is whole: a user message, then its reply.
    assert [m.role for m in messages] == ["user", "assistant"] * (THREADS * RUNS * 2)
    # Each thread's turns appear in the order its runs made them.
    for i in range(THREADS):
        said = [m.content for m in messages if m.role == "user" and m.content.startswith(f"t{i} ")]
        expected = [
            f"t{i} {verb} {n} [{name}]"
            for n in range(RUNS)
            for verb, name in (("says", "reply"), ("again", "again"))
        ]
        assert said == expected
