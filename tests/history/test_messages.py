"""The portable message contract (C1), the args rule and C4."""

from __future__ import annotations

import copy
import gc
import json
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest

from kedi.errors import HistoryError
from kedi.history import (
    INTERRUPTED_RESULT,
    Message,
    Part,
    ThinkingBlock,
    ToolCall,
    as_messages,
    interrupted_result,
    is_truncated_args,
    wire_tool_arguments,
)

GOLDEN = Path(__file__).with_name("golden_history_v1.json")


def compact(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


# --------------------------------------------------------------------------- golden file


def test_golden_history_loads_and_redumps_identically() -> None:
    data = json.loads(GOLDEN.read_text(encoding="utf-8"))
    assert len(data) == 9
    messages = [Message.model_validate(item) for item in data]
    # Text-identical, key order included: the stored format is stable.
    for item, message in zip(data, messages, strict=True):
        assert message.model_dump_json(by_alias=True, exclude_defaults=True) == compact(item)
        assert message.to_json_dict() == item


def test_golden_history_python_values() -> None:
    messages = [
        Message.model_validate(item) for item in json.loads(GOLDEN.read_text(encoding="utf-8"))
    ]
    calls = messages[2].tool_calls
    assert calls[0].args == '{"path":"a.txt","lines":[1,2.5],"raw":null,"deep":true}'
    assert calls[1].args == '{"query": "cats", "limit": 1'
    assert calls[1].signature == "sig-call-2"
    assert calls[2].args == ""
    assert calls[3].args == '{"a": 1}'
    assert calls[4].args == '"just a string"'
    assert messages[2].thinking[1] == ThinkingBlock(redacted="ZW5jcnlwdGVkIHJlYXNvbmluZw==")
    assert messages[4].failed is True
    assert messages[5].content == INTERRUPTED_RESULT
    assert messages[1].parts[1] == Part(
        kind="document", data="JVBERi0xLjQK", media_type="application/pdf"
    )
    assert messages[0].run_id == "01900000-0000-7000-8000-000000000001"
    assert messages[0].conversation_id == "01900000-0000-7000-8000-0000000000c0"


def test_golden_history_survives_model_dump_json_roundtrip() -> None:
    messages = [
        Message.model_validate(item) for item in json.loads(GOLDEN.read_text(encoding="utf-8"))
    ]
    for message in messages:
        text = message.model_dump_json(by_alias=True, exclude_defaults=True)
        assert Message.model_validate_json(text) == message


# --------------------------------------------------------------------------- JSON shape


def test_only_role_is_written_when_everything_is_empty() -> None:
    assert Message(role="user").to_json_dict() == {"role": "user"}
    assert (
        Message(role="assistant").model_dump_json(by_alias=True, exclude_defaults=True)
        == '{"role":"assistant"}'
    )


def test_keys_are_lower_camel_and_attributes_snake_case() -> None:
    message = Message(
        role="tool", tool_call_id="c1", tool_name="f", run_id="r", conversation_id="k", content="x"
    )
    assert message.to_json_dict() == {
        "role": "tool",
        "content": "x",
        "toolCallId": "c1",
        "toolName": "f",
        "runId": "r",
        "conversationId": "k",
    }
    assert Message.model_validate(message.to_json_dict()) == message


def test_input_accepts_both_spellings_and_ignores_unknown_keys() -> None:
    by_alias = Message.model_validate({"role": "tool", "toolCallId": "c1", "futureField": {"x": 1}})
    by_name = Message.model_validate({"role": "tool", "tool_call_id": "c1"})
    assert by_alias == by_name
    assert by_alias.tool_call_id == "c1"
    assert "futureField" not in by_alias.to_json_dict()


def test_part_media_type_alias() -> None:
    part = Part(kind="image", data="AAAA", media_type="image/png")
    assert part.to_json_dict() == {"kind": "image", "data": "AAAA", "mediaType": "image/png"}


def test_null_content_is_empty_content() -> None:
    message = Message.model_validate(
        {"role": "assistant", "content": None, "toolCalls": [{"id": "c", "name": "f"}]}
    )
    assert message.content == ""


def test_messages_are_frozen() -> None:
    message = Message(role="user", content="hi")
    with pytest.raises(Exception, match="frozen"):
        message.content = "changed"  # type: ignore[misc]
    assert message.model_copy(update={"content": "changed"}).content == "changed"
    assert message.content == "hi"


def test_messages_pickle() -> None:
    data = json.loads(GOLDEN.read_text(encoding="utf-8"))
    messages = [Message.model_validate(item) for item in data]
    assert pickle.loads(pickle.dumps(messages)) == messages


# --------------------------------------------------------------------------- tool-call args


@pytest.mark.parametrize(
    ("raw", "json_value"),
    [
        ('{"a":1}', {"a": 1}),
        ("[1,2]", [1, 2]),
        ("3", 3),
        ("null", None),
        ('{"x":"é"}', {"x": "é"}),
        # Not canonical compact JSON, a JSON string literal, or not JSON: a string.
        ('{"a": 1}', '{"a": 1}'),
        ('"hi"', '"hi"'),
        ("hi", "hi"),
        ('{"a":', '{"a":'),
        ("NaN", "NaN"),
        ('{"a":NaN}', '{"a":NaN}'),
        ("1e5", "1e5"),
    ],
)
def test_args_json_form(raw: str, json_value: Any) -> None:
    call = ToolCall(id="c", name="f", args=raw)
    assert call.to_json_dict()["args"] == json_value
    assert (
        ToolCall.model_validate_json(
            call.model_dump_json(by_alias=True, exclude_defaults=True)
        ).args
        == raw
    )
    assert ToolCall.model_validate(call.to_json_dict()).args == raw


def test_args_given_as_python_values_are_stored_as_compact_json() -> None:
    assert (
        ToolCall(id="c", name="f", args={"b": [1, {"c": None}], "a": "é"}).args
        == '{"b":[1,{"c":null}],"a":"é"}'
    )  # type: ignore[arg-type]
    assert ToolCall(id="c", name="f", args=[1, 2]).args == "[1,2]"  # type: ignore[arg-type]


def test_args_string_holding_canonical_json_reloads_to_the_same_raw_text() -> None:
    # Externally written JSON may store canonical JSON as a string; meaning is kept.
    call = ToolCall.model_validate({"id": "c", "name": "f", "args": '{"a":1}'})
    assert call.args == '{"a":1}'
    assert call.to_json_dict()["args"] == {"a": 1}


def test_plain_model_dump_keeps_raw_text() -> None:
    call = ToolCall(id="c", name="f", args='{"a":1}')
    assert call.model_dump()["args"] == '{"a":1}'


def test_empty_signature_is_absent() -> None:
    assert ToolCall(id="c", name="f", signature="").to_json_dict() == {"id": "c", "name": "f"}


# --------------------------------------------------------------------------- C4


@pytest.mark.parametrize(
    ("raw", "wire"),
    [
        ("", {}),
        ("  \n\t", {}),
        ('{"a": 1}', {"a": 1}),
        ('  {"a": [1, 2]}  \n', {"a": [1, 2]}),
        ('{"a": 1', {"truncated_args": '{"a": 1'}),
        (' {"a": 1 ', {"truncated_args": ' {"a": 1 '}),
        ("[1, 2]", {"truncated_args": "[1, 2]"}),
        ('"text"', {"truncated_args": '"text"'}),
        ("42", {"truncated_args": "42"}),
        ("null", {"truncated_args": "null"}),
        ("true", {"truncated_args": "true"}),
        ('{"a": NaN}', {"truncated_args": '{"a": NaN}'}),
        ('{"a": Infinity}', {"truncated_args": '{"a": Infinity}'}),
        ('{"a": 1,}', {"truncated_args": '{"a": 1,}'}),
        ("{'a': 1}", {"truncated_args": "{'a': 1}"}),
    ],
)
def test_wire_tool_arguments(raw: str, wire: dict[str, Any]) -> None:
    assert wire_tool_arguments(raw) == wire
    assert is_truncated_args(raw) is ("truncated_args" in wire)
    assert ToolCall(id="c", name="f", args=raw).truncated is ("truncated_args" in wire)


# --------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (
            {"role": "robot"},
            "invalid Message: role: Input should be 'system', 'user', 'assistant' or 'tool'",
        ),
        (
            {"role": "user", "parts": [{"kind": "image"}]},
            "invalid Message: parts.0: a part of kind 'image' needs exactly one of url or data",
        ),
        (
            {
                "role": "user",
                "parts": [
                    {
                        "kind": "image",
                        "url": "https://x/a.png",
                        "data": "AAAA",
                        "mediaType": "image/png",
                    }
                ],
            },
            "invalid Message: parts.0: a part of kind 'image' needs exactly one of url or data",
        ),
        (
            {"role": "user", "parts": [{"kind": "audio", "data": "AAAA"}]},
            "invalid Message: parts.0: a part of kind 'audio' with inline data needs a mediaType",
        ),
        (
            {
                "role": "user",
                "parts": [{"kind": "video", "data": "not base64!", "mediaType": "video/mp4"}],
            },
            "invalid Message: parts.0: the data of a part of kind 'video' is not valid base64",
        ),
        (
            {"role": "user", "parts": [{"kind": "sticker", "url": "https://x"}]},
            "invalid Message: parts.0.kind: Input should be 'image', 'document', 'audio' or 'video'",
        ),
        (
            {"role": "assistant", "parts": [{"kind": "image", "url": "https://x/a.png"}]},
            "invalid Message: parts is only allowed on tool and user messages, not on assistant",
        ),
        (
            {"role": "user", "thinking": [{"text": "hmm"}]},
            "invalid Message: thinking is only allowed on assistant messages, not on user",
        ),
        (
            {"role": "tool", "toolCalls": [{"id": "c", "name": "f"}]},
            "invalid Message: toolCalls is only allowed on assistant messages, not on tool",
        ),
        (
            {"role": "user", "toolCallId": "c"},
            "invalid Message: toolCallId is only allowed on tool messages, not on user",
        ),
        (
            {"role": "assistant", "failed": True},
            "invalid Message: failed is only allowed on tool messages, not on assistant",
        ),
        (
            {"role": "assistant", "thinking": [{}]},
            "invalid Message: thinking.0: a thinking block needs text, signature or redacted",
        ),
        (
            {"role": "assistant", "thinking": [{"text": "a", "redacted": "b"}]},
            "invalid Message: thinking.0: a thinking block is either readable text or redacted, not both",
        ),
        (
            {"role": "assistant", "toolCalls": [{"name": "f"}]},
            "invalid Message: toolCalls.0.id: Field required",
        ),
    ],
)
def test_invalid_messages_raise_history_error(data: dict[str, Any], message: str) -> None:
    with pytest.raises(HistoryError) as caught:
        Message.model_validate(data)
    assert str(caught.value) == message
    assert isinstance(caught.value, ValueError)


