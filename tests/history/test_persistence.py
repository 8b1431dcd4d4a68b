"""Saving and loading conversations: the versioned JSON document, native lanes, atomic files."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kedi.errors import HistoryError, KediUsageError
from kedi.history import Message, ToolCall
from kedi.history.lanes import Conversation, LaneKey, canonical_digest
from kedi.history.persistence import dump_conversation, load_conversation

ROOT = Path(__file__).resolve().parents[2]
PORTABLE_KEY = LaneKey("script", "replies.json", canonical_digest({}), tools="t1")
HOT_KEY = LaneKey("offline", "offline", canonical_digest({"temperature": 1}))


def portable_conversation() -> Conversation:
    conversation = Conversation("conv-1")
    conversation.lane(PORTABLE_KEY).seed(
        [
            Message(role="user", content="Find it", run_id="r1", conversation_id="conv-1"),
            Message(
                role="assistant",
                tool_calls=[ToolCall(id="c1", name="lookup", args='{"q": "trunc')],
                run_id="r1",
            ),
            Message(
                role="tool", tool_call_id="c1", tool_name="lookup", content="found", failed=True
            ),
            Message(role="assistant", content="Done"),
        ]
    )
    hot = conversation.lane(HOT_KEY)
    hot.seed([Message(role="user", content="a"), Message(role="assistant", content="b")])
    hot.replace(list(hot.messages), generations=2)
    return conversation


def test_the_document_is_versioned_json_with_portable_messages_in_c1_form() -> None:
    document = json.loads(portable_conversation().dumps())
    assert document["version"] == 1 and document["conversation_id"] == "conv-1"
    first, second = document["lanes"]
    assert first["key"] == {
        "adapter": "script",
        "model": "replies.json",
        "settings": canonical_digest({}),
        "mcp": "",
        "tools": "t1",
    }
    assert (first["epoch"], first["format"], second["epoch"]) == (0, "portable", 2)
    assert first["messages"][:2] == [
        {"role": "user", "content": "Find it", "runId": "r1", "conversationId": "conv-1"},
        {
            "role": "assistant",
            "toolCalls": [{"id": "c1", "name": "lookup", "args": '{"q": "trunc'}],
            "runId": "r1",
        },
    ]
    assert first["messages"][2] == {
        "role": "tool",
        "content": "found",
        "toolCallId": "c1",
        "toolName": "lookup",
        "failed": True,
    }


def test_a_portable_conversation_round_trips_with_its_cache_identities() -> None:
    original = portable_conversation()
    loaded = Conversation.loads(original.dumps())
    assert loaded.conversation_id == "conv-1"
    assert list(loaded.lanes) == list(original.lanes)
    for key, lane in original.lanes.items():
        copy = loaded.lanes[key]
        assert list(copy.messages) == list(lane.messages)
        assert (copy.epoch, copy.cache_key) == (lane.epoch, lane.cache_key)
    assert loaded.dumps() == original.dumps()


def test_portable_lanes_load_without_any_adapter_module() -> None:
    text = (
        portable_conversation()
        .dumps()
        .replace('"adapter": "script"', '"adapter": "my-own-adapter"')
    )
    code = (
        "import sys; from kedi.history.persistence import loads\n"
        f"conversation = loads({text!r})\n"
        "assert sum(len(lane) for lane in conversation.lanes.values()) == 6\n"
        "loaded = {m.split('.')[0] if not m.startswith('kedi') else m for m in sys.modules}\n"
        "print(sorted(loaded & {'pydantic_ai', 'langchain_core', *(f'kedi.adapters.{name}' for name in ("
        "'offline', 'scripted', 'openai', 'pydantic_ai', 'langchain'))}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def pydantic_messages() -> list[Any]:
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )

    return [
        ModelRequest(
            parts=[UserPromptPart("Weather in Oslo?")], run_id="r1", conversation_id="conv-1"
        ),
        ModelResponse(
            parts=[ToolCallPart("weather", {"city": "Oslo"}, tool_call_id="t1")], model_name="m"
        ),
        ModelRequest(parts=[ToolReturnPart("weather", "rain", tool_call_id="t1")]),
        ModelResponse(parts=[TextPart("It rains.")], model_name="m"),
    ]


def pydantic_dump(messages: list[Any]) -> list[Any]:
    from pydantic_ai.messages import ModelMessagesTypeAdapter

    return list(ModelMessagesTypeAdapter.dump_python(messages, mode="json"))


def langchain_dump(messages: list[Any]) -> list[Any]:
    from langchain_core.messages import messages_to_dict

    return messages_to_dict(messages)


def langchain_messages() -> list[Any]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    return [
        HumanMessage("Weather in Oslo?", id="h1"),
        AIMessage("", tool_calls=[{"name": "weather", "args": {"city": "Oslo"}, "id": "t1"}]),
        ToolMessage("rain", tool_call_id="t1"),
        AIMessage("It rains."),
    ]


@pytest.mark.parametrize(
    ("adapter", "message_format", "messages", "framework_dump"),
    [
        ("pydantic", "pydantic-ai", pydantic_messages, pydantic_dump),
        ("langchain", "langchain", langchain_messages, langchain_dump),
    ],
)
def test_native_lanes_use_their_frameworks_serializer_found_by_short_name(
    adapter: str, message_format: str, messages: Any, framework_dump: Any
) -> None:
    original = Conversation("conv-1")
    key = LaneKey(adapter, "model-x", canonical_digest({}), format=message_format)
    native = messages()
    original.lane(key).seed(native)
    document = json.loads(original.dumps())
    assert document["lanes"][0]["format"] == message_format
    assert document["lanes"][0]["messages"] == json.loads(json.dumps(framework_dump(native)))
    loaded = Conversation.loads(json.dumps(document))
    assert list(loaded.lane(key).messages) == list(original.lane(key).messages)
    assert loaded.dumps() == original.dumps()


def test_a_given_adapter_serializes_its_lanes() -> None:
    from pydantic_ai.models.test import TestModel

    from kedi.adapters.pydantic_ai import PydanticAdapter

    class Recording(PydanticAdapter):
        loaded = 0

        def load_messages(self, data: Any) -> list[Any]:
            Recording.loaded += 1
            return super().load_messages(data)

    adapter = Recording(TestModel())
    original = Conversation()
    key = LaneKey.for_call(adapter, {})
    original.lane(key).seed(pydantic_messages())
    loaded = Conversation.loads(original.dumps(adapters=[adapter]), adapters=[adapter])
    assert Recording.loaded == 1 and len(loaded.lane(key)) == 4


class Homegrown:
    """A native-format adapter the registry does not know: only `adapters=` can find it."""

    shortname = "homegrown"
    profile = SimpleNamespace(message_format="homegrown-json")

    def dump_messages(self, messages: list[Any]) -> list[Any]:
        return [{"text": message} for message in messages]

    def load_messages(self, data: list[Any]) -> list[Any]:
        return [item["text"] for item in data]


def test_the_conversation_methods_pass_their_adapters_on(tmp_path: Path) -> None:
    key = LaneKey("homegrown", "m", "s", format="homegrown-json")
    conversation = Conversation()
    conversation.lane(key).append(["hi", "there"])
    adapters = [Homegrown()]
    text = conversation.dumps(adapters=adapters)
    assert list(Conversation.loads(text, adapters=adapters).lane(key).messages) == ["hi", "there"]
    path = tmp_path / "conversation.json"
    conversation.save(path, adapters=adapters)
    assert list(Conversation.load(path, adapters=adapters).lane(key).messages) == ["hi", "there"]


def test_a_native_lane_of_an_unknown_adapter_needs_that_adapter() -> None:
    conversation = Conversation()
    conversation.lane(LaneKey("homegrown", "m", "s", format="homegrown-json")).append([object()])
    with pytest.raises(
        HistoryError,
        match=r"homegrown-json messages of adapter 'homegrown' need that adapter .* pass it as adapters=\[\.\.\.\]",
    ):
        conversation.dumps()


def test_a_lane_whose_format_is_not_its_adapters_is_refused() -> None:
    document = json.loads(portable_conversation().dumps())
    document["lanes"][0]["key"]["adapter"] = "pydantic"
    document["lanes"][0]["format"] = "langchain"
    with pytest.raises(
        HistoryError,
        match="lanes\\[0\\]: the lane holds langchain messages but adapter 'pydantic' uses pydantic-ai messages",
    ):
        load_conversation(document)


def valid() -> dict[str, Any]:
    return json.loads(portable_conversation().dumps())


def edited(change: Any) -> dict[str, Any]:
    document = valid()
    change(document)
    return document


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ([], "the conversation document: expected a JSON object, not a list"),
        (
            {**valid(), "version": 2},
            "unsupported conversation format version 2 (this kedi reads version 1)",
        ),
        ({"conversation_id": "c", "lanes": []}, "unsupported conversation format version None"),
        (
            {**valid(), "conversation_id": ""},
            "the conversation document.conversation_id: expected a non-empty string, not ''",
        ),
        ({**valid(), "lanes": {}}, "lanes: expected a list of lanes, not an object"),
        (
            edited(lambda d: d["lanes"].__setitem__(1, "lane")),
            "lanes[1]: expected a JSON object, not a string",
        ),
        (
            edited(lambda d: d["lanes"][0].pop("key")),
            "lanes[0].key: expected a JSON object, not null",
        ),
        (
            edited(lambda d: d["lanes"][0]["key"].pop("adapter")),
            "lanes[0].key.adapter: expected a non-empty string, not None",
        ),
        (
            edited(lambda d: d["lanes"][0]["key"].__setitem__("model", 3)),
            "lanes[0].key.model: expected a string, not 3",
        ),
        (
            edited(lambda d: d["lanes"][0].pop("format")),
            "lanes[0].format: expected a non-empty string, not None",
        ),
        (
            edited(lambda d: d["lanes"][0].__setitem__("epoch", -1)),
            "lanes[0].epoch: expected an integer >= 0, not -1",
        ),
        (
            edited(lambda d: d["lanes"][0].__setitem__("epoch", True)),
            "lanes[0].epoch: expected an integer >= 0, not True",
        ),
        (
            edited(lambda d: d["lanes"][0].__setitem__("messages", "x")),
            "lanes[0].messages: expected a list, not a string",
        ),
        (
            edited(lambda d: d["lanes"][1]["messages"].append({"role": "robot"})),
            "lanes[1].messages: history message 2: invalid Message: role:",
        ),
        (
            edited(lambda d: d["lanes"].append(d["lanes"][0])),
            "lanes[2]: a second lane with the key of an earlier one",
        ),
    ],
)
def test_malformed_documents_name_the_problem(document: Any, message: str) -> None:
    with pytest.raises(HistoryError) as caught:
        load_conversation(document)
    assert str(caught.value).startswith(message)


def test_unknown_fields_are_ignored_and_missing_optional_key_parts_default() -> None:
    document = valid()
    document["saved_by"] = "a later kedi"
    document["lanes"][1]["note"] = "ignored"
    del document["lanes"][1]["key"]["mcp"], document["lanes"][1]["key"]["tools"]
    loaded = load_conversation(document)
    assert loaded.lanes[HOT_KEY].epoch == 2


def test_text_that_is_not_json_is_a_history_error() -> None:
    with pytest.raises(
        HistoryError,
        match="a saved conversation must be JSON: Expecting property name enclosed in double quotes: line 1 column 2",
    ):
        Conversation.loads("{not json")


def test_save_replaces_the_file_atomically_and_privately(tmp_path: Path) -> None:
    path = tmp_path / "conversation.json"
    path.write_text("old contents")
    conversation = portable_conversation()
    conversation.save(path)
    assert json.loads(path.read_text()) == dump_conversation(conversation)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["conversation.json"]
    assert Conversation.load(path).dumps() == conversation.dumps()


def test_a_failed_save_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "conversation.json"
    path.write_text("old contents")

    def broken_replace(source: Any, target: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(KediUsageError, match=f"cannot save to {path}: No space left on device"):
        portable_conversation().save(path)
    assert path.read_text() == "old contents"
    assert [p.name for p in tmp_path.iterdir()] == ["conversation.json"]


def test_file_problems_are_usage_errors_and_bad_contents_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(
        KediUsageError, match="cannot save to .*missing/c.json: No such file or directory"
    ):
        portable_conversation().save(tmp_path / "missing" / "c.json")
    with pytest.raises(
        KediUsageError,
        match="cannot read conversation file .*nothing.json: No such file or directory",
    ):
        Conversation.load(tmp_path / "nothing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "conversation_id": "c", "lanes": 5}')
    with pytest.raises(
        HistoryError, match=f"^{bad}: lanes: expected a list of lanes, not a number$"
    ):
        Conversation.load(bad)
