"""One LangChain call in progress: the tool loop, structured output and its retries, requests.

`Turn` holds the history in force, the turn so far and the usage; it sends
each model request (history processed and long tool loops archived first),
runs the tools a reply calls and decodes the structured answer. Imported only
by the LangChain adapter's modules, after its import guard.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolMessage,
    messages_to_dict,
)
from langchain_core.messages.utils import message_chunk_to_message
from langchain_core.runnables import Runnable
from pydantic import ValidationError

from kedi.adapters._capture_stream import CaptureText, capture_text
from kedi.adapters._langchain_messages import (
    CLASSIFIER,
    LangChainClassifier,
    checkpoint_id,
    checkpoint_message,
    portable_json,
    reply_usage,
    reply_without_lone_surrogates,
)
from kedi.adapters._model_errors import model_error
from kedi.adapters._openai_wire import (
    count,
    function_tool,
    json_text,
    refused_output_format,
    seconds,
    timed_out,
)
from kedi.adapters._portable import (
    WholeCharacters,
    correction_text,
    run_handler,
    validation_problems,
)
from kedi.adapters.base import CallRequest, CallResult, Exchange, OutputSpec, Usage
from kedi.errors import (
    AdapterError,
    HistoryProcessingValidationError,
    OutputValidationError,
    StopRun,
)
from kedi.history import INTERRUPTED_RESULT, PartialResult, wire_tool_arguments
from kedi.history.archive import archive_exchanges, expand_checkpoints
from kedi.history.partial import PartialStage
from kedi.history.processors import run_history_processor

if TYPE_CHECKING:
    from kedi.adapters.langchain import LangChainAdapter


FIELD_SETTINGS = (
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
BIND_SETTINGS = ("tool_choice", "parallel_tool_calls")
"""Settings passed to `bind_tools`."""
KEY_HINT = "check the API key of the chat model's provider"
"""What a refused key's error says to check (the chat model may be any provider's)."""
_CLOSED = "Final result processed."
"""The content of the `ToolMessage` that closes an accepted output-tool call (as Pydantic AI words it)."""


def _configured(chat_model: BaseChatModel, settings: Any) -> BaseChatModel:
    """A copy of `chat_model` with the call's generation settings on its own fields."""
    fields = type(chat_model).model_fields
    update = {
        name: settings[name] for name in FIELD_SETTINGS if name in settings and name in fields
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


# --------------------------------------------------------------------------- one call


@dataclass
class Turn:
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
    output_retries: int = 0
    """Invalid structured replies sent back before failing (the setting, else the adapter's)."""

    def __post_init__(self) -> None:
        settings = self.request.settings
        timeout = settings.get("timeout")
        self.timeout = None if timeout is None else seconds("timeout", timeout)
        self.output_retries = count(
            "output_retries", settings.get("output_retries", self.adapter.output_retries), 0
        )
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
            function_tool(tool.name, tool.description, tool.parameters)
            for tool in self.request.tools
        ]
        if spec is not None and not tools:
            method = self.request.settings.get("structured_method")
            if method is None:
                return model.with_structured_output(spec.model, include_raw=True)
            return model.with_structured_output(spec.model, include_raw=True, method=method)
        if spec is not None:
            return model.bind_tools(
                [*tools, function_tool(spec.name, "The final answer.", spec.json_schema)],
                tool_choice=self._structured_choice(spec),
            )
        if tools:
            options = {
                name: self.request.settings[name]
                for name in BIND_SETTINGS
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
                mapped = model_error(error, self.where, self.partial("model"), KEY_HINT)
                if self.request.output is not None:
                    mapped = refused_output_format(
                        mapped, "structured_method", "function_calling, json_mode"
                    )
                raise mapped from error
        if bounded.cancelled_caught:
            raise timed_out(self.where, self.timeout, partial=self.partial("model"))
        reply = answer["raw"] if isinstance(answer, dict) else answer
        if not isinstance(reply, AIMessage):
            raise AdapterError(
                f"{self.where} answered with {type(reply).__name__}, not an AIMessage"
            )
        reply = reply_without_lone_surrogates(reply)
        self.usage += reply_usage(sent, reply)
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
            LangChainClassifier(frozenset(map(id, turn))),
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
        self.history = expand_checkpoints(prior, archives, checkpoint_id)
        self.rewrites += 1
        return kept

    def _archived(self) -> tuple[list[BaseMessage], list[BaseMessage], dict[str, list[Any]]]:
        """History and turn as the next request sends them: long tool loops archived."""
        policy = self.adapter.history_archive
        if policy is None:
            return self.history, self.turn, {}
        history, archives = archive_exchanges(
            self.history,
            CLASSIFIER,
            policy,
            dump=messages_to_dict,
            make_checkpoint=checkpoint_message,
        )
        turn, own = archive_exchanges(
            self.turn, CLASSIFIER, policy, dump=messages_to_dict, make_checkpoint=checkpoint_message
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
        if self.retries >= self.output_retries:
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
