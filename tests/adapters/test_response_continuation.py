"""Response-ID continuation through Pydantic AI's OpenAI Responses model, against a local server.

The server (tests/adapters/openai_server.py) answers `POST /v1/responses` with
minimal Responses API objects and records every request body, so the tests
see exactly what each turn sent.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic_ai.messages import ModelResponse, TextPart
from pydantic_ai.models.openai import OpenAIResponsesModel
from pydantic_ai.providers.openai import OpenAIProvider

import kedi
from kedi.adapters._pydantic_state import FreshAfterEdit, continues_responses
from kedi.agent_adapter import HistoryProcessorContext, PydanticAdapter
from tests.adapters.openai_server import OpenAIServer, Reply

CHAT = kedi.compile(
    "> history: enabled\n> system: Be brief.\n[reply] << <`args.message`>\n= <reply>"
)


def response(n: int) -> dict[str, Any]:
    """A minimal Responses API object answering `reply n` with id `resp_n`."""
    return {
        "id": f"resp_{n}",
        "object": "response",
        "created_at": 1700000000,
        "model": "m",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": f"msg_{n}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": f"reply {n}", "annotations": []}],
            }
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": 5,
            "output_tokens": 2,
            "total_tokens": 7,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens_details": {"reasoning_tokens": 0},
        },
    }


pytestmark = pytest.mark.anyio


@pytest.fixture
def server() -> Iterator[OpenAIServer]:
    with OpenAIServer() as running:
        running.add(*[Reply(body=response(n)) for n in range(1, 7)])
        yield running


@pytest.fixture
async def model(server: OpenAIServer) -> AsyncIterator[OpenAIResponsesModel]:
    """A Responses model on the local server; its client is closed after the test."""
    provider = OpenAIProvider(base_url=server.base_url, api_key="sk-test")
    yield OpenAIResponsesModel("m", provider=provider)
    await provider.client.close()


def sent(server: OpenAIServer) -> list[tuple[list[str], str | None]]:
    """Per request: the input texts and the previous_response_id (None when absent)."""
    return [
        ([item["content"] for item in body["input"]], body.get("previous_response_id"))
        for body in server.bodies
    ]


async def test_later_turns_send_only_the_new_input_after_the_previous_response(
    server: OpenAIServer, model: OpenAIResponsesModel
) -> None:
    assert continues_responses(model)
    adapter, conversation = PydanticAdapter(model), kedi.Conversation()
    settings = {"temperature": 0.5}
    frozen = copy.deepcopy(settings)
    for message in ("one", "two", "three"):
        await CHAT.run(
            args={"message": message}, adapter=adapter, conversation=conversation, settings=settings
        )
    assert sent(server) == [(["one"], None), (["two"], "resp_1"), (["three"], "resp_2")]
    assert all(body["instructions"] == "Be brief." for body in server.bodies)
    assert settings == frozen  # the caller's settings object is never mutated
    # The lane keeps the run's id on every message, the call's id in metadata.
    (lane,) = conversation.lanes.values()
    assert all(
        m.run_id == m.metadata["kedi_run_id"] != m.metadata["kedi_call_id"] for m in lane.messages
    )


def drop_first_cycle(ctx: HistoryProcessorContext[Any]) -> list[Any]:
    """From the fourth user turn on, drop the oldest closed cycle."""
    eligible = [g for g in ctx.groups if g.closed and not g.protected]
    if len(eligible) < 3:
        return list(ctx.messages)
    return [m for g in ctx.groups if g is not eligible[0] for m in ctx.group_messages(g)]


async def test_after_an_edit_the_full_edited_history_is_sent_then_continuation_resumes(
    server: OpenAIServer, model: OpenAIResponsesModel
) -> None:
    adapter = PydanticAdapter(model, history_processor=drop_first_cycle)
    conversation = kedi.Conversation()
    for message in ("one", "two", "three", "four", "five"):
        await CHAT.run(args={"message": message}, adapter=adapter, conversation=conversation)
    assert sent(server) == [
        (["one"], None),
        (["two"], "resp_1"),
        (["three"], "resp_2"),
        # The edit dropped "one": the request carries the whole edited history, no stale id.
        (["two", "reply 2", "three", "reply 3", "four"], None),
        # The edit of turn five drops "two"; turn four's response predates it, so again in full.
        (["three", "reply 3", "four", "reply 4", "five"], None),
    ]


async def test_continuation_can_be_turned_off_and_server_conversations_are_never_used(
    server: OpenAIServer, model: OpenAIResponsesModel
) -> None:
    adapter, conversation = PydanticAdapter(model), kedi.Conversation()
    settings = {"openai_previous_response_id": False}
    for message in ("one", "two"):
        await CHAT.run(
            args={"message": message}, adapter=adapter, conversation=conversation, settings=settings
        )
    assert sent(server) == [(["one"], None), (["one", "reply 1", "two"], None)]
    # A server conversation is not a setting the adapter takes: refused before anything is sent.
    with pytest.raises(kedi.KediError, match="does not take the setting `openai_conversation_id`"):
        await CHAT.run(
            args={"message": "three"},
            adapter=adapter,
            conversation=conversation,
            settings={"openai_conversation_id": "conv_old"},
        )
    assert len(server.bodies) == 2


@dataclass
class FakeRequestContext:
    """The one field of Pydantic AI's `ModelRequestContext` the guard reads."""

    model_settings: dict[str, Any] = field(
        default_factory=lambda: {"openai_previous_response_id": "auto", "temperature": 0}
    )


@dataclass
class FakeCall:
    stale: bool = True


async def test_the_first_request_after_an_edit_drops_previous_response_id_until_a_new_response() -> (
    None
):
    call = FakeCall()
    guard = FreshAfterEdit(call)  # type: ignore[arg-type]
    context = FakeRequestContext()
    fresh: Any = await guard.before_model_request(None, context)  # type: ignore[arg-type]
    assert fresh.model_settings == {"temperature": 0}
    assert context.model_settings == {
        "openai_previous_response_id": "auto",
        "temperature": 0,
    }  # not mutated
    reply = ModelResponse(parts=[TextPart("ok")])
    assert await guard.after_model_request(None, request_context=context, response=reply) is reply  # type: ignore[arg-type]
    assert not call.stale
    assert await guard.before_model_request(None, context) is context  # type: ignore[arg-type]
