"""Server-sent events of a streamed chat completion, and their accumulation.

`sse_payloads` turns the lines of an SSE body into event payloads (the `data:`
lines of one event joined with newlines), ignoring comments (`: keep-alive`),
`event:`/`id:`/`retry:` fields and blank separators, and stopping at the
OpenAI end marker `data: [DONE]` as soon as it arrives.

`StreamAccumulator` folds `chat.completion.chunk` objects into the same shapes
a non-streamed reply has: content pieces are concatenated, tool calls are
built up by their `index` (the id and name arrive once, the `arguments` string
in pieces), `finish_reason` comes from whichever chunk sets it, and `usage`
from the final chunk (the one with no choices, sent when the request asked for
`stream_options.include_usage`).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterable
from dataclasses import dataclass, field
from typing import Any

DONE = "[DONE]"
"""The payload that ends an OpenAI stream."""


async def sse_payloads(lines: AsyncIterable[str]) -> AsyncGenerator[str, None]:
    """Yield the data payload of every event in `lines`, up to `[DONE]`."""
    data: list[str] = []
    async for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data.clear()
            continue
        if line.startswith("data:"):
            # The SSE format strips exactly one space after the colon.
            value = line[5:]
            value = value[1:] if value.startswith(" ") else value
            if value == DONE and not data:
                return  # at once: some servers keep the connection open after it
            data.append(value)
    # A body that ends without a blank line still completes its last event.
    if data:
        yield "\n".join(data)


@dataclass
class _ToolCallPieces:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class StreamAccumulator:
    """Builds one assistant message, its finish reason and usage from stream chunks."""

    content: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    tool_calls: dict[int, _ToolCallPieces] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: dict[str, Any] | None = None

    def feed(self, chunk: dict[str, Any]) -> str:
        """Fold one decoded `chat.completion.chunk` into the message; return its new text."""
        text = ""
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        for choice in chunk.get("choices") or ():
            # Only the first choice is ever requested (`n` is not forwarded).
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
            delta = choice.get("delta") or {}
            if delta.get("content"):
                self.content.append(delta["content"])
                text += delta["content"]
            if delta.get("refusal"):
                self.refusal.append(delta["refusal"])
            for piece in delta.get("tool_calls") or ():
                self._feed_tool_call(piece)
        return text

    def _feed_tool_call(self, piece: dict[str, Any]) -> None:
        index = piece.get("index", len(self.tool_calls))
        call = self.tool_calls.setdefault(index, _ToolCallPieces())
        call.id = call.id or piece.get("id") or ""
        function = piece.get("function") or {}
        call.name = call.name or function.get("name") or ""
        if function.get("arguments"):
            call.arguments.append(function["arguments"])

    def message(self) -> dict[str, Any]:
        """The accumulated assistant message, shaped like a non-streamed reply's `message`."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self.content) or None}
        if self.refusal:
            message["refusal"] = "".join(self.refusal)
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": "".join(call.arguments)},
                }
                for _, call in sorted(self.tool_calls.items())
            ]
        return message
