"""The Pydantic AI adapter, offline against the real package (FunctionModel doubles)."""

from __future__ import annotations

import datetime as dt
import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.exceptions import (
    ModelConnectionError,
    ModelContextWindowExceededError,
    ModelHTTPError,
)
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.profiles import ModelProfile
from pydantic_ai.usage import RequestUsage

import kedi
from kedi.adapters.base import Exchange, ToolSpec
from kedi.adapters.pydantic_ai import CLASSIFIER, PydanticAdapter
from kedi.errors import (
    AdapterError,
    AuthenticationError,
    CapabilityError,
    ContextLengthError,
    ExtraNotInstalledError,
    HistoryError,
    HistoryProcessingError,
    HistoryProcessingValidationError,
    KediConfigError,
    KediUsageError,
    ModelNotFoundError,
    OutputValidationError,
    ProviderError,
    RateLimitError,
)
from kedi.history.processors import HistoryProcessorContext
from tests.adapters.helpers import CONVERSATION, RUN, add_tool, call, spec

pytestmark = pytest.mark.anyio

CITY = spec(city=(str, ...), population=(int, ...))


class Script:
    """A FunctionModel body answering from a list of replies, recording what it was sent."""

    def __init__(self, *replies: Callable[[list[ModelMessage], AgentInfo], ModelResponse]) -> None:
        self.replies = list(replies)
        self.seen: list[list[ModelMessage]] = []
        self.infos: list[AgentInfo] = []

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.seen.append(list(messages))
        self.infos.append(info)
        return self.replies.pop(0)(messages, info)

    def model(self, **kwargs: Any) -> FunctionModel:
        return FunctionModel(self, **kwargs)


def text(content: str, *, tokens: tuple[int, int] = (7, 3)) -> Callable[..., ModelResponse]:
    usage = RequestUsage(input_tokens=tokens[0], output_tokens=tokens[1])
    return lambda messages, info: ModelResponse(parts=[TextPart(content)], usage=usage)


def output(args: dict[str, Any]) -> Callable[..., ModelResponse]:
    """Answer a structured call the way its output mode asks for."""

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if info.output_tools:
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, args)])
        return ModelResponse(parts=[TextPart(json.dumps(args))])

    return reply


def tool_call(name: str, args: dict[str, Any], call_id: str) -> Callable[..., ModelResponse]:
    return lambda messages, info: ModelResponse(
        parts=[ToolCallPart(name, args, tool_call_id=call_id)]
    )


def kinds(messages: Any) -> list[list[str]]:
    return [[type(part).__name__ for part in message.parts] for message in messages]


def prompts(messages: list[ModelMessage]) -> list[str]:
    return [part.content for m in messages for part in m.parts if isinstance(part, UserPromptPart)]  # type: ignore[misc]


# --------------------------------------------------------------------------- text, structure, usage


async def test_text_call_with_a_sync_function_model() -> None:
    script = Script(text("Hello there", tokens=(11, 4)))
    result = await PydanticAdapter(script.model()).request(
        call("Say hello", instructions="Be terse.")
    )
    assert result.value == "Hello there"
    assert kinds(result.new_messages) == [["UserPromptPart"], ["TextPart"]]
    assert all(m.run_id == RUN and m.conversation_id == CONVERSATION for m in result.new_messages)
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.requests) == (
        11,
        4,
        1,
    )
    assert script.infos[0].instructions == "Be terse."


async def test_async_function_model_and_tool_mode_capture() -> None:
    seen: list[AgentInfo] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info)
        return ModelResponse(
            parts=[ToolCallPart(info.output_tools[0].name, {"city": "Lyon", "population": 522})]
        )

    adapter = PydanticAdapter(FunctionModel(model), output_mode="tool")
    result = await adapter.request(call("Largest city near the Alps?", output=CITY))
    assert result.value == {"city": "Lyon", "population": 522}
    assert seen[0].model_request_parameters.output_mode == "tool"
    # The output call is closed in the turn, so the lane can be sent again as is.
    assert kinds(result.new_messages) == [["UserPromptPart"], ["ToolCallPart"], ["ToolReturnPart"]]


