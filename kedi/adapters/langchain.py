"""The LangChain adapter: native `BaseMessage` lanes over any LangChain chat model.

`LangChainAdapter(chat_model)` takes any `BaseChatModel`, or a model name
that LangChain's `init_chat_model` resolves (`"openai:gpt-4o-mini"`, which
is how `kedi run --adapter langchain --model NAME` builds it; see
`chat_model_from_name`), and owns the whole call, so the lane gets exactly
what was sent and answered:

- **Requests**: a leading `SystemMessage` with the call's instructions (never
  stored), then the lane history without its system messages, then the turn so
  far, starting with a `HumanMessage` holding the prompt.
- **Tool loop**: `bind_tools(specs)` → `ainvoke` → run the handlers → append
  one `ToolMessage` per call (a failure, an unknown tool or unparsable
  arguments become a `ToolMessage(status="error")`) → repeat until the model
  answers without tool calls; at most `max_rounds` model requests per call.
- **Structured output**: without tools, `with_structured_output(model,
  include_raw=True)` (so each chat model uses its own method: a forced tool,
  or a JSON response format; the `structured_method` setting chooses one,
  e.g. `function_calling` for llama.cpp, which refuses ChatOpenAI's default
  `json_schema`); with tools, the output schema is bound as one
  more tool and the model is asked to call some tool every round (a forced
  single schema tool would leave it unable to use the call's tools). kedi
  validates the raw reply itself, with the JSON rules of `request.output`. A
  tool call it answers is closed with a `ToolMessage` before the turn is
  committed, so the next request is pair-valid. An invalid reply is sent back,
  as a `ToolMessage(status="error")` in tool mode or a `HumanMessage` in JSON
  mode, up to `output_retries` times.
- **Settings**: generation settings (`temperature`, `max_tokens`, `top_p`,
  `seed`, `stop`/`stop_sequences`, penalties, `logit_bias`, `service_tier`,
  `extra_body`) are set on a copy of the chat model, but only where its class
  declares a field of that name; `effort` goes to its `reasoning_effort`
  field, else `reasoning={"effort": ...}`; `tool_choice` and
  `parallel_tool_calls` go to `bind_tools`; `timeout` bounds each model
  request end to end (`anyio.move_on_after`; then a retryable
  `ProviderError`, "timed out after N s"). Everything else is dropped.
- **Usage**: summed from each reply's `usage_metadata`; a reply without it is
  estimated with `count_tokens_approximately`.
- **History processors** (Part B; the adapter's own, then the run's) run
  before every model request, tool-loop follow-ups and retries included; the
  call's own messages are protected.

LangChain messages carry no run or conversation stamps (they have no field
for them that providers are guaranteed to ignore).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, NoReturn

import anyio
from pydantic import ValidationError

from kedi.adapters._capture_stream import CaptureText, capture_text
from kedi.adapters._openai_wire import (
    count,
    json_text,
    provider_error,
    refused_output_format,
    seconds,
    string_content_http_client,
)
from kedi.adapters._portable import (
    WholeCharacters,
    correction_text,
    run_handler,
    validation_problems,
    without_lone_surrogates,
)
from kedi.adapters.base import (
    Adapter,
    AdapterProfile,
    CallRequest,
    CallResult,
    Exchange,
    JSONDict,
    OutputSpec,
    Usage,
    copy_per_model,
)
from kedi.adapters.endpoint import api_key, configured_base_url
from kedi.adapters.resources import current_resources
from kedi.errors import (
    AdapterError,
    AuthenticationError,
    CapabilityError,
    ExtraNotInstalledError,
    HistoryError,
    HistoryProcessingValidationError,
    KediConfigError,
    KediUsageError,
    OutputValidationError,
    ProviderError,
    StopRun,
)
from kedi.history import INTERRUPTED_RESULT, PartialResult, wire_tool_arguments
from kedi.history.archive import (
    CHECKPOINT_PREFIX,
    HistoryArchive,
    archive_exchanges,
    archive_policy,
    expand_checkpoints,
)
from kedi.history.grouping import CALL_IN_PROGRESS, CHECKPOINT, SIGNED_THINKING, SYSTEM, MessageInfo
from kedi.history.partial import PartialStage
from kedi.history.processors import (
    chain_processors,
    run_history_processor,
)

try:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import (
        AIMessage,
        AIMessageChunk,
        BaseMessage,
        HumanMessage,
        SystemMessage,
        ToolMessage,
        messages_from_dict,
        messages_to_dict,
    )
    from langchain_core.messages.utils import count_tokens_approximately, message_chunk_to_message
    from langchain_core.runnables import Runnable
except ImportError as error:  # pragma: no cover - exercised by a test that hides langchain_core
    raise ExtraNotInstalledError("langchain-core", "langchain") from error

__all__ = ["CLASSIFIER", "LangChainAdapter", "chat_model_from_name"]

_FIELD_SETTINGS = (
    "temperature",
    "max_tokens",
    "top_p",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "service_tier",
    "extra_body",
)
"""Settings set on the chat model's field of the same name (read on every request)."""
_BIND_SETTINGS = ("tool_choice", "parallel_tool_calls")
"""Settings passed to `bind_tools`."""
_CLOSED = "Final result processed."
"""The content of the `ToolMessage` that closes an accepted output-tool call (as Pydantic AI words it)."""


