"""The Pydantic AI and LangChain adapters on an OpenAI-compatible base URL (the test server)."""

from __future__ import annotations

import os
from typing import Any

import pytest

import kedi
from kedi.errors import KediError, ModelNotFoundError
from tests.adapters.openai_server import OpenAIServer, Reply, completion, tool_call

pytest.importorskip("pydantic_ai", reason='needs Pydantic AI: pip install "kedi[pydantic-ai]"')


def population(city: str) -> int:
    """The population of a city."""
    return 2100000


TOOL_PROGRAM = (
    "> use: population\n> settings:\n    tool_choice: population\n    output_mode: json_object\n"
    '    extra_body: {"repeat_penalty": 1.3}\n'
    ">> How many people live in Paris? [count: int]\n= `count`"
)


def run(source: str, **options: Any) -> Any:
    env = options.pop("env", {})
    return kedi.compile(source, known_globals=tuple(env)).run_sync(env=env, **options)


def test_pydantic_with_a_base_url_uses_chat_completions_and_json_object_mode(
    endpoint_server: OpenAIServer,
) -> None:
    endpoint_server.add(Reply(body=completion('{"n": 4}')))
    source = "> settings:\n    output_mode: json_object\n>> A number [n: int].\n= `n`"

    assert run(source, adapter="pydantic", model="openai:local") == 4
    [received] = endpoint_server.received
    assert received.path == "/v1/chat/completions" and received.body["model"] == "local"
    schema = received.body["response_format"]["schema"]
    assert received.body["response_format"]["type"] == "json_object" and schema["required"] == ["n"]


def test_pydantic_forces_a_named_tool_until_it_has_a_result(endpoint_server: OpenAIServer) -> None:
    endpoint_server.add(
        Reply(body=completion(tool_calls=[tool_call("c1", "population", '{"city": "Paris"}')])),
        Reply(body=completion('{"count": 2100000}')),
    )

    assert (
        run(TOOL_PROGRAM, adapter="pydantic", model="openai:local", env={"population": population})
        == 2100000
    )
    first, second = endpoint_server.bodies
    assert first["tool_choice"] == {"type": "function", "function": {"name": "population"}}
    assert second["tool_choice"] == "auto"
    # The mode's response_format and the call's extra_body travel with the forced choice.
    assert first["response_format"]["type"] == second["response_format"]["type"] == "json_object"
    assert first["repeat_penalty"] == second["repeat_penalty"] == 1.3
    [call] = [m for m in second["messages"] if m["role"] == "assistant"]
    assert call["content"] == "" and call["tool_calls"]  # never null beside tool calls


@pytest.mark.parametrize(
    "arguments",
    ['{"city": "Par', '{"town": "Paris"}'],
    ids=["unparsable JSON", "schema error"],
)
def test_pydantic_keeps_the_tool_forced_after_a_call_with_invalid_arguments(
    endpoint_server: OpenAIServer, arguments: str
) -> None:
    # A call with bad arguments is no result: the retry must be forced too, since
    # on llama.cpp the forced choice is what constrains the arguments to the schema.
    endpoint_server.add(
        Reply(body=completion(tool_calls=[tool_call("c1", "population", arguments)])),
        Reply(body=completion(tool_calls=[tool_call("c2", "population", '{"city": "Paris"}')])),
        Reply(body=completion('{"count": 2100000}')),
    )
    cities: list[str] = []

    def counted(city: str) -> int:
        """The population of a city."""
        cities.append(city)
        return 2100000

    assert (
        run(TOOL_PROGRAM, adapter="pydantic", model="openai:local", env={"population": counted})
        == 2100000
    )
    first, retry, answer = endpoint_server.bodies
    forced = {"type": "function", "function": {"name": "population"}}
    assert first["tool_choice"] == retry["tool_choice"] == forced
    assert answer["tool_choice"] == "auto"
    assert cities == ["Paris"]  # the bad call never reached the tool
    [feedback] = [m for m in retry["messages"] if m["role"] == "tool"]
    assert feedback["tool_call_id"] == "c1"


def test_pydantic_stops_forcing_a_tool_that_ran_and_failed(endpoint_server: OpenAIServer) -> None:
    # The tool's own failure is a result the model sees; forcing it again would
    # repeat the failure up to request_limit.
    endpoint_server.add(
        Reply(body=completion(tool_calls=[tool_call("c1", "population", '{"city": "Paris"}')])),
        Reply(body=completion('{"count": 0}')),
    )

    def failing(city: str) -> int:
        """The population of a city."""
        raise LookupError(f"no census for {city}")

    assert (
        run(TOOL_PROGRAM, adapter="pydantic", model="openai:local", env={"population": failing})
        == 0
    )
    first, second = endpoint_server.bodies
    assert first["tool_choice"] == {"type": "function", "function": {"name": "population"}}
    assert second["tool_choice"] == "auto"
    [result] = [m for m in second["messages"] if m["role"] == "tool"]
    assert "no census for Paris" in result["content"]


def test_pydantic_404_names_the_endpoint_and_asks_about_v1(
    endpoint_server: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = endpoint_server.base_url.removesuffix("/v1")
    monkeypatch.setenv("KEDI_BASE_URL", root)
    endpoint_server.add(Reply(404, {"detail": "Not Found"}))
    with pytest.raises(KediError) as caught:
        run(">> Hi.", adapter="pydantic", model="openai:local")

    assert isinstance(caught.value.original, ModelNotFoundError)  # type: ignore[attr-defined]
    # One "at", for the call's place in the program; the endpoint in parentheses.
    assert str(caught.value.original) == (  # type: ignore[attr-defined]
        f"model 'openai:local' (POST {root}/chat/completions) at <string>:1: model or endpoint "
        "not found (HTTP 404): {'detail': 'Not Found'}; is `/v1` missing from the base URL?"
    )


def test_langchain_by_name_forces_a_named_tool_then_the_answer_and_sends_string_content(
    endpoint_server: OpenAIServer,
) -> None:
    pytest.importorskip(
        "langchain_openai", reason='needs langchain-openai: pip install "kedi[langchain]"'
    )
    endpoint_server.add(
        Reply(body=completion(tool_calls=[tool_call("c1", "population", '{"city": "Paris"}')])),
        Reply(body=completion(tool_calls=[tool_call("c2", "KediOutputs", '{"count": 7}')])),
    )

    # `output_mode` is the pydantic adapter's setting: the langchain adapter would refuse it.
    program = TOOL_PROGRAM.replace("    output_mode: json_object\n", "")
    assert (
        run(program, adapter="langchain", model="openai:local", env={"population": population}) == 7
    )
    first, second = endpoint_server.bodies
    assert first["tool_choice"] == {"type": "function", "function": {"name": "population"}}
    assert second["tool_choice"] == {"type": "function", "function": {"name": "KediOutputs"}}
    assistant = [m for m in second["messages"] if m["role"] == "assistant"]
    assert assistant and all(m["content"] == "" for m in assistant)  # never null beside tool calls
    assert os.environ["KEDI_BASE_URL"] == endpoint_server.base_url
