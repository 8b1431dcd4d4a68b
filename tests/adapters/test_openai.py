"""The `openai` adapter against a real chat-completions server on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from pydantic import BaseModel

from kedi.adapters import capability_cache, create_adapter
from kedi.adapters._openai_wire import retry_after, strict_schema
from kedi.adapters._sse import sse_payloads
from kedi.adapters.base import CallRequest, Exchange, OutputSpec, ToolSpec, Usage
from kedi.adapters.endpoint import command_line_options
from kedi.adapters.openai import OpenAIAdapter
from kedi.errors import (
    AdapterError,
    AuthenticationError,
    CapabilityError,
    ContextLengthError,
    HistoryProcessingError,
    HistoryProcessingValidationError,
    HistoryShapeError,
    KediConfigError,
    ModelNotFoundError,
    OutputValidationError,
    ProviderError,
    RateLimitError,
)
from kedi.history import Message, Part, ToolCall
from tests.adapters.openai_server import (
    MODEL,
    OpenAIServer,
    Reply,
    chunk,
    completion,
    error_body,
    sse,
    tool_call,
)

KEY = "sk-test-secret-4242"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_openai_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


def make(server: OpenAIServer, **options: Any) -> OpenAIAdapter:
    return OpenAIAdapter(MODEL, base_url=server.base_url, api_key=KEY, **options)


class City(BaseModel):
    name: str
    population: int
    country: str = "France"


CITY = OutputSpec(City, City.model_json_schema())
CITY_JSON = '{"name": "Paris", "population": 2100000, "country": "France"}'
CITY_VALUE = {"name": "Paris", "population": 2100000, "country": "France"}


def stamped(
    run_id: str = "run-1", conversation_id: str = "conv-1", **fields: Any
) -> dict[str, Any]:
    return {**fields, "runId": run_id, "conversationId": conversation_id}


def dumped(messages: Any) -> list[dict[str, Any]]:
    return [message.to_json_dict() for message in messages]


def call(prompt: str = "Capital of France?", **fields: Any) -> CallRequest:
    return CallRequest(prompt=prompt, run_id="run-1", conversation_id="conv-1", **fields)


def weather_tool(seen: list[Mapping[str, Any]]) -> ToolSpec:
    async def handler(args: Mapping[str, Any]) -> Any:
        seen.append(dict(args))
        if args["city"] == "Atlantis":
            raise ValueError("unknown city Atlantis")
        return {"temp": 21}

    parameters = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }
    return ToolSpec("get_weather", "Current weather of a city.", parameters, handler)


# --------------------------------------------------------------------------- plain replies


@pytest.mark.anyio
async def test_text_reply_sends_the_request_and_returns_the_stamped_turn(
    server: OpenAIServer,
) -> None:
    server.add(Reply(body=completion("Paris", usage=(12, 3))))
    exchanges: list[Exchange] = []
    result = await make(server).request(
        call(instructions="Be terse.", on_exchange=exchanges.append)
    )

    assert result.value == "Paris"
    [received] = server.received
    assert received.path == "/v1/chat/completions"
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.body == {
        "model": MODEL,
        "messages": [
            {"role": "system", "content": "Be terse."},
            {"role": "user", "content": "Capital of France?"},
        ],
    }
    assert dumped(result.new_messages) == [
        stamped(role="user", content="Capital of France?"),
        stamped(role="assistant", content="Paris"),
    ]
    assert result.usage == Usage(input_tokens=12, output_tokens=3, requests=1)
    [exchange] = exchanges
    assert exchange.messages == (
        {"role": "system", "content": "Be terse."},
        stamped(role="user", content="Capital of France?"),
    )
    assert exchange.response == stamped(role="assistant", content="Paris")
    assert exchange.output_schema is None and exchange.tools == ()


@pytest.mark.anyio
async def test_a_streamed_reply_assembles_content_and_tool_calls_split_across_chunks(
    server: OpenAIServer,
) -> None:
    def piece(index: int, arguments: str, **first: str) -> dict[str, Any]:
        function = {"arguments": arguments}
        call: dict[str, Any] = {"index": index, "function": function}
        if first:
            call.update(id=first["id"], type="function")
            function["name"] = first["name"]
        return chunk({"tool_calls": [call]})

    tool_stream = sse(
        chunk({"role": "assistant", "content": ""}),
        piece(0, "", id="call_1", name="get_weather"),
        piece(1, '{"ci', id="call_2", name="get_weather"),
        piece(0, '{"city": '),
        piece(1, 'ty": "Rome"}'),
        piece(0, '"Paris"}'),
        chunk(finish_reason="tool_calls"),
        chunk(usage=(10, 5)),
    )
    text_stream = [": keep-alive", ""] + sse(
        chunk({"role": "assistant", "content": ""}),
        chunk({"content": "Sunny, "}),
        chunk({"content": "21 degrees."}),
        chunk(finish_reason="stop"),
        chunk(usage=(30, 7)),
    )
    server.add(Reply(events=tool_stream), Reply(events=text_stream))
    seen: list[Mapping[str, Any]] = []
    result = await make(server, stream=True).request(call("Weather?", tools=(weather_tool(seen),)))

    assert result.value == "Sunny, 21 degrees."
    assert seen == [{"city": "Paris"}, {"city": "Rome"}]
    first = server.bodies[0]
    assert first["stream"] is True and first["stream_options"] == {"include_usage": True}
    assistant = dumped(result.new_messages)[1]
    assert assistant["toolCalls"] == [
        {"id": "call_1", "name": "get_weather", "args": '{"city": "Paris"}'},
        {"id": "call_2", "name": "get_weather", "args": '{"city": "Rome"}'},
    ]
    assert result.usage == Usage(input_tokens=40, output_tokens=12, requests=2, tool_calls=2)


# --------------------------------------------------------------------------- structured output


@pytest.mark.anyio
async def test_json_schema_mode_sends_a_strict_response_format_and_keeps_the_json_text(
    server: OpenAIServer,
) -> None:
    server.add(Reply(body=completion(CITY_JSON)))
    exchanges: list[Exchange] = []
    result = await make(server).request(call(output=CITY, on_exchange=exchanges.append))

    assert result.value == CITY_VALUE
    response_format = server.bodies[0]["response_format"]
    assert response_format["type"] == "json_schema"
    schema = response_format["json_schema"]
    assert schema["name"] == "City" and schema["strict"] is True
    # Strict mode: closed objects, every property required, no defaults.
    assert schema["schema"]["additionalProperties"] is False
    assert schema["schema"]["required"] == ["name", "population", "country"]
    assert "default" not in schema["schema"]["properties"]["country"]
    assert "tools" not in server.bodies[0]
    assert dumped(result.new_messages)[1] == stamped(role="assistant", content=CITY_JSON)
    assert exchanges[0].output_schema == CITY.json_schema


@pytest.mark.anyio
async def test_tool_mode_closes_the_output_call_so_the_next_turn_is_pair_valid(
    server: OpenAIServer,
) -> None:
    args = '{"name": "Paris", "population": 2100000}'
    server.add(
        Reply(body=completion(tool_calls=[tool_call("call_9", "final_result", args)])),
        Reply(body=completion("Lyon is smaller.")),
    )
    adapter = make(server, structured_mode="tool")
    result = await adapter.request(call(output=CITY))

    assert result.value == CITY_VALUE
    body = server.bodies[0]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "final_result"}}
    [tool] = body["tools"]
    assert tool["function"]["name"] == "final_result" and tool["function"]["strict"] is True
    assert "response_format" not in body
    assert dumped(result.new_messages) == [
        stamped(role="user", content="Capital of France?"),
        stamped(
            role="assistant", toolCalls=[{"id": "call_9", "name": "final_result", "args": args}]
        ),
        stamped(
            role="tool",
            content="Final result processed.",
            toolCallId="call_9",
            toolName="final_result",
        ),
    ]
    follow_up = await adapter.request(call("And Lyon?", history=result.new_messages))
    assert follow_up.value == "Lyon is smaller."
    assert [m["role"] for m in server.bodies[1]["messages"]] == [
        "user",
        "assistant",
        "tool",
        "user",
    ]
    assert server.bodies[1]["messages"][2] == {
        "role": "tool",
        "tool_call_id": "call_9",
        "content": "Final result processed.",
    }


@pytest.mark.anyio
async def test_auto_mode_uses_a_tool_for_a_schema_with_no_strict_form(server: OpenAIServer) -> None:
    class Scores(BaseModel):
        by_name: dict[str, int]

    spec = OutputSpec(Scores, Scores.model_json_schema())
    args = '{"by_name": {"ada": 3}}'
    server.add(Reply(body=completion(tool_calls=[tool_call("c1", "final_result", args)])))
    result = await make(server).request(call(output=spec))

    assert result.value == {"by_name": {"ada": 3}}
    [tool] = server.bodies[0]["tools"]
    assert tool["function"]["parameters"] == spec.json_schema and "strict" not in tool["function"]


@pytest.mark.anyio
async def test_auto_mode_steps_down_when_the_server_rejects_response_format(
    server: OpenAIServer,
) -> None:
    server.add(
        Reply(400, error_body("response_format 'json_schema' is not supported by this model")),
        Reply(body=completion(CITY_JSON)),
        Reply(body=completion(CITY_JSON)),
    )
    adapter = make(server, max_retries=0)
    first = await adapter.request(call(output=CITY))
    second = await adapter.request(call(output=CITY))

    assert first.value == second.value == CITY_VALUE
    assert server.bodies[0]["response_format"]["type"] == "json_schema"
    # The rejected request is no part of the call, and the adapter remembers the model's limits.
    assert first.usage.requests == 1
    formats = [body["response_format"] for body in server.bodies[1:]]
    assert formats == [{"type": "json_object", "schema": strict_schema(CITY.json_schema)}] * 2
    # json_object mode also puts the schema in the instructions (OpenAI wants JSON named there).
    assert '"population"' in server.bodies[1]["messages"][0]["content"]


LLAMA_CPP_REJECTION = {
    "error": {
        "message": "1 validation error: {'type': 'literal_error', 'loc': ('body', "
        "'response_format', 'type'), 'msg': \"Input should be 'text' or 'json_object'\"}",
        "type": "internal_server_error",
        "param": None,
        "code": None,
    }
}
"""What llama.cpp's server (llama-cpp-python 0.3.36) answers to a json_schema response_format."""