def test_direct_construction_raises_history_error() -> None:
    with pytest.raises(
        HistoryError,
        match=r"^invalid Part: a part of kind 'image' needs exactly one of url or data$",
    ):
        Part(kind="image")
    with pytest.raises(
        HistoryError, match=r"^invalid Message: thinking is only allowed on assistant messages"
    ):
        Message(role="tool", thinking=[ThinkingBlock(text="x")])


def test_invalid_json_text_raises_history_error() -> None:
    with pytest.raises(HistoryError, match="^invalid Message: Invalid JSON"):
        Message.model_validate_json('{"role": ')


def test_signature_only_thinking_block_is_valid() -> None:
    assert ThinkingBlock(signature="s").to_json_dict() == {"signature": "s"}


# --------------------------------------------------------------------------- helpers


def test_interrupted_result_shape() -> None:
    result = interrupted_result(ToolCall(id="c1", name="lookup"))
    assert result.to_json_dict() == {
        "role": "tool",
        "content": "Tool call was interrupted before execution; no result was produced. "
        "Call the tool again if you need its result.",
        "toolCallId": "c1",
        "toolName": "lookup",
    }
    assert "toolName" not in interrupted_result(ToolCall(id="c1", name="")).to_json_dict()
    stamped = interrupted_result(ToolCall(id="c1", name="f"), run_id="r", conversation_id="k")
    assert (stamped.run_id, stamped.conversation_id) == ("r", "k")