async def test_native_mode_leaves_no_tool_traffic_and_keeps_json_rules() -> None:
    dated = spec(day=(dt.date, ...), count=(int, ...))
    script = Script(output({"day": "2024-05-01", "count": 3}))
    result = await PydanticAdapter(script.model(), output_mode="native").request(
        call("When?", output=dated)
    )
    assert result.value == {"day": dt.date(2024, 5, 1), "count": 3}
    assert script.infos[0].model_request_parameters.output_mode == "native"
    assert kinds(result.new_messages) == [["UserPromptPart"], ["TextPart"]]


async def test_dict_tool_arguments_are_validated_with_json_rules() -> None:
    dated = spec(day=(dt.date, ...))
    script = Script(output({"day": "2024-05-01"}))
    result = await PydanticAdapter(script.model(), output_mode="tool").request(
        call("When?", output=dated)
    )
    assert result.value == {"day": dt.date(2024, 5, 1)}


async def test_prompted_mode_puts_the_schema_in_the_instructions() -> None:
    script = Script(output({"city": "Oslo", "population": 700}))
    adapter = PydanticAdapter(script.model(), output_mode="prompted")
    result = await adapter.request(call("Capital of Norway?", output=CITY))
    assert result.value == {"city": "Oslo", "population": 700}
    assert '"population"' in (script.infos[0].instructions or "")


def test_auto_mode_follows_the_model_profile() -> None:
    assert PydanticAdapter(FunctionModel(text("x"))).output_mode == "native"
    plain = ModelProfile(supports_json_schema_output=False)
    assert PydanticAdapter(FunctionModel(text("x"), profile=plain)).output_mode == "tool"
    with pytest.raises(CapabilityError, match="does not support native structured output"):
        PydanticAdapter(FunctionModel(text("x"), profile=plain), output_mode="native")
    with pytest.raises(KediConfigError, match="unknown output_mode 'json'"):
        PydanticAdapter(FunctionModel(text("x")), output_mode="json")  # type: ignore[arg-type]


async def test_validation_retry_sends_the_error_back() -> None:
    script = Script(
        output({"city": "Oslo", "population": "many"}), output({"city": "Oslo", "population": 700})
    )
    result = await PydanticAdapter(script.model(), output_mode="native").request(
        call("Capital?", output=CITY)
    )
    assert result.value == {"city": "Oslo", "population": 700}
    assert result.usage.requests == 2
    assert "population" in prompts(script.seen[1])[-1]


async def test_output_that_never_validates_is_an_output_validation_error() -> None:
    bad = output({"city": "Oslo"})
    adapter = PydanticAdapter(Script(bad, bad, bad).model(), output_mode="native")
    with pytest.raises(OutputValidationError, match="Exceeded maximum output retries") as caught:
        await adapter.request(call("Capital?", output=CITY, settings={"output_retries": 2}))
    assert type(caught.value.__cause__).__name__ == "UnexpectedModelBehavior"
    partial = caught.value.partial
    assert partial is not None and partial.stage == "decode" and partial.requests == 3
    assert partial.run_id == RUN and isinstance(partial.messages[-1], ModelResponse)


@pytest.mark.parametrize("mode", ["tool", "native", "prompted"])
async def test_output_that_never_validates_says_why(mode: str) -> None:
    """Pydantic AI's own text only counts the retries; the error names the field and the problem."""
    bad = output({"city": "Oslo", "population": "many"})
    adapter = PydanticAdapter(Script(bad, bad).model(), output_mode=mode)
    with pytest.raises(OutputValidationError) as caught:
        await adapter.request(call("Capital?", output=CITY, settings={"output_retries": 1}))
    assert str(caught.value).endswith(
        "gave no valid output (Exceeded maximum output retries (1)): "
        "population: Input should be a valid integer"
    )


# --------------------------------------------------------------------------- history