@pytest.mark.anyio
async def test_a_500_naming_response_format_steps_down_at_once_and_is_remembered_across_runs(
    server: OpenAIServer,
) -> None:
    server.add(Reply(500, LLAMA_CPP_REJECTION), Reply(body=completion(CITY_JSON)))
    exchanges: list[Exchange] = []
    result = await make(server).request(call(output=CITY, on_exchange=exchanges.append))

    assert result.value == CITY_VALUE
    # Not retried as a transient 500: one rejected request, then json_object.
    assert [body["response_format"]["type"] for body in server.bodies] == [
        "json_schema",
        "json_object",
    ]
    assert [(e.mode, e.attempt, e.failed) for e in exchanges] == [
        ("json_schema", 1, True),
        ("json_object", 2, False),
    ]
    assert "HTTP 500" in (exchanges[0].error or "")

    # A new process (the in-memory cache forgotten) reads the file and starts in json_object.
    capability_cache.forget_all()
    server.add(Reply(body=completion(CITY_JSON)))
    await make(server).request(call(output=CITY))
    assert server.bodies[2]["response_format"]["type"] == "json_object"
    cached = json.loads(capability_cache.cache_path().read_text())
    assert cached["structured_modes"] == {f"{server.base_url} {MODEL}": "json_object"}