@pytest.mark.parametrize("name", ["lookup", ""])
def test_an_unstamped_interrupted_result_is_what_validation_builds(name: str) -> None:
    call = ToolCall(id="c1", name=name)
    result = interrupted_result(call)  # copied from a template, not validated
    validated = Message(
        role="tool",
        content=INTERRUPTED_RESULT,
        tool_call_id="c1",
        tool_name=name,
        run_id="",
        conversation_id="",
    )
    assert result == validated and list(vars(result).items()) == list(vars(validated).items())
    assert result.model_fields_set is validated.model_fields_set  # the shared set
    assert interrupted_result(ToolCall(id="c2", name="g")).tool_call_id == "c2"  # no sharing
    with pytest.raises(ValueError, match="frozen"):
        result.content = "changed"  # type: ignore[misc]
    for clone in (pickle.loads(pickle.dumps(result)), copy.deepcopy(result)):
        assert clone == result
    assert Message.model_validate(result.to_json_dict()) == result


def test_synthesized_results_are_small_and_outside_the_cyclic_collector() -> None:
    # Repair may synthesize one result per call left open: each is a copy of
    # a template field dict on a shared key table, which CPython's collector
    # does not scan (see `_untracked_unstamped_fields`).
    result = interrupted_result(ToolCall(id="c1", name="lookup"))
    validated = Message(
        role="tool", content=INTERRUPTED_RESULT, tool_call_id="c1", tool_name="lookup"
    )
    if sys.implementation.name == "cpython" and sys.version_info[:2] == (3, 11):
        assert not gc.is_tracked(vars(result))
        assert sys.getsizeof(vars(result)) < 0.6 * sys.getsizeof(vars(validated))
    # Storing a container in a copy makes CPython track it again, so the
    # collector still sees whatever a changed copy refers to.
    changed = result.model_copy(update={"parts": [Part(kind="image", url="https://x.test/a.png")]})
    assert gc.is_tracked(vars(changed))
    assert changed.parts[0].url == "https://x.test/a.png" and result.parts == []
    assert result.model_copy(update={"content": "other"}).content == "other"


def test_as_messages_accepts_messages_and_dicts_without_mutating() -> None:
    data = [{"role": "user", "content": "hi"}, Message(role="assistant", content="yo")]
    before = copy.deepcopy(data)
    messages = as_messages(data)
    assert messages == [Message(role="user", content="hi"), Message(role="assistant", content="yo")]
    assert messages[1] is data[1]
    assert data == before
    assert as_messages(iter(data)) == messages


@pytest.mark.parametrize(
    ("history", "message"),
    [
        ("hello", "a history is a sequence of messages, not a str"),
        ({"role": "user"}, "a history is a sequence of messages, not a dict"),
        (42, "a history is a sequence of messages, not a int"),
        (
            [{"role": "user"}, "hi"],
            "history message 1 is a str; expected a kedi Message or a dict in the C1 shape",
        ),
        (
            [{"role": "user"}, {"role": "nobody"}],
            "history message 1: invalid Message: role: Input should be",
        ),
    ],
)
def test_as_messages_rejects_bad_history(history: Any, message: str) -> None:
    with pytest.raises(HistoryError) as caught:
        as_messages(history)
    assert str(caught.value).startswith(message)
