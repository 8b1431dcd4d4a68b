"""The Pydantic AI adapter: native `ModelMessage` lanes over any Pydantic AI model.

`PydanticAdapter(model)` takes a model name that Pydantic AI resolves
(`"openai:gpt-4o-mini"`) or any Pydantic AI `Model` instance (`FunctionModel`,
`TestModel`, `OpenAIChatModel(...)`). Each call is one `agent.run(...)`:

- **Agents**: one `Agent` per tool contract (names, descriptions, argument
  schemas), cached on the adapter. Everything else is given per run:
  `instructions=` (never `system_prompt=`, which Pydantic AI would store in the
  history), the output type, model settings, retries and usage limits. Tool
  handlers travel as the run's `deps`, so one cached agent serves every call.
- **Lanes**: `CallResult.new_messages` is `result.new_messages()`, with the
  per-request `instructions` field of each `ModelRequest` cleared so that
  instructions are never stored. Messages are stamped with kedi's run and
  conversation ids. System prompt parts found in supplied history are dropped
  from requests. `dump_messages` / `load_messages` use `ModelMessagesTypeAdapter`.
- **Structured output**: the call's own pydantic model (`request.output.model`),
  never `StructuredDict` (which does not validate). `output_mode="auto"` picks
  `native` where the model profile has `supports_json_schema_output` (the lane
  then holds no tool traffic), else `tool` where it supports tools, else
  `prompted`. `json_object` is prompted output sent with `response_format
  {"type": "json_object", "schema": ...}` (llama.cpp constrains decoding to
  the schema). In `tool` mode a call without tools of its own forces the
  output tool by name (servers such as llama.cpp ignore `tool_choice:
  "required"`). The `output_mode` setting (`> settings:`) chooses per call,
  over the constructor's. The value is the dict of captures, validated again
  with `request.output`.
- **Endpoints**: with a base URL configured (`--base-url`, `KEDI_BASE_URL`,
  `OPENAI_BASE_URL`, `OPENAI_API_BASE`; `kedi.adapters.endpoint`), an
  `openai:NAME`, `openai-chat:NAME` or bare `NAME` model is Pydantic AI's
  chat-completions model at that URL (the Responses API that `openai:` means
  exists only at OpenAI); an error names the endpoint, and a 404 asks whether
  `/v1` is missing.
- **Settings**: the common settings Pydantic AI knows go to `ModelSettings`;
  one the model class lists in `unsupported_settings` is refused before the
  call (`settings_taken`), like any name the adapter does not take; `stop` becomes
  `stop_sequences`; `effort` becomes the unified `thinking` setting (`max` sent
  as `xhigh`) only where the profile has `supports_thinking` and no explicit
  `thinking` setting is given; `output_retries` / `tool_retries` become the
  run's retry budgets and `request_limit` its `UsageLimits`. Other keys are
  dropped.
- **History processors** (Part B; the adapter's own, then the run's): run by
  kedi on the lane snapshot plus the new prompt before `agent.run`, and
  through a `ProcessHistory` capability before each later model request of the
  run (tool-loop follow-ups, retries). The run's own messages are protected.
- **Transcripts**: each model request is reported to `request.on_exchange` as
  portable JSON (one-way, for display), instructions first.

Pydantic AI runs only on asyncio (not on anyio's trio backend); kedi's own
entry points always use asyncio.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal, get_args

from pydantic import ValidationError, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import to_json

from kedi.adapters._capture_stream import capture_text
from kedi.adapters._openai_wire import count
from kedi.adapters._portable import run_handler
from kedi.adapters.base import (
    Adapter,
    AdapterProfile,
    CallRequest,
    CallResult,
    OutputSpec,
    ToolHandler,
    ToolSpec,
    Usage,
    copy_per_model,
)
from kedi.adapters.resources import current_resources
from kedi.errors import (
    CapabilityError,
    ExtraNotInstalledError,
    HistoryError,
    KediConfigError,
    KediUsageError,
    OutputValidationError,
)
from kedi.history.archive import HistoryArchive, archive_policy
from kedi.history.processors import chain_processors, reject_process_history
from kedi.settings import PYDANTIC_AI_SETTINGS

try:
    from pydantic_ai import (
        Agent,
        AgentRetries,
        ModelRetry,
        RunContext,
        Tool,
        ToolFailed,
        capture_run_messages,
    )
    from pydantic_ai import exceptions as pai
    from pydantic_ai.capabilities import AbstractCapability
    from pydantic_ai.messages import ModelMessagesTypeAdapter
    from pydantic_ai.models import Model, infer_model
    from pydantic_ai.output import NativeOutput, PromptedOutput, ToolOutput
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.usage import UsageLimits
except ImportError as error:  # pragma: no cover - exercised by a test that hides pydantic_ai
    raise ExtraNotInstalledError("pydantic-ai-slim", "pydantic-ai") from error

# Imports Pydantic AI itself: only once the guard above has passed.
from kedi.adapters._pydantic_call import CallState  # noqa: E402
from kedi.adapters._pydantic_endpoint import (  # noqa: E402
    ForceToolFirst,
    RunChatModel,
    model_at_base_url,
)
from kedi.adapters._pydantic_errors import at_origin, mapped_errors  # noqa: E402
from kedi.adapters._pydantic_messages import CLASSIFIER  # noqa: E402
from kedi.adapters._pydantic_state import (  # noqa: E402
    as_sent,
    as_stored,
    can_stream,
    capture_deltas,
    continues_responses,
    text_deltas,
)

__all__ = ["CLASSIFIER", "OutputMode", "PydanticAdapter"]

OutputMode = Literal["auto", "tool", "native", "prompted", "json_object"]

_MODEL_SETTINGS = PYDANTIC_AI_SETTINGS
"""Settings forwarded to `ModelSettings` under the same name (spec §9.6)."""
_KEDI_SETTINGS = frozenset(
    {
        "stop",
        "effort",
        "output_retries",
        "tool_retries",
        "request_limit",
        "openai_previous_response_id",
        "output_mode",
    }
)
"""Settings kedi maps itself (see the module docs)."""
_EFFORTS = {"max": "xhigh"}
OUTPUT_TOOL = "final_result"


# --------------------------------------------------------------------------- the adapter


class PydanticAdapter(Adapter):
    """Runs kedi calls through a Pydantic AI `Agent` (asyncio only)."""

    shortname: ClassVar[str] = "pydantic"
    checks_requests: ClassVar[bool] = True
    profile: ClassVar[AdapterProfile] = AdapterProfile(
        structured_output=True,
        tools=True,
        streaming=True,
        history=True,
        offline=False,
        message_format="pydantic-ai",
        settings=_MODEL_SETTINGS | _KEDI_SETTINGS,
    )

    def __init__(
        self,
        model: str | Model | None = None,
        *,
        history_processor: Callable[..., Any] | None = None,
        history_archive: HistoryArchive | int | None = None,
        output_mode: OutputMode = "auto",
        capabilities: Sequence[AbstractCapability[Any]] = (),
    ) -> None:
        """Resolve the model and check the options; raises `KediConfigError` on a bad one."""
        if output_mode not in get_args(OutputMode):
            raise KediConfigError(
                f"unknown output_mode {output_mode!r}; expected one of {', '.join(get_args(OutputMode))}"
            )
        self.history_processor = history_processor
        self.history_archive = archive_policy(history_archive)
        self.capabilities = tuple(capabilities)
        if history_processor is not None:
            reject_process_history(self.capabilities)
        self.endpoint: str | None = None
        """`POST <url>` of the chat-completions endpoint kedi configured, named in errors."""
        self._chat_model_at: Callable[[Any], Model] | None = None
        """Builds the chat model at the configured base URL with a given HTTP client."""
        self._model: Model | None
        at_base_url = model_at_base_url(model) if isinstance(model, str) else None
        if at_base_url is not None:
            self._chat_model_at, self.endpoint = at_base_url
            self._model = self._chat_model_at(None)
        else:
            self._model = _resolve_model(model)
        self.model_name = model if isinstance(model, str) else _model_id(self._model)
        self.output_mode = (
            _output_mode(self._model, output_mode) if self._model is not None else output_mode
        )
        self._agents: dict[
            tuple[tuple[tuple[str, str, str], ...], type[Any] | None, OutputMode],
            Agent[Mapping[str, ToolHandler], Any],
        ] = {}
        self._bound: dict[Any, tuple[Any, PydanticAdapter]] = {}
        self._requested_mode: OutputMode = output_mode

    def with_model(self, model: Any) -> PydanticAdapter:
        """A copy with this adapter's options on `model` when it has none (see `Adapter.with_model`).

        Copies are kept per model, so every run of a program on one model
        shares one adapter (and its cached agents).
        """
        if self._model is not None or model is None:
            return self
        return copy_per_model(
            self._bound,
            model,
            lambda model: PydanticAdapter(
                model,
                history_processor=self.history_processor,
                history_archive=self.history_archive,
                output_mode=self._requested_mode,
                capabilities=self.capabilities,
            ),
        )

    def settings_taken(self) -> frozenset[str] | None:
        """The profile's settings less those the model class lists in `unsupported_settings`
        (refused, not dropped); `stop` goes with `stop_sequences`, which carries it."""
        declared = self.profile.settings
        if self._model is None or declared is None:
            return declared
        unsupported = _MODEL_SETTINGS.intersection(self._model.unsupported_settings)
        stop = {"stop"} if "stop_sequences" in unsupported else set()
        return declared - unsupported - stop

    def __repr__(self) -> str:
        """`PydanticAdapter('<model>', output_mode='<mode>')`."""
        return f"PydanticAdapter({self.model_name!r}, output_mode={self.output_mode!r})"

    @classmethod
    def capability_rows(cls) -> dict[str, str]:
        """What this adapter supports, one row per capability-matrix line."""
        rows = super().capability_rows()
        return {
            **rows,
            "settings": rows["settings"]
            + " (less the model class's unsupported_settings, refused)",
            "structured output": "tool, native, prompted (auto: native where the model profile allows)",
            "tools": "yes (Tool.from_schema; failures go back to the model)",
            "streaming": "yes: text calls and str captures stream to on_delta (event_stream_handler)",
            "history": "yes: Pydantic AI ModelMessage lanes, history processors before every request",
        }

    def check(self, request: CallRequest) -> None:
        """Raise before any I/O if the request cannot be served."""
        super().check(request)
        if self._model is None:
            raise KediConfigError(
                "the pydantic adapter has no model; name one (`> model: openai:gpt-4o-mini`) "
                "or pass a Pydantic AI Model to PydanticAdapter(...)"
            )
        if request.tools and not self._model.profile.get("supports_tools", True):
            raise CapabilityError(
                f"model {self.model_name!r} does not support tools (its Pydantic AI profile)"
            )
        if request.history_processor is not None:
            reject_process_history(self.capabilities)

    async def request(self, request: CallRequest) -> CallResult:
        """Run one call as one `agent.run(...)`."""
        _require_asyncio()
        self.check(request)
        assert self._model is not None  # checked above
        build = self._chat_model_at
        if build is None:
            return await self._run(request, self._model)
        # A model kedi built gets an HTTP client per run, closed when the run ends (on
        # the run's own event loop), or per call outside a run.
        run = current_resources()
        if run is not None:
            return await self._run(request, run.client(self, lambda: RunChatModel(build)).model)
        session = RunChatModel(build)
        try:
            return await self._run(request, session.model)
        finally:
            await session.aclose()

    async def _run(self, request: CallRequest, model: Model) -> CallResult:
        assert self._model is not None  # checked by `request`
        mode = self._call_mode(request)
        options = _run_options(
            request.settings,
            self._model,
            _mode_settings(request, mode),
            frozenset(tool.name for tool in request.tools),
        )
        call = CallState(
            self, request, chain_processors(self.history_processor, request.history_processor)
        )
        call.forced, call.mode = options.forced, mode
        history = await call.first_history()
        if continues_responses(self._model):
            history = [as_sent(message) for message in history]
        on_delta = request.on_delta
        capture = capture_text(
            request.output, on_delta
        )  # a structured call streams its str captures
        handler = None
        if on_delta is not None and can_stream(self._model):
            if capture is not None:
                handler = capture_deltas(capture, OUTPUT_TOOL if mode == "tool" else None)
            elif request.output is None:
                handler = text_deltas(on_delta)
        with capture_run_messages() as captured, mapped_errors(call, captured):
            result = await self._agent(request.tools, request.output, mode).run(
                request.prompt,
                model=model,
                message_history=history,
                instructions=request.instructions or None,
                model_settings=options.model_settings,
                usage_limits=options.usage_limits,
                retries=options.retries,
                deps={tool.name: tool.handler for tool in request.tools},
                run_id=call.call_id,
                conversation_id=call.conversation_id,
                capabilities=call.capabilities(),
                event_stream_handler=handler,
            )
        value = _value(request, result.output)
        # A model that cannot stream: the text in one piece, at the end.
        if handler is None and capture is not None:
            capture.whole(value)
        elif handler is None and on_delta is not None and request.output is None:
            on_delta(value)
        usage = result.usage
        return CallResult(
            value=value,
            new_messages=tuple(call.stamped(call.expanded(result.new_messages()))),
            usage=Usage(usage.input_tokens, usage.output_tokens, usage.requests, usage.tool_calls),
            rewritten_history=tuple(map(as_stored, call.history)) if call.rewrites else None,
            rewrites=call.rewrites,
        )

    def _call_mode(self, request: CallRequest) -> OutputMode:
        """The structured-output mode of one call: its `output_mode` setting, else the adapter's."""
        setting = request.settings.get("output_mode")
        if setting is None or self._model is None:
            return self.output_mode
        if setting not in get_args(OutputMode):
            raise KediConfigError(
                f"unknown output_mode setting {setting!r}; expected one of {', '.join(get_args(OutputMode))}"
            )
        return _output_mode(self._model, setting)

    def _agent(
        self, tools: Sequence[ToolSpec], output: OutputSpec | None, mode: OutputMode
    ) -> Agent[Mapping[str, ToolHandler], Any]:
        """The agent of a tool contract and output type, built once.

        The output type goes to the agent, not to each run: Pydantic AI
        rebuilds a run's output schema (TypeAdapter, JSON Schema) on every
        run that passes one.
        """
        contract = tuple(
            (t.name, t.description, json.dumps(t.parameters, sort_keys=True)) for t in tools
        )
        key = (contract, None if output is None else output.model, mode)
        agent = self._agents.get(key)
        if agent is None:
            agent = self._agents[key] = Agent(
                self._model,
                output_type=str if output is None else _output_type(output, mode),
                deps_type=Mapping[str, ToolHandler],
                tools=[_tool(spec) for spec in tools],
                capabilities=list(self.capabilities) or None,
            )
        return agent

    def dump_messages(self, messages: Sequence[Any]) -> list[Any]:
        """Serialize `ModelMessage`s with `ModelMessagesTypeAdapter` (JSON-compatible data)."""
        return list(ModelMessagesTypeAdapter.dump_python(list(messages), mode="json"))

    def load_messages(self, data: Sequence[Any]) -> list[Any]:
        """Inverse of `dump_messages`; raises `HistoryError` naming the problem."""
        try:
            return list(ModelMessagesTypeAdapter.validate_python(list(data)))
        except ValidationError as error:
            raise HistoryError(f"not a list of Pydantic AI messages: {error}") from None