@pytest.mark.anyio
async def test_auto_mode_steps_all_the_way_down_to_prompted(server: OpenAIServer) -> None:
    server.add(
        Reply(400, error_body("bad", param="response_format")),
        Reply(422, {"detail": [{"loc": ["body", "response_format"], "msg": "extra"}]}),
        Reply(400, error_body("this model does not support tools")),
        Reply(body=completion(f"```json\n{CITY_JSON}\n```")),
    )
    result = await make(server).request(call(output=CITY))

    assert result.value == CITY_VALUE
    last = server.bodies[3]
    assert "tools" not in last and "response_format" not in last
    assert capability_cache.remembered_mode(server.base_url, MODEL) == "prompted"


@pytest.mark.anyio
async def test_a_rejection_that_names_no_shape_field_is_no_step_down_even_if_the_model_or_url_says_tool(
    server: OpenAIServer,
) -> None:
    model = "llama-3-tool-use-preview"
    detail = f"temperature too high for {model} at {server.base_url}/tools"
    server.add(Reply(400, error_body(detail)))
    adapter = OpenAIAdapter(model, base_url=server.base_url + "/tools", api_key=KEY)
    server_path_noise = adapter.base_url
    with pytest.raises(ProviderError, match="temperature too high") as caught:
        await adapter.request(call(output=CITY))

    assert caught.value.status == 400 and server_path_noise.endswith("/tools")
    assert len(server.received) == 1
    assert capability_cache.remembered_mode(adapter.base_url, model) is None


@pytest.mark.anyio
async def test_an_explicit_mode_the_server_refuses_fails_at_once_naming_the_setting(
    server: OpenAIServer,
) -> None:
    server.add(Reply(500, LLAMA_CPP_REJECTION))
    with pytest.raises(ProviderError, match="refused structured_mode json_schema") as caught:
        await make(server, structured_mode="json_schema").request(call(output=CITY))

    assert "--structured-mode" in caught.value.message
    assert len(server.received) == 1  # a shape rejection is never retried


@pytest.mark.anyio
async def test_structured_mode_comes_from_cli_then_environment_then_settings_then_constructor(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def mode_sent(adapter: OpenAIAdapter, **settings: Any) -> None:
        server.add(Reply(body=completion(CITY_JSON)))
        await adapter.request(call(output=CITY, settings=settings))

    def sent_mode(body: dict[str, Any]) -> str:
        if "response_format" in body:
            return str(body["response_format"]["type"])
        return "prompted"

    adapter = make(server, structured_mode="json_schema")
    await mode_sent(adapter, structured_mode="json_object")
    monkeypatch.setenv("KEDI_STRUCTURED_MODE", "prompted")
    await mode_sent(make(server, structured_mode="json_schema"), structured_mode="json_object")
    with command_line_options(structured_mode="json_schema"):
        cli_adapter = make(server)
    await mode_sent(cli_adapter, structured_mode="json_object")
    await mode_sent(make(server, structured_mode="json_object"))
    monkeypatch.delenv("KEDI_STRUCTURED_MODE")
    await mode_sent(make(server, structured_mode="json_object"))

    assert [sent_mode(body) for body in server.bodies] == [
        "json_object",  # the setting beats the constructor
        "prompted",  # the environment beats the setting
        "json_schema",  # the command line beats the environment
        "prompted",
        "json_object",
    ]
    with pytest.raises(KediConfigError, match="unknown structured_mode 'native'"):
        await make(server).request(call(output=CITY, settings={"structured_mode": "native"}))


@pytest.mark.anyio
async def test_prompted_mode_puts_the_schema_in_the_instructions_and_reads_fenced_json(
    server: OpenAIServer,
) -> None:
    reply = f"Here it is:\n```json\n{CITY_JSON}\n```"
    server.add(Reply(body=completion(reply)))
    result = await make(server, structured_mode="prompted").request(
        call(output=CITY, instructions="Be terse.")
    )

    assert result.value == CITY_VALUE
    body = server.bodies[0]
    assert "tools" not in body and "response_format" not in body
    system = body["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith("Be terse.\n\nAlways respond with a JSON object")
    assert json.dumps(CITY.json_schema) in system["content"]
    assert dumped(result.new_messages)[1]["content"] == reply


@pytest.mark.anyio
async def test_an_invalid_reply_is_sent_back_with_its_validation_errors(
    server: OpenAIServer,
) -> None:
    bad = '{"name": "Paris", "population": "many"}'
    server.add(Reply(body=completion(bad)), Reply(body=completion(CITY_JSON)))
    result = await make(server).request(call(output=CITY))

    assert result.value == CITY_VALUE
    retry_messages = server.bodies[1]["messages"]
    assert retry_messages[-2] == {"role": "assistant", "content": bad}
    correction = retry_messages[-1]
    assert correction["role"] == "user"
    assert "population: Input should be a valid integer" in correction["content"]
    assert [m.role for m in result.new_messages] == ["user", "assistant", "user", "assistant"]
    assert result.usage.requests == 2


@pytest.mark.anyio
async def test_tool_mode_sends_validation_errors_as_a_failed_result_of_the_output_call(
    server: OpenAIServer,
) -> None:
    server.add(
        Reply(body=completion(tool_calls=[tool_call("c1", "final_result", '{"name": "Paris"}')])),
        Reply(body=completion(tool_calls=[tool_call("c2", "final_result", CITY_JSON)])),
    )
    result = await make(server, structured_mode="tool").request(call(output=CITY))

    assert result.value == CITY_VALUE
    failed = server.bodies[1]["messages"][-1]
    assert failed["role"] == "tool" and failed["tool_call_id"] == "c1"
    assert failed["content"].startswith("Error: Your reply did not validate")
    assert "population: Field required" in failed["content"]
    turn = dumped(result.new_messages)
    assert [(m["role"], m.get("failed", False)) for m in turn] == [
        ("user", False),
        ("assistant", False),
        ("tool", True),
        ("assistant", False),
        ("tool", False),
    ]


@pytest.mark.anyio
async def test_output_retries_run_out_with_an_output_validation_error(server: OpenAIServer) -> None:
    server.add(*(Reply(body=completion('{"name": 3}')) for _ in range(2)))
    with pytest.raises(OutputValidationError) as caught:
        await make(server).request(call(output=CITY, settings={"output_retries": 1}))

    assert len(server.received) == 2
    assert "did not validate after 2 attempts" in str(caught.value)
    partial = caught.value.partial
    assert partial.stage == "decode" and partial.requests == 2
    assert [m.role for m in partial.messages] == ["user", "assistant", "user", "assistant"]


@pytest.mark.anyio
async def test_output_retries_default_to_two(server: OpenAIServer) -> None:
    """Spec B21: Kedi does not retry; the openai adapter re-asks twice by default."""
    server.add(*(Reply(body=completion('{"name": 3}')) for _ in range(4)))
    with pytest.raises(OutputValidationError, match="did not validate after 3 attempts"):
        await make(server).request(call(output=CITY))
    assert len(server.received) == 3


# --------------------------------------------------------------------------- tools


@pytest.mark.anyio
async def test_tool_loop_runs_parallel_calls_and_feeds_a_failure_back(server: OpenAIServer) -> None:
    calls = [
        tool_call("call_1", "get_weather", '{"city": "Paris"}'),
        tool_call("call_2", "get_weather", '{"city": "Atlantis"}'),
    ]
    server.add(
        Reply(body=completion(tool_calls=calls, usage=(10, 5))),
        Reply(body=completion("Paris is 21 degrees; Atlantis is unknown.", usage=(20, 6))),
    )
    seen: list[Mapping[str, Any]] = []
    exchanges: list[Exchange] = []
    tools = (weather_tool(seen),)
    result = await make(server).request(call("Weather?", tools=tools, on_exchange=exchanges.append))

    assert result.value == "Paris is 21 degrees; Atlantis is unknown."
    assert seen == [{"city": "Paris"}, {"city": "Atlantis"}]
    assert server.bodies[0]["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Current weather of a city.",
                "parameters": tools[0].parameters,
            },
        }
    ]
    assert server.bodies[1]["messages"][1:] == [
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp":21}'},
        {"role": "tool", "tool_call_id": "call_2", "content": "Error: unknown city Atlantis"},
    ]
    turn = dumped(result.new_messages)
    assert turn[3] == stamped(
        role="tool",
        content="unknown city Atlantis",
        toolCallId="call_2",
        toolName="get_weather",
        failed=True,
    )
    assert [m["role"] for m in turn] == ["user", "assistant", "tool", "tool", "assistant"]
    assert result.usage == Usage(input_tokens=30, output_tokens=11, requests=2, tool_calls=1)
    assert [len(exchange.messages) for exchange in exchanges] == [1, 4]
    assert exchanges[1].messages[1:] == tuple(turn[1:4]) and exchanges[1].tools == ("get_weather",)


