"""Streaming the text of `str` captures while their JSON reply arrives.

A call with captures asks the model for one JSON object (one field per
capture), validated whole at the end. While that object streams in,
`CaptureText` decodes it incrementally and passes to `on_delta` only the
string content of the top-level fields whose capture is `str`, decoding
escapes (`\\n`, `\\"`, `\\uXXXX`, surrogate pairs) however the pieces split
them; a lone surrogate half (raw or escaped) is sent as U+FFFD. Everything else (keys, numbers, nested objects, fields of other
types, prose or fences before the object) is skipped.

Between two stretches of text that do not continue each other (the next
`str` field, or a new reply after a correction or a retry) one line break
`"\\n"` is sent, just before the first character of the new stretch, so
empty fields send nothing. `docs/adapters.md` ("Streaming text as it
arrives") documents this for users.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from kedi.adapters.base import CallRequest, OutputSpec

__all__ = ["CaptureText", "capture_text", "stream_in_one_piece", "stream_value_in_one_piece"]

_SIMPLE_ESCAPES = {
    "n": "\n",
    "t": "\t",
    "r": "\r",
    "b": "\b",
    "f": "\f",
    "/": "/",
    "\\": "\\",
    '"': '"',
}
_HIGH = range(0xD800, 0xDC00)
_LOW = range(0xDC00, 0xE000)
_REPLACEMENT = "\ufffd"
"""What a lone surrogate half becomes, as in the reply's value (docs/history.md)."""


def capture_text(
    spec: OutputSpec | None, on_delta: Callable[[str], None] | None
) -> CaptureText | None:
    """The parser streaming a structured call's `str` captures, or None when nothing of it streams."""
    if spec is None or on_delta is None or not spec.text_fields:
        return None
    return CaptureText(spec.text_fields, on_delta)


def stream_in_one_piece(request: CallRequest, reply: str) -> None:
    """For a model that cannot stream (offline, script): send what would have streamed, at once.

    A text call's reply, or the text of a structured call's `str` captures
    (`reply` is then its JSON), goes to `on_delta` when the call has one, so
    `--stream` shows the same text as with a streaming model, in one piece.
    """
    if request.on_delta is None:
        return
    if request.output is None:
        if reply:
            request.on_delta(reply)
        return
    capture = capture_text(request.output, request.on_delta)
    if capture is not None:
        capture.feed(reply)


def stream_value_in_one_piece(request: CallRequest, value: Any) -> None:
    """`stream_in_one_piece` from a call's validated value (`CallResult.value`), not its reply."""
    if request.on_delta is None:
        return
    if request.output is None:
        if isinstance(value, str) and value:
            request.on_delta(value)
        return
    capture = capture_text(request.output, request.on_delta)
    if capture is not None and isinstance(value, Mapping):
        capture.whole(value)


class CaptureText:
    """Feeds pieces of a JSON reply; sends the text of its `str` fields to `on_delta`.

    Call `start()` before each reply (each model response); `feed(piece)`
    with each piece of its JSON text, as it arrives.
    """

    def __init__(self, fields: Collection[str], on_delta: Callable[[str], None]) -> None:
        self._fields = frozenset(fields)
        self._on_delta = on_delta
        self._sent = False  # any text sent for this call (so the next stretch needs a break)
        self._stretch_open = False  # the current field already sent some text
        self.start()

    def start(self) -> None:
        """A new reply begins: forget the previous one's parse state."""
        self._depth = 0
        self._done = False
        self._expect_key = True
        self._key = ""
        self._in_string = False
        self._role = "skip"  # of the string being read: "key", "text" (sent) or "skip"
        self._buffer: list[str] = []  # the key being read
        self._escape: str | None = None  # None, "\\" after a backslash, or "u" + hex digits so far
        self._high: int | None = None  # a high surrogate waiting for its low half
        self._stretch_open = False

    def feed(self, piece: str) -> None:
        """Parse `piece`; send the text it adds to a `str` field in one `on_delta` call."""
        out: list[str] = []
        for char in piece:
            if self._done:
                break
            if self._in_string:
                self._string_char(char, out)
            else:
                self._structure_char(char)
        if out:
            self._on_delta("".join(out))

    def whole(self, values: Mapping[str, Any]) -> None:
        """A model that cannot stream: send the text of the validated `str` captures in one piece."""
        texts = [
            value
            for name, value in values.items()
            if name in self._fields and isinstance(value, str) and value
        ]
        if texts:
            self._on_delta(("\n" if self._sent else "") + "\n".join(texts))
            self._sent = True

    # ------------------------------------------------------------------ the parser

    def _structure_char(self, char: str) -> None:
        depth = self._depth
        if depth == 0:
            if char == "{":  # anything before the object (a fence, prose) is skipped
                self._depth, self._expect_key = 1, True
        elif char == '"':
            self._in_string = True
            if depth > 1:
                self._role = "skip"
            elif self._expect_key:
                self._role, self._buffer = "key", []
            else:
                self._role = "text" if self._key in self._fields else "skip"
                self._stretch_open = False
        elif char in "{[":
            self._depth += 1
        elif char in "}]":
            self._depth -= 1
            self._done = self._depth == 0
        elif depth == 1 and char == ":":
            self._expect_key = False
        elif depth == 1 and char == ",":
            self._expect_key = True

    def _string_char(self, char: str, out: list[str]) -> None:
        escape = self._escape
        if escape is None:
            if char == "\\":
                self._escape = "\\"
            elif char == '"':
                self._end_string(out)
            else:
                self._unit(ord(char), out)
        elif escape == "\\":
            if char == "u":
                self._escape = "u"
            else:
                self._escape = None
                self._unit(ord(_SIMPLE_ESCAPES.get(char, char)), out)
        else:
            escape += char
            if len(escape) < 5:
                self._escape = escape
                return
            self._escape = None
            try:
                code = int(escape[1:], 16)
            except ValueError:  # not JSON; validation at the end reports it
                return
            self._unit(code, out)

    def _unit(self, code: int, out: list[str]) -> None:
        """One decoded code point (or UTF-16 surrogate half) of the string being read."""
        high = self._high
        if high is not None and code in _LOW:
            self._high = None
            self._emit(chr(0x10000 + ((high - 0xD800) << 10) + (code - 0xDC00)), out)
            return
        if high is not None:  # a lone high surrogate
            self._high = None
            self._emit(_REPLACEMENT, out)
        if code in _HIGH:
            self._high = code
        else:
            self._emit(_REPLACEMENT if code in _LOW else chr(code), out)

    def _end_string(self, out: list[str]) -> None:
        if self._high is not None:
            self._emit(_REPLACEMENT, out)
            self._high = None
        if self._role == "key":
            self._key = "".join(self._buffer)
        self._in_string = False

    def _emit(self, text: str, out: list[str]) -> None:
        if self._role == "key":
            self._buffer.append(text)
        elif self._role == "text":
            if not self._stretch_open:
                if self._sent:
                    out.append("\n")
                self._stretch_open = self._sent = True
            out.append(text)