class LangChainAdapter(Adapter):
    """Runs kedi calls on a LangChain chat model, with kedi's own tool loop."""

    shortname: ClassVar[str] = "langchain"
    checks_requests: ClassVar[bool] = True
    profile: ClassVar[AdapterProfile] = AdapterProfile(
        structured_output=True,
        tools=True,
        streaming=True,
        history=True,
        offline=False,
        message_format="langchain",
        settings=frozenset(
            {
                *_FIELD_SETTINGS,
                *_BIND_SETTINGS,
                "stop",
                "stop_sequences",
                "effort",
                "structured_method",
                "timeout",
            }
        ),
    )

    def __init__(
        self,
        chat_model: BaseChatModel | str | None = None,
        *,
        history_processor: Callable[..., Any] | None = None,
        history_archive: HistoryArchive | int | None = None,
        max_rounds: int = 10,
        output_retries: int = 2,
    ) -> None:
        """Wrap `chat_model` (a chat model object, a model name, or None to take the program's).

        A name goes through `chat_model_from_name` (LangChain's `init_chat_model`),
        and such a model gets an HTTP client of its own per run. Raises
        `KediConfigError` on a bad argument.
        """
        self._name: str | None = None
        """The model's name when kedi builds it (then each run gets a copy with its own client)."""
        if isinstance(chat_model, str):
            self._name = chat_model
            chat_model = chat_model_from_name(chat_model)
            if "http_async_client" not in type(chat_model).model_fields:
                self._name = None  # a provider without a client to give: use the model as it is
        if chat_model is not None and not isinstance(chat_model, BaseChatModel):
            raise KediConfigError(
                "the langchain adapter needs a model name (`--model openai:gpt-4o-mini`) or a "
                f"LangChain chat model object, not {type(chat_model).__name__}, e.g. "
                "run(adapter=LangChainAdapter(ChatOpenAI(model=...)))"
            )
        self.chat_model = chat_model
        self.history_processor = history_processor
        self.history_archive = archive_policy(history_archive)
        self.max_rounds = count("max_rounds", max_rounds, 1)
        self.output_retries = count("output_retries", output_retries, 0)
        self._bound: dict[Any, tuple[Any, LangChainAdapter]] = {}
        self.model_name = ""
        self.supports_tools = self.supports_structured = False
        if chat_model is None:
            return
        self.model_name = _model_name(chat_model)
        kind = type(chat_model)
        # The base class implements neither; with_structured_output falls back on bind_tools.
        self.supports_tools = kind.bind_tools is not BaseChatModel.bind_tools
        self.supports_structured = self.supports_tools or (
            kind.with_structured_output is not BaseChatModel.with_structured_output
        )

    def with_model(self, model: Any) -> LangChainAdapter:
        """A copy with this adapter's options on `model` when it has none (see `Adapter.with_model`).

        A name is resolved with `chat_model_from_name`; copies are kept per model.
        """
        if self.chat_model is not None or model is None:
            return self
        return copy_per_model(
            self._bound,
            model,
            lambda model: LangChainAdapter(
                model,
                history_processor=self.history_processor,
                history_archive=self.history_archive,
                max_rounds=self.max_rounds,
                output_retries=self.output_retries,
            ),
        )

    def __repr__(self) -> str:
        """`LangChainAdapter('<model name>')`."""
        return f"LangChainAdapter({self.model_name!r})"

    @classmethod
    def capability_rows(cls) -> dict[str, str]:
        """What this adapter supports, one row per capability-matrix line."""
        rows = super().capability_rows()
        return {
            **rows,
            "structured output": "with_structured_output (the chat model's method); with tools: schema as a tool",
            "tools": "yes, where the chat model implements bind_tools (kedi runs the loop)",
            "streaming": "yes: text calls and str captures stream to on_delta (astream, astream_events)",
            "history": "yes: LangChain BaseMessage lanes, history processors before every request",
            "settings": rows["settings"]
            + " (timeout always; the others where the chat model has the field)",
        }

    def check(self, request: CallRequest) -> None:
        """Raise `CapabilityError` before any I/O if the chat model cannot serve the request."""
        super().check(request)
        if self.chat_model is None:
            raise KediConfigError(
                "the langchain adapter has no chat model; name one (`> model: openai:gpt-4o-mini`) "
                "or pass a LangChain chat model to LangChainAdapter(...)"
            )
        name = type(self.chat_model).__name__
        if request.tools and not self.supports_tools:
            raise CapabilityError(
                f"chat model {name} does not implement bind_tools, so it cannot use tools"
            )
        if request.output is not None and not self.supports_structured:
            raise CapabilityError(
                f"chat model {name} implements neither bind_tools nor with_structured_output, "
                "so it has no structured output; use a raw invoke `[x] << ...`"
            )
        if request.output is not None and request.output.name in {
            tool.name for tool in request.tools
        }:
            raise CapabilityError(
                f"a tool is named {request.output.name!r}, the name of the call's output schema"
            )

    async def request(self, request: CallRequest) -> CallResult:
        """Run one call: the tool loop, structured-output retries, history processing."""
        _require_asyncio()
        self.check(request)
        processor = chain_processors(self.history_processor, request.history_processor)
        if self._name is None:
            assert self.chat_model is not None  # `check` refuses an adapter without one
            return await _Turn(self, request, processor, self.chat_model).run()
        # LangChain caches one HTTP client per process, whose connections belong to the
        # event loop of the run that opened them; a model kedi built gets a client of its
        # own per run, closed when the run ends (or after the call, outside a run).
        run = current_resources()
        if run is not None:
            model = run.client(self, lambda: _RunModel(self._name or "")).model
            return await _Turn(self, request, processor, model).run()
        session = _RunModel(self._name)
        try:
            return await _Turn(self, request, processor, session.model).run()
        finally:
            await session.aclose()

    def dump_messages(self, messages: Sequence[Any]) -> list[Any]:
        """Serialize `BaseMessage`s with `messages_to_dict`."""
        return messages_to_dict(list(messages))

    def load_messages(self, data: Sequence[Any]) -> list[Any]:
        """Inverse of `dump_messages`; raises `HistoryError` naming the problem."""
        try:
            return messages_from_dict(list(data))
        except (KeyError, TypeError, ValueError, ValidationError) as error:
            raise HistoryError(
                f"not a list of LangChain messages (messages_to_dict form): {error!r}"
            ) from None