@pytest.mark.anyio
async def test_the_request_limit_ends_an_endless_tool_loop(server: OpenAIServer) -> None:
    looping = completion(tool_calls=[tool_call("c", "get_weather", '{"city": "Paris"}')])
    server.add(Reply(body=looping), Reply(body=looping))
    with pytest.raises(AdapterError) as caught:
        await make(server).request(
            call(tools=(weather_tool([]),), settings={"request_limit": 2}, origin="flow.kedi:3")
        )

    assert type(caught.value) is AdapterError
    assert "at flow.kedi:3 reached its request_limit of 2" in str(caught.value)
    assert caught.value.partial.stage == "loop" and caught.value.partial.tool_calls == 2
    assert len(server.received) == 2


@pytest.mark.anyio
async def test_cancelling_in_the_middle_of_a_tool_loop_returns_promptly(
    server: OpenAIServer,
) -> None:
    server.add(
        Reply(body=completion(tool_calls=[tool_call("c1", "get_weather", '{"city": "Paris"}')])),
        Reply(body=completion("late"), delay=5),
    )
    seen: list[Mapping[str, Any]] = []
    started = time.monotonic()
    with anyio.move_on_after(0.3) as scope:
        await make(server).request(call(tools=(weather_tool(seen),)))

    assert scope.cancelled_caught
    assert time.monotonic() - started < 4  # well before the delayed reply (5 s)
    assert seen == [{"city": "Paris"}] and len(server.received) == 2


@pytest.mark.anyio
async def test_a_failure_after_a_tool_round_carries_the_completed_turn(
    server: OpenAIServer,
) -> None:
    server.add(
        Reply(body=completion(tool_calls=[tool_call("c1", "get_weather", '{"city": "Paris"}')])),
        Reply(400, error_body("something else went wrong")),
    )
    with pytest.raises(ProviderError) as caught:
        await make(server).request(call(tools=(weather_tool([]),)))

    partial = caught.value.partial
    assert partial.stage == "model" and partial.requests == 1 and partial.tool_calls == 1
    assert [m.role for m in partial.messages] == ["user", "assistant", "tool"]
    assert partial.run_id == "run-1" and partial.conversation_id == "conv-1"


# --------------------------------------------------------------------------- history on the wire


@pytest.mark.anyio
async def test_history_goes_on_the_wire_with_arguments_as_json_strings(
    server: OpenAIServer,
) -> None:
    truncated = '{"q": "par'
    history = [
        Message(role="system", content="old instructions, never sent"),
        Message(
            role="user",
            content="Look these up",
            parts=[Part(kind="image", url="https://example.com/a.png")],
        ),
        Message(
            role="assistant",
            tool_calls=[
                ToolCall(id="c1", name="lookup", args=truncated),
                ToolCall(id="c2", name="lookup", args='{ "q" : "x" }'),
                ToolCall(id="c3", name="lookup", args="  "),
            ],
        ),
        *(
            Message(role="tool", content="r", tool_call_id=f"c{n}", tool_name="lookup")
            for n in (1, 2, 3)
        ),
    ]
    server.add(Reply(body=completion("ok")))
    await make(server).request(call("Next", history=tuple(history)))

    messages = server.bodies[0]["messages"]
    assert messages[0] == {
        "role": "user",
        "content": [
            {"type": "text", "text": "Look these up"},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        ],
    }
    arguments = [c["function"]["arguments"] for c in messages[1]["tool_calls"]]
    assert all(isinstance(a, str) for a in arguments)
    assert [json.loads(a) for a in arguments] == [{"truncated_args": truncated}, {"q": "x"}, {}]
    assert history[2].tool_calls[0].args == truncated  # the history keeps the raw text


