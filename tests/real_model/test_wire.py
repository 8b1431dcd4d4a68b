"""Every message shape the `openai` adapter sends, accepted by a real llama.cpp server."""

from __future__ import annotations

import anyio
import pytest

from kedi.adapters.base import CallRequest
from kedi.adapters.openai import OpenAIAdapter
from kedi.history import Message, ToolCall

pytestmark = pytest.mark.real_model


def test_the_server_accepts_every_message_shape_kedi_sends(llama_url: str) -> None:
    history = (
        Message(role="user", content="What is the weather in Paris and Atlantis?"),
        # Tool calls with no text: sent with `content: ""` (llama.cpp refuses `null`).
        Message(
            role="assistant",
            content="",
            tool_calls=[
                ToolCall(id="call_1", name="weather", args='{"city": "Paris"}'),
                ToolCall(id="call_2", name="weather", args='{"city": "Atlantis"}'),
            ],
        ),
        Message(role="tool", content='{"temp": 21}', tool_call_id="call_1", tool_name="weather"),
        Message(
            role="tool",
            content="unknown city",
            tool_call_id="call_2",
            tool_name="weather",
            failed=True,
        ),
        Message(role="assistant", content="Paris is 21 degrees; Atlantis is unknown."),
        Message(
            role="assistant",
            content="Thinking aloud.",
            tool_calls=[ToolCall(id="call_3", name="weather", args="")],
        ),
        Message(role="tool", content="{}", tool_call_id="call_3", tool_name="weather"),
    )
    request = CallRequest(
        prompt="Thanks. Reply with one word.",
        instructions="Be brief.",
        history=history,
        settings={"max_tokens": 4},
    )
    adapter = OpenAIAdapter("local", base_url=llama_url, max_retries=0)

    result = anyio.run(adapter.request, request)

    assert isinstance(result.value, str)
    assert [m.role for m in result.new_messages] == ["user", "assistant"]