def chat_model_from_name(name: str, **settings: Any) -> BaseChatModel:
    """The chat model LangChain's `init_chat_model` builds for `name` (`"openai:gpt-4o-mini"`).

    `settings` go to the chat model's constructor. With a base URL configured
    (`--base-url`, `KEDI_BASE_URL`, `OPENAI_BASE_URL`; `kedi.adapters.endpoint`)
    an `openai:` or provider-less name is a `ChatOpenAI` at that URL, with the
    configured key (a placeholder when there is none: local servers need no
    key, but ChatOpenAI refuses to start without one).

    Raises:
        ExtraNotInstalledError: `langchain` (or the provider's package) is missing.
        KediConfigError: LangChain cannot build a model of that name.
    """
    try:
        from langchain.chat_models import init_chat_model
    except ImportError:
        raise ExtraNotInstalledError("langchain", "langchain") from None
    provider, _, bare = name.rpartition(":")
    base_url = configured_base_url()
    if base_url is not None and provider in ("", "openai"):
        name = bare
        settings.setdefault("model_provider", "openai")
        settings.setdefault("base_url", base_url)
        settings.setdefault("api_key", api_key() or "not-needed")
    elif provider == "openai" and "api_key" not in settings and api_key():
        settings["api_key"] = api_key()
    try:
        model: BaseChatModel = init_chat_model(name, **settings)
    except ImportError as error:
        package = getattr(error, "name", None) or "the provider's package"
        raise KediConfigError(
            f'LangChain needs {package} for model {name!r}: pip install "kedi[langchain]" '
            f"(and the provider's langchain-* package): {error}"
        ) from None
    except Exception as error:  # the provider's own checks (a missing key, a bad name) vary
        raise KediConfigError(
            f"LangChain cannot build a chat model for {name!r}: {error}"
        ) from None
    return model


class _RunModel:
    """A chat model built by name with an HTTP client of its own, closed by `aclose`.

    The client sends an assistant message's missing content as `""`, the rule
    kedi's own `openai` adapter follows: ChatOpenAI sends `null` beside tool
    calls, which llama.cpp's server refuses (HTTP 500 on every request whose
    history holds a structured-output or tool call).
    """

    def __init__(self, name: str) -> None:
        self.client = string_content_http_client()
        self.model = chat_model_from_name(name, http_async_client=self.client)

    async def aclose(self) -> None:
        await self.client.aclose()


