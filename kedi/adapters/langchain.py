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
  mode, up to `output_retries` times (the setting, else the adapter's option).
- **Settings**: generation settings (`temperature`, `max_tokens`, `top_p`,
  `seed`, `stop`/`stop_sequences`, penalties, `logit_bias`, `service_tier`,
  `extra_body`) are set on a copy of the chat model, but only where its class
  declares a field of that name; `effort` goes to its `reasoning_effort`
  field, else `reasoning={"effort": ...}`; `tool_choice` and
  `parallel_tool_calls` go to `bind_tools`; `timeout` bounds each model
  request end to end (`anyio.move_on_after`; then a retryable
  `ProviderError`, "timed out after N s"). A setting the chat model has no
  field for is refused before the call, like any name the adapter does not
  take (`settings_taken`); `effort` alone is a hint, left out where the model
  has neither field.
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
from collections.abc import Callable, Sequence
from typing import Any, ClassVar

from pydantic import ValidationError

from kedi.adapters._openai_wire import count, string_content_http_client
from kedi.adapters.base import Adapter, AdapterProfile, CallRequest, CallResult, copy_per_model
from kedi.adapters.endpoint import api_key, configured_base_url
from kedi.adapters.resources import current_resources
from kedi.errors import (
    CapabilityError,
    ExtraNotInstalledError,
    HistoryError,
    KediConfigError,
    KediUsageError,
)
from kedi.history.archive import HistoryArchive, archive_policy
from kedi.history.processors import chain_processors

try:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import messages_from_dict, messages_to_dict
except ImportError as error:  # pragma: no cover - exercised by a test that hides langchain_core
    raise ExtraNotInstalledError("langchain-core", "langchain") from error

from kedi.adapters._langchain_call import BIND_SETTINGS, FIELD_SETTINGS, Turn  # noqa: E402
from kedi.adapters._langchain_messages import CLASSIFIER  # noqa: E402

__all__ = ["CLASSIFIER", "LangChainAdapter", "chat_model_from_name"]


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
                *FIELD_SETTINGS,
                *BIND_SETTINGS,
                "stop",
                "stop_sequences",
                "effort",
                "structured_method",
                "timeout",
                "output_retries",
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

    def settings_taken(self) -> frozenset[str] | None:
        """The profile's settings less those the chat model has no field for (refused, not dropped).

        `effort` stays: it is a hint, sent where the model has a reasoning field.
        """
        declared = self.profile.settings
        if self.chat_model is None or declared is None:
            return declared
        fields = type(self.chat_model).model_fields
        missing = {name for name in FIELD_SETTINGS if name not in fields}
        if "stop" not in fields:
            missing |= {"stop", "stop_sequences"}
        return declared - missing

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
            + " (timeout and output_retries always; the others where the chat model has the field, else refused; effort is left out)",
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
            return await Turn(self, request, processor, self.chat_model).run()
        # LangChain caches one HTTP client per process, whose connections belong to the
        # event loop of the run that opened them; a model kedi built gets a client of its
        # own per run, closed when the run ends (or after the call, outside a run).
        run = current_resources()
        if run is not None:
            model = run.client(self, lambda: _RunModel(self._name or "")).model
            return await Turn(self, request, processor, model).run()
        session = _RunModel(self._name)
        try:
            return await Turn(self, request, processor, session.model).run()
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