def _require_asyncio() -> None:
    # Pydantic AI needs an asyncio event loop; under trio it fails deep inside
    # with "no running event loop", so say what is wrong up front.
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise KediUsageError(
            "the pydantic adapter runs only on asyncio (Pydantic AI does not support trio); "
            'use anyio.run(..., backend="asyncio")'
        ) from None


def _resolve_model(model: str | Model | None) -> Model | None:
    if model is None or isinstance(model, Model):
        return model
    if not isinstance(model, str):
        raise KediConfigError(
            f"PydanticAdapter takes a model name or a Pydantic AI Model, not {type(model).__name__}"
        )
    try:
        return infer_model(model)
    except (pai.UserError, ImportError, ValueError) as error:
        raise KediConfigError(f"Pydantic AI cannot use model {model!r}: {error}") from None


def _model_id(model: Model | None) -> str:
    """The id of a model object: `provider:name` where Pydantic AI knows both."""
    if model is None:
        return ""
    return str(getattr(model, "model_id", "") or model.model_name)


def _output_mode(model: Model, mode: OutputMode) -> OutputMode:
    """The structured-output mode for `model` (see the module docs for `auto`)."""
    profile = model.profile
    supported = {
        "native": bool(profile.get("supports_json_schema_output")),
        "tool": bool(profile.get("supports_tools", True)),
        "prompted": True,
        "json_object": True,
    }
    if mode == "auto":
        return next(name for name in ("native", "tool", "prompted") if supported[name])
    if not supported[mode]:
        raise CapabilityError(
            f"model {model.model_name!r} does not support {mode} structured output (its Pydantic AI profile)"
        )
    return mode