def _require_asyncio() -> None:
    # LangChain's async methods need an asyncio event loop; under trio they fail
    # with an obscure error from inside the chat model, so say what is wrong up front.
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise KediUsageError(
            "the langchain adapter runs only on asyncio (LangChain does not support trio); "
            'use anyio.run(..., backend="asyncio")'
        ) from None


def _model_name(chat_model: BaseChatModel) -> str:
    for attribute in ("model_name", "model", "model_id"):
        value = getattr(chat_model, attribute, None)
        if isinstance(value, str) and value:
            return value
    return chat_model._llm_type


def _configured(chat_model: BaseChatModel, settings: Any) -> BaseChatModel:
    """A copy of `chat_model` with the call's generation settings on its own fields."""
    fields = type(chat_model).model_fields
    update = {
        name: settings[name] for name in _FIELD_SETTINGS if name in settings and name in fields
    }
    stop = settings.get("stop", settings.get("stop_sequences"))
    if stop is not None and "stop" in fields:
        update["stop"] = [stop] if isinstance(stop, str) else list(stop)
    effort = settings.get("effort")
    if effort is not None and "reasoning_effort" in fields:
        update["reasoning_effort"] = effort
    elif effort is not None and "reasoning" in fields:
        update["reasoning"] = {"effort": effort}
    return chat_model.model_copy(update=update) if update else chat_model


async def _streamed(
    runnable: Runnable[Any, Any], sent: Sequence[BaseMessage], on_delta: Callable[[str], None]
) -> AIMessage:
    """`runnable.astream(sent)`: each chunk's text goes to `on_delta`, made whole
    (`WholeCharacters`: never half a surrogate pair); the chunks add up to the reply."""
    total: AIMessageChunk | None = None
    whole = WholeCharacters()
    async for chunk in runnable.astream(sent):
        if not isinstance(chunk, AIMessageChunk):
            raise TypeError(f"the chat model streamed {type(chunk).__name__}, not AIMessageChunk")
        text = whole.piece(str(chunk.text))
        if text:
            on_delta(text)
        total = chunk if total is None else total + chunk
    if rest := whole.end():
        on_delta(rest)
    if total is None:
        raise ValueError("the chat model streamed no reply")
    message = message_chunk_to_message(total)
    assert isinstance(message, AIMessage)
    return message


async def _captured(
    runnable: Runnable[Any, Any],
    sent: Sequence[BaseMessage],
    capture: CaptureText,
    output_tool: str,
) -> tuple[Any, bool]:
    """`runnable.astream_events(sent)` of a structured call: the runnable's output, and whether it streamed.

    The JSON whose `str` fields `capture` streams is the arguments of the
    output tool (`output_tool`) once the reply calls it, else the reply's
    text (a chat model's JSON-schema or JSON mode) when it begins with `{`
    or a code fence: text beginning otherwise is the model talking before a
    tool call, not the answer.
    """
    capture.start()
    output: Any = None
    streamed = False
    names: dict[Any, str] = {}  # tool-call chunk index -> tool name (the name comes once)
    output_index: Any = None
    text_is_json: bool | None = None  # decided by the text's first visible character
    async for event in runnable.astream_events(sent, version="v2"):
        kind = event["event"]
        if kind == "on_chat_model_stream":
            chunk = event["data"]["chunk"]
            streamed = True
            for piece in getattr(chunk, "tool_call_chunks", ()):
                index = piece.get("index")
                names[index] = names.get(index) or piece.get("name") or ""
                if output_index is None and names[index] == output_tool:
                    output_index = index
                    capture.start()  # any text before the call was not the JSON
                if index == output_index and piece.get("args"):
                    capture.feed(piece["args"])
            text = str(chunk.text)
            if text_is_json is None and text.strip():
                text_is_json = text.lstrip()[0] in "{`"
            if output_index is None and text_is_json:
                capture.feed(text)
        elif kind.endswith("_end") and not event["parent_ids"]:  # the runnable's own result
            output = event["data"].get("output")
    if isinstance(output, dict) and isinstance(output.get("raw"), AIMessageChunk):
        output = {**output, "raw": message_chunk_to_message(output["raw"])}
    elif isinstance(output, AIMessageChunk):
        output = message_chunk_to_message(output)
    return output, streamed


def _checkpoint(archive_id: str, text: str) -> HumanMessage:
    """A checkpoint: a `HumanMessage` whose `id` names the archive (ids are never sent)."""
    return HumanMessage(text, id=f"{CHECKPOINT_PREFIX}{archive_id}")


def _checkpoint_id(message: BaseMessage) -> str | None:
    """The archive a checkpoint names, or None for any other message."""
    if isinstance(message, HumanMessage) and (message.id or "").startswith(CHECKPOINT_PREFIX):
        return (message.id or "")[len(CHECKPOINT_PREFIX) :]
    return None