async def test_history_across_two_turns_without_storing_instructions() -> None:
    script = Script(text("Paris."), text("About 2.1 million."))
    adapter = PydanticAdapter(script.model())
    first = await adapter.request(call("Capital of France?", instructions="Answer briefly."))
    assert all(getattr(m, "instructions", None) is None for m in first.new_messages)
    second = await adapter.request(
        call(
            "How many?",
            instructions="Answer in French.",
            history=first.new_messages,
            run_id="run-2",
        )
    )
    assert prompts(script.seen[1]) == ["Capital of France?", "How many?"]
    assert script.infos[1].instructions == "Answer in French."
    assert second.value == "About 2.1 million."
    assert kinds(second.new_messages) == [["UserPromptPart"], ["TextPart"]]


async def test_system_prompts_in_supplied_history_are_not_sent() -> None:
    script = Script(text("ok"))
    history = [
        ModelRequest(parts=[SystemPromptPart("Old rules."), UserPromptPart("Hi")]),
        ModelResponse(parts=[TextPart("Hello")]),
    ]
    await PydanticAdapter(script.model()).request(call("Again", history=tuple(history)))
    sent = [type(part).__name__ for message in script.seen[0] for part in message.parts]
    assert "SystemPromptPart" not in sent and prompts(script.seen[0]) == ["Hi", "Again"]


async def test_dump_and_load_round_trip_and_bad_data() -> None:
    adapter = PydanticAdapter(Script(text("Hello")).model())
    result = await adapter.request(call("Hi"))
    data = adapter.dump_messages(result.new_messages)
    assert json.loads(json.dumps(data)) == data
    assert adapter.load_messages(data) == list(result.new_messages)
    with pytest.raises(HistoryError, match="not a list of Pydantic AI messages"):
        adapter.load_messages([{"kind": "nonsense"}])


# --------------------------------------------------------------------------- tools


async def test_tool_loop_round_trip() -> None:
    log: list[Any] = []
    script = Script(
        tool_call("add", {"a": 2, "b": 3}, "c1"), output({"city": "Five", "population": 5})
    )
    adapter = PydanticAdapter(script.model(), output_mode="native")
    result = await adapter.request(call("Add 2 and 3", output=CITY, tools=(add_tool(log),)))
    assert log == [{"a": 2, "b": 3}]
    returned = script.seen[1][-1].parts[0]
    assert isinstance(returned, ToolReturnPart) and returned.content == "5"
    assert [tool.name for tool in script.infos[0].function_tools] == ["add"]
    assert result.usage.tool_calls == 1 and result.usage.requests == 2
    assert kinds(result.new_messages) == [
        ["UserPromptPart"],
        ["ToolCallPart"],
        ["ToolReturnPart"],
        ["TextPart"],
    ]


async def test_a_failing_tool_is_reported_to_the_model() -> None:
    log: list[Any] = []
    script = Script(tool_call("add", {"a": -1, "b": 3}, "c1"), text("I could not add those."))
    result = await PydanticAdapter(script.model()).request(
        call("Add -1 and 3", tools=(add_tool(log),))
    )
    returned = script.seen[1][-1].parts[0]
    assert isinstance(returned, ToolReturnPart) and returned.outcome == "failed"
    assert "negative numbers are not allowed" in returned.model_response_str()
    assert result.value == "I could not add those." and result.usage.tool_calls == 0


async def test_each_call_sees_only_its_own_tools() -> None:
    script = Script(text("a"), text("b"))
    adapter = PydanticAdapter(script.model())
    await adapter.request(call("one", tools=(add_tool([]),)))
    await adapter.request(call("two"))
    assert [[tool.name for tool in info.function_tools] for info in script.infos] == [["add"], []]


async def test_cancellation_in_the_middle_of_a_tool_loop_returns_nothing() -> None:
    started = anyio.Event()

    async def slow(args: Any) -> str:
        started.set()
        await anyio.sleep(10)
        return "late"

    script = Script(tool_call("slow", {}, "c1"), text("never"))
    adapter = PydanticAdapter(script.model())
    request = call(
        "Go", tools=(ToolSpec("slow", "Slow.", {"type": "object", "properties": {}}, slow),)
    )
    results: list[Any] = []
    with anyio.move_on_after(0.3) as scope:
        results.append(await adapter.request(request))
    assert scope.cancelled_caught and started.is_set()
    assert results == [] and len(script.seen) == 1


