"""The LangChain adapter, offline against the real package (a scripted BaseChatModel)."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Sequence
from typing import Any

import anyio
import pytest
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import Field

import kedi
from kedi.adapters.base import Exchange, ToolSpec
from kedi.adapters.langchain import CLASSIFIER, LangChainAdapter
from kedi.errors import (
    AdapterError,
    AuthenticationError,
    CapabilityError,
    ExtraNotInstalledError,
    HistoryError,
    HistoryProcessingError,
    HistoryProcessingValidationError,
    KediConfigError,
    KediUsageError,
    OutputValidationError,
    ProviderError,
    RateLimitError,
)
from kedi.history.processors import HistoryProcessorContext
from tests.adapters.helpers import add_tool, call, spec

pytestmark = pytest.mark.anyio


class Scripted(BaseChatModel):
    """Answers from a script of AIMessages (or raises scripted errors); records every request."""

    replies: list[Any] = Field(default_factory=list)
    seen: list[list[BaseMessage]] = Field(default_factory=list)
    bound: list[dict[str, Any]] = Field(default_factory=list)
    temperature: float | None = None
    reasoning_effort: str | None = None
    stop: list[str] | None = None

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.seen.append(list(messages))
        self.bound.append(
            {
                **kwargs,
                "temperature": self.temperature,
                "effort": self.reasoning_effort,
                "stop": self.stop,
            }
        )
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        if callable(reply):
            reply = reply(messages, kwargs)
        return ChatResult(generations=[ChatGeneration(message=reply)])

    def bind_tools(self, tools: Sequence[Any], *, tool_choice: Any = None, **kwargs: Any) -> Any:
        # The maintainers' recipe for fakes (adapters notes §3.2): bind_tools is bind().
        return self.bind(
            tools=[convert_to_openai_tool(tool) for tool in tools],
            tool_choice=tool_choice,
            **kwargs,
        )


class Plain(BaseChatModel):
    """A chat model with neither bind_tools nor with_structured_output."""

    @property
    def _llm_type(self) -> str:
        return "plain"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage("plain"))])


class Slow(BaseChatModel):
    """Answers after `delay` seconds (a provider that hangs)."""

    delay: float = 30.0

    @property
    def _llm_type(self) -> str:
        return "slow"

    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        raise NotImplementedError("kedi calls the chat model's async methods")

    async def _agenerate(self, *args: Any, **kwargs: Any) -> ChatResult:
        await anyio.sleep(self.delay)
        return ChatResult(generations=[ChatGeneration(message=AIMessage("late"))])


CITY = spec(city=(str, ...), population=(int, ...))


def ai(
    content: str = "",
    *,
    calls: Sequence[tuple[str, dict[str, Any], str]] = (),
    tokens: tuple[int, int] | None = (9, 4),
) -> AIMessage:
    usage = (
        None
        if tokens is None
        else {"input_tokens": tokens[0], "output_tokens": tokens[1], "total_tokens": sum(tokens)}
    )
    return AIMessage(
        content,
        tool_calls=[{"name": name, "args": args, "id": call_id} for name, args, call_id in calls],
        usage_metadata=usage,
    )


def kinds(messages: Sequence[BaseMessage]) -> list[str]:
    return [type(message).__name__ for message in messages]


def pair_valid(messages: Sequence[BaseMessage]) -> bool:
    """Every tool call is answered before the next non-tool message, and every answer has a call."""
    open_calls: set[str] = set()
    for message in messages:
        if isinstance(message, ToolMessage):
            if message.tool_call_id not in open_calls:
                return False
            open_calls.discard(message.tool_call_id)
            continue
        if open_calls:
            return False
        if isinstance(message, AIMessage):
            calls = [*message.tool_calls, *message.invalid_tool_calls]
            open_calls = {c["id"] for c in calls if c["id"]}
    return not open_calls


# --------------------------------------------------------------------------- text, usage, history


async def test_text_call_sends_instructions_first_and_never_stores_them() -> None:
    model = Scripted(replies=[ai("Hello!", tokens=(12, 3))])
    result = await LangChainAdapter(model).request(call("Say hello", instructions="Be terse."))
    assert result.value == "Hello!"
    assert (
        kinds(model.seen[0]) == ["SystemMessage", "HumanMessage"]
        and model.seen[0][0].content == "Be terse."
    )
    assert kinds(result.new_messages) == ["HumanMessage", "AIMessage"]
    assert (result.usage.input_tokens, result.usage.output_tokens, result.usage.requests) == (
        12,
        3,
        1,
    )


async def test_usage_is_estimated_when_the_model_reports_none() -> None:
    model = Scripted(replies=[ai("Hello!", tokens=None)])
    result = await LangChainAdapter(model).request(call("Say hello"))
    assert result.usage.input_tokens == count_tokens_approximately([HumanMessage("Say hello")])
    assert result.usage.output_tokens == count_tokens_approximately([AIMessage("Hello!")])


async def test_history_across_turns_drops_stored_system_messages() -> None:
    model = Scripted(replies=[ai("Paris."), ai("About two million.")])
    adapter = LangChainAdapter(model)
    first = await adapter.request(call("Capital of France?"))
    history = (SystemMessage("Old rules."), *first.new_messages)
    second = await adapter.request(
        call("How many people?", instructions="Be brief.", history=history)
    )
    assert [m.content for m in model.seen[1]] == [
        "Be brief.",
        "Capital of France?",
        "Paris.",
        "How many people?",
    ]
    assert second.value == "About two million."


async def test_dump_and_load_round_trip_and_bad_data() -> None:
    adapter = LangChainAdapter(
        Scripted(replies=[ai("", calls=[("Outputs", {"city": "Oslo", "population": 7}, "c1")])])
    )
    result = await adapter.request(call("Capital of Norway?", output=CITY))
    data = adapter.dump_messages(result.new_messages)
    assert json.loads(json.dumps(data)) == data
    assert adapter.load_messages(data) == list(result.new_messages)
    with pytest.raises(HistoryError, match="not a list of LangChain messages"):
        adapter.load_messages([{"type": "nonsense"}])


# --------------------------------------------------------------------------- structured output


async def test_structured_output_closes_its_call_before_commit() -> None:
    model = Scripted(
        replies=[
            ai("", calls=[("Outputs", {"city": "Oslo", "population": 700}, "c1")]),
            ai("Cold."),
        ]
    )
    adapter = LangChainAdapter(model)
    result = await adapter.request(call("Capital of Norway?", output=CITY))
    assert result.value == {"city": "Oslo", "population": 700}
    assert model.bound[0]["tool_choice"] == "any"
    assert [tool["function"]["name"] for tool in model.bound[0]["tools"]] == ["Outputs"]
    assert kinds(result.new_messages) == ["HumanMessage", "AIMessage", "ToolMessage"]
    await adapter.request(call("Weather there?", history=result.new_messages))
    assert pair_valid(model.seen[1])


async def test_parse_error_retry_in_tool_mode_sends_an_error_tool_message() -> None:
    model = Scripted(
        replies=[
            ai("", calls=[("Outputs", {"city": "Oslo", "population": "many"}, "c1")]),
            ai("", calls=[("Outputs", {"city": "Oslo", "population": 700}, "c2")]),
        ]
    )
    result = await LangChainAdapter(model).request(call("Capital?", output=CITY))
    assert result.value == {"city": "Oslo", "population": 700}
    error = model.seen[1][-1]
    assert isinstance(error, ToolMessage) and error.status == "error" and error.tool_call_id == "c1"
    assert "population" in error.content
    assert pair_valid(result.new_messages) and result.usage.requests == 2


async def test_parse_error_retry_in_json_mode_sends_a_human_message() -> None:
    model = Scripted(
        replies=[ai('{"city": "Oslo"}'), ai('Sure: {"city": "Oslo", "population": 700}')]
    )
    result = await LangChainAdapter(model).request(call("Capital?", output=CITY))
    assert result.value == {"city": "Oslo", "population": 700}
    correction = model.seen[1][-1]
    assert isinstance(correction, HumanMessage) and "population" in correction.content
    assert kinds(result.new_messages) == ["HumanMessage", "AIMessage", "HumanMessage", "AIMessage"]


async def test_unparsable_output_arguments_are_answered_and_retried() -> None:
    broken = AIMessage(
        "",
        invalid_tool_calls=[
            {"name": "Outputs", "args": '{"city": "Os', "id": "c1", "error": "bad JSON"}
        ],
    )
    model = Scripted(
        replies=[broken, ai("", calls=[("Outputs", {"city": "Oslo", "population": 7}, "c2")])]
    )
    result = await LangChainAdapter(model).request(call("Capital?", output=CITY))
    assert result.value == {"city": "Oslo", "population": 7}
    error = model.seen[1][-1]
    assert isinstance(error, ToolMessage) and (error.tool_call_id, error.status) == ("c1", "error")
    assert pair_valid(result.new_messages)


async def test_a_provider_error_after_a_tool_round_carries_partial_evidence() -> None:
    model = Scripted(replies=[ai("", calls=[("add", {"a": 1, "b": 2}, "c1")]), StatusError(500)])
    with pytest.raises(ProviderError) as caught:
        await LangChainAdapter(model).request(call("Add", tools=(add_tool([]),), history=HISTORY))
    partial = caught.value.partial
    assert partial is not None and partial.stage == "model" and partial.tool_calls == 1
    assert kinds(partial.messages) == [*kinds(HISTORY), "HumanMessage", "AIMessage", "ToolMessage"]


async def test_output_that_never_validates_fails_with_partial_evidence() -> None:
    bad = [ai("", calls=[("Outputs", {"city": 1, "population": 2}, f"c{n}")]) for n in range(2)]
    adapter = LangChainAdapter(Scripted(replies=bad), output_retries=1)
    with pytest.raises(OutputValidationError, match="after 2 tries: city") as caught:
        await adapter.request(call("Capital?", output=CITY))
    partial = caught.value.partial
    assert partial is not None and partial.stage == "decode" and partial.requests == 2
    assert kinds(partial.messages) == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]


async def test_output_retries_default_to_two() -> None:
    """Spec B21: like the openai adapter, two re-asks after the first answer."""
    bad = [ai("", calls=[("Outputs", {"city": 1, "population": 2}, f"c{n}")]) for n in range(4)]
    model = Scripted(replies=bad)
    with pytest.raises(OutputValidationError, match="after 3 tries"):
        await LangChainAdapter(model).request(call("Capital?", output=CITY))
    assert len(model.seen) == 3


async def test_the_output_retries_setting_overrides_the_adapters_option() -> None:
    """As on the openai and pydantic adapters, `> settings: output_retries:` applies per call."""
    bad = [ai("", calls=[("Outputs", {"city": 1, "population": 2}, f"c{n}")]) for n in range(4)]
    model = Scripted(replies=bad)
    request = call("Capital?", output=CITY, settings={"output_retries": 0})
    with pytest.raises(OutputValidationError, match="after 1 tries"):
        await LangChainAdapter(model).request(request)
    assert len(model.seen) == 1


async def test_structured_output_with_tools_binds_the_schema_as_a_tool() -> None:
    log: list[Any] = []
    model = Scripted(
        replies=[
            ai("", calls=[("add", {"a": 2, "b": 3}, "c1")]),
            ai("", calls=[("Outputs", {"city": "Five", "population": 5}, "c2")]),
        ]
    )
    result = await LangChainAdapter(model).request(
        call("Add 2 and 3", output=CITY, tools=(add_tool(log),))
    )
    assert result.value == {"city": "Five", "population": 5} and log == [{"a": 2, "b": 3}]
    assert [tool["function"]["name"] for tool in model.bound[0]["tools"]] == ["add", "Outputs"]
    assert kinds(result.new_messages) == [
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "AIMessage",
        "ToolMessage",
    ]
    assert pair_valid(result.new_messages) and result.usage.tool_calls == 1


# --------------------------------------------------------------------------- tools


async def test_tool_loop_round_trip() -> None:
    log: list[Any] = []
    model = Scripted(replies=[ai("", calls=[("add", {"a": 2, "b": 3}, "c1")]), ai("It is 5.")])
    result = await LangChainAdapter(model).request(call("Add 2 and 3", tools=(add_tool(log),)))
    assert result.value == "It is 5." and log == [{"a": 2, "b": 3}]
    returned = model.seen[1][-1]
    assert (
        isinstance(returned, ToolMessage)
        and returned.content == "5"
        and returned.tool_call_id == "c1"
    )
    assert kinds(result.new_messages) == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]
    assert (result.usage.requests, result.usage.tool_calls) == (2, 1)


async def test_failing_and_unknown_tools_are_reported_to_the_model() -> None:
    model = Scripted(
        replies=[ai("", calls=[("add", {"a": -1, "b": 3}, "c1"), ("mul", {}, "c2")]), ai("Sorry.")]
    )
    result = await LangChainAdapter(model).request(call("Go", tools=(add_tool([]),)))
    failed = [m for m in model.seen[1] if isinstance(m, ToolMessage)]
    assert [(m.tool_call_id, m.status) for m in failed] == [("c1", "error"), ("c2", "error")]
    assert "negative numbers are not allowed" in failed[0].content
    assert "unknown tool 'mul'; available tools: add" in failed[1].content
    assert result.value == "Sorry." and result.usage.tool_calls == 0


async def test_the_tool_loop_stops_after_max_rounds() -> None:
    looping = [ai("", calls=[("add", {"a": 1, "b": 1}, f"c{n}")]) for n in range(3)]
    adapter = LangChainAdapter(Scripted(replies=looping), max_rounds=3)
    with pytest.raises(AdapterError, match="made 3 model requests") as caught:
        await adapter.request(call("Loop", tools=(add_tool([]),)))
    assert caught.value.partial is not None and caught.value.partial.stage == "loop"
    assert caught.value.partial.tool_calls == 3


async def test_cancellation_in_the_middle_of_a_tool_loop_returns_nothing() -> None:
    started = anyio.Event()

    async def slow(args: Any) -> str:
        started.set()
        await anyio.sleep(10)
        return "late"

    model = Scripted(replies=[ai("", calls=[("slow", {}, "c1")]), ai("never")])
    request = call(
        "Go", tools=(ToolSpec("slow", "Slow.", {"type": "object", "properties": {}}, slow),)
    )
    results: list[Any] = []
    with anyio.move_on_after(0.3) as scope:
        results.append(await LangChainAdapter(model).request(request))
    assert scope.cancelled_caught and started.is_set()
    assert results == [] and len(model.seen) == 1


async def test_transcript_gets_every_model_request() -> None:
    exchanges: list[Exchange] = []
    model = Scripted(replies=[ai("", calls=[("add", {"a": 1, "b": 1}, "c1")]), ai("2")])
    request = call(
        "1+1?", instructions="Use the tool.", tools=(add_tool([]),), on_exchange=exchanges.append
    )
    await LangChainAdapter(model).request(request)
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
    assert exchanges[1].response == {"role": "assistant", "content": "2"}


# --------------------------------------------------------------------------- settings, capabilities, errors


async def test_settings_go_to_the_chat_models_own_fields() -> None:
    model = Scripted(replies=[ai("a"), ai("b")])
    settings = {
        "temperature": 0.3,
        "effort": "high",
        "stop": "END",
        "tool_choice": "auto",
        "approval_policy": "x",
    }
    await LangChainAdapter(model).request(call("one", settings=settings, tools=(add_tool([]),)))
    assert model.bound[0]["temperature"] == 0.3 and model.bound[0]["effort"] == "high"
    assert model.bound[0]["stop"] == ["END"] and model.bound[0]["tool_choice"] == "auto"
    assert "approval_policy" not in model.bound[0]
    await LangChainAdapter(model).request(call("two"))
    assert (
        model.temperature is None and model.bound[1]["temperature"] is None
    )  # the original is untouched


@pytest.mark.parametrize("streamed", [False, True])
async def test_the_timeout_setting_bounds_a_model_request(streamed: bool) -> None:
    """`> settings: timeout` bounds the call as on the openai and pydantic adapters."""
    on_delta = [].append if streamed else None
    started = anyio.current_time()
    with pytest.raises(ProviderError) as caught:
        await LangChainAdapter(Slow()).request(
            call("Hi", settings={"timeout": 0.2}, origin="flow.kedi:4", on_delta=on_delta)
        )
    assert anyio.current_time() - started < 5
    assert str(caught.value) == (
        "the request to chat model 'slow' at flow.kedi:4 timed out after 0.2 s"
    )
    assert caught.value.retryable
    assert (
        await LangChainAdapter(Slow(delay=0)).request(call("Hi", settings={"timeout": 5}))
    ).value == "late"
    with pytest.raises(
        KediConfigError, match="timeout setting must be a number of seconds > 0, not 'soon'"
    ):
        await LangChainAdapter(Slow()).request(call("Hi", settings={"timeout": "soon"}))


def test_a_program_timeout_setting_reaches_the_langchain_adapter() -> None:
    program = kedi.compile(
        "> settings:\n    timeout: 0.2\n[reply] << Hi\n= <reply>", path="flow.kedi"
    )
    with pytest.raises(ProviderError, match=r"flow.kedi:3 timed out after 0\.2 s"):
        program.run_sync(adapter=LangChainAdapter(Slow()))


async def test_models_without_tools_are_refused_before_any_request() -> None:
    adapter = LangChainAdapter(Plain())
    assert (await adapter.request(call("Hi"))).value == "plain"
    with pytest.raises(CapabilityError, match="does not implement bind_tools"):
        await adapter.request(call("Hi", tools=(add_tool([]),)))
    with pytest.raises(CapabilityError, match="no structured output"):
        await adapter.request(call("Hi", output=CITY))


def test_capability_rows_describe_the_adapter() -> None:
    """The row names every adapter shares are checked in test_architecture; these are the values."""
    rows = LangChainAdapter.capability_rows()
    assert rows["message format"] == "langchain" and rows["streaming"].startswith(
        "yes: text calls and str captures stream"
    )
    assert all(name in rows["settings"] for name in LangChainAdapter.profile.settings)


def test_bad_constructor_arguments_are_config_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(
        KediConfigError, match="needs a model name .* or a LangChain chat model object, not int"
    ):
        LangChainAdapter(42)  # type: ignore[arg-type]
    with pytest.raises(
        KediConfigError, match="cannot build a chat model for 'openai:gpt-4o'.*credentials"
    ):
        LangChainAdapter("openai:gpt-4o")
    with pytest.raises(KediConfigError, match="max_rounds setting must be an integer >= 1"):
        LangChainAdapter(Scripted(), max_rounds=0)


def test_a_model_name_goes_through_init_chat_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(
        KediConfigError,
        match="LangChain cannot build a chat model for 'openai:gpt-4o-mini': Missing credentials",
    ):
        LangChainAdapter("openai:gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    adapter = LangChainAdapter().with_model("openai:gpt-4o-mini")
    assert type(adapter.chat_model).__name__ == "ChatOpenAI" and adapter.model_name == "gpt-4o-mini"
    assert "sk-test" not in repr(adapter)


class StatusError(Exception):
    def __init__(self, status_code: int) -> None:
        super().__init__(f"HTTP {status_code} from the provider")
        self.status_code = status_code


@pytest.mark.parametrize(
    ("error", "kind", "retryable"),
    [
        (StatusError(401), AuthenticationError, False),
        (StatusError(429), RateLimitError, True),
        (StatusError(503), ProviderError, True),
        (RuntimeError("socket closed"), ProviderError, False),
    ],
)
async def test_chat_model_errors_are_mapped(
    error: Exception, kind: type[ProviderError], retryable: bool
) -> None:
    adapter = LangChainAdapter(Scripted(replies=[error]))
    with pytest.raises(kind) as caught:
        await adapter.request(call("Hi", origin="flow.kedi:4"))
    assert type(caught.value) is kind and caught.value.retryable is retryable
    assert "flow.kedi:4" in str(caught.value) and caught.value.__cause__ is error
    assert caught.value.partial is None


@pytest.mark.parametrize(
    ("status", "words"),
    [
        (401, " rejected the credentials (HTTP 401): StatusError: HTTP 401 from the provider; "),
        (404, ": model or endpoint not found (HTTP 404): StatusError: HTTP 404 from the provider"),
        (429, " is rate limiting requests (HTTP 429): StatusError: HTTP 429 from the provider"),
    ],
)
async def test_chat_model_errors_read_as_the_openai_adapters_do(status: int, words: str) -> None:
    """The status named as the openai adapter names it (tests/adapters/test_openai_guards.py)."""
    adapter = LangChainAdapter(Scripted(replies=[StatusError(status)]))
    with pytest.raises(ProviderError) as caught:
        await adapter.request(call("Hi", origin="flow.kedi:4"))
    assert str(caught.value).startswith(f"chat model 'scripted' at flow.kedi:4{words}")


def test_missing_extra_names_the_package_and_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    # Hide the package and its loaded submodules, as if it were not installed.
    for name in [name for name in sys.modules if name.split(".")[0] == "langchain_core"]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.delitem(sys.modules, "kedi.adapters.langchain")
    with pytest.raises(ExtraNotInstalledError) as caught:
        importlib.import_module("kedi.adapters.langchain")
    assert caught.value.package == "langchain-core"
    assert 'pip install "kedi[langchain]"' in str(caught.value)


# --------------------------------------------------------------------------- history processors

HISTORY: tuple[BaseMessage, ...] = (
    HumanMessage("Turn one"),
    AIMessage("Answer one"),
    HumanMessage("Turn two"),
    AIMessage("Answer two"),
)


async def test_a_no_op_processor_changes_nothing() -> None:
    contexts: list[HistoryProcessorContext] = []

    def keep(ctx: HistoryProcessorContext) -> Any:
        contexts.append(ctx)
        return list(ctx.messages)

    model = Scripted(replies=[ai("ok")])
    result = await LangChainAdapter(model, history_processor=keep).request(
        call("Turn three", history=HISTORY)
    )
    assert result.rewritten_history is None and result.rewrites == 0
    assert [m.content for m in model.seen[0]] == [
        "Turn one",
        "Answer one",
        "Turn two",
        "Answer two",
        "Turn three",
    ]
    assert contexts[0].adapter_shortname == "langchain" and contexts[0].estimated_tokens > 0


async def test_an_async_processor_edit_shapes_the_request_and_the_lane() -> None:
    async def drop_oldest(ctx: HistoryProcessorContext) -> Any:
        return ctx.messages[2:]

    model = Scripted(replies=[ai("ok")])
    result = await LangChainAdapter(model, history_processor=drop_oldest).request(
        call("Turn three", history=HISTORY)
    )
    assert [m.content for m in model.seen[0]] == ["Turn two", "Answer two", "Turn three"]
    assert result.rewrites == 1 and result.rewritten_history == HISTORY[2:]


async def test_processors_run_before_every_request_of_the_tool_loop() -> None:
    seen: list[tuple[int, int]] = []

    def watch(ctx: HistoryProcessorContext) -> Any:
        seen.append((ctx.request_index, len(ctx.messages)))
        return ctx.messages[2:] if ctx.request_index == 2 else ctx.messages

    model = Scripted(replies=[ai("", calls=[("add", {"a": 1, "b": 1}, "c1")]), ai("2")])
    adapter = LangChainAdapter(model, history_processor=watch)
    result = await adapter.request(call("1+1?", history=HISTORY, tools=(add_tool([]),)))
    assert seen == [(1, 5), (2, 7)]
    assert kinds(model.seen[1]) == [
        "HumanMessage",
        "AIMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
    ]
    assert result.rewrites == 1 and result.rewritten_history == HISTORY[2:]
    assert kinds(result.new_messages) == ["HumanMessage", "AIMessage", "ToolMessage", "AIMessage"]


async def test_a_processor_may_not_cut_the_call_in_progress() -> None:
    def drop_tool_traffic(ctx: HistoryProcessorContext) -> Any:
        return (
            [m for m in ctx.messages if not isinstance(m, ToolMessage)]
            if ctx.request_index == 2
            else ctx.messages
        )

    model = Scripted(replies=[ai("", calls=[("add", {"a": 1, "b": 1}, "c1")]), ai("2")])
    adapter = LangChainAdapter(model, history_processor=drop_tool_traffic)
    with pytest.raises(HistoryProcessingValidationError):
        await adapter.request(call("1+1?", tools=(add_tool([]),)))
    assert len(model.seen) == 1


async def test_an_invalid_edit_or_a_failing_processor_stops_before_any_request() -> None:
    model = Scripted(replies=[ai("never")])
    with pytest.raises(HistoryProcessingValidationError, match="current request"):
        await LangChainAdapter(model, history_processor=lambda ctx: ctx.messages[:-1]).request(
            call("x", history=HISTORY)
        )

    def broken(ctx: HistoryProcessorContext) -> Any:
        raise RuntimeError("boom")

    with pytest.raises(HistoryProcessingError, match="broken failed: RuntimeError: boom"):
        await LangChainAdapter(model, history_processor=broken).request(call("x"))
    assert model.seen == []


async def test_a_processor_may_not_call_its_own_adapter() -> None:
    model = Scripted(replies=[ai("never")])

    async def summarize(ctx: HistoryProcessorContext) -> Any:
        await adapter.request(call("Summarize"))
        return ctx.messages

    adapter = LangChainAdapter(model, history_processor=summarize)
    with pytest.raises(
        HistoryProcessingError, match="called from inside its own history processor"
    ):
        await adapter.request(call("Hi"))
    assert model.seen == []


def test_classifier_describes_langchain_messages() -> None:
    call_info = CLASSIFIER.info(AIMessage("", tool_calls=[{"name": "t", "args": {}, "id": "c9"}]))
    assert (call_info.role, call_info.opens, call_info.is_text_only) == (
        "assistant",
        ("c9",),
        False,
    )
    assert CLASSIFIER.info(ToolMessage("x", tool_call_id="c9")).answers == ("c9",)
    assert CLASSIFIER.info(SystemMessage("rules")).protected == ("system",)
    signed = AIMessage(
        [{"type": "thinking", "thinking": "hm", "signature": "sig"}, {"type": "text", "text": "ok"}]
    )
    assert CLASSIFIER.info(signed).protected == ("signed-thinking",)
    message = HumanMessage("hi")
    assert CLASSIFIER.same(CLASSIFIER.copy([message])[0], message)


# --------------------------------------------------------------------------- a real program


def test_a_kedi_program_with_history_runs_on_the_adapter() -> None:
    source = (
        "> history: enabled\n"
        "> system: Be brief.\n"
        ">> Name a risk of migrating queues: [risk: str].\n"
        "[followup] << How would you mitigate <risk>?\n"
        "= `f'{risk} | {followup}'`\n"
    )

    def output_call(messages: list[BaseMessage], bound: dict[str, Any]) -> AIMessage:
        return ai("", calls=[(bound["tools"][0]["function"]["name"], {"risk": "data loss"}, "c1")])

    model = Scripted(replies=[output_call, ai("Back up first.")])
    result = kedi.compile(source, path="flow.kedi").run_sync(adapter=LangChainAdapter(model))
    assert result == "data loss | Back up first."
    second = model.seen[1]
    assert kinds(second) == [
        "SystemMessage",
        "HumanMessage",
        "AIMessage",
        "ToolMessage",
        "HumanMessage",
    ]
    assert second[-1].content == "How would you mitigate data loss?"


def test_running_on_trio_is_refused_with_a_clear_error() -> None:
    model = Scripted(replies=[ai("never")])
    with pytest.raises(KediUsageError, match="runs only on asyncio"):
        anyio.run(LangChainAdapter(model).request, call("Hi"), backend="trio")
    assert model.seen == []


def test_a_model_name_is_built_by_init_chat_model_at_the_configured_base_url(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip(
        "langchain_openai", reason='needs langchain-openai: pip install "kedi[langchain]"'
    )
    from langchain_openai import ChatOpenAI

    from kedi.adapters.endpoint import command_line_options
    from kedi.adapters.langchain import chat_model_from_name

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    with command_line_options(base_url="http://127.0.0.1:8765/v1"):
        adapter = LangChainAdapter("openai:smollm2")
    model = adapter.chat_model
    assert isinstance(model, ChatOpenAI)
    assert (model.model_name, model.openai_api_base) == ("smollm2", "http://127.0.0.1:8765/v1")
    assert adapter.model_name == "smollm2"
    built = chat_model_from_name("gpt-4o-mini", temperature=0.5)
    assert isinstance(built, ChatOpenAI) and built.temperature == 0.5
    assert built.openai_api_base == "http://127.0.0.1:9/v1"


def test_one_chat_openai_serves_every_run_sync_of_a_program() -> None:
    """langchain-openai binds its cached HTTP client to the loop of the first request.

    Each `run_sync` used to run on a new event loop, so the second run on the
    same `ChatOpenAI` failed with "Event loop is closed"; the sync entry points
    now share the thread's loop (`kedi.runtime.loops`).
    """
    pytest.importorskip(
        "langchain_openai", reason='needs langchain-openai: pip install "kedi[langchain]"'
    )
    from langchain_openai import ChatOpenAI

    from tests.adapters.openai_server import OpenAIServer, Reply, completion

    with OpenAIServer() as server:
        server.add(*(Reply(body=completion(text)) for text in ("one", "two", "three")))
        chat = ChatOpenAI(model="m", base_url=server.base_url, api_key="k", max_retries=0)
        program = kedi.compile("[reply] << Hi\n= <reply>")
        assert program.run_sync(adapter=LangChainAdapter(chat)) == "one"
        assert program.run_sync(adapter=LangChainAdapter(chat)) == "two"

        @kedi.query(adapter=LangChainAdapter(chat))
        def greet() -> str:
            """kedi
            [reply] << Hello
            = <reply>
            """
            raise NotImplementedError

        assert greet() == "three"
