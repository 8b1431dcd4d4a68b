"""Pydantic AI messages as kedi reads them: portable JSON for transcripts and the group classifier.

Imported only by the Pydantic AI adapter's modules, after its import guard.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Literal

from pydantic_ai.messages import (
    BaseToolReturnPart,
    CompactionPart,
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryFeedbackPart,
    SystemPromptPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from kedi.adapters._pydantic_state import (
    checkpoint_of,
)
from kedi.adapters.base import (
    JSONDict,
)
from kedi.history.grouping import CALL_IN_PROGRESS, CHECKPOINT, SIGNED_THINKING, SYSTEM, MessageInfo

# --------------------------------------------------------------------------- messages


def portable_json(message: ModelMessage) -> list[JSONDict]:
    """A `ModelMessage` as portable C1 message dicts (one-way, for transcripts).

    A request becomes one message per part (system, user, tool); a response
    becomes one assistant message. Parts with no portable form are left out.
    """
    if isinstance(message, ModelResponse):
        text = "".join(part.content for part in message.parts if isinstance(part, TextPart))
        out: JSONDict = {"role": "assistant"}
        if text:
            out["content"] = text
        calls = [
            {"id": part.tool_call_id, "name": part.tool_name, "args": part.args_as_json_str()}
            for part in message.parts
            if isinstance(part, ToolCallPart)
        ]
        if calls:
            out["toolCalls"] = calls
        thinking = [
            {
                key: value
                for key, value in (("text", part.content), ("signature", part.signature))
                if value
            }
            for part in message.parts
            if isinstance(part, ThinkingPart)
        ]
        if thinking:
            out["thinking"] = thinking
        return [out]
    messages: list[JSONDict] = []
    for part in message.parts:
        if isinstance(part, SystemPromptPart):
            messages.append({"role": "system", "content": part.content})
        elif isinstance(part, UserPromptPart):
            messages.append({"role": "user", "content": _user_text(part)})
        elif isinstance(part, BaseToolReturnPart):
            result: JSONDict = {
                "role": "tool",
                "content": part.model_response_str(),
                "toolCallId": part.tool_call_id,
            }
            if part.tool_name:
                result["toolName"] = part.tool_name
            if part.outcome != "success":
                result["failed"] = True
            messages.append(result)
        elif isinstance(part, RetryFeedbackPart):
            messages.append({"role": "user", "content": part.model_response()})
    return messages


def _user_text(part: UserPromptPart) -> str:
    if isinstance(part.content, str):
        return part.content
    return "".join(
        item if isinstance(item, str) else f"[{getattr(item, 'kind', 'media')}]"
        for item in part.content
    )


def _message_text(message: ModelMessage) -> str:
    """The text a message carries, for token estimates."""
    pieces: list[str] = []
    for part in message.parts:
        if isinstance(part, ToolCallPart):
            pieces += [part.tool_name, part.args_as_json_str()]
        elif isinstance(part, BaseToolReturnPart):
            pieces.append(part.model_response_str())
        elif isinstance(part, UserPromptPart):
            pieces.append(_user_text(part))
        elif isinstance(text := getattr(part, "content", None), str):
            pieces.append(text)
    return "".join(pieces)


class _PydanticClassifier:
    """The history-processor `Classifier` of Pydantic AI's `ModelMessage`.

    A request with a user prompt is a `user` message (also `SYSTEM`-protected
    if it holds system parts), one with only tool returns a `tool` message, one
    with only system parts a `system` message; a request holding only retry
    feedback is `other`, so a turn and its validation retries stay one group.
    With a `run_id`, the messages that run added are protected: the call in
    progress must come back whole.
    """

    native_name = "Pydantic AI ModelMessage"

    def __init__(self, run_id: str | None = None) -> None:
        self.run_id = run_id

    def accepts(self, obj: object) -> bool:
        """Whether `obj` is a `ModelRequest` or `ModelResponse`."""
        return isinstance(obj, ModelRequest | ModelResponse)

    def info(self, message: ModelMessage) -> MessageInfo:
        """Classify one message (see the class docs)."""
        own = (CALL_IN_PROGRESS,) if self.run_id and message.run_id == self.run_id else ()
        if isinstance(message, ModelResponse):
            reasons = [*own]
            if any(isinstance(part, ThinkingPart) and part.signature for part in message.parts):
                reasons.append(SIGNED_THINKING)
            if any(isinstance(part, CompactionPart) for part in message.parts):
                reasons.append(CHECKPOINT)
            return MessageInfo(
                "assistant",
                opens=tuple(
                    p.tool_call_id
                    for p in message.parts
                    if isinstance(p, ToolCallPart) and p.tool_call_id
                ),
                protected=tuple(reasons),
                is_text_only=all(isinstance(part, TextPart) for part in message.parts),
            )
        if checkpoint_of(message) is not None:
            return MessageInfo("other", protected=(CHECKPOINT, *own))
        system = any(isinstance(part, SystemPromptPart) for part in message.parts)
        prompts = [part for part in message.parts if isinstance(part, UserPromptPart)]
        answers = tuple(
            part.tool_call_id for part in message.parts if isinstance(part, ToolReturnPart)
        )
        role: Literal["user", "tool", "system", "other"] = (
            "user" if prompts else "tool" if answers else "system" if system else "other"
        )
        return MessageInfo(
            role,
            answers=answers,
            protected=((SYSTEM,) if system else ()) + own,
            is_text_only=bool(prompts)
            and len(prompts) == len(message.parts)
            and all(isinstance(part.content, str) for part in prompts),
        )

    def same(self, a: Any, b: Any) -> bool:
        """Dataclass equality of two messages of the same kind."""
        return type(a) is type(b) and bool(a == b)

    def copy(self, messages: Sequence[ModelMessage]) -> list[ModelMessage]:
        """Deep copies (messages and parts are mutable dataclasses)."""
        return copy.deepcopy(list(messages))

    def estimate_tokens(self, messages: Sequence[ModelMessage]) -> int:
        """`len(text) // 4 + 3` per message, as `kedi.history.estimate_tokens` counts."""
        return sum(len(_message_text(message)) // 4 + 3 for message in messages)


CLASSIFIER = _PydanticClassifier()
"""The classifier of Pydantic AI messages (no call in progress)."""