async def test_transcript_gets_every_model_request_instructions_first() -> None:
    exchanges: list[Exchange] = []
    script = Script(tool_call("add", {"a": 1, "b": 1}, "c1"), text("2"))
    request = call(
        "1+1?", instructions="Use the tool.", tools=(add_tool([]),), on_exchange=exchanges.append
    )
    await PydanticAdapter(script.model()).request(request)
    assert [len(exchange.messages) for exchange in exchanges] == [2, 4]
    assert exchanges[0].messages == (
        {"role": "system", "content": "Use the tool."},
        {"role": "user", "content": "1+1?"},
    )
    assert exchanges[0].response == {
        "role": "assistant",
        "toolCalls": [{"id": "c1", "name": "add", "args": '{"a":1,"b":1}'}],
    }
    assert exchanges[1].messages[-1] == {
        "role": "tool",
        "content": "2",
        "toolCallId": "c1",
        "toolName": "add",
    }
    assert exchanges[1].tools == ("add",)


# --------------------------------------------------------------------------- settings and errors


async def test_settings_are_mapped_and_filtered() -> None:
    script = Script(text("a"), text("b"))
    thinking = FunctionModel(script, profile=ModelProfile(supports_thinking=True))
    settings = {"temperature": 0.2, "stop": "END", "effort": "max", "approval_policy": "never"}
    await PydanticAdapter(thinking).request(call("one", settings=settings))
    assert script.infos[0].model_settings == {"temperature": 0.2, "stop_sequences": ["END"]}
    assert script.infos[0].model_request_parameters.thinking == "xhigh"
    await PydanticAdapter(FunctionModel(script)).request(call("two", settings=settings))
    assert script.infos[1].model_settings == {"temperature": 0.2, "stop_sequences": ["END"]}
    assert script.infos[1].model_request_parameters.thinking is None


async def test_bad_retry_setting_is_a_config_error() -> None:
    with pytest.raises(KediConfigError, match="output_retries setting must be an integer >= 0"):
        await PydanticAdapter(Script().model()).request(call("x", settings={"output_retries": -1}))


def raising(error: Exception) -> Callable[..., ModelResponse]:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise error

    return reply


@pytest.mark.parametrize(
    ("error", "kind", "retryable"),
    [
        (ModelHTTPError(401, "m", {"error": "bad key"}), AuthenticationError, False),
        (ModelHTTPError(403, "m"), AuthenticationError, False),
        (ModelHTTPError(404, "m"), ModelNotFoundError, False),
        (ModelHTTPError(429, "m"), RateLimitError, True),
        (ModelHTTPError(500, "m"), ProviderError, True),
        (ModelConnectionError("m", "connection reset"), ProviderError, True),
        (
            ModelHTTPError.for_category(
                ModelContextWindowExceededError, status_code=400, model_name="m", body="too long"
            ),
            ContextLengthError,
            False,
        ),
    ],
)
async def test_provider_errors_are_mapped(
    error: Exception, kind: type[ProviderError], retryable: bool
) -> None:
    adapter = PydanticAdapter(Script(raising(error)).model())
    with pytest.raises(kind) as caught:
        await adapter.request(call("Hi", origin="flow.kedi:3"))
    assert type(caught.value) is kind and caught.value.retryable is retryable
    assert "flow.kedi:3" in str(caught.value) and caught.value.__cause__ is error
    assert caught.value.partial is None  # nothing completed


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (401, " rejected the credentials (HTTP 401): bad key; check the API key of the model's"),
        (404, ": model or endpoint not found (HTTP 404): bad key"),
        (429, " is rate limiting requests (HTTP 429): bad key"),
    ],
)
async def test_provider_errors_read_as_the_openai_adapters_do(status: int, words: str) -> None:
    """The status named as the openai adapter names it (tests/adapters/test_openai_guards.py)."""
    error = ModelHTTPError(status, "m", "bad key")
    adapter = PydanticAdapter(Script(raising(error)).model())
    with pytest.raises(ProviderError) as caught:
        await adapter.request(call("Hi", origin="flow.kedi:3"))
    assert str(caught.value).startswith(f"model {adapter.model_name!r} at flow.kedi:3{words}")
    assert " failed" not in str(caught.value)


