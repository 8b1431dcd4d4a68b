"""Pydantic AI message state kedi keeps across calls: stamps, checkpoints, continuation, streaming.

- **Stamps**: Pydantic AI requires a distinct `run_id` per `agent.run` and
  its continuation digests cover the stamps a message was sent with, so a
  lane stores the kedi run's id with the call's id in `metadata`
  (`kedi_call_id`, `kedi_run_id`); `as_sent` / `as_stored` switch between
  the two.
- **Checkpoints** of `history_archive=` are requests whose `metadata` names
  their archive (`kedi_checkpoint`).
- **Response-ID continuation** on models that keep server-side response
  state, and the capability that sends the full history after an edit.
- **Streaming**: the `event_stream_handler`s that pass text to `on_delta`:
  a text call's reply, or the text of a structured call's `str` captures.

Imported only by the Pydantic AI adapter's modules, after its import guard.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from pydantic_ai import RunContext
from pydantic_ai.capabilities import AbstractCapability
from pydantic_ai.messages import (
    AgentStreamEvent,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
)
from pydantic_ai.models import Model, ModelRequestContext
from pydantic_ai.models.function import FunctionModel

from kedi.adapters._capture_stream import CaptureText
from kedi.adapters._portable import WholeCharacters

__all__ = [
    "CALL_ID",
    "CHECKPOINT",
    "RUN_ID",
    "FreshAfterEdit",
    "as_sent",
    "as_stored",
    "can_stream",
    "capture_deltas",
    "checkpoint_of",
    "continues_responses",
    "text_deltas",
]


class _Edits(Protocol):
    stale: bool
    """An accepted edit since the last response."""


def can_stream(model: Model) -> bool:
    """Whether `model` serves streamed requests (a `FunctionModel` needs a `stream_function`)."""
    return not (isinstance(model, FunctionModel) and model.stream_function is None)


def text_deltas(
    on_delta: Callable[[str], None] | None,
) -> Callable[[RunContext[Any], AsyncIterable[AgentStreamEvent]], Awaitable[None]]:
    """An `event_stream_handler` passing each piece of text Pydantic AI streams to `on_delta`.

    Pieces are made whole (`WholeCharacters`): never half a surrogate pair.
    """
    assert on_delta is not None  # only built for a streaming call

    async def handle(ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
        whole = WholeCharacters()
        async for event in events:
            if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                text = whole.piece(event.part.content)
            elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                text = whole.piece(event.delta.content_delta)
            else:
                continue
            if text:
                on_delta(text)
        if rest := whole.end():
            on_delta(rest)

    return handle


def capture_deltas(
    capture: CaptureText, output_tool: str | None
) -> Callable[[RunContext[Any], AsyncIterable[AgentStreamEvent]], Awaitable[None]]:
    """An `event_stream_handler` passing the text of the `str` captures to `capture` as the JSON streams.

    The JSON is the arguments of `output_tool` (tool mode), else the reply's
    text (native and prompted modes). Only the first part carrying it is
    parsed; each model response starts a new reply (a retry streams again).
    """

    async def handle(ctx: RunContext[Any], events: AsyncIterable[AgentStreamEvent]) -> None:
        capture.start()
        output_part: int | None = None
        async for event in events:
            piece: Any = None  # str (streamed JSON) or dict (whole arguments)
            if isinstance(event, PartStartEvent) and output_part is None:
                part = event.part
                if output_tool is None and isinstance(part, TextPart):
                    piece = part.content
                elif (
                    output_tool is not None
                    and isinstance(part, ToolCallPart)
                    and part.tool_name == output_tool
                ):
                    piece = part.args
                else:
                    continue
                output_part = event.index
            elif isinstance(event, PartDeltaEvent) and event.index == output_part:
                delta = event.delta
                if isinstance(delta, TextPartDelta):
                    piece = delta.content_delta
                elif isinstance(delta, ToolCallPartDelta):
                    piece = delta.args_delta
            if isinstance(piece, dict):  # arguments given whole, not as streamed JSON
                piece = json.dumps(piece)
            if piece:
                capture.feed(piece)

    return handle


@dataclass
class FreshAfterEdit(AbstractCapability[Any]):
    """Sends the full history, not `previous_response_id`, on the first request after an accepted edit.

    The server's copy of an earlier response holds the history before the
    edit, so continuing from it would bring removed messages back. Once a
    response produced after the edit exists, continuing from it is safe again.
    """

    call: _Edits

    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        settings = request_context.model_settings
        if not self.call.stale or not settings or "openai_previous_response_id" not in settings:
            return request_context
        fresh = {
            key: value for key, value in settings.items() if key != "openai_previous_response_id"
        }
        return replace(request_context, model_settings=fresh)  # type: ignore[arg-type]  # Pydantic AI types model_settings narrower than it accepts

    async def after_model_request(
        self, ctx: RunContext[Any], *, request_context: ModelRequestContext, response: ModelResponse
    ) -> ModelResponse:
        self.call.stale = False
        return response


CHECKPOINT = "kedi_checkpoint"
"""`metadata` key naming the archive a checkpoint request stands for."""
CALL_ID = "kedi_call_id"
RUN_ID = "kedi_run_id"


def checkpoint_of(message: ModelMessage) -> str | None:
    """The archive a checkpoint request names, or None for any other message."""
    found = (message.metadata or {}).get(CHECKPOINT) if isinstance(message, ModelRequest) else None
    return found if isinstance(found, str) else None


def as_sent(message: ModelMessage) -> ModelMessage:
    """`message` with the run id Pydantic AI stamped when it was sent (the kedi call's id)."""
    call_id = (message.metadata or {}).get(CALL_ID)
    return (
        message
        if call_id is None or message.run_id == call_id
        else replace(message, run_id=call_id)
    )


def as_stored(message: ModelMessage) -> ModelMessage:
    """`message` with the kedi run's id, as a lane keeps it (the inverse of `_as_sent`)."""
    run_id = (message.metadata or {}).get(RUN_ID)
    return (
        message if run_id is None or message.run_id == run_id else replace(message, run_id=run_id)
    )


def continues_responses(model: Model | None) -> bool:
    """Whether `model` keeps server-side response state (Pydantic AI's `OpenAIResponsesModel`).

    Read from the class names, so `pydantic_ai.models.openai` (and the openai
    SDK) is not imported to ask.
    """
    return model is not None and any(
        cls.__name__ == "OpenAIResponsesModel" for cls in type(model).__mro__
    )
