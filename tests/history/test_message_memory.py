"""A message is small: shared empty defaults and fields-sets, and a paused collector for bulk loads."""

from __future__ import annotations

import copy
import gc
import pickle
import sys
import threading
import tracemalloc

import pytest

from kedi.history import Message
from kedi.history.messages import collector_paused


def test_messages_share_one_unchangeable_empty_list() -> None:
    first, second = Message(role="user", content="a"), Message(role="assistant", content="b")
    assert first.parts is second.tool_calls is second.thinking
    assert first.parts == [] and isinstance(first.parts, list)
    with pytest.raises(TypeError, match="cannot be changed"):
        first.parts.append("x")  # would otherwise change every message at once
    with pytest.raises(TypeError):
        first.tool_calls += ["x"]  # type: ignore[misc]  # the in-place add on a frozen field's list
    assert second.parts == [] and first.to_json_dict() == {"role": "user", "content": "a"}


def test_shared_defaults_survive_copies_and_pickles() -> None:
    message = Message(role="user", content="a", run_id="r")
    for clone in (copy.copy(message), copy.deepcopy(message), pickle.loads(pickle.dumps(message))):
        assert clone == message and clone.parts is message.parts
    changed = message.model_copy(update={"content": "b"})
    assert changed.content == "b" and message.content == "a"
    assert message.model_fields_set == {"role", "content", "run_id"}
    assert Message(role="user", content="z", run_id="q").model_fields_set is message.model_fields_set


def test_a_text_message_costs_under_half_a_kilobyte() -> None:
    tracemalloc.start()
    try:
        messages = [Message(role="user", content=f"m{index}") for index in range(10_000)]
        per_message = tracemalloc.get_traced_memory()[0] / len(messages)
    finally:
        tracemalloc.stop()
    assert per_message < 500, per_message  # about 800 bytes with a list and set of its own each
    assert sys.getsizeof(messages[0].parts) <= sys.getsizeof([])


def test_collector_pause_is_counted_and_restores_the_previous_state() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            pass
        assert not gc.isenabled()  # the inner pause ending does not switch it back on
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # off before, off after
    finally:
        gc.enable()


def test_collector_pauses_in_threads_leave_it_enabled() -> None:
    barrier = threading.Barrier(4)

    def pause() -> None:
        barrier.wait(timeout=10)  # all four start together, so their pauses overlap
        for _ in range(200):
            with collector_paused():
                pass

    threads = [threading.Thread(target=pause) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert gc.isenabled()