async def test_a_models_own_transport_error_is_retryable_as_on_langchain() -> None:
    # A model's plain exception is mapped as the LangChain adapter maps its chat model's.
    adapter = PydanticAdapter(Script(raising(ConnectionError("connection reset"))).model())
    with pytest.raises(ProviderError) as caught:
        await adapter.request(call("Hi", origin="flow.kedi:3"))
    assert str(caught.value).endswith("at flow.kedi:3 failed: ConnectionError: connection reset")
    assert caught.value.retryable


async def test_misuse_of_pydantic_ai_is_an_adapter_error() -> None:
    script = Script(text("one"), text("two"))
    adapter = PydanticAdapter(script.model())
    first = await adapter.request(call("Hi"))
    with pytest.raises(AdapterError, match="Pydantic AI rejected the call at flow.kedi:9.*run_id"):
        # A call id that the history already holds as a run id: Pydantic AI refuses the run.
        await adapter.request(
            call("Again", history=first.new_messages, origin="flow.kedi:9", call_id=RUN)
        )


async def test_calls_of_one_run_share_its_run_id_and_pydantic_ai_sees_their_call_ids() -> None:
    script = Script(text("one"), text("two"))
    adapter = PydanticAdapter(script.model())
    first = await adapter.request(call("Hi", call_id="call-1"))
    second = await adapter.request(call("Again", history=first.new_messages, call_id="call-2"))
    assert {m.run_id for m in [*first.new_messages, *second.new_messages]} == {RUN}


async def test_usage_limit_is_a_clear_adapter_error_with_partial_evidence() -> None:
    script = Script(
        tool_call("add", {"a": 1, "b": 1}, "c1"), tool_call("add", {"a": 2, "b": 2}, "c2")
    )
    adapter = PydanticAdapter(script.model())
    with pytest.raises(AdapterError, match="usage limit.*request_limit setting") as caught:
        await adapter.request(call("Loop", tools=(add_tool([]),), settings={"request_limit": 1}))
    partial = caught.value.partial
    assert partial is not None and partial.stage == "usage" and partial.tool_calls == 1
    assert kinds(partial.messages) == [["UserPromptPart"], ["ToolCallPart"], ["ToolReturnPart"]]