def _function(name: str, description: str, parameters: JSONDict) -> JSONDict:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


# --------------------------------------------------------------------------- one call


@dataclass
class _Turn:
    """One call in progress: the history in force, the turn so far, usage."""

    adapter: LangChainAdapter
    request: CallRequest
    processor: Callable[..., Any] | None
    chat_model: BaseChatModel
    history: list[BaseMessage] = field(default_factory=list)
    turn: list[BaseMessage] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    rewrites: int = 0
    retries: int = 0
    capture: CaptureText | None = None
    """Streams the text of the call's `str` captures (a structured call with `on_delta`)."""
    streamed: bool = False
    """Whether the chat model streamed any reply of a structured call."""
    answered: set[str] = field(default_factory=set)
    """The tools that have returned a result in this call (see `ToolOutcome.ran`)."""
    timeout: float | None = None
    """Seconds each model request may take, end to end (the `timeout` setting; None: no limit)."""

    def __post_init__(self) -> None:
        timeout = self.request.settings.get("timeout")
        self.timeout = None if timeout is None else seconds("timeout", timeout)
        self.history = list(self.request.history)
        self.turn = [HumanMessage(self.request.prompt)]
        self.capture = capture_text(self.request.output, self.request.on_delta)

    @property
    def where(self) -> str:
        origin = self.request.origin
        return f"chat model {self.adapter.model_name!r}" + (f" at {origin}" if origin else "")

    async def run(self) -> CallResult:
        """The loop: ask, run tools or decode the output, until done or out of rounds."""
        spec = self.request.output
        for _ in range(self.adapter.max_rounds):
            reply = await self._ask(self._runnable())
            if spec is not None:
                done, value = await self._structured(reply, spec)
                if done:
                    if self.capture is not None and not self.streamed:
                        self.capture.whole(
                            value
                        )  # a chat model that cannot stream: the text at the end
                    return self._result(value)
            elif reply.tool_calls or reply.invalid_tool_calls:
                await self._run_tools(reply, skip=None)
            else:
                return self._result(str(reply.text))
        raise AdapterError(
            f"{self.where} made {self.adapter.max_rounds} model requests without finishing the call "
            "(max_rounds); the model kept calling tools",
            partial=self.partial("loop"),
        )

    def _runnable(self) -> Runnable[Any, Any]:
        model = _configured(self.chat_model, self.request.settings)
        spec = self.request.output
        tools = [
            _function(tool.name, tool.description, tool.parameters) for tool in self.request.tools
        ]
        if spec is not None and not tools:
            method = self.request.settings.get("structured_method")
            if method is None:
                return model.with_structured_output(spec.model, include_raw=True)
            return model.with_structured_output(spec.model, include_raw=True, method=method)
        if spec is not None:
            return model.bind_tools(
                [*tools, _function(spec.name, "The final answer.", spec.json_schema)],
                tool_choice=self._structured_choice(spec),
            )
        if tools:
            options = {
                name: self.request.settings[name]
                for name in _BIND_SETTINGS
                if name in self.request.settings
            }
            if self._named_tool() in self.answered:  # forced until it has a result, then free
                del options["tool_choice"]
            return model.bind_tools(tools, **options)
        return model

    def _structured_choice(self, spec: OutputSpec) -> str:
        """`tool_choice` of a structured call with tools: some tool, or a named one.

        A `tool_choice` setting naming one of the call's tools forces it until
        the tool has returned a result, then the answer (the schema tool) is
        forced: servers such as llama.cpp ignore `any`/`required` but honour a name.
        """
        named = self._named_tool()
        if named is None:
            return "any"
        return spec.name if named in self.answered else named

    def _named_tool(self) -> str | None:
        """The call's tool that the `tool_choice` setting names, if it names one."""
        named = self.request.settings.get("tool_choice")
        return next((tool.name for tool in self.request.tools if tool.name == named), None)

    def _result(self, value: Any) -> CallResult:
        return CallResult(
            value=value,
            new_messages=tuple(self.turn),
            usage=self.usage,
            rewritten_history=tuple(self.history) if self.rewrites else None,
            rewrites=self.rewrites,
        )

    # ------------------------------------------------------------------ requests

    async def _ask(self, runnable: Runnable[Any, Any]) -> AIMessage:
        """Send one model request (history processed first); add the reply to the turn."""
        messages = await self._processed()
        instructions = self.request.instructions
        sent: list[BaseMessage] = [SystemMessage(instructions)] if instructions else []
        sent += [message for message in messages if not isinstance(message, SystemMessage)]
        answer: Any = None
        # The `timeout` setting bounds the whole request, as on the other adapters.
        with anyio.move_on_after(self.timeout) as bounded:
            try:
                answer = await self._send(runnable, sent)
            except Exception as error:  # the chat model's own errors, mapped at this one boundary
                mapped = _provider_error(error, self.where, self.partial("model"))
                if self.request.output is not None:
                    mapped = refused_output_format(
                        mapped, "structured_method", "function_calling, json_mode"
                    )
                raise mapped from error
        if bounded.cancelled_caught:
            message = f"the request to {self.where} timed out after {self.timeout:g} s"
            raise ProviderError(message, retryable=True, partial=self.partial("model"))
        reply = answer["raw"] if isinstance(answer, dict) else answer
        if not isinstance(reply, AIMessage):
            raise AdapterError(
                f"{self.where} answered with {type(reply).__name__}, not an AIMessage"
            )
        reply = _without_lone_surrogates(reply)
        self.usage += _reply_usage(sent, reply)
        self._record(sent, reply)
        self.turn.append(reply)
        return reply

    async def _send(self, runnable: Runnable[Any, Any], sent: list[BaseMessage]) -> Any:
        spec = self.request.output
        if self.request.on_delta is not None and spec is None:
            return await _streamed(runnable, sent, self.request.on_delta)
        if self.capture is not None and spec is not None:
            answer, streamed = await _captured(runnable, sent, self.capture, spec.name)
            self.streamed = self.streamed or streamed
            return answer
        return await runnable.ainvoke(sent)

    async def _processed(self) -> list[BaseMessage]:
        """History and turn, through the history processor if there is one."""
        history, turn, archives = self._archived()
        messages = [*history, *turn]
        if self.processor is None:
            return messages
        outcome = await run_history_processor(
            self.processor,
            messages,
            _LangChainClassifier(frozenset(map(id, turn))),
            adapter_shortname=self.adapter.shortname,
            model_id=self.adapter.model_name,
            request_index=self.usage.requests + 1,
            cache_epoch=self.request.cache_epoch + self.rewrites,
            owner=self.adapter,
        )
        if not outcome.rewritten:
            return messages
        kept = list(outcome.messages)
        prior, tail = kept[: len(kept) - len(turn)], kept[len(kept) - len(turn) :]
        if len(tail) != len(turn) or any(a is not b for a, b in zip(tail, turn, strict=True)):
            raise HistoryProcessingValidationError(
                "a history processor must return the messages of the call in progress unchanged, at the end"
            )
        # The lane keeps archived exchanges verbatim: checkpoints are for requests only.
        self.history = expand_checkpoints(prior, archives, _checkpoint_id)
        self.rewrites += 1
        return kept

    def _archived(self) -> tuple[list[BaseMessage], list[BaseMessage], dict[str, list[Any]]]:
        """History and turn as the next request sends them: long tool loops archived."""
        policy = self.adapter.history_archive
        if policy is None:
            return self.history, self.turn, {}
        history, archives = archive_exchanges(
            self.history, CLASSIFIER, policy, dump=messages_to_dict, make_checkpoint=_checkpoint
        )
        turn, own = archive_exchanges(
            self.turn, CLASSIFIER, policy, dump=messages_to_dict, make_checkpoint=_checkpoint
        )
        return history, turn, {**archives, **own}

    def _record(self, sent: list[BaseMessage], reply: AIMessage) -> None:
        sink = self.request.on_exchange
        if sink is None:
            return
        output = self.request.output
        sink(
            Exchange(
                messages=tuple(portable_json(message) for message in sent),
                response=portable_json(reply),
                output_schema=None if output is None else output.json_schema,
                tools=tuple(tool.name for tool in self.request.tools),
                mode=None if output is None else self.mode,
                attempt=self.usage.requests,
            )
        )

    @property
    def mode(self) -> str:
        """How the call asks for structured output: the `structured_method`, `tools`, or `default`."""
        if self.request.tools:
            return "tools"
        return str(self.request.settings.get("structured_method") or "default")

    # ------------------------------------------------------------------ tools and output

    async def _run_tools(self, reply: AIMessage, *, skip: str | None) -> None:
        """Answer every call of `reply` (but the output call `skip`) with one `ToolMessage`."""
        handlers = {tool.name: tool.handler for tool in self.request.tools}
        for index, call in enumerate(reply.tool_calls):
            if call["name"] == skip:
                continue
            handler = handlers.get(call["name"])
            if handler is None:
                offered = ", ".join(sorted(handlers)) or "none"
                self._answer(
                    call, f"unknown tool {call['name']!r}; available tools: {offered}", failed=True
                )
                continue
            try:
                outcome = await run_handler(handler, call["args"])
            except StopRun as stop:
                self._stop(stop, reply, index)
            if outcome.ran:
                self.answered.add(call["name"])
            self.usage += Usage(tool_calls=int(outcome.ok))
            self._answer(call, outcome.content, failed=not outcome.ok)
        for invalid in reply.invalid_tool_calls:
            if invalid.get("name") != skip:
                self._answer(
                    invalid,
                    f"the arguments are not valid JSON: {invalid.get('error') or invalid.get('args')}",
                    failed=True,
                )

    def _stop(self, stop: StopRun, reply: AIMessage, index: int) -> NoReturn:
        """A tool stopped the run: close every unanswered call of `reply`, fail with the partial."""
        unanswered = [*reply.tool_calls[index:], *reply.invalid_tool_calls]
        for call in unanswered:
            self.turn.append(
                ToolMessage(
                    INTERRUPTED_RESULT, tool_call_id=call.get("id") or "", name=call.get("name")
                )
            )
        raise StopRun(
            stop.reason,
            message=f"tool {unanswered[0].get('name')!r} stopped the run in {self.where}: "
            f"{stop.reason or 'no reason given'}",
            partial=self.partial("canceled"),
        ) from stop

    def _answer(self, call: Any, content: str, *, failed: bool) -> None:
        self.turn.append(
            ToolMessage(
                content,
                tool_call_id=call.get("id") or "",
                name=call.get("name"),
                status="error" if failed else "success",
            )
        )

    async def _structured(self, reply: AIMessage, spec: OutputSpec) -> tuple[bool, Any]:
        """Decode a structured reply; return (done, value), sending problems back if invalid."""
        await self._run_tools(reply, skip=spec.name)
        call = next((c for c in reply.tool_calls if c["name"] == spec.name), None)
        broken = next((c for c in reply.invalid_tool_calls if c.get("name") == spec.name), None)
        try:
            if call is not None:
                value = spec.validate_python(call["args"])
            elif broken is not None:
                value = spec.validate_python(wire_tool_arguments(broken.get("args") or ""))
            elif reply.tool_calls or reply.invalid_tool_calls:
                return False, None  # only the call's own tools this round
            else:
                value = spec.validate_json(json_text(str(reply.text)))
        except ValidationError as error:
            self._reject(validation_problems(error), spec, call or broken)
            return False, None
        if call is not None or broken is not None:
            self._answer(call or broken, _CLOSED, failed=False)
        return True, value

    def _reject(self, problems: list[str], spec: OutputSpec, call: Any) -> None:
        """Send validation problems back (or fail once the retries are spent)."""
        if self.retries >= self.adapter.output_retries:
            listed = "; ".join(problems)
            raise OutputValidationError(
                f"{self.where} gave no valid output after {self.retries + 1} tries: {listed}",
                partial=self.partial("decode"),
            )
        self.retries += 1
        text = correction_text(problems, spec)
        if call is None:
            self.turn.append(HumanMessage(text))
        else:
            self._answer(call, text, failed=True)

    def partial(self, stage: PartialStage) -> PartialResult | None:
        """Evidence of a failed call: the history through its last completed model turn."""
        ends = [
            i for i, message in enumerate(self.turn) if isinstance(message, AIMessage | ToolMessage)
        ]
        if not ends:
            return None
        return PartialResult(
            stage=stage,
            messages=[*self.history, *self.turn[: ends[-1] + 1]],  # type: ignore[list-item]  # native messages; PartialResult holds Any
            usage=self.usage,
            requests=self.usage.requests,
            tool_calls=self.usage.tool_calls,
            run_id=self.request.run_id,
            conversation_id=self.request.conversation_id,
        )


