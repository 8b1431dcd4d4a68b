"""A `tool_choice` naming a tool is forced until that tool has returned a result.

The decision (docs/adapters.md, "tool_choice"): a call whose arguments do not
validate (unparsable JSON, or a schema error) is no result, so the model's
retry is forced too (on llama.cpp the forced choice is what constrains the
arguments to the tool's schema); the tool's own failure is a result. The
pydantic adapter's side is in `tests/adapters/test_endpoints.py`; these are
the `openai` and `langchain` adapters against the scripted server.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import kedi
from tests.adapters.openai_server import OpenAIServer, Reply, completion, tool_call

FORCED = {"type": "function", "function": {"name": "population"}}
HEADER = "> use: population\n> settings:\n    tool_choice: population\n"
STRUCTURED = HEADER + ">> How many people live in Paris? [count: int]\n= `count`"
TEXT = HEADER + "[reply] << How many people live in Paris?\n= <reply>"
INVALID = pytest.mark.parametrize(
    "arguments",
    ['{"city": "Par', '{"town": "Paris"}'],
    ids=["unparsable JSON", "schema error"],
)


def counting(cities: list[str]) -> Callable[[str], int]:
    def population(city: str) -> int:
        """The population of a city."""
        cities.append(city)
        return 2100000

    return population


def run(source: str, adapter: str, tool: Callable[[str], int]) -> Any:
    if adapter == "langchain":
        pytest.importorskip(
            "langchain_openai", reason='needs langchain-openai: pip install "kedi[langchain]"'
        )
    model = "openai:local" if adapter == "langchain" else "local"
    program = kedi.compile(source, known_globals=("population",))
    return program.run_sync(adapter=adapter, model=model, env={"population": tool})


def calls(*replies: tuple[str, str, str]) -> list[Reply]:
    return [Reply(body=completion(tool_calls=[tool_call(*reply)])) for reply in replies]


@INVALID
@pytest.mark.parametrize("adapter", ["openai", "langchain"])
def test_a_structured_call_keeps_the_tool_forced_after_invalid_arguments(
    endpoint_server: OpenAIServer, adapter: str, arguments: str
) -> None:
    endpoint_server.add(
        *calls(("c1", "population", arguments), ("c2", "population", '{"city": "Paris"}'))
    )
    if adapter == "langchain":  # with tools, the answer is the schema tool's call
        endpoint_server.add(*calls(("c3", "KediOutputs", '{"count": 2100000}')))
    else:
        endpoint_server.add(Reply(body=completion('{"count": 2100000}')))
    cities: list[str] = []

    assert run(STRUCTURED, adapter, counting(cities)) == 2100000
    first, retry, answer = endpoint_server.bodies
    assert first["tool_choice"] == retry["tool_choice"] == FORCED
    assert cities == ["Paris"]  # the invalid call never reached the tool
    [feedback] = [m for m in retry["messages"] if m["role"] == "tool"]
    assert feedback["tool_call_id"] == "c1"
    if adapter == "langchain":
        assert answer["tool_choice"] == {"type": "function", "function": {"name": "KediOutputs"}}
    else:
        assert "tool_choice" not in answer  # the model may answer now


@INVALID
@pytest.mark.parametrize("adapter", ["openai", "langchain"])
def test_a_text_call_keeps_the_tool_forced_after_invalid_arguments_then_frees_the_model(
    endpoint_server: OpenAIServer, adapter: str, arguments: str
) -> None:
    endpoint_server.add(
        *calls(("c1", "population", arguments), ("c2", "population", '{"city": "Paris"}')),
        Reply(body=completion("About 2.1 million.")),
    )
    cities: list[str] = []

    assert run(TEXT, adapter, counting(cities)) == "About 2.1 million."
    first, retry, answer = endpoint_server.bodies
    assert first["tool_choice"] == retry["tool_choice"] == FORCED
    assert "tool_choice" not in answer  # the tool has a result: the model chooses
    assert cities == ["Paris"]


@pytest.mark.parametrize("adapter", ["openai", "langchain"])
def test_a_tool_that_ran_and_failed_is_a_result_and_ends_the_forcing(
    endpoint_server: OpenAIServer, adapter: str
) -> None:
    # Forcing it again would only repeat the failure up to the request limit.
    endpoint_server.add(
        *calls(("c1", "population", '{"city": "Paris"}')),
        Reply(body=completion("No census today.")),
    )

    def failing(city: str) -> int:
        """The population of a city."""
        raise LookupError(f"no census for {city}")

    assert run(TEXT, adapter, failing) == "No census today."
    first, second = endpoint_server.bodies
    assert first["tool_choice"] == FORCED and "tool_choice" not in second
    [result] = [m for m in second["messages"] if m["role"] == "tool"]
    assert "no census for Paris" in result["content"]