async def test_a_models_own_error_after_a_tool_carries_the_partial_and_the_location() -> None:
    # Only Pydantic AI's own errors were mapped: a model raising anything else (a custom
    # or FunctionModel, a transport error Pydantic AI does not wrap) reached the program
    # raw, with no partial of the completed tool exchange and no .kedi line.
    def exploded(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("connection reset")

    script = Script(tool_call("add", {"a": 1, "b": 1}, "c1"), exploded)
    adapter = PydanticAdapter(script.model())
    with pytest.raises(
        ProviderError, match="at flow.kedi:4 failed: RuntimeError: connection reset"
    ) as caught:
        await adapter.request(call("Add", tools=(add_tool([]),), origin="flow.kedi:4"))
    partial = caught.value.partial
    assert partial is not None and partial.stage == "model" and partial.tool_calls == 1
    assert kinds(partial.messages) == [["UserPromptPart"], ["ToolCallPart"], ["ToolReturnPart"]]
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_with_model_keeps_one_copy_per_model_with_the_options() -> None:
    """Every run of a program on one model shares one adapter (and its cached agents)."""
    adapter = PydanticAdapter(output_mode="tool")
    model, other = FunctionModel(text("a")), FunctionModel(text("b"))
    copy = adapter.with_model(model)
    assert copy is not adapter and copy.output_mode == "tool"
    assert adapter.with_model(model) is copy
    assert adapter.with_model(other) not in (copy, adapter)
    assert copy.with_model(other) is copy  # a model chosen at construction stays


def test_capability_rows_describe_the_adapter() -> None:
    """The row names every adapter shares are checked in test_architecture; these are the values."""
    rows = PydanticAdapter.capability_rows()
    assert rows["message format"] == "pydantic-ai" and rows["streaming"].startswith(
        "yes: text calls and str captures stream"
    )
    assert all(name in rows["settings"] for name in PydanticAdapter.profile.settings)


async def test_missing_model_and_unknown_model_names() -> None:
    with pytest.raises(KediConfigError, match="has no model"):
        await PydanticAdapter().request(call("Hi"))
    with pytest.raises(KediConfigError, match="cannot use model 'nope:x'"):
        PydanticAdapter("nope:x")


def test_missing_extra_names_the_package_and_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # Hide the package and its loaded submodules, as if it were not installed.
    for name in [name for name in sys.modules if name.split(".")[0] == "pydantic_ai"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "kedi.adapters.pydantic_ai")
    with pytest.raises(ExtraNotInstalledError) as caught:
        importlib.import_module("kedi.adapters.pydantic_ai")
    assert caught.value.package == "pydantic-ai-slim"
    assert 'pip install "kedi[pydantic-ai]"' in str(caught.value)


# --------------------------------------------------------------------------- history processors


HISTORY: tuple[ModelMessage, ...] = (
    ModelRequest(parts=[UserPromptPart("Turn one")]),
    ModelResponse(parts=[TextPart("Answer one")]),
    ModelRequest(parts=[UserPromptPart("Turn two")]),
    ModelResponse(parts=[TextPart("Answer two")]),
)


async def test_a_no_op_processor_changes_nothing() -> None:
    contexts: list[HistoryProcessorContext] = []

    def keep(ctx: HistoryProcessorContext) -> Any:
        contexts.append(ctx)
        return ctx.messages

    script = Script(text("ok"))
    adapter = PydanticAdapter(script.model(), history_processor=keep)
    result = await adapter.request(call("Turn three", history=HISTORY))
    assert result.rewritten_history is None and result.rewrites == 0
    assert prompts(script.seen[0]) == ["Turn one", "Turn two", "Turn three"]
    assert contexts[0].request_index == 1 and contexts[0].adapter_shortname == "pydantic"
    assert [(g.entry_start, g.entry_end, g.eligible) for g in contexts[0].groups] == [
        (0, 2, True),
        (2, 4, True),
        (4, 5, False),
    ]


async def test_an_async_processor_edit_shapes_the_request_and_the_lane() -> None:
    async def drop_oldest(ctx: HistoryProcessorContext) -> Any:
        return ctx.messages[2:]

    script = Script(text("ok"))
    adapter = PydanticAdapter(script.model(), history_processor=drop_oldest)
    result = await adapter.request(call("Turn three", history=HISTORY))
    assert prompts(script.seen[0]) == ["Turn two", "Turn three"]
    assert result.rewrites == 1
    assert result.rewritten_history == HISTORY[2:]


async def test_processors_run_before_tool_loop_follow_ups() -> None:
    indexes: list[tuple[int, int]] = []

    def watch(ctx: HistoryProcessorContext) -> Any:
        indexes.append((ctx.request_index, len(ctx.messages)))
        if ctx.request_index == 2:
            return ctx.messages[2:]  # drop the oldest turn before the follow-up request
        return ctx.messages

    script = Script(tool_call("add", {"a": 1, "b": 1}, "c1"), text("2"))
    adapter = PydanticAdapter(script.model(), history_processor=watch)
    result = await adapter.request(call("1+1?", history=HISTORY, tools=(add_tool([]),)))
    assert indexes == [(1, 5), (2, 7)]
    assert prompts(script.seen[0]) == ["Turn one", "Turn two", "1+1?"]
    assert prompts(script.seen[1]) == ["Turn two", "1+1?"]
    assert result.rewrites == 1 and result.rewritten_history == HISTORY[2:]
    assert kinds(result.new_messages) == [
        ["UserPromptPart"],
        ["ToolCallPart"],
        ["ToolReturnPart"],
        ["TextPart"],
    ]


async def test_an_invalid_edit_is_rejected_before_any_model_call() -> None:
    script = Script(text("never"))
    adapter = PydanticAdapter(script.model(), history_processor=lambda ctx: ctx.messages[:-1])
    with pytest.raises(HistoryProcessingValidationError, match="current request"):
        await adapter.request(call("Turn three", history=HISTORY))
    assert script.seen == []


async def test_a_failing_processor_is_a_history_processing_error() -> None:
    def broken(ctx: HistoryProcessorContext) -> Any:
        raise RuntimeError("boom")

    script = Script(text("never"))
    with pytest.raises(HistoryProcessingError, match="broken failed: RuntimeError: boom"):
        await PydanticAdapter(script.model(), history_processor=broken).request(call("Hi"))
    assert script.seen == []


async def test_a_processor_may_not_call_its_own_adapter() -> None:
    script = Script(text("never"))

    async def summarize(ctx: HistoryProcessorContext) -> Any:
        await adapter.request(call("Summarize", run_id="run-2"))
        return ctx.messages

    adapter = PydanticAdapter(script.model(), history_processor=summarize)
    with pytest.raises(
        HistoryProcessingError, match="called from inside its own history processor"
    ):
        await adapter.request(call("Hi"))
    assert script.seen == []


async def test_process_history_capability_is_rejected_with_a_processor() -> None:
    with pytest.raises(KediUsageError, match="ProcessHistory"):
        PydanticAdapter(
            FunctionModel(text("x")),
            history_processor=lambda ctx: ctx.messages,
            capabilities=[ProcessHistory(lambda messages: messages)],
        )
    adapter = PydanticAdapter(
        FunctionModel(text("x")), capabilities=[ProcessHistory(lambda messages: messages)]
    )
    with pytest.raises(KediUsageError, match="ProcessHistory"):
        await adapter.request(call("Hi", history_processor=lambda ctx: ctx.messages))


def test_classifier_describes_pydantic_messages() -> None:
    request = ModelRequest(parts=[SystemPromptPart("Rules"), UserPromptPart("Hi")])
    info = CLASSIFIER.info(request)
    assert (info.role, info.protected, info.is_text_only) == ("user", ("system",), False)
    call_info = CLASSIFIER.info(ModelResponse(parts=[ToolCallPart("t", {}, tool_call_id="c9")]))
    assert (call_info.role, call_info.opens) == ("assistant", ("c9",))
    answer = CLASSIFIER.info(ModelRequest(parts=[ToolReturnPart("t", "x", tool_call_id="c9")]))
    assert (answer.role, answer.answers) == ("tool", ("c9",))
    copies = CLASSIFIER.copy([request])
    assert CLASSIFIER.same(copies[0], request) and copies[0] is not request


# --------------------------------------------------------------------------- a real program


def answer_everything(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Structured calls get `<field> #<n>` for each field; text calls get the number of prompts seen."""
    seen = prompts(messages)
    schema = info.model_request_parameters.output_object
    if schema is None:
        return ModelResponse(parts=[TextPart(f"saw {len(seen)} prompts")])
    fields = schema.json_schema["properties"]
    return ModelResponse(
        parts=[TextPart(json.dumps({name: f"{name} #{len(seen)}" for name in fields}))]
    )


def test_a_kedi_program_with_history_runs_on_the_adapter() -> None:
    source = (
        "> history: enabled\n"
        "> system: Be brief.\n"
        ">> Name a risk of migrating queues: [risk: str].\n"
        "[followup] << How would you mitigate <risk>?\n"
        "= `f'{risk} | {followup}'`\n"
    )
    seen: list[list[ModelMessage]] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        return answer_everything(messages, info)

    program = kedi.compile(source, path="flow.kedi")
    result = program.run_sync(adapter=PydanticAdapter(FunctionModel(model)))
    assert result == "risk #1 | saw 2 prompts"
    assert prompts(seen[1]) == [
        "Name a risk of migrating queues: [risk].",
        "How would you mitigate risk #1?",
    ]


def test_running_on_trio_is_refused_with_a_clear_error() -> None:
    adapter = PydanticAdapter(Script(text("never")).model())
    with pytest.raises(KediUsageError, match="runs only on asyncio"):
        anyio.run(adapter.request, call("Hi"), backend="trio")