def _without_lone_surrogates(reply: AIMessage) -> AIMessage:
    """`reply` with every lone surrogate (content, tool calls, metadata) replaced by U+FFFD.

    The lane must be able to send and save what it holds (docs/history.md).
    """
    data = reply.model_dump()
    cleaned = without_lone_surrogates(data)
    return reply if cleaned is data else type(reply).model_validate(cleaned)


def _reply_usage(sent: Sequence[BaseMessage], reply: AIMessage) -> Usage:
    """One request's usage: the reply's `usage_metadata`, else an approximate count."""
    meta = reply.usage_metadata
    if meta:
        return Usage(
            input_tokens=meta["input_tokens"], output_tokens=meta["output_tokens"], requests=1
        )
    return Usage(
        input_tokens=count_tokens_approximately(list(sent)),
        output_tokens=count_tokens_approximately([reply]),
        requests=1,
    )


def _provider_error(error: Exception, where: str, partial: PartialResult | None) -> ProviderError:
    """The kedi error of a chat-model failure: by HTTP status where the SDK reports one."""
    status = getattr(error, "status_code", None)
    if not isinstance(status, int):
        status = getattr(getattr(error, "response", None), "status_code", None)
    detail = f"{type(error).__name__}: {error}"
    if not isinstance(status, int):
        return ProviderError(
            f"{where} failed: {detail}", retryable=_transient(error), partial=partial
        )
    if status in (401, 403):
        mapped: ProviderError = AuthenticationError(
            f"{where} was refused (HTTP {status}): {detail}", status=status
        )
    else:
        mapped = provider_error(status, str(getattr(error, "code", "") or ""), detail, where)
    mapped.partial = partial
    return mapped