@pytest.mark.anyio
async def test_parts_the_endpoint_cannot_take_fail_before_any_request(server: OpenAIServer) -> None:
    audio = Part(kind="audio", data="AAAA", media_type="audio/wav")
    history = (Message(role="user", content="listen", parts=[audio]),)
    with pytest.raises(CapabilityError, match="cannot send audio parts"):
        await make(server).request(call(history=history))
    assert server.received == []


def forget_closed_groups(context: Any) -> list[Any]:
    """A history processor that keeps only protected groups (the call in progress)."""
    return [
        message
        for group in context.groups
        if not group.eligible
        for message in context.messages[group.entry_start : group.entry_end]
    ]


@pytest.mark.anyio
async def test_a_history_processor_decides_what_every_request_sends(server: OpenAIServer) -> None:
    history = (
        Message(role="user", content="old question", run_id="old"),
        Message(role="assistant", content="old answer", run_id="old"),
    )
    server.add(
        Reply(body=completion(tool_calls=[tool_call("c1", "get_weather", '{"city": "Paris"}')])),
        Reply(body=completion("Sunny.")),
    )
    exchanges: list[Exchange] = []
    adapter = OpenAIAdapter(MODEL, base_url=server.base_url, history_processor=forget_closed_groups)
    result = await adapter.request(
        call(
            "Weather?",
            instructions="Be terse.",
            history=history,
            tools=(weather_tool([]),),
            on_exchange=exchanges.append,
        )
    )

    assert [[m["content"] for m in body["messages"][:2]] for body in server.bodies] == [
        ["Be terse.", "Weather?"],
        ["Be terse.", "Weather?"],
    ]
    assert [m["content"] for m in exchanges[1].messages[:2]] == ["Be terse.", "Weather?"]
    # One actual rewrite (the second request had nothing left to drop).
    assert result.rewritten_history == () and result.rewrites == 1
    assert [m.role for m in result.new_messages] == ["user", "assistant", "tool", "assistant"]


@pytest.mark.anyio
async def test_a_history_processor_must_not_change_the_call_in_progress(
    server: OpenAIServer,
) -> None:
    history = (Message(role="user", content="old"), Message(role="assistant", content="answer"))
    with pytest.raises(HistoryProcessingValidationError):
        await make(server).request(
            call(history=history, history_processor=lambda ctx: ctx.messages[:-1])
        )
    assert server.received == []


@pytest.mark.anyio
async def test_a_failing_history_processor_stops_the_call_before_any_request(
    server: OpenAIServer,
) -> None:
    def broken(context: Any) -> list[Any]:
        raise RuntimeError("processor bug")

    with pytest.raises(HistoryProcessingError, match="processor bug") as info:
        await make(server).request(call(history_processor=broken))
    assert isinstance(info.value.__cause__, RuntimeError)
    assert server.received == []


# --------------------------------------------------------------------------- retries and errors


@pytest.mark.anyio
@pytest.mark.parametrize("header", [{"Retry-After": "0.05"}, {"retry-after-ms": "50"}])
async def test_429_waits_as_long_as_the_server_asks_then_succeeds(
    server: OpenAIServer, header: dict[str, str], sleeps: list[float]
) -> None:
    server.add(Reply(429, error_body("slow down", kind="rate_limit_error"), headers=header))
    server.add(Reply(body=completion("done")))
    started = time.monotonic()
    result = await make(server).request(call())

    assert result.value == "done" and len(server.received) == 2
    # The server's 50 ms, not the default backoff (at least 375 ms).
    assert sleeps == [pytest.approx(0.05)]
    assert time.monotonic() - started >= 0.05
    assert result.usage.requests == 1


@pytest.mark.anyio
async def test_server_errors_and_connection_failures_are_retried(server: OpenAIServer) -> None:
    server.add(Reply(500, error_body("boom", kind="server_error")), Reply(body=completion("fine")))
    result = await make(server).request(call())
    assert result.value == "fine" and len(server.received) == 2

    attempts: list[int] = []

    def flaky(request: httpx.Request) -> httpx.Response:
        attempts.append(1)
        if len(attempts) == 1:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json=completion("reached"))

    adapter = OpenAIAdapter(
        MODEL, base_url="http://model.invalid/v1", transport=httpx.MockTransport(flaky)
    )
    assert (await adapter.request(call())).value == "reached"
    assert (await adapter.request(call())).value == "reached"  # the borrowed transport stays open
    assert len(attempts) == 3


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (
            401,
            error_body(f"Incorrect API key provided: {KEY}", "invalid_api_key"),
            AuthenticationError,
        ),
        (403, error_body("Project does not have access"), AuthenticationError),
        (
            404,
            error_body("The model `test-model` does not exist", "model_not_found"),
            ModelNotFoundError,
        ),
        (400, error_body("Too many tokens", "context_length_exceeded"), ContextLengthError),
        (
            400,
            error_body("This model's maximum context length is 8192 tokens."),
            ContextLengthError,
        ),
        (
            400,
            error_body(
                "Invalid parameter: messages with role 'tool' must be a response to a "
                "preceeding message with 'tool_calls'."
            ),
            HistoryShapeError,
        ),
        (
            400,
            error_body(
                "An assistant message with 'tool_calls' must be followed by tool messages "
                "responding to each 'tool_call_id'. The following tool_call_ids did not have "
                "response messages: call_1"
            ),
            HistoryShapeError,
        ),
        (429, error_body("Rate limit reached", kind="rate_limit_error"), RateLimitError),
        (400, error_body("Unrecognized request argument"), ProviderError),
        (502, "<html>Bad gateway</html>", ProviderError),
    ],
)
async def test_error_statuses_map_to_kedi_errors(
    server: OpenAIServer, status: int, body: Any, expected: type[ProviderError]
) -> None:
    server.add(Reply(status, body))
    with pytest.raises(ProviderError) as caught:
        await make(server, max_retries=0).request(call())

    error = caught.value
    assert type(error) is expected
    assert error.status == status and error.partial is None
    detail = body["error"]["message"].replace(KEY, "***") if isinstance(body, dict) else body
    assert detail in str(error)
    assert KEY not in str(error) and KEY not in repr(error.__dict__)


