"""Shared machinery of adapters whose lanes hold portable `Message`s.

The offline, script and OpenAI-compatible adapters all keep kedi's portable
messages in their lanes, so they build requests, stamp messages, run tools,
report transcript exchanges and count usage the same way. `PortableTurn`
tracks one call from its first model request to its `CallResult`:

- `prefix`: the instructions (a system message, only if non-empty) and the
  repaired lane history; sent with every request, never part of the turn;
- `added`: the stamped user prompt, then everything the call adds (assistant
  replies, tool results, correction messages), which becomes
  `CallResult.new_messages` on success.

Every model request is reported to `CallRequest.on_exchange` with the C1
JSON of exactly what was sent; its `response` is the C1 JSON of the reply
message (or `{"error": ...}` for a request that failed).

Usage is a deterministic estimate: `estimate_tokens` of the messages sent per
request (input) and of each reply (output); `tool_calls` counts the tool
calls that succeeded, as Pydantic AI does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

from pydantic import ValidationError
from pydantic_core import to_json

from kedi.adapters.base import (
    Adapter,
    CallRequest,
    CallResult,
    Exchange,
    JSONDict,
    OutputSpec,
    ToolArgumentsError,
    ToolHandler,
    ToolSpec,
    Usage,
)
from kedi.errors import HistoryProcessingValidationError, StopRun
from kedi.history import (
    Message,
    PartialResult,
    ToolCall,
    build_request_messages,
    estimate_tokens,
    resolve_conversation_id,
    resolve_run_id,
    wire_tool_arguments,
)
from kedi.history.grouping import PORTABLE
from kedi.history.messages import interrupted_result
from kedi.history.partial import PartialStage
from kedi.history.processors import chain_processors, run_history_processor
from kedi.history.repair import request_history_tokens


def request_messages(request: CallRequest, *, run_id: str, conversation_id: str) -> list[Message]:
    """The messages of a call's first model request: instructions, history, prompt (C2).

    This is the one place a request is built from a `CallRequest`, so history
    processing belongs here too.
    """
    return build_request_messages(
        request.instructions,
        request.history,
        request.prompt,
        run_id=run_id,
        conversation_id=conversation_id,
    )


@dataclass
class PortableTurn:
    """One call in progress: what each request sends and what the call adds."""

    request: CallRequest
    prefix: list[Message]
    """Instructions and repaired history: sent every time, never committed."""
    added: list[Message]
    """The prompt first, then every message this call added."""
    run_id: str
    conversation_id: str
    usage: Usage = field(default_factory=Usage)
    rewrites: int = 0
    """How many times a history processor rewrote the history during this call."""
    processed: int = 0
    """Model requests the history processor has run before (its `request_index`)."""
    prefix_tokens: tuple[list[Message], int] | None = None
    """The token estimate of `prefix` while it is that list (a lane keeps its history's)."""
    answered: set[str] = field(default_factory=set)
    """The tools that have returned a result in this call (see `ToolOutcome.ran`)."""

    @classmethod
    def start(cls, request: CallRequest) -> PortableTurn:
        """Build the first request of `request` with its identity resolved (C8)."""
        run_id = resolve_run_id(request.run_id)
        conversation_id = resolve_conversation_id(request.conversation_id, request.history)
        messages = request_messages(request, run_id=run_id, conversation_id=conversation_id)
        turn = cls(request, messages[:-1], messages[-1:], run_id, conversation_id)
        history_tokens = request_history_tokens(request.history)
        if history_tokens is not None:
            system = turn.prefix[:1] if turn.prefix and turn.prefix[0].role == "system" else []
            turn.prefix_tokens = (turn.prefix, estimate_tokens(system) + history_tokens)
        return turn

    @property
    def messages(self) -> list[Message]:
        """Everything the next model request sends, in order."""
        return [*self.prefix, *self.added]

    def stamp(self, **fields: Any) -> Message:
        """A new message stamped with this call's run and conversation ids."""
        return Message(run_id=self.run_id, conversation_id=self.conversation_id, **fields)

    def record(self, response: Any) -> None:
        """Count one model request and report it to the transcript sink, if any."""
        sent = self.messages
        known = self.prefix_tokens
        if known is not None and known[0] is self.prefix:
            tokens = known[1] + estimate_tokens(self.added)  # O(new messages) on a long lane
        else:
            tokens = estimate_tokens(sent)
        self.usage += Usage(input_tokens=tokens, requests=1)
        if self.request.on_exchange is not None:
            self.report(tuple(m.to_json_dict() for m in sent), response)

    def sent_json(self) -> tuple[JSONDict, ...]:
        """What the next model request sends, as C1 JSON (for a transcript line)."""
        return tuple(m.to_json_dict() for m in self.messages)

    def report(
        self,
        sent: tuple[JSONDict, ...],
        response: Any,
        *,
        mode: str | None = None,
        attempt: int = 1,
        failed: bool = False,
        error: str | None = None,
    ) -> None:
        """Report one model request (`sent` as C1 JSON) to the transcript sink, if any."""
        if self.request.on_exchange is None:
            return
        output = self.request.output
        self.request.on_exchange(
            Exchange(
                messages=sent,
                response=response,
                output_schema=output.json_schema if output is not None else None,
                tools=tuple(tool.name for tool in self.request.tools),
                mode=mode,
                attempt=attempt,
                failed=failed,
                error=error,
            )
        )

    def respond(self, reply: Message, *, report: bool = True) -> None:
        """Count a model request whose answer is `reply`, report it unless told not to, add the reply."""
        if report:
            self.record(reply.to_json_dict())
        else:
            self.usage += Usage(input_tokens=estimate_tokens(self.messages), requests=1)
        self.usage += Usage(output_tokens=estimate_tokens([reply]))
        self.added.append(reply)

    def add(self, message: Message) -> None:
        """Add a message that did not come from the model (tool result, correction)."""
        self.added.append(message)

    async def process(self, owner: Adapter) -> None:
        """Run the history processor (if any) on what the next model request sends.

        The processor sees the history and this call's turn so far (never the
        instructions) and must hand the turn back unchanged at the end; an
        accepted rewrite replaces the history for the rest of the call, and is
        committed only if the call succeeds (`CallResult.rewritten_history`).
        """
        processor = chain_processors(
            getattr(owner, "history_processor", None), self.request.history_processor
        )
        if processor is None:
            return
        system = [m for m in self.prefix if m.role == "system"]
        history = [m for m in self.prefix if m.role != "system"]
        self.processed += 1
        outcome = await run_history_processor(
            processor,
            [*history, *self.added],
            PORTABLE,
            adapter_shortname=owner.shortname,
            model_id=owner.model_name,
            request_index=self.processed,
            cache_epoch=self.request.cache_epoch + self.rewrites,
            owner=owner,
        )
        if not outcome.rewritten:
            return
        size = len(self.added)
        processed = list(outcome.messages)
        if processed[-size:] != self.added:
            raise HistoryProcessingValidationError(
                "a history processor must return the messages of the call in progress unchanged at the end"
            )
        self.prefix = [*system, *processed[:-size]]
        self.rewrites += 1

    def result(self, value: Any) -> CallResult:
        """The successful call: `value`, the whole turn, and any accepted history rewrite."""
        rewritten = None
        if self.rewrites:
            rewritten = tuple(m for m in self.prefix if m.role != "system")
        return CallResult(
            value=value,
            new_messages=tuple(self.added),
            usage=self.usage,
            rewritten_history=rewritten,
            rewrites=self.rewrites,
        )

    def partial(self, stage: PartialStage) -> PartialResult | None:
        """Evidence of a failed call: the history through its last completed model turn.

        `None` when the model never answered (nothing completed).
        """
        ends = [i for i, m in enumerate(self.added) if m.role in ("assistant", "tool")]
        if not ends:
            return None
        history = [m for m in self.prefix if m.role != "system"]
        return PartialResult(
            stage=stage,
            messages=[*history, *self.added[: ends[-1] + 1]],
            usage=self.usage,
            requests=self.usage.requests,
            tool_calls=self.usage.tool_calls,
            run_id=self.run_id,
            conversation_id=self.conversation_id,
        )

    async def run_tools(self, calls: Sequence[ToolCall]) -> None:
        """Run the calls of an assistant turn in order and add one tool result each.

        A failure never ends the call: the error text goes back to the model as
        a `failed` result, as does a call to a tool the request does not offer.
        """
        tools = {tool.name: tool for tool in self.request.tools}
        for index, call in enumerate(calls):
            try:
                outcome = await _run_tool(tools, call)
            except StopRun as stop:
                self.stop(stop, calls[index:])
            self.usage += Usage(tool_calls=int(outcome.ok))
            if outcome.ran:
                self.answered.add(call.name)
            self.add(
                self.stamp(
                    role="tool",
                    content=outcome.content,
                    tool_call_id=call.id,
                    tool_name=call.name,
                    failed=not outcome.ok,
                )
            )

    def stop(self, stop: StopRun, unanswered: Sequence[ToolCall]) -> NoReturn:
        """A tool stopped the run: close the unanswered calls (stamped) and fail with the partial."""
        for call in unanswered:
            self.add(
                interrupted_result(call, run_id=self.run_id, conversation_id=self.conversation_id)
            )
        raise StopRun(
            stop.reason,
            message=f"tool {unanswered[0].name!r} stopped the run{at_origin(self.request)}: {stop.reason or 'no reason given'}",
            partial=self.partial("canceled"),
        ) from stop


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """What one tool call gives back to the model."""

    content: str
    """The tool result's text: the tool's return value, or what went wrong."""
    ok: bool
    """The tool returned (else the result is a failed one)."""
    ran: bool
    """The tool ran, so the call has a result of it, even a failed one.

    A call whose arguments do not validate (`ToolArgumentsError`) has none: a
    `tool_choice` that names the tool stays forced for the model's next try
    (on llama.cpp the forced choice is what constrains the arguments to the
    tool's schema). This is the rule of every adapter (docs/adapters.md); the
    pydantic adapter applies it with `ForceToolFirst`.
    """


async def run_handler(handler: ToolHandler, arguments: Mapping[str, Any]) -> ToolOutcome:
    """Run one tool call's handler; a failure goes back to the model, a `StopRun` is raised."""
    try:
        # An escape `\ud800` in the arguments' JSON decodes to a lone surrogate: the tool gets U+FFFD.
        result = await handler(without_lone_surrogates(arguments))
    except StopRun:
        raise
    except ToolArgumentsError as error:
        return ToolOutcome(without_lone_surrogates(str(error)), ok=False, ran=False)
    except Exception as error:  # any tool failure is reported to the model, not raised
        text = str(error) or type(error).__name__
        return ToolOutcome(without_lone_surrogates(text), ok=False, ran=True)
    return ToolOutcome(tool_result_text(result), ok=True, ran=True)


async def _run_tool(tools: Mapping[str, ToolSpec], call: ToolCall) -> ToolOutcome:
    """Run one call of the model's, or answer it with the tools on offer."""
    tool = tools.get(call.name)
    if tool is None:
        offered = ", ".join(sorted(tools)) or "none"
        return ToolOutcome(
            f"unknown tool {call.name!r}; available tools: {offered}", ok=False, ran=False
        )
    return await run_handler(tool.handler, wire_tool_arguments(call.args))


def at_origin(request: CallRequest) -> str:
    """` at flow.kedi:12` when the request knows its source location, else nothing."""
    return f" at {request.origin}" if request.origin else ""


def tool_result_text(result: Any) -> str:
    """The content of a tool result: strings as they are, anything else as compact JSON.

    Lone surrogates become U+FFFD (`without_lone_surrogates`), so the lane can hold it.
    """
    result = without_lone_surrogates(result)
    if isinstance(result, str):
        return result
    return to_json(result, fallback=str).decode()


_Value = TypeVar("_Value")


def without_lone_surrogates(value: _Value) -> _Value:
    """`value` with every lone surrogate in its strings replaced by U+FFFD (dicts, lists, tuples walked).

    Text that enters a lane from outside kedi (a model's reply, a tool's
    result) passes through here: a lone surrogate (`"\\ud800"` in a reply's
    JSON) has no UTF-8 form, so a lane holding it could be neither sent nor
    saved (docs/history.md). A high and a low half side by side (a pair a
    stream split across two chunks) become their one character. `value`
    itself is returned when it holds no lone surrogate.
    """
    cleaned = _cleaned(value)
    return value if cleaned is None else cleaned


_SURROGATE_ESCAPES = re.compile(
    r"(?P<kept>\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|\\u[dD][89a-fA-F][0-9a-fA-F]{2}"
)
"""In JSON text: an escaped backslash or a surrogate pair's escapes (kept), or a lone surrogate's escape."""


def without_lone_surrogate_escapes(json_text: str) -> str:
    """JSON text with each lone surrogate's `\\uXXXX` escape written as `\\ufffd`.

    For JSON a framework decodes after kedi has taken the reply (Pydantic AI's
    parser refuses such escapes, Python's `json` decodes them to lone
    surrogates). Escaped backslashes and surrogate pairs are left as they are.
    """
    if "\\u" not in json_text:
        return json_text
    return _SURROGATE_ESCAPES.sub(lambda match: match["kept"] or "\\ufffd", json_text)


class WholeCharacters:
    """Pieces of streamed text made whole: no piece passed on holds half a surrogate pair.

    A stream may split a pair between two chunks, so a high half that ends a
    piece waits for the next; a half that stays alone becomes U+FFFD, as in
    the final reply (`without_lone_surrogates`). `end()` gives what a high
    half still waiting at the end of the stream becomes.
    """

    __slots__ = ("_high",)

    def __init__(self) -> None:
        self._high = ""

    def piece(self, text: str) -> str:
        """`text` ready to pass on (empty while it is only a waiting half)."""
        if self._high:
            text, self._high = self._high + text, ""
        elif text.isascii():
            return text
        if text and "\ud800" <= text[-1] <= "\udbff":
            text, self._high = text[:-1], text[-1]
        return without_lone_surrogates(text)

    def end(self) -> str:
        """The stream ended: U+FFFD for a high half still waiting, else nothing."""
        held, self._high = self._high, ""
        return "\ufffd" if held else ""


def _cleaned(value: Any) -> Any:
    """A copy of `value` without lone surrogates, or None when it holds none."""
    if isinstance(value, str):
        if value.isascii():
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return None
    if isinstance(value, dict):
        pairs = [(_cleaned(key), _cleaned(item)) for key, item in value.items()]
        if all(key is None and item is None for key, item in pairs):
            return None
        return {
            old_key if key is None else key: old_item if item is None else item
            for (old_key, old_item), (key, item) in zip(value.items(), pairs, strict=True)
        }
    if isinstance(value, list | tuple):
        items = [_cleaned(item) for item in value]
        if all(item is None for item in items):
            return None
        new = [old if item is None else item for old, item in zip(value, items, strict=True)]
        return new if isinstance(value, list) else tuple(new)
    return None


def compact_json(data: Any) -> str:
    """Compact JSON text, as a structured reply's content is stored."""
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False)


def validation_problems(error: ValidationError) -> list[str]:
    """One readable line per validation error: `field.path: message`."""
    return detail_problems(error.errors(include_url=False))


def detail_problems(details: Iterable[Mapping[str, Any]]) -> list[str]:
    """`validation_problems` of pydantic's error details (`ValidationError.errors()`)."""
    problems = []
    for item in details:
        where = ".".join(str(piece) for piece in item.get("loc") or ())
        problems.append(f"{where}: {item['msg']}" if where else str(item["msg"]))
    return problems


def correction_text(problems: Sequence[str], spec: OutputSpec) -> str:
    """The user message that sends validation errors back to the model."""
    listed = "\n".join(f"- {problem}" for problem in problems)
    fields = ", ".join(spec.fields)
    return (
        f"Your reply did not validate:\n{listed}\n"
        f"Reply again with one JSON object with the fields {fields}, fixing these errors."
    )


def decode_outputs(spec: OutputSpec, reply: str | JSONDict) -> dict[str, Any]:
    """Validate a structured reply (JSON text or decoded data); raises `ValidationError`."""
    if isinstance(reply, str):
        return spec.validate_json(reply)
    return spec.validate_python(reply)