_TRANSIENT = frozenset(
    {"APIConnectionError", "APITimeoutError", "TransportError", "TimeoutException"}
)
"""Classes (of the openai and httpx clients, by name: neither is a dependency) of failures worth retrying."""


def _transient(error: Exception) -> bool:
    """Whether `error` is a connection failure or a timeout, which a later attempt may not meet."""
    if isinstance(error, ConnectionError | TimeoutError):
        return True
    return any(cls.__name__ in _TRANSIENT for cls in type(error).__mro__)


# --------------------------------------------------------------------------- messages


def _is_text(message: BaseMessage) -> bool:
    content = message.content
    return isinstance(content, str) or all(
        isinstance(block, str) or (isinstance(block, dict) and block.get("type") == "text")
        for block in content
    )


def portable_json(message: BaseMessage) -> JSONDict:
    """A LangChain message as a portable C1 message dict (one-way, for transcripts)."""
    role = {"system": "system", "human": "user", "ai": "assistant", "tool": "tool"}.get(
        message.type, message.type
    )
    out: JSONDict = {"role": role}
    text = str(message.text)
    if text:
        out["content"] = text
    if isinstance(message, AIMessage):
        calls = [
            {
                "id": c.get("id") or "",
                "name": c["name"],
                "args": json.dumps(c["args"], separators=(",", ":")),
            }
            for c in message.tool_calls
        ]
        calls += [
            {"id": c.get("id") or "", "name": c.get("name") or "", "args": c.get("args") or ""}
            for c in message.invalid_tool_calls
        ]
        if calls:
            out["toolCalls"] = calls
    if isinstance(message, ToolMessage):
        out["toolCallId"] = message.tool_call_id
        if message.name:
            out["toolName"] = message.name
        if message.status == "error":
            out["failed"] = True
    return out