@pytest.mark.anyio
async def test_rate_limits_that_outlast_the_retries_raise_rate_limit_error(
    server: OpenAIServer,
) -> None:
    server.add(
        *(
            Reply(429, error_body("Rate limit reached"), headers={"Retry-After": "0"})
            for _ in range(3)
        )
    )
    with pytest.raises(RateLimitError) as caught:
        await make(server, max_retries=2).request(call())
    assert len(server.received) == 3 and caught.value.retryable


@pytest.mark.anyio
async def test_timeouts_and_unreachable_servers_raise_provider_errors(server: OpenAIServer) -> None:
    server.add(Reply(body=completion("late"), delay=3))
    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"timed out after 0\.2 s"):
        await make(server, timeout=0.2, max_retries=0).request(call())
    assert time.monotonic() - started < 2.5  # before the reply (3 s) would have come

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    closed = OpenAIAdapter(
        MODEL, base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0
    )
    with pytest.raises(ProviderError, match=f"cannot reach http://127.0.0.1:{port}/v1") as caught:
        await closed.request(call())
    assert KEY not in str(caught.value)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (Reply(body={"unexpected": True}), "not a chat completion"),
        (Reply(events=["data: {not json", ""]), "not a stream chunk"),
        (
            Reply(events=sse({"error": {"message": "overloaded mid-stream"}})),
            "overloaded mid-stream",
        ),
    ],
)
async def test_malformed_replies_raise_provider_errors(
    server: OpenAIServer, reply: Reply, message: str
) -> None:
    server.add(reply)
    with pytest.raises(ProviderError, match=message):
        await make(server, stream=reply.events is not None).request(call())


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"Retry-After": "0.05"}, 0.05),
        ({"retry-after-ms": "250", "Retry-After": "9"}, 0.25),
        ({"Retry-After": "-3"}, None),
        ({"Retry-After": "nan"}, None),
        ({"Retry-After": "inf"}, None),
        ({"Retry-After": "1e400"}, None),
        ({"retry-after-ms": "-1"}, None),
        ({"Retry-After": "Mon, 01 Jan 1990 00:00:00 GMT"}, None),
        ({"Retry-After": "Mon, 99 Foo 1990 99:99:99 GMT"}, None),
        ({"Retry-After": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_headers_give_the_wait_in_seconds(
    headers: dict[str, str], seconds: float | None
) -> None:
    assert retry_after(httpx.Headers(headers)) == seconds


def test_retry_after_accepts_an_http_date() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    wait = retry_after(httpx.Headers({"Retry-After": when}))
    assert wait is not None and 28 <= wait <= 30


@pytest.mark.anyio
async def test_sse_events_may_span_lines_and_carry_other_fields() -> None:
    async def lines() -> AsyncIterator[str]:
        for line in [
            ": ping",
            "event: message",
            "id: 1",
            'data: {"a":',
            "data: 1}",
            "",
            "data:[DONE]",
        ]:
            yield line
        yield "data: never read"

    assert [payload async for payload in sse_payloads(lines())] == ['{"a":\n1}', "[DONE]"]


# --------------------------------------------------------------------------- connections


def closed_connections(server: OpenAIServer, count: int) -> list[int]:
    """The connections the server saw closed, once there are `count` (closing is asynchronous)."""
    deadline = time.monotonic() + 5
    while len(server.closed) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return sorted(server.closed)


def test_the_calls_of_a_run_share_one_connection_that_closes_when_the_run_ends(
    server: OpenAIServer,
) -> None:
    import kedi

    program = kedi.compile(
        ">> Name a city: [city: str].\n[why] << Why?\n>> Name a river: [river: str].\n= <city> <river>\n"
    )
    adapter = make(server)
    for _ in range(2):
        server.add(
            Reply(body=completion('{"city": "Lyon"}')),
            Reply(body=completion("Food.")),
            Reply(body=completion('{"river": "Rhone"}')),
        )
        assert program.run_sync(adapter=adapter) == "Lyon Rhone"
    first, second = server.received[:3], server.received[3:]
    assert len({request.connection for request in first}) == 1
    assert len({request.connection for request in second}) == 1
    # Each run closed its own connection: the same adapter works on the next run's loop.
    expected = sorted({first[0].connection, second[0].connection})
    assert len(expected) == 2
    assert closed_connections(server, 2) == expected


@pytest.mark.anyio
async def test_an_adapter_awaited_outside_a_run_closes_its_connection_after_each_call(
    server: OpenAIServer,
) -> None:
    adapter = make(server)
    server.add(Reply(body=completion("one")), Reply(body=completion("two")))
    await adapter.request(call())
    await adapter.request(call())
    connections = sorted(request.connection for request in server.received)
    assert len(set(connections)) == 2
    assert closed_connections(server, 2) == connections


# --------------------------------------------------------------------------- configuration


@pytest.mark.anyio
async def test_the_key_is_sent_only_in_the_authorization_header(server: OpenAIServer) -> None:
    server.add(Reply(body=completion("hi")))
    exchanges: list[Exchange] = []
    adapter = make(server)
    await adapter.request(call(on_exchange=exchanges.append))

    assert server.received[0].headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in json.dumps(server.bodies[0])
    assert KEY not in json.dumps([exchange.messages for exchange in exchanges])
    assert KEY not in json.dumps([exchange.response for exchange in exchanges])
    assert KEY not in repr(adapter)


@pytest.mark.anyio
async def test_key_and_base_url_come_from_the_environment(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url + "/")
    server.add(Reply(body=completion("env")), Reply(body=completion("keyless")))
    adapter = create_adapter("openai", MODEL)

    assert isinstance(adapter, OpenAIAdapter) and adapter.model_name == MODEL
    assert (await adapter.request(call())).value == "env"
    assert server.received[0].headers["authorization"] == "Bearer sk-from-env"
    monkeypatch.delenv("OPENAI_API_KEY")
    assert (await OpenAIAdapter(MODEL).request(call())).value == "keyless"
    assert "authorization" not in server.received[1].headers


@pytest.mark.anyio
async def test_settings_map_to_request_fields_and_unknown_ones_are_dropped(
    server: OpenAIServer,
) -> None:
    server.add(Reply(body=completion("a")), Reply(body=completion("b")))
    settings = {
        "temperature": 0.2,
        "max_tokens": 50,
        "stop_sequences": ["END"],
        "seed": 7,
        "effort": "max",
        "thinking": {"budget_tokens": 100},
        "cache": True,
        "extra_headers": {"X-Trace": "t1"},
        "extra_body": {"top_k": 3},
        "timeout": 30,
        "output_retries": 1,
        "request_limit": 5,
        "max_retries": 0,
        "tool_choice": "get_weather",
        "parallel_tool_calls": False,
    }
    adapter = make(server)
    await adapter.request(call(settings=settings))
    await adapter.request(call(settings=settings, tools=(weather_tool([]),)))

    without_tools, with_tools = server.bodies
    assert {k: v for k, v in without_tools.items() if k != "messages"} == {
        "model": MODEL,
        "temperature": 0.2,
        "max_tokens": 50,
        "stop": ["END"],
        "seed": 7,
        "reasoning_effort": "xhigh",
        "top_k": 3,
    }
    assert server.received[0].headers["x-trace"] == "t1"
    assert with_tools["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert with_tools["parallel_tool_calls"] is False


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"output_retries": -1}, "output_retries setting must be an integer >= 0"),
        ({"request_limit": 0}, "request_limit setting must be an integer >= 1"),
        ({"timeout": "soon"}, "timeout setting must be a number of seconds"),
        ({"extra_headers": ["X"]}, "extra_headers setting must map header names to strings"),
        ({"stop": 3}, "stop setting must be a string or a list of strings"),
        ({"extra_body": {"when": object()}}, "settings must be JSON values"),
    ],
)
async def test_bad_settings_fail_before_any_request(
    server: OpenAIServer, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(KediConfigError, match=message):
        await make(server).request(call(settings=settings))
    assert server.received == []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"model": None}, "the openai adapter needs a model"),
        ({"model": MODEL, "base_url": "ftp://host/v1"}, "invalid OpenAI base URL"),
        ({"model": MODEL, "structured_mode": "native"}, "unknown structured_mode 'native'"),
        ({"model": MODEL, "max_retries": -1}, "max_retries setting must be an integer >= 0"),
    ],
)
def test_bad_construction_raises_config_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(KediConfigError, match=message):
        OpenAIAdapter(**options)


