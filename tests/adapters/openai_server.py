"""A real OpenAI-compatible HTTP server on 127.0.0.1, scripted per test.

`OpenAIServer` runs the standard library's threading HTTP server in a daemon
thread. Each POST takes the next scripted `Reply` (JSON, SSE or an error
status, with optional headers and delay) and is recorded as a `Received`
(path, headers, decoded JSON body). A request with no reply left gets a 500
naming the problem, so a test that scripts too few replies fails loudly.
A reply may also misbehave on purpose (see `tests/adapters/test_faults.py`):
raw bytes of any kind, a Content-Length longer than the body, a stream whose
lines drip in slowly or that stops before its end.

The builders (`completion`, `chunk`, `tool_call`, `error_body`) produce the
shapes of the openai SDK's `ChatCompletion` / `ChatCompletionChunk` types.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "test-model"


@dataclass(frozen=True)
class Reply:
    """One scripted answer."""

    status: int = 200
    body: Any = None
    """A JSON reply body (ignored when `events` is set)."""
    events: Sequence[str] | None = None
    """Raw SSE lines (without their line ends): the reply is a stream."""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    """Seconds to wait before answering."""
    interval: float = 0.0
    """Seconds to wait between the lines of a stream (a server dripping keep-alives)."""
    raw: bytes | None = None
    """A body sent as these bytes, whatever they are (with `headers` as given)."""
    declared_length: int | None = None
    """The Content-Length sent with `raw`, if not its real length (a body cut short)."""


@dataclass(frozen=True)
class Received:
    """One request as the server saw it."""

    path: str
    headers: dict[str, str]
    """Header names lowercased."""
    body: Any
    connection: int
    """The client's port: requests on one kept-alive connection share it."""


class OpenAIServer:
    """A scripted chat-completions endpoint; use as a context manager."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.received: list[Received] = []
        self.closed: list[int] = []
        """The connections (client ports) the client has closed, in order."""
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        # A short poll interval keeps `shutdown` (which waits for one poll) fast.
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.01,), daemon=True)

    @property
    def base_url(self) -> str:
        """The endpoint's base URL (`.../v1`)."""
        port = self._httpd.server_address[1]
        return f"http://127.0.0.1:{port}/v1"

    def add(self, *replies: Reply) -> None:
        """Script the next replies, in order."""
        with self._lock:
            self.replies.extend(replies)

    @property
    def bodies(self) -> list[Any]:
        """The JSON body of every request received, in order."""
        return [request.body for request in self.received]

    def __enter__(self) -> OpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()  # ends delayed replies early
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _take(self, received: Received) -> Reply | None:
        with self._lock:
            self.received.append(received)
            return self.replies.popleft() if self.replies else None


def _handler(server: OpenAIServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints do
        # Headers and body go out in two writes: without TCP_NODELAY, Nagle's
        # algorithm holds the second one for the client's delayed ACK (~40 ms).
        disable_nagle_algorithm = True

        def do_POST(self) -> None:  # noqa: N802 (the http.server API)
            raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            try:
                body = json.loads(raw)
            except ValueError:
                body = raw.decode(errors="replace")
            headers = {name.lower(): value for name, value in self.headers.items()}
            reply = server._take(Received(self.path, headers, body, self.client_address[1]))
            if reply is None:
                reply = Reply(
                    500, error_body("the test server has no scripted reply left", "no_reply")
                )
            if reply.delay and server._stopping.wait(reply.delay):
                self.close_connection = True
                return
            try:
                self._answer(reply)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a cancelled or timed-out request)

        def _answer(self, reply: Reply) -> None:
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if reply.events is not None:
                # A stream has no length: closing the connection ends it.
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.close_connection = True
                self.end_headers()
                for line in reply.events:
                    if reply.interval and server._stopping.wait(reply.interval):
                        return
                    self.wfile.write(line.encode() + b"\n")
                    self.wfile.flush()
                return
            data = json.dumps(reply.body).encode() if reply.raw is None else reply.raw
            if "content-type" not in {name.lower() for name in reply.headers}:
                self.send_header("Content-Type", "application/json")
            length = len(data) if reply.declared_length is None else reply.declared_length
            self.send_header("Content-Length", str(length))
            if reply.declared_length is not None:
                self.close_connection = True  # the body is short: nothing can follow it
            self.end_headers()
            self.wfile.write(data)

        def finish(self) -> None:
            super().finish()
            with server._lock:
                server.closed.append(self.client_address[1])

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler


# --------------------------------------------------------------------------- reply builders


def tool_call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    """A complete tool call of a reply message (`arguments` is the raw JSON string)."""
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def completion(
    content: str | None = None,
    *,
    tool_calls: Sequence[dict[str, Any]] = (),
    usage: tuple[int, int] | None = (10, 5),
    finish_reason: str | None = None,
) -> dict[str, Any]:
    """A `chat.completion` object with one choice."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls:
        message["tool_calls"] = list(tool_calls)
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": finish_reason or ("tool_calls" if tool_calls else "stop"),
                "logprobs": None,
            }
        ],
    }
    if usage is not None:
        body["usage"] = _usage(*usage)
    return body


def chunk(
    delta: dict[str, Any] | None = None,
    *,
    finish_reason: str | None = None,
    usage: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """A `chat.completion.chunk`; with `usage` it is the final chunk, which has no choices."""
    body: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": MODEL,
        "choices": [],
    }
    if usage is not None:
        body["usage"] = _usage(*usage)
    else:
        body["choices"] = [{"index": 0, "delta": delta or {}, "finish_reason": finish_reason}]
    return body


def sse(*chunks: dict[str, Any], done: bool = True) -> list[str]:
    """SSE lines for `chunks`, each event followed by a blank line, then `[DONE]`."""
    lines: list[str] = []
    for item in chunks:
        lines += [f"data: {json.dumps(item)}", ""]
    if done:
        lines += ["data: [DONE]", ""]
    return lines


def error_body(
    message: str,
    code: str | None = None,
    kind: str = "invalid_request_error",
    param: str | None = None,
) -> dict[str, Any]:
    """An OpenAI error object."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _usage(prompt: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt + completion_tokens,
    }
