"""Server-sent events of a streamed chat completion, and their accumulation.

`BodyReader` reads a reply body (already content-decoded) in chunks, counting
its bytes and refusing more than a cap, and splits a stream into lines.
`sse_payloads` turns those lines into event payloads (the `data:` lines of one
event joined with newlines), ignoring comments (`: keep-alive`),
`event:`/`id:`/`retry:` fields and blank separators; it yields the OpenAI end
marker `data: [DONE]` as its last payload and stops there, as soon as it
arrives, so the reader can tell a finished stream from a cut-off one.

`StreamAccumulator` folds `chat.completion.chunk` objects into the same shapes
a non-streamed reply has: content pieces are concatenated (and each chunk's
new text is given out whole, never half a surrogate pair), tool calls are
built up by their `index` (the id and name arrive once, the `arguments` string
in pieces), `finish_reason` comes from whichever chunk sets it, and `usage`
from the final chunk (the one with no choices, sent when the request asked for
`stream_options.include_usage`).
"""

from __future__ import annotations

import codecs
from collections.abc import AsyncGenerator, AsyncIterable
from dataclasses import dataclass, field
from typing import Any

from kedi.adapters._portable import WholeCharacters

DONE = "[DONE]"
"""The payload that ends an OpenAI stream."""


class BodyTooLarge(Exception):
    """A reply body passed its reader's byte cap."""


class BodyReader:
    """Reads a body from its byte chunks, counting them (`received`) and refusing more than `limit`."""

    def __init__(self, chunks: AsyncIterable[bytes], limit: int) -> None:
        self._chunks = chunks
        self.limit = limit
        self.received = 0
        """Bytes read so far (after content decoding)."""

    async def _pieces(self) -> AsyncGenerator[bytes, None]:
        async for piece in self._chunks:
            self.received += len(piece)
            if self.received > self.limit:
                raise BodyTooLarge
            yield piece

    async def read(self) -> bytes:
        """The whole body; `BodyTooLarge` as soon as it passes the cap."""
        return b"".join([piece async for piece in self._pieces()])

    async def lines(self) -> AsyncGenerator[str, None]:
        """The body's lines (UTF-8, ended by LF or CRLF); a last line without an end too.

        Raises `UnicodeDecodeError` on invalid UTF-8 and `BodyTooLarge`.
        """
        decoder = codecs.getincrementaldecoder("utf-8")()
        pending: list[str] = []
        async for piece in self._pieces():
            text = decoder.decode(piece)
            if "\n" not in text:
                pending.append(text)
                continue
            head, *middle, tail = text.split("\n")
            pending.append(head)
            for line in ("".join(pending), *middle):
                yield line[:-1] if line.endswith("\r") else line
            pending = [tail]
        last = "".join(pending) + decoder.decode(b"", final=True)
        if last:
            yield last.removesuffix("\r")


async def sse_payloads(lines: AsyncIterable[str]) -> AsyncGenerator[str, None]:
    """Yield the data payload of every event in `lines`; `[DONE]`, if it comes, last."""
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
                yield DONE
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
    choices: int = 0
    """How many chunks carried the (first) choice."""
    _text: WholeCharacters = field(default_factory=WholeCharacters)

    def feed(self, chunk: dict[str, Any]) -> str:
        """Fold one decoded `chat.completion.chunk` into the message; return its new text.

        The text is made whole (`WholeCharacters`): a pair split between two
        chunks comes out with the second, a lone half as U+FFFD.
        """
        text = ""
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choices = chunk.get("choices")
        for choice in choices if isinstance(choices, list) else ():
            # Only the first choice is ever requested (`n` is not forwarded).
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            self.choices += 1
            if isinstance(choice.get("finish_reason"), str):
                self.finish_reason = choice["finish_reason"]
            # A hostile or broken server may send any JSON: wrong types are skipped.
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                continue
            if isinstance(delta.get("content"), str):
                self.content.append(delta["content"])
                text += self._text.piece(delta["content"])
            if isinstance(delta.get("refusal"), str):
                self.refusal.append(delta["refusal"])
            pieces = delta.get("tool_calls")
            for piece in pieces if isinstance(pieces, list) else ():
                if isinstance(piece, dict):
                    self._feed_tool_call(piece)
        if self.finish_reason is not None:  # the reply is complete: a waiting half stays alone
            text += self._text.end()
        return text

    def _feed_tool_call(self, piece: dict[str, Any]) -> None:
        index = piece.get("index", len(self.tool_calls))
        call = self.tool_calls.setdefault(
            index if isinstance(index, int) else -1, _ToolCallPieces()
        )
        call.id = call.id or _text(piece.get("id"))
        function = piece.get("function")
        if not isinstance(function, dict):
            return
        call.name = call.name or _text(function.get("name"))
        call.arguments.append(_text(function.get("arguments")))

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


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
