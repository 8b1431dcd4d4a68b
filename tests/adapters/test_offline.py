"""The offline model: deterministic text and schema-valid structured replies."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from pydantic import Field

from kedi.adapters.base import CallRequest, Exchange, ToolSpec
from kedi.adapters.offline import OfflineAdapter, offline_text
from kedi.errors import OutputValidationError
from kedi.history import Message, estimate_tokens
from kedi.redaction import redact_text
from tests.adapters.helpers import CONVERSATION, RUN, call, spec

pytestmark = pytest.mark.anyio


async def test_text_reply_echoes_the_prompt() -> None:
    result = await OfflineAdapter().request(call("Say hello"))
    assert result.value == "[offline] Say hello"
    assert [m.to_json_dict() for m in result.new_messages] == [
        {"role": "user", "content": "Say hello", "runId": RUN, "conversationId": CONVERSATION},
        {
            "role": "assistant",
            "content": "[offline] Say hello",
            "runId": RUN,
            "conversationId": CONVERSATION,
        },
    ]


def test_text_replies_differ_for_prompts_that_look_alike() -> None:
    shared = "x" * 60
    long_a, long_b = offline_text(shared + "a"), offline_text(shared + "b")
    assert long_a != long_b
    assert long_a.startswith(f"[offline] {shared}… #")
    assert offline_text("a  b") != offline_text("a b")
    assert offline_text("line one\nline two").startswith("[offline] line one line two… #")
    assert offline_text("Say hello") == offline_text("Say hello")


SECRETS_CUT_SHORT = [
    # (what stands at the 60th character, where the secret comes from)
    ("sk-abcdefghijklmnopqrstuvwx", None),  # token-shaped: `sk-` and 12 more is a key
    ("https://user:hunter2hunter2@example.test/v1", None),  # URL credentials, cut before `@`
    ("Zq8vLm2Np4Rt6Xw9", "MY_SERVICE_TOKEN"),  # a known secret: an environment variable's
]


@pytest.mark.parametrize(("secret", "variable"), SECRETS_CUT_SHORT)
def test_a_cut_never_leaves_a_secrets_prefix_that_redaction_misses(
    secret: str, variable: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if variable is not None:
        monkeypatch.setenv(variable, secret)
    prompt = "x" * 52 + " " + secret + " and then some more words"
    reply = offline_text(prompt)
    assert secret[:4] not in reply  # the cut word is left out whole
    assert reply.startswith("[offline] " + "x" * 52 + "… #")
    assert redact_text(reply) == reply  # nothing for redaction to find either


async def test_structured_reply_is_validated_captures_and_compact_json() -> None:
    output = spec(
        city=(str, ...),
        founded=(dt.date, ...),
        code=(str, Field(pattern=r"^[A-Z]{3}$")),
        population=(int, Field(gt=1000)),
    )
    result = await OfflineAdapter().request(call("Describe a city", output=output))
    assert result.value == {
        "city": "city",
        "founded": dt.date(2000, 1, 1),
        "code": "AAA",
        "population": 1001,
    }
    reply = result.new_messages[-1]
    assert reply.role == "assistant"
    assert reply.content == '{"city":"city","founded":"2000-01-01","code":"AAA","population":1001}'
    assert (reply.run_id, reply.conversation_id) == (RUN, CONVERSATION)


async def test_same_request_twice_gives_equal_results() -> None:
    output = spec(names=(list[str], Field(min_length=2)), when=(dt.datetime, ...))
    adapter = OfflineAdapter()
    request = call("List names", output=output, settings={"temperature": 0.9, "seed": 3})
    first, second = await adapter.request(request), await adapter.request(request)
    assert first == second
    other = await adapter.request(call("List names", output=output, settings={"temperature": 0.1}))
    assert other.value == first.value


async def test_turn_excludes_instructions_and_history_and_records_one_exchange() -> None:
    history = (
        Message(role="system", content="old system prompt"),
        Message(role="user", content="earlier"),
        Message(role="assistant", content="reply"),
    )
    exchanges: list[Exchange] = []
    output = spec(answer=(str, ...))
    result = await OfflineAdapter().request(
        call(
            "Now this",
            instructions="Be terse.",
            history=history,
            output=output,
            on_exchange=exchanges.append,
        )
    )
    assert [m.role for m in result.new_messages] == ["user", "assistant"]
    assert result.new_messages[0].content == "Now this"
    [exchange] = exchanges
    assert exchange.messages == (
        {"role": "system", "content": "Be terse."},
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "reply"},
        {"role": "user", "content": "Now this", "runId": RUN, "conversationId": CONVERSATION},
    )
    assert exchange.response == {
        "role": "assistant",
        "content": '{"answer":"answer"}',
        "runId": RUN,
        "conversationId": CONVERSATION,
    }
    assert exchange.output_schema == output.json_schema
    assert exchange.tools == ()


async def test_usage_is_a_deterministic_estimate() -> None:
    result = await OfflineAdapter().request(call("Count me", instructions="Short."))
    sent = [Message(role="system", content="Short."), *result.new_messages[:1]]
    assert result.usage.requests == 1
    assert result.usage.input_tokens == estimate_tokens(sent)
    assert result.usage.output_tokens == estimate_tokens(result.new_messages[1:])
    assert result.usage.tool_calls == 0


async def test_tools_are_accepted_but_never_called() -> None:
    called: list[Any] = []

    async def lookup(args: Any) -> str:
        called.append(args)
        return "found"

    tool = ToolSpec("lookup", "Look something up.", {"type": "object", "properties": {}}, lookup)
    exchanges: list[Exchange] = []
    result = await OfflineAdapter().request(
        call("Find it", tools=(tool,), on_exchange=exchanges.append)
    )
    assert result.value == "[offline] Find it"
    assert called == []
    assert exchanges[0].tools == ("lookup",)


async def test_identity_is_resolved_when_the_request_has_none() -> None:
    history = (Message(role="user", content="hi", conversation_id="conv-from-history"),)
    result = await OfflineAdapter().request(CallRequest(prompt="again", history=history))
    run_ids = {m.run_id for m in result.new_messages}
    assert len(run_ids) == 1 and run_ids != {""}
    assert {m.conversation_id for m in result.new_messages} == {"conv-from-history"}


async def test_unsatisfiable_schema_names_the_field_and_suggests_a_script() -> None:
    output = spec(word=(str, Field(pattern=r"^\d+$", max_length=0)))
    with pytest.raises(OutputValidationError) as caught:
        await OfflineAdapter().request(call("x", output=output, origin="flow.kedi:3"))
    message = str(caught.value)
    assert "flow.kedi:3" in message
    assert "word:" in message
    assert "script:" in message


def test_model_name_and_profile() -> None:
    assert OfflineAdapter().model_name == "offline"
    assert OfflineAdapter("offline-large").model_name == "offline-large"
    profile = OfflineAdapter.profile
    assert (profile.structured_output, profile.tools, profile.offline, profile.history) == (
        True,
        True,
        True,
        True,
    )
    assert {"temperature", "max_tokens", "top_p", "seed", "stop"} <= profile.settings
    assert OfflineAdapter.shortname == "offline"


async def test_reply_content_is_json_of_what_validated() -> None:
    output = spec(tags=(set[int], Field(min_length=3)), ratio=(float, Field(gt=0.5, lt=0.6)))
    result = await OfflineAdapter().request(call("x", output=output))
    assert output.validate_json(result.new_messages[-1].content) == result.value
    assert json.loads(result.new_messages[-1].content)["tags"] == [0, 1, 2]