def test_the_test_server_speaks_the_openai_sdk_types() -> None:
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    reply = completion(CITY_JSON, tool_calls=[tool_call("c1", "f", "{}")])
    calls = ChatCompletion.model_validate(reply).choices[0].message.tool_calls
    assert calls is not None and calls[0].id == "c1"
    for item in (chunk({"content": "hi"}), chunk(finish_reason="stop"), chunk(usage=(1, 2))):
        ChatCompletionChunk.model_validate(item)


# --------------------------------------------------------------------------- from the command line


def test_kedi_run_with_the_openai_adapter_keeps_a_lane(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from kedi.cli import main

    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    flow = tmp_path / "flow.kedi"
    flow.write_text(
        "> history: enabled\n"
        ">> Name a city in France: [city: str].\n"
        "[why] << Why that one?\n"
        "= `f'{city}: {why}'`\n"
    )
    server.add(Reply(body=completion('{"city": "Lyon"}')), Reply(body=completion("Food.")))
    run = ["run", str(flow), "--adapter", "openai", "--model", "gpt-4o-mini"]
    result = CliRunner().invoke(main, run)

    assert (result.exit_code, result.stdout) == (0, "Lyon: Food.\n")
    assert [body["model"] for body in server.bodies] == ["gpt-4o-mini", "gpt-4o-mini"]
    assert server.bodies[1]["messages"][:2] == [
        {"role": "user", "content": "Name a city in France: [city]."},
        {"role": "assistant", "content": '{"city": "Lyon"}'},
    ]

    server.add(Reply(401, error_body(f"Incorrect API key provided: {KEY}")))
    result = CliRunner().invoke(main, run)
    assert result.exit_code == 1
    assert "AuthenticationError" in result.stderr and "Traceback" not in result.stderr
    assert KEY not in result.stderr


# --------------------------------------------------------------------------- configuration


@pytest.mark.anyio
async def test_base_url_order_is_command_line_then_kedi_then_openai_then_the_legacy_variable(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_BASE", "http://legacy.invalid/v1")
    with pytest.warns(FutureWarning, match="OPENAI_API_BASE is deprecated.*OPENAI_BASE_URL"):
        assert OpenAIAdapter(MODEL).base_url == "http://legacy.invalid/v1"
    monkeypatch.setenv("OPENAI_BASE_URL", "http://openai-env.invalid/v1")
    assert OpenAIAdapter(MODEL).base_url == "http://openai-env.invalid/v1"
    monkeypatch.setenv("KEDI_BASE_URL", "http://kedi-env.invalid/v1")
    assert OpenAIAdapter(MODEL).base_url == "http://kedi-env.invalid/v1"
    with command_line_options(base_url=server.base_url):
        adapter = OpenAIAdapter(MODEL)
    server.add(Reply(body=completion("ok")))
    assert (await adapter.request(call())).value == "ok"
    assert OpenAIAdapter(MODEL, base_url="http://explicit.invalid/v1").base_url.startswith(
        "http://explicit"
    )


@pytest.mark.anyio
async def test_api_key_env_names_the_variable_and_crlf_is_dropped(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-this-one")
    monkeypatch.setenv("MY_LLAMA_KEY", "sk-mine\r")
    with command_line_options(api_key_env="MY_LLAMA_KEY"):
        adapter = OpenAIAdapter(MODEL, base_url=server.base_url)
    server.add(Reply(body=completion("ok")))
    await adapter.request(call())

    assert server.received[0].headers["authorization"] == "Bearer sk-mine"
    monkeypatch.setenv("KEDI_API_KEY_ENV", "UNSET_KEY_VARIABLE")
    with pytest.raises(KediConfigError, match="names the environment variable UNSET_KEY_VARIABLE"):
        OpenAIAdapter(MODEL, base_url=server.base_url)


@pytest.mark.anyio
async def test_a_404_names_the_endpoint_and_asks_whether_v1_is_missing(
    server: OpenAIServer,
) -> None:
    root = server.base_url.removesuffix("/v1")
    server.add(
        Reply(404, {"detail": "Not Found"}), Reply(404, error_body("no", code="model_not_found"))
    )
    with pytest.raises(ModelNotFoundError) as missing_v1:
        await OpenAIAdapter(MODEL, base_url=root, api_key=KEY).request(call())
    with pytest.raises(ModelNotFoundError) as unknown_model:
        await make(server).request(call())

    assert f"POST {root}/chat/completions" in str(missing_v1.value)
    assert "is `/v1` missing" in str(missing_v1.value)
    assert "/v1` missing" not in str(unknown_model.value)
    assert f"POST {server.base_url}/chat/completions" in str(unknown_model.value)


def test_kedi_run_takes_base_url_api_key_env_and_structured_mode_flags(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from kedi.cli import main

    monkeypatch.setenv("OPENAI_BASE_URL", "http://not-this.invalid/v1")
    monkeypatch.setenv("KEDI_STRUCTURED_MODE", "tool")
    monkeypatch.setenv("LOCAL_KEY", "sk-local")
    flow = tmp_path / "flow.kedi"
    flow.write_text(
        "> settings:\n    structured_mode: json_schema\n>> A number [n: int].\n= `n + 1`\n"
    )
    server.add(Reply(body=completion('{"n": 41}')))
    flags = [
        "--base-url",
        server.base_url,
        "--api-key-env",
        "LOCAL_KEY",
        "--structured-mode",
        "json_object",
    ]
    result = CliRunner().invoke(
        main, ["run", str(flow), "--adapter", "openai", "--model", "m", *flags]
    )

    assert (result.exit_code, result.stdout) == (0, "42\n"), result.stderr
    [received] = server.received
    assert received.headers["authorization"] == "Bearer sk-local"
    assert received.body["response_format"]["type"] == "json_object"
    result = CliRunner().invoke(main, ["run", str(flow), "--structured-mode", "native"])
    assert result.exit_code == 2 and "native" in result.stderr


@pytest.mark.anyio
async def test_transcript_lines_carry_mode_attempt_and_failures_without_the_key(
    server: OpenAIServer, tmp_path: Path
) -> None:
    import kedi

    server.add(
        Reply(503, error_body(f"overloaded, key {KEY}")),
        Reply(body=completion('{"n": "not a number"}')),
        Reply(body=completion('{"n": 7}')),
    )
    path = tmp_path / "transcript.jsonl"
    program = kedi.compile(">> A number [n: int].\n= `n`")
    value = await program.run(adapter=make(server, structured_mode="json_object"), transcript=path)

    assert value == 7
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["structured_mode"], r["attempt"], r["failed"]) for r in lines] == [
        ("json_object", 1, True),
        ("json_object", 2, True),
        ("json_object", 3, False),
    ]
    assert "HTTP 503" in lines[0]["error"] and lines[0]["response"]["status"] == 503
    assert "n: Input should be a valid integer" in lines[1]["error"]
    assert "error" not in lines[2]
    assert KEY not in path.read_text()


@pytest.mark.anyio
async def test_a_tool_choice_naming_a_tool_forces_it_until_it_was_called(
    server: OpenAIServer,
) -> None:
    seen: list[Mapping[str, Any]] = []
    server.add(
        Reply(body=completion(tool_calls=[tool_call("c1", "get_weather", '{"city": "Paris"}')])),
        Reply(body=completion(CITY_JSON)),
    )
    request = call(
        output=CITY, tools=(weather_tool(seen),), settings={"tool_choice": "get_weather"}
    )
    result = await make(server, structured_mode="json_object").request(request)

    assert result.value == CITY_VALUE and seen == [{"city": "Paris"}]
    first, second = server.bodies
    assert first["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert "tool_choice" not in second  # the model may answer now


def test_a_pydantic_ai_style_openai_prefix_is_not_sent_as_the_model_id(
    server: OpenAIServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`--model openai:gpt-4o-mini` (Pydantic AI's spelling) reaches the server as `gpt-4o-mini`."""
    from click.testing import CliRunner

    from kedi.cli import main

    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    flow = tmp_path / "flow.kedi"
    flow.write_text("[reply] << Say hi.\n= <reply>\n")
    server.add(Reply(body=completion("hi")))
    run = ["run", str(flow), "--adapter", "openai", "--model", "openai:gpt-4o-mini"]
    result = CliRunner().invoke(main, run)

    assert (result.exit_code, result.stdout) == (0, "hi\n")
    assert [body["model"] for body in server.bodies] == ["gpt-4o-mini"]
    # Only that exact prefix: other ids with a colon (Ollama's `llama3:8b`) are sent as written.
    assert OpenAIAdapter(model="llama3:8b", api_key=KEY).model_name == "llama3:8b"
    with pytest.raises(KediConfigError, match="needs a model"):
        OpenAIAdapter(model="openai:", api_key=KEY)