class _LangChainClassifier:
    """The history-processor `Classifier` of LangChain's `BaseMessage`.

    Messages whose `id()` is in `in_progress` (the turn of the running call)
    are protected: the call in progress must come back whole.
    """

    native_name = "LangChain BaseMessage"

    def __init__(self, in_progress: frozenset[int] = frozenset()) -> None:
        self.in_progress = in_progress

    def accepts(self, obj: object) -> bool:
        """Whether `obj` is a `BaseMessage`."""
        return isinstance(obj, BaseMessage)

    def info(self, message: BaseMessage) -> MessageInfo:
        """Classify one message by its LangChain type (a kedi checkpoint is `other`, protected)."""
        own = (CALL_IN_PROGRESS,) if id(message) in self.in_progress else ()
        if _checkpoint_id(message) is not None:
            return MessageInfo("other", protected=(CHECKPOINT, *own))
        if isinstance(message, SystemMessage):
            return MessageInfo("system", protected=(SYSTEM, *own), is_text_only=_is_text(message))
        if isinstance(message, HumanMessage):
            return MessageInfo("user", protected=own, is_text_only=_is_text(message))
        if isinstance(message, ToolMessage):
            return MessageInfo("tool", answers=(message.tool_call_id,), protected=own)
        if isinstance(message, AIMessage):
            calls = [*message.tool_calls, *message.invalid_tool_calls]
            blocks = message.content if isinstance(message.content, list) else []
            signed = any(
                isinstance(block, dict)
                and (block.get("signature") or block.get("type") == "redacted_thinking")
                for block in blocks
            )
            return MessageInfo(
                "assistant",
                opens=tuple(call_id for call in calls if (call_id := call.get("id"))),
                protected=(*own, *((SIGNED_THINKING,) if signed else ())),
                is_text_only=not calls and _is_text(message),
            )
        return MessageInfo("other", protected=own)

    def same(self, a: Any, b: Any) -> bool:
        """Field equality of two messages of the same class."""
        return type(a) is type(b) and bool(a == b)

    def copy(self, messages: Sequence[BaseMessage]) -> list[BaseMessage]:
        """Deep copies (LangChain messages are mutable)."""
        return [message.model_copy(deep=True) for message in messages]

    def estimate_tokens(self, messages: Sequence[BaseMessage]) -> int:
        """`count_tokens_approximately` (rounded up per message, so additive)."""
        return count_tokens_approximately(list(messages))


CLASSIFIER = _LangChainClassifier()
"""The classifier of LangChain messages (no call in progress)."""
