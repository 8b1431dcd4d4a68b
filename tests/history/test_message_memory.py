"""A message is small: shared empty defaults and fields-sets, and a paused collector for bulk loads."""

from __future__ import annotations

import copy
import gc
import json
import pickle
import sys
import threading
import tracemalloc

import pytest

import kedi
from kedi.errors import HistoryError
from kedi.history import Message, ToolCall
from kedi.history.lanes import Conversation, Lane
from kedi.history.messages import collector_paused
from kedi.history.persistence import load_conversation


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
    assert (
        Message(role="user", content="z", run_id="q").model_fields_set is message.model_fields_set
    )
    call = Message(role="assistant", tool_calls=[{"id": "1", "name": "f"}]).tool_calls[0]
    assert call.model_fields_set is ToolCall(id="2", name="g").model_fields_set == {"id", "name"}


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


def _document(messages: list[dict[str, object]]) -> str:
    lane = {
        "key": {"adapter": "script", "model": "m", "settings": "d"},
        "epoch": 0,
        "format": "portable",
        "messages": messages,
    }
    return json.dumps({"version": 1, "conversation_id": "c1", "lanes": [lane]})


def _only_lane(conversation: Conversation) -> Lane:
    (lane,) = conversation.lanes.values()
    return lane


def test_a_loaded_lane_builds_each_message_when_first_read_and_keeps_it() -> None:
    text = _document(
        [
            {"role": "user", "content": "hi"},
            {
                "role": "assistant",
                "content": None,
                "toolCalls": [{"id": "1", "name": "f", "args": {"a": 1}}],
            },
        ]
    )
    view = _only_lane(Conversation.loads(text)).messages
    assert isinstance(view[1], Message) and view[1].tool_calls[0].args == '{"a":1}'
    assert view[1] is view[1] and view[0] is list(view)[0] and view[:] == [view[0], view[1]]
    assert (
        Conversation.loads(Conversation.loads(text).dumps()).dumps()
        == Conversation.loads(text).dumps()
    )


def test_loading_a_long_lane_keeps_it_compact_and_still_names_a_bad_message() -> None:
    messages: list[dict[str, object]] = [
        {"role": "user", "content": f"m{index}"} for index in range(100_000)
    ]
    text = _document(messages)
    tracemalloc.start()
    try:
        conversation = Conversation.loads(text)
        per_message = tracemalloc.get_traced_memory()[1] / len(messages)  # the peak, while loading
    finally:
        tracemalloc.stop()
    assert per_message < 350, per_message  # about 600 bytes when every message was built at load
    assert _only_lane(conversation).messages[99_999] == Message(role="user", content="m99999")
    messages[25_000] = {
        "role": "user",
        "toolCalls": [{"id": "1", "name": "f"}],
    }  # past the first checked chunk
    with pytest.raises(
        HistoryError, match=r"lanes\[0\]\.messages: history message 25000: .*toolCalls"
    ):
        Conversation.loads(_document(messages))


def test_a_callers_document_is_never_kept_by_the_lane() -> None:
    document = json.loads(_document([{"role": "user", "content": "hi"}]))
    conversation = load_conversation(document)
    document["lanes"][0]["messages"][0]["content"] = "changed later"
    assert _only_lane(conversation).messages[0].content == "hi"


def test_a_loaded_conversation_carries_its_history_into_a_run() -> None:
    program = kedi.compile("> history: enabled\n>> say [answer]\n= `answer`\n", path="chat.kedi")
    conversation = kedi.Conversation()
    program.run_sync(model="offline", conversation=conversation)
    loaded = Conversation.loads(conversation.dumps())
    program.run_sync(model="offline", conversation=loaded)
    lane = _only_lane(loaded)
    assert len(lane) == 2 * len(_only_lane(conversation)) and all(
        isinstance(m, Message) for m in lane.messages
    )