def _output_type(spec: OutputSpec, mode: OutputMode) -> Any:
    # The call's model is strict, and strict *Python* validation rejects the
    # JSON spellings of dates, UUIDs and the like that arrive as dict arguments
    # (FunctionModel, TestModel). Validating dicts through JSON keeps the JSON
    # rules whatever form the arguments take; the JSON Schema is unchanged.
    def as_json(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if isinstance(value, dict):
            return spec.model.model_validate_json(to_json(value))
        return handler(value)

    validated = Annotated[spec.model, WrapValidator(as_json)]  # type: ignore[name-defined]  # a runtime type, built per call
    if mode == "native":
        return NativeOutput(validated, name=spec.name)
    if mode in ("prompted", "json_object"):
        return PromptedOutput(validated, name=spec.name)
    return ToolOutput(validated, name=OUTPUT_TOOL)


def _mode_settings(request: CallRequest, mode: OutputMode) -> dict[str, Any]:
    """Model settings a structured mode adds to the call's own (which win)."""
    output = request.output
    if output is None:
        return {}
    if mode == "json_object":
        response_format = {"type": "json_object", "schema": output.json_schema}
        return {"extra_body": {"response_format": response_format}}
    if mode == "tool" and not request.tools:
        return {"tool_choice": [OUTPUT_TOOL]}
    return {}


def _tool(spec: ToolSpec) -> Tool[Mapping[str, ToolHandler]]:
    """A Pydantic AI tool that runs the current run's handler for `spec.name`."""
    name = spec.name

    async def run(ctx: RunContext[Mapping[str, ToolHandler]], **arguments: Any) -> str:
        # A StopRun ends the run (see `CallState.stopped`); the outcome is every adapter's.
        outcome = await run_handler(ctx.deps[name], arguments)
        if not outcome.ran:  # bad arguments, no result: a retry (Pydantic AI's outcome for them)
            raise ModelRetry(outcome.content)
        if not outcome.ok:  # reported to the model as a failed result, as on every adapter
            raise ToolFailed(outcome.content)
        return outcome.content

    return Tool.from_schema(
        run, name=name, description=spec.description, json_schema=spec.parameters, takes_ctx=True
    )


@dataclass(frozen=True, slots=True)
class _RunOptions:
    forced: ForceToolFirst | None
    model_settings: ModelSettings | None
    retries: AgentRetries | None
    usage_limits: UsageLimits | None


def _run_options(
    settings: Mapping[str, Any],
    model: Model,
    defaults: Mapping[str, Any],
    tool_names: frozenset[str] = frozenset(),
) -> _RunOptions:
    """Map kedi settings to a run's options (see the module docs); unknown keys are dropped.

    `defaults` are the structured mode's settings; the call's own win, and an
    `extra_body` of the call is merged over the mode's.
    """
    unsupported = model.unsupported_settings
    chosen: dict[str, Any] = {
        key: value
        for key, value in {**defaults, **settings}.items()
        if key in _MODEL_SETTINGS and key not in unsupported
    }
    if continues_responses(model):
        # Response-ID continuation (docs/adapters.md): on by default; `false` or null turns it off.
        continuation = settings.get("openai_previous_response_id", "auto")
        if continuation not in (None, False):
            chosen["openai_previous_response_id"] = continuation
    if "extra_body" in defaults and "extra_body" in settings:
        chosen["extra_body"] = {**defaults["extra_body"], **settings["extra_body"]}
    forced = None
    choice = chosen.get("tool_choice")
    if isinstance(choice, str) and choice in tool_names:
        # Forced until the tool has a result, by a capability that also carries extra_body.
        forced = ForceToolFirst(str(chosen.pop("tool_choice")), dict(chosen.pop("extra_body", {})))
    stop = settings.get("stop")
    if (
        stop is not None
        and "stop_sequences" not in settings
        and "stop_sequences" not in unsupported
    ):
        chosen["stop_sequences"] = [stop] if isinstance(stop, str) else list(stop)
    effort = settings.get("effort")
    if effort is not None and "thinking" not in chosen and model.profile.get("supports_thinking"):
        chosen["thinking"] = _EFFORTS.get(effort, effort)
    retries = AgentRetries()
    if "output_retries" in settings:
        retries["output"] = count("output_retries", settings["output_retries"], 0)
    if "tool_retries" in settings:
        retries["tools"] = count("tool_retries", settings["tool_retries"], 0)
    limit = settings.get("request_limit")
    return _RunOptions(
        forced=forced,
        model_settings=ModelSettings(**chosen) if chosen else None,  # type: ignore[typeddict-item]  # keys are filtered to ModelSettings' names above
        retries=retries or None,
        usage_limits=None
        if limit is None
        else UsageLimits(request_limit=count("request_limit", limit, 1)),
    )


def _value(request: CallRequest, output: Any) -> Any:
    """The call's value: the reply text, or the captures validated again by kedi."""
    if request.output is None:
        return output
    try:
        return request.output.validate_python(output.model_dump(mode="json", by_alias=True))
    except ValidationError as error:
        raise OutputValidationError(
            f"the structured output of the call{at_origin(request)} did not validate: {error}"
        ) from error
