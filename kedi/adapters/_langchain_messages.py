"""LangChain messages as kedi reads them: portable JSON for transcripts, the
message-group classifier, `history_archive` checkpoints, replies made fit for
a lane and their usage.

Imported only by the LangChain adapter's modules, after its import guard.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately

from kedi.adapters._portable import without_lone_surrogates
from kedi.adapters.base import JSONDict, Usage
from kedi.history.archive import CHECKPOINT_PREFIX
from kedi.history.grouping import CALL_IN_PROGRESS, CHECKPOINT, SIGNED_THINKING, SYSTEM, MessageInfo


def checkpoint_message(archive_id: str, text: str) -> HumanMessage:
    """A checkpoint: a `HumanMessage` whose `id` names the archive (ids are never sent)."""
    return HumanMessage(text, id=f"{CHECKPOINT_PREFIX}{archive_id}")


def checkpoint_id(message: BaseMessage) -> str | None:
    """The archive a checkpoint names, or None for any other message."""
    if isinstance(message, HumanMessage) and (message.id or "").startswith(CHECKPOINT_PREFIX):
        return (message.id or "")[len(CHECKPOINT_PREFIX) :]
    return None


def reply_without_lone_surrogates(reply: AIMessage) -> AIMessage:
    """`reply` with every lone surrogate (content, tool calls, metadata) replaced by U+FFFD.

    The lane must be able to send and save what it holds (docs/history.md).
    """
    data = reply.model_dump()
    cleaned = without_lone_surrogates(data)
    return reply if cleaned is data else type(reply).model_validate(cleaned)


def reply_usage(sent: Sequence[BaseMessage], reply: AIMessage) -> Usage:
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


class LangChainClassifier:
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
        if checkpoint_id(message) is not None:
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


CLASSIFIER = LangChainClassifier()
"""The classifier of LangChain messages (no call in progress)."""
