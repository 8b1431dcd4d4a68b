"""The `script:PATH` model: scripted replies, matching, errors, retries and tool loops."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import Field

import kedi
from kedi.adapters.base import CallRequest, Exchange, ToolSpec
from kedi.adapters.scripted import ScriptAdapter
from kedi.errors import (
    AdapterError,
    KediConfigError,
    KediExecutionError,
    OutputValidationError,
    ProviderError,
    ScriptExhaustedError,
)
from tests.adapters.helpers import CONVERSATION, RUN, call, spec

pytestmark = pytest.mark.anyio


@pytest.fixture
def script(tmp_path: Path) -> Any:
    """Write a script file and return a `ScriptAdapter` replaying it."""

    def make(entries: Any) -> ScriptAdapter:
        path = tmp_path / "replies.json"
        path.write_text(json.dumps(entries), encoding="utf-8")
        return ScriptAdapter(path)

    return make


def tool(name: str, handler: Any) -> ToolSpec:
    return ToolSpec(name, f"The {name} tool.", {"type": "object", "properties": {}}, handler)


CITY = spec(city=(str, ...))
COUNT = spec(count=(int, Field(ge=0)))


async def test_entries_answer_calls_in_order(script: Any) -> None:
    adapter = script(["first", {"text": "second"}, {"outputs": {"city": "Paris"}}])
    assert (await adapter.request(call("a"))).value == "first"
    assert (await adapter.request(call("b"))).value == "second"
    result = await adapter.request(call("c", output=CITY))
    assert result.value == {"city": "Paris"}
    assert result.new_messages[-1].content == '{"city":"Paris"}'
    assert adapter.remaining == 0


async def test_turn_messages_are_stamped_and_exclude_instructions(script: Any) -> None:
    adapter = script(["hello back"])
    result = await adapter.request(call("hello", instructions="Be kind."))
    assert [m.to_json_dict() for m in result.new_messages] == [
        {"role": "user", "content": "hello", "runId": RUN, "conversationId": CONVERSATION},
        {
            "role": "assistant",
            "content": "hello back",
            "runId": RUN,
            "conversationId": CONVERSATION,
        },
    ]


async def test_text_entry_for_a_structured_call_is_parsed_as_json(script: Any) -> None:
    adapter = script([{"text": '{"city": "Rome"}'}])
    assert (await adapter.request(call("x", output=CITY))).value == {"city": "Rome"}


async def test_outputs_entry_for_a_text_call_is_compact_json(script: Any) -> None:
    adapter = script([{"outputs": {"a": 1}}])
    assert (await adapter.request(call("x"))).value == '{"a":1}'


async def test_when_entries_match_their_calls_whatever_the_order(script: Any) -> None:
    adapter = script(
        [
            "plain",
            {"when": {"prompt_contains": "river"}, "outputs": {"city": "Seine"}},
            {"when": {"outputs": ["count"]}, "outputs": {"count": 7}},
        ]
    )
    assert (await adapter.request(call("How many?", output=COUNT))).value == {"count": 7}
    assert (await adapter.request(call("Unrelated"))).value == "plain"
    assert (await adapter.request(call("Which river?", output=CITY))).value == {"city": "Seine"}


async def test_when_outputs_needs_every_listed_name(script: Any) -> None:
    adapter = script(
        [
            {"when": {"outputs": ["city", "count"]}, "outputs": {"city": "wrong"}},
            {"outputs": {"city": "ordered"}},
        ]
    )
    assert (await adapter.request(call("x", output=CITY))).value == {"city": "ordered"}
    assert adapter.remaining == 1


async def test_concurrent_calls_get_their_matching_entries(script: Any) -> None:
    adapter = script(
        [
            {"when": {"outputs": ["city"]}, "outputs": {"city": "Paris"}, "delay_ms": 60},
            {"when": {"outputs": ["count"]}, "outputs": {"count": 3}, "delay_ms": 0},
            {"when": {"prompt_contains": "poem"}, "text": "roses", "delay_ms": 30},
        ]
    )
    results: dict[str, Any] = {}

    async def run(key: str, request: CallRequest) -> None:
        results[key] = (await adapter.request(request)).value

    async with anyio.create_task_group() as group:
        group.start_soon(run, "poem", call("Write a poem"))
        group.start_soon(run, "city", call("Capital of France?", output=CITY))
        group.start_soon(run, "count", call("How many?", output=COUNT))
    assert results == {"poem": "roses", "city": {"city": "Paris"}, "count": {"count": 3}}


async def test_entries_are_claimed_before_the_delay(script: Any) -> None:
    adapter = script([{"text": "slow", "delay_ms": 80}, "fast"])
    finished: list[str] = []

    async def run(prompt: str) -> None:
        finished.append((await adapter.request(call(prompt))).value)

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        group.start_soon(run, "first")
        await anyio.sleep(0)
        group.start_soon(run, "second")
    assert finished == ["fast", "slow"]
    assert time.perf_counter() - started >= 0.07


async def test_many_concurrent_calls_never_share_an_entry(script: Any) -> None:
    adapter = script([{"text": f"reply {i}", "delay_ms": 5 * (i % 3)} for i in range(12)])
    values: list[str] = []

    async def run() -> None:
        values.append((await adapter.request(call("go"))).value)

    async with anyio.create_task_group() as group:
        for _ in range(12):
            group.start_soon(run)
    assert sorted(values) == sorted(f"reply {i}" for i in range(12))


async def test_running_out_names_the_call_and_the_script(script: Any) -> None:
    adapter = script(["only one"])
    await adapter.request(call("first"))
    with pytest.raises(ScriptExhaustedError) as caught:
        await adapter.request(call("second", origin="flow.kedi:12"))
    message = str(caught.value)
    assert "flow.kedi:12" in message
    assert adapter.model_name in message
    assert "'second'" in message


async def test_unmatched_when_entries_do_not_answer_other_calls(script: Any) -> None:
    adapter = script([{"when": {"prompt_contains": "river"}, "text": "Seine"}])
    with pytest.raises(ScriptExhaustedError):
        await adapter.request(call("mountain"))
    assert adapter.remaining == 1


async def test_error_entry_is_a_final_provider_error(script: Any) -> None:
    adapter = script([{"error": "upstream exploded"}, "after"])
    exchanges: list[Exchange] = []
    with pytest.raises(ProviderError) as caught:
        await adapter.request(call("x", on_exchange=exchanges.append))
    assert "upstream exploded" in str(caught.value)
    assert "entry 1" in str(caught.value)
    assert caught.value.retryable is False
    assert caught.value.partial is None
    assert exchanges[0].response == {"error": "upstream exploded"}
    assert (await adapter.request(call("y"))).value == "after"


async def test_invalid_outputs_are_corrected_by_the_next_entry(script: Any) -> None:
    adapter = script([{"outputs": {"count": -2}}, {"outputs": {"count": 2}}])
    exchanges: list[Exchange] = []
    result = await adapter.request(call("How many?", output=COUNT, on_exchange=exchanges.append))
    assert result.value == {"count": 2}
    roles = [m.role for m in result.new_messages]
    assert roles == ["user", "assistant", "user", "assistant"]
    correction = result.new_messages[2]
    assert "count: Input should be greater than or equal to 0" in correction.content
    assert (correction.run_id, correction.conversation_id) == (RUN, CONVERSATION)
    assert len(exchanges) == 2
    assert exchanges[1].messages[-1]["content"] == correction.content
    assert result.usage.requests == 2


async def test_retries_exhausted_lists_the_errors(script: Any) -> None:
    adapter = script([{"outputs": {"count": "many"}}, {"outputs": {}}, "unused"])
    with pytest.raises(OutputValidationError) as caught:
        await adapter.request(call("How many?", output=COUNT, origin="f.kedi:2"))
    message = str(caught.value)
    assert "f.kedi:2" in message and "entry 2" in message
    assert "count: Field required" in message
    partial = caught.value.partial
    assert partial is not None and partial.stage == "decode"
    assert [m.role for m in partial.messages] == ["user", "assistant", "user", "assistant"]
    assert adapter.remaining == 1


@pytest.mark.parametrize(("retries", "attempts"), [(0, 1), (2, 3)])
async def test_output_retries_setting_bounds_the_attempts(
    script: Any, retries: int, attempts: int
) -> None:
    adapter = script([{"outputs": {"count": -1}}] * 4)
    with pytest.raises(OutputValidationError):
        await adapter.request(call("x", output=COUNT, settings={"output_retries": retries}))
    assert adapter.remaining == 4 - attempts


async def test_bad_output_retries_setting_is_a_config_error(script: Any) -> None:
    with pytest.raises(KediConfigError, match="output_retries"):
        await script(["x"]).request(call("x", settings={"output_retries": "two"}))


async def test_tool_loop_round_trip(script: Any) -> None:
    adapter = script(
        [
            {
                "tool_calls": [
                    {"name": "add", "args": {"a": 2, "b": 3}, "id": "c1"},
                    {"name": "divide", "args": {"a": 1, "b": 0}},
                ]
            },
            {"outputs": {"count": 5}},
        ]
    )
    seen: list[Mapping[str, Any]] = []

    async def add(args: Mapping[str, Any]) -> int:
        seen.append(args)
        return args["a"] + args["b"]

    async def divide(args: Mapping[str, Any]) -> float:
        return args["a"] / args["b"]

    exchanges: list[Exchange] = []
    result = await adapter.request(
        call(
            "Compute",
            instructions="Use the tools.",
            output=COUNT,
            tools=(tool("add", add), tool("divide", divide)),
            on_exchange=exchanges.append,
        )
    )
    assert seen == [{"a": 2, "b": 3}]
    assert result.value == {"count": 5}
    messages = [m.to_json_dict() for m in result.new_messages]
    stamps = {"runId": RUN, "conversationId": CONVERSATION}
    assert messages[1] == {
        "role": "assistant",
        "toolCalls": [
            {"id": "c1", "name": "add", "args": {"a": 2, "b": 3}},
            {"id": "call_1_2", "name": "divide", "args": {"a": 1, "b": 0}},
        ],
        **stamps,
    }
    assert messages[2] == {
        "role": "tool",
        "content": "5",
        "toolCallId": "c1",
        "toolName": "add",
        **stamps,
    }
    assert messages[3] == {
        "role": "tool",
        "content": "division by zero",
        "toolCallId": "call_1_2",
        "toolName": "divide",
        "failed": True,
        **stamps,
    }
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert len(exchanges) == 2
    assert exchanges[0].messages == ({"role": "system", "content": "Use the tools."}, messages[0])
    assert exchanges[1].messages == ({"role": "system", "content": "Use the tools."}, *messages[:4])
    assert exchanges[1].tools == ("add", "divide")
    assert result.usage.requests == 2
    assert result.usage.tool_calls == 1


async def test_raw_args_and_unknown_tools_are_fed_back(script: Any) -> None:
    adapter = script(
        [{"tool_calls": [{"name": "echo", "args": '{"text": "cut'}, {"name": "missing"}]}, "done"]
    )
    seen: list[Mapping[str, Any]] = []

    async def echo(args: Mapping[str, Any]) -> dict[str, Any]:
        seen.append(args)
        return {"echo": dict(args)}

    result = await adapter.request(call("x", tools=(tool("echo", echo),)))
    assert seen == [{"truncated_args": '{"text": "cut'}]
    assert result.new_messages[1].tool_calls[0].args == '{"text": "cut'
    echo_result, missing = result.new_messages[2], result.new_messages[3]
    assert json.loads(echo_result.content) == {"echo": {"truncated_args": '{"text": "cut'}}
    assert missing.failed and "unknown tool 'missing'" in missing.content
    assert result.value == "done"


async def test_tool_loop_stops_after_eight_rounds(script: Any) -> None:
    async def noop(args: Mapping[str, Any]) -> str:
        return "ok"

    adapter = script([{"tool_calls": [{"name": "noop"}]}] * 9 + ["never"])
    with pytest.raises(AdapterError, match="more than 8 tool rounds") as caught:
        await adapter.request(call("x", tools=(tool("noop", noop),)))
    assert caught.value.partial.stage == "loop"
    assert adapter.remaining == 1


def test_model_name_is_the_path_as_given(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "r.json").write_text("[]", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    adapter = ScriptAdapter("r.json")
    assert adapter.model_name == "r.json"
    assert ScriptAdapter.shortname == "script"
    assert ScriptAdapter.profile.tools and ScriptAdapter.profile.structured_output
    assert "output_retries" in ScriptAdapter.profile.settings


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[1, 2", "is not valid JSON"),
        ('{"text": "x"}', "must hold a JSON list of replies, not an object"),
        ("[42]", "entry 1: expected a string or an object, not a number"),
        ('["ok", {"output": {}}]', "entry 2: unknown key 'output'"),
        (
            '[{"text": "a", "error": "b"}]',
            "entry 1: needs exactly one of text, outputs, error, tool_calls",
        ),
        ('[{"delay_ms": 5}]', "entry 1: needs exactly one of"),
        ('[{"outputs": [1]}]', "entry 1: 'outputs' must be an object"),
        ('[{"text": 3}]', "entry 1: 'text' must be a string"),
        ('[{"text": "a", "delay_ms": -1}]', "entry 1: 'delay_ms' must be a number"),
        ('[{"text": "a", "when": {"outputs": "city"}}]', "'when.outputs' must be a non-empty list"),
        ('[{"text": "a", "when": {"prompt": "x"}}]', "'when': unknown key 'prompt'"),
        ('[{"tool_calls": []}]', "'tool_calls' must be a non-empty list"),
        ('[{"tool_calls": [{"args": {}}]}]', "tool call 1 needs a 'name' string"),
        ('[{"tool_calls": [{"name": "f", "args": 3}]}]', "'args' must be an object or raw text"),
    ],
)
def test_malformed_scripts_name_file_entry_and_problem(
    tmp_path: Path, content: str, problem: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(KediConfigError) as caught:
        ScriptAdapter(path)
    assert str(path) in str(caught.value)
    assert problem in str(caught.value)


def test_missing_script_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(KediConfigError, match="cannot read script .*nope.json"):
        ScriptAdapter(tmp_path / "nope.json")


def test_a_missing_relative_script_names_the_directory_it_was_read_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `> model: script:replies.json` is read from the working directory, not the
    # program's: run from elsewhere, the error only said "cannot read script replies.json".
    monkeypatch.chdir(tmp_path)
    with pytest.raises(KediConfigError) as caught:
        ScriptAdapter("replies.json")
    assert str(caught.value) == (
        "cannot read script replies.json: No such file or directory "
        f"(a relative path is read from the working directory, {tmp_path})"
    )


def test_the_script_adapter_without_a_file_says_how_to_name_one() -> None:
    # `kedi run flow.kedi --adapter script` (no --model) built ScriptAdapter(None).
    source = ">> Say hi [greeting]\n= `greeting`\n"
    with pytest.raises(KediExecutionError) as caught:
        kedi.compile(source, path="flow.kedi").run_sync(adapter="script")
    assert isinstance(caught.value.original, KediConfigError)
    assert "pass --model script:PATH" in str(caught.value)
