"""The `openai` adapter: any OpenAI-compatible chat-completions endpoint, over httpx.

Lanes hold kedi's portable `Message`s; each model request turns them into
wire messages (`POST {base_url}/chat/completions`, see `_openai_wire`).
Configuration comes from the constructor, else the command line and the
environment (`--base-url`, `KEDI_BASE_URL`, `OPENAI_BASE_URL`, the key from
`OPENAI_API_KEY` or the variable `--api-key-env` names; see
`kedi.adapters.endpoint`); without a key no `Authorization` header is sent
(local servers need none). The key goes only into that header: it is
never logged and is masked in every error message (a server may echo it).

Structured output (`structured_mode`: `--structured-mode` or
`KEDI_STRUCTURED_MODE`, else the call's `structured_mode` setting, else the
constructor's, else `auto`):

- `json_schema`: `response_format` json_schema, strict when the schema has a
  strict form; the reply's content (the JSON text) is the final assistant message.
- `json_object`: `response_format` `{"type": "json_object", "schema": ...}`
  (llama.cpp constrains decoding to the schema; OpenAI wants JSON mentioned
  in the messages), and the schema in the instructions, as in `prompted`.
- `tool`: a forced function tool (`final_result`, or `final_result_` if a tool
  of the call has that name). Its call is closed with a tool result before
  the turn commits, so the lane stays pair-valid.
- `prompted`: the schema goes into the instructions; the JSON is taken from
  the reply's text (a Markdown fence around it is accepted).
- `auto` (the default): starts with `json_schema` when the schema has a
  strict form, else `tool`, and steps down `json_schema` → `json_object` →
  `tool` → `prompted` when the server rejects the request's shape
  (`_openai_wire.rejects_shape`: decided from the status and the JSON body,
  never retried as transient). The mode that worked after a step-down is
  remembered per (base URL, model), for the process and on disk
  (`kedi.adapters.capability_cache`), so later calls and runs start there.

Every structured reply is validated against the call's `OutputSpec`; a reply
that fails is sent back with the errors (a user message, or a failed result of
the output tool) up to `output_retries` (default 2) times, then
`OutputValidationError`. Tool calls run through `ToolSpec.handler`; a failure
goes back to the model as a failed result. One call makes at most
`request_limit` (default 10) model requests.

A reply is complete or it is an error (see docs/failure-model.md): a stream
must end with a finish reason or `[DONE]`, a completion must hold a choice
whose message has content or tool calls; anything less is a `ProviderError`
"reply cut off after N bytes", retried like a transient failure, and the turn
commits nothing. Each request attempt must finish within `timeout` seconds
(default 600) end to end, whatever trickles in; a body (after content
decoding) may hold at most `max_reply_bytes` (default 32 MiB). Every
transport, decoding, protocol and JSON failure is a `ProviderError`.

Requests that fail with 408, 409, 429 or 5xx, time out, cannot connect or are
cut off are retried `max_retries` (default 3) times with exponential backoff
and jitter, or after the wait `retry-after-ms` / `Retry-After` ask for
(fractional seconds or an HTTP date, at most 60 s; a value that is no usable
wait, such as NaN, negative or a past date, falls back to the backoff). Usage is the server's `usage` summed over the
call's requests (the portable estimate for a request whose reply has none).

Connections: the calls of one run share one connection pool (closed when
the run ends; see `kedi.adapters.resources`); an adapter awaited outside a
run opens one per call. Requests go straight to httpx's transport unless a
proxy or URL credentials need httpx's client (`kedi.adapters._openai_http`);
redirects are not followed and no cookies are kept.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from contextlib import aclosing
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

import anyio
import httpx
from pydantic import ValidationError

from kedi.adapters import capability_cache, endpoint
from kedi.adapters._capture_stream import capture_text
from kedi.adapters._openai_http import (
    Sender,
    endpoint_url,
    open_sender,
    request_headers,
    shared_sender,
)
from kedi.adapters._openai_wire import (
    DEFAULT_MAX_REPLY_BYTES,
    CallOptions,
    IncompleteReply,
    assistant_message,
    cached_strict_schema,
    call_options,
    completion_message,
    count,
    error_fields,
    function_tool,
    json_object_format,
    json_text,
    provider_error,
    rejects_shape,
    reply_usage,
    response_format,
    retry_after,
    seconds,
    timed_out,
    wire_messages,
)
from kedi.adapters._portable import (
    PortableTurn,
    correction_text,
    decode_outputs,
    validation_problems,
)
from kedi.adapters._sse import DONE, BodyReader, BodyTooLarge, StreamAccumulator, sse_payloads
from kedi.adapters.base import (
    Adapter,
    AdapterProfile,
    CallRequest,
    CallResult,
    JSONDict,
    OutputSpec,
    Usage,
)
from kedi.adapters.endpoint import (
    check_structured_mode,
    configured_base_url,
    forced_structured_mode,
)
from kedi.adapters.resources import current_resources
from kedi.errors import (
    AdapterError,
    KediConfigError,
    ModelNotFoundError,
    OutputValidationError,
    ProviderError,
)
from kedi.history import Message, ToolCall, join_instructions
from kedi.redaction import logger, redact_text, remember_secret, secret_values
from kedi.settings import COMMON_SETTINGS

StructuredMode = Literal["auto", "json_schema", "json_object", "tool", "prompted"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_TIMEOUT = 600.0
"""Seconds one request attempt may take end to end (and so any single read), as in the openai SDK."""
DEFAULT_MAX_RETRIES = 3
MAX_RETRY_AFTER = 60.0
"""The longest wait a `Retry-After` header can impose, in seconds."""
INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 8.0
OUTPUT_TOOL = "final_result"
FINAL_RESULT = "Final result processed."
"""The tool result that closes an accepted output-tool call."""

_PROMPTED = (
    "Always respond with a JSON object that's compatible with this schema:\n\n{schema}\n\n"
    "Don't include any text or Markdown fencing before or after."
)
_STEPS: tuple[StructuredMode, ...] = ("json_schema", "json_object", "tool", "prompted")
"""Auto mode's structured modes, best first: a shape rejection moves a call one step on."""


OPENAI_SETTINGS = (COMMON_SETTINGS - {"thinking"}) | {
    "output_retries",
    "request_limit",
    "max_retries",
    "max_reply_bytes",
    "effort",
    "reasoning_effort",
    "structured_mode",
}
"""The settings the adapter takes (`thinking` is Pydantic AI's: chat completions spell it `effort`)."""

PROVIDER_PREFIX = "openai:"
"""A leading provider prefix the adapter drops from the model id it sends (Pydantic AI's spelling)."""


class OpenAIAdapter(Adapter):
    """Any OpenAI-compatible chat-completions endpoint (see the module docstring)."""

    shortname: ClassVar[str] = "openai"
    checks_requests: ClassVar[bool] = True
    profile: ClassVar[AdapterProfile] = AdapterProfile(
        structured_output=True,
        tools=True,
        streaming=True,
        history=True,
        settings=OPENAI_SETTINGS,
    )

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        structured_mode: StructuredMode = "auto",
        stream: bool = False,
        max_retries: int = DEFAULT_MAX_RETRIES,
        timeout: float = DEFAULT_TIMEOUT,
        max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
        history_processor: Any = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        # `openai:gpt-4o-mini` is how Pydantic AI names the model; the server knows `gpt-4o-mini`.
        model = (model or "").removeprefix(PROVIDER_PREFIX)
        if not model:
            raise KediConfigError(
                "the openai adapter needs a model: pass --model, use `> model:`, "
                "or OpenAIAdapter(model=...)"
            )
        check_structured_mode(structured_mode, "structured_mode")
        self.model_name = model
        self.base_url = _base_url(base_url or configured_base_url() or DEFAULT_BASE_URL)
        self._api_key = endpoint.clean_key(api_key) if api_key is not None else endpoint.api_key()
        self.structured_mode: StructuredMode = structured_mode
        self._forced_mode = forced_structured_mode()
        self.stream = stream
        self.max_retries = count("max_retries", max_retries, 0)
        self.timeout = seconds("timeout", timeout)
        self.max_reply_bytes = count("max_reply_bytes", max_reply_bytes, 1)
        self.history_processor = history_processor
        self._transport = transport
        self._shared_sender = shared_sender(endpoint_url(self.base_url), transport)
        """Set when every run can share one sender (a caller's transport): no per-run client."""
        self._headers = request_headers(self._api_key, {})
        """The headers of a call without `extra_headers` (made once: most calls have none)."""

    def __repr__(self) -> str:
        return redact_text(f"OpenAIAdapter(model={self.model_name!r}, base_url={self.base_url!r})")

    async def request(self, request: CallRequest) -> CallResult:
        """Run one call: its tool loop, structured-output retries and request retries."""
        self.check(request)
        options = call_options(
            request.settings,
            timeout=self.timeout,
            max_retries=self.max_retries,
            max_reply_bytes=self.max_reply_bytes,
        )
        call = _Call(request, options, self._plan(request))
        if self._shared_sender is not None:
            return await self._converse(self._shared_sender, call)
        run = current_resources()
        if run is not None:
            return await self._converse(run.client(self, self._open_sender), call)
        sender = self._open_sender()
        try:
            return await self._converse(sender, call)
        finally:
            await sender.aclose()

    async def _converse(self, sender: Sender, call: _Call) -> CallResult:
        """Exchange requests and replies until the call has its result."""
        while True:
            reply = await self._complete(sender, call)
            try:
                value = await call.handle(reply)
            except OutputValidationError as error:
                call.report_reply(error.message)
                raise
            call.report_reply(call.take_rejection())
            if value is not _CONTINUE:
                self._remember(call)
                return call.result(value)

    # ------------------------------------------------------------------ structured output

    def _plan(self, request: CallRequest) -> _Plan | None:
        spec = request.output
        if spec is None:
            return None
        strict = cached_strict_schema(spec.json_schema)
        setting = request.settings.get("structured_mode")
        if setting is not None:
            check_structured_mode(setting, "the structured_mode setting")
        mode: StructuredMode = self._forced_mode or setting or self.structured_mode  # type: ignore[assignment]  # the setting was validated against the modes when parsed
        auto = mode == "auto"
        if auto:
            # The schema's best mode, unless this server is known to need a lower one.
            best = _STEPS.index("json_schema" if strict is not None else "tool")
            known = capability_cache.remembered_mode(self.base_url, self.model_name)
            mode = _STEPS[max(best, _STEPS.index(known) if known in _STEPS else 0)]
        taken = {tool.name for tool in request.tools}
        name = OUTPUT_TOOL
        while name in taken:
            name += "_"
        return _Plan(spec, mode, auto, name, strict, start=mode)

    def _step_down(self, call: _Call) -> bool:
        """In auto mode, move the call to the next structured mode; False at the last one."""
        plan = call.plan
        if plan is None or not plan.auto or plan.mode == _STEPS[-1]:
            return False
        plan.mode = _STEPS[_STEPS.index(plan.mode) + 1]
        return True

    def _remember(self, call: _Call) -> None:
        """After an auto call that stepped down succeeded, remember the mode that worked."""
        plan = call.plan
        if plan is not None and plan.auto and plan.mode != plan.start:
            capability_cache.remember_mode(self.base_url, self.model_name, plan.mode)

    # ------------------------------------------------------------------ one model request

    async def _complete(self, sender: Sender, call: _Call) -> Message:
        """Send the turn so far; add the model's reply to the turn and return it."""
        turn = call.turn
        while True:
            if turn.usage.requests >= call.options.request_limit:
                raise AdapterError(
                    f"the call{_at(call.request)} reached its request_limit of "
                    f"{call.options.request_limit} model requests; raise the request_limit "
                    "setting if its tool loop needs more",
                    partial=turn.partial("loop"),
                )
            call.set_instructions()
            await turn.process(self)
            call.sending()
            try:
                reply = await self._send(sender, self._body(call), call)
            except _ShapeRejected as rejected:
                if self._step_down(call):
                    continue
                error = rejected.error
                if call.plan is not None:
                    error = _with_hint(error, _mode_hint(call.plan))
                error.partial = turn.partial("model")
                raise error from None
            except ProviderError as error:
                error.partial = turn.partial("model")
                raise
            message = assistant_message(turn, reply.message)
            call.cut_off = reply.finish_reason == "length"
            before = turn.usage
            turn.respond(message, report=False)  # reported once validated (`report_reply`)
            call.replied(message)
            if reply.usage is not None:
                # The server's count replaces the estimate `respond` made.
                turn.usage = before + replace(reply.usage, requests=1)
            return message

    def _body(self, call: _Call) -> JSONDict:
        request, options, plan = call.request, call.options, call.plan
        body: JSONDict = {"model": self.model_name, "messages": wire_messages(call.turn.messages)}
        tools = [
            function_tool(tool.name, tool.description, tool.parameters) for tool in request.tools
        ]
        choice = _pending_choice(options.tool_choice, call.turn.answered)
        if plan is not None and plan.mode == "tool":
            description = f"Give the final {plan.spec.name} answer."
            tools.append(function_tool(plan.tool_name, description, *plan.schema()))
            # With other tools the model may use them first, then must end with the output tool.
            forced = {"type": "function", "function": {"name": plan.tool_name}}
            choice = "required" if request.tools else forced
        if tools:
            body["tools"] = tools
            if choice is not None:
                body["tool_choice"] = choice
            if options.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = options.parallel_tool_calls
        if plan is not None and plan.mode == "json_schema":
            body["response_format"] = response_format(plan.spec.name, *plan.schema())
        elif plan is not None and plan.mode == "json_object":
            body["response_format"] = json_object_format(plan.schema()[0])
        body.update(options.params)
        # A subclass whose transport cannot stream (local) asks whole and sends `on_delta` the result.
        if self.profile.streaming and (self.stream or request.on_delta is not None):
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        body.update(options.extra_body)
        return body

    # ------------------------------------------------------------------ HTTP

    def _open_sender(self) -> Sender:
        # A run shares one sender (see kedi.adapters.resources); each request sets its timeout.
        return open_sender(endpoint_url(self.base_url), self._transport)

    async def _send(self, sender: Sender, body: JSONDict, call: _Call) -> _Reply:
        """POST one request, retrying transient failures; raise a mapped `ProviderError`.

        Every failed attempt is reported to the transcript. A shape rejection
        (`_ShapeRejected`) is never retried: the same body would fail again.
        """
        options = call.options
        headers = self._headers
        if options.headers:
            for secret in secret_values(options.headers):
                remember_secret(secret)  # a server may echo a header's key back in an error
            headers = request_headers(self._api_key, options.headers)
        # Encoded once for every attempt, as httpx's `json=` would (compact, UTF-8, no NaN).
        content = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        request = _Request(content.encode(), headers, bool(body.get("stream")))
        attempt = 0
        while True:
            try:
                return await self._attempt(sender, request, options, call.deltas())
            except _Retry as retry:
                call.report_failure(retry.error)
                if attempt >= options.max_retries:
                    raise retry.error from None
                wait = _backoff(attempt, retry.after)
                logger.info(
                    "kedi: retrying in %.1f s (retry %d of %d): %s",
                    wait,
                    attempt + 1,
                    options.max_retries,
                    retry.error.message,
                )
                await anyio.sleep(wait)
                attempt += 1
                call.sending()
            except _ShapeRejected as rejected:
                call.report_failure(rejected.error)
                raise
            except ProviderError as error:
                call.report_failure(error)
                raise

    async def _attempt(
        self, sender: Sender, request: _Request, options: CallOptions, deltas: _Deltas | None
    ) -> _Reply:
        """One request, complete or an error: every failure comes out as a `ProviderError`."""
        url = f"{self.base_url}/chat/completions"
        timeout = options.timeout
        reader: BodyReader | None = None
        # `from None` everywhere: an httpx error's request holds the Authorization header.
        try:
            # The whole attempt, not only each read: a server dripping keep-alives ends here too.
            with anyio.fail_after(timeout):
                response = await sender.send(
                    endpoint_url(url), request.content, request.headers, timeout
                )
                try:
                    reader = BodyReader(response.aiter_bytes(), options.max_reply_bytes)
                    if response.is_error:
                        raise self._http_error(response, await reader.read())
                    if response.is_redirect:
                        raise self._redirected(response)
                    self._check_length(response, options.max_reply_bytes)
                    if request.stream:
                        return await self._read_stream(reader, deltas)
                    return self._read_completion(await reader.read(), reader.received)
                finally:
                    await response.aclose()
        except (TimeoutError, httpx.TimeoutException):  # the whole attempt's, or one read's
            raise _Retry(timed_out(url, timeout)) from None
        except BodyTooLarge:
            raise self._too_large(options.max_reply_bytes) from None
        except (httpx.TransportError, httpx.DecodingError) as error:
            detail = self._scrub(str(error) or type(error).__name__)
            if isinstance(error, httpx.DecodingError):
                message = f"{self.base_url} sent a reply that cannot be decoded: {detail}"
            elif reader is not None and reader.received:
                message = self._cut_off(reader.received, detail)
            else:
                message = f"cannot reach {url}: {detail}"
            raise _Retry(ProviderError(message, retryable=True)) from None
        except httpx.HTTPError as error:  # any other request failure (too many redirects, ...)
            detail = self._scrub(str(error) or type(error).__name__)
            raise ProviderError(f"the request to {url} failed: {detail}") from None

    def _check_length(self, response: httpx.Response, limit: int) -> None:
        """Refuse a body whose declared length is over the cap before reading any of it."""
        declared = response.headers.get("content-length", "")
        # The encoding last: most replies are under the cap, so one header lookup each.
        if (
            declared.isdigit()
            and int(declared) > limit
            and "content-encoding" not in response.headers
        ):
            raise BodyTooLarge

    def _http_error(self, response: httpx.Response, content: bytes) -> Exception:
        """The mapped error of an error reply: `_ShapeRejected` when it refuses the
        request's shape, `_Retry` when it may be retried, else the error itself."""
        status = response.status_code
        try:
            data: Any = json.loads(content)
        except (ValueError, RecursionError):
            data = None
        if data is not None:
            code, detail = error_fields(data)
        else:
            code, detail = (
                "",
                content.decode("utf-8", "replace").strip()[:500] or response.reason_phrase,
            )
        where = f"{self.base_url} (model {self.model_name!r})"
        error = provider_error(status, code, self._scrub(detail), where)
        if status == 404 and type(error) is not ProviderError:
            error = _with_hint(error, _not_found_hint(self.base_url, code))
        noise = (self.base_url, self.model_name)
        shaped = type(error) in (ProviderError, ModelNotFoundError)
        if shaped and data is not None and rejects_shape(status, data, noise):
            return _ShapeRejected(_with_hint(error, "", retryable=False))
        return _Retry(error, retry_after(response.headers)) if error.retryable else error

    def _read_completion(self, body: bytes, received: int) -> _Reply:
        try:
            data = json.loads(body)
            message = completion_message(data)
        except IncompleteReply as why:
            raise _Retry(ProviderError(self._cut_off(received, str(why)), retryable=True)) from None
        except (ValueError, RecursionError):
            raise self._malformed("a chat completion") from None
        return _Reply(
            message, reply_usage(data.get("usage")), data["choices"][0].get("finish_reason")
        )

    async def _read_stream(self, reader: BodyReader, deltas: _Deltas | None) -> _Reply:
        stream = StreamAccumulator()
        done = False
        # `aclosing`: leaving early (an error event) must close the generator here, not at GC.
        async with aclosing(sse_payloads(reader.lines())) as payloads:
            async for payload in payloads:
                if payload == DONE:
                    done = True
                    break
                try:
                    chunk = json.loads(payload)
                except (ValueError, RecursionError):
                    raise self._malformed("a stream chunk") from None
                if not isinstance(chunk, dict):
                    raise self._malformed("a stream chunk")
                if chunk.get("error"):
                    detail = self._scrub(error_fields(chunk)[1])
                    raise ProviderError(f"{self.base_url} failed during the stream: {detail}")
                text = stream.feed(chunk)
                if deltas is not None:
                    deltas(stream, text)
        if stream.finish_reason is None and not (done and stream.choices):
            why = (
                "the stream ended without a finish reason"
                if stream.choices
                else "the stream held no reply"
            )
            raise _Retry(ProviderError(self._cut_off(reader.received, why), retryable=True))
        return _Reply(stream.message(), reply_usage(stream.usage), stream.finish_reason)

    def _cut_off(self, received: int, why: str) -> str:
        return f"{self.base_url}: reply cut off after {received} bytes ({why})"

    def _redirected(self, response: httpx.Response) -> ProviderError:
        location = self._scrub(response.headers.get("location", ""))
        return ProviderError(
            f"{self.base_url} answered {response.status_code} {response.reason_phrase}, a redirect "
            f"to {location}; kedi does not follow redirects: set the base URL to where it points",
            status=response.status_code,
        )

    def _too_large(self, limit: int) -> ProviderError:
        return ProviderError(
            f"{self.base_url} sent a reply larger than the max_reply_bytes setting ({limit} bytes); "
            "raise that setting to accept it"
        )

    def _malformed(self, what: str) -> ProviderError:
        return ProviderError(
            f"{self.base_url} sent a reply that is not {what} in the OpenAI format"
        )

    def _scrub(self, text: str) -> str:
        """`text` with every known secret masked (servers may echo the key back)."""
        return redact_text(text)


# --------------------------------------------------------------------------- one call


_Deltas = Callable[[StreamAccumulator, str], None]
"""Called after each chunk of a streamed reply with the stream so far and the chunk's text."""

_CONTINUE = object()
"""`_Call.handle` result: the call needs another model request."""

_CUT_OFF = (
    'the reply was cut off at the max_tokens limit (finish_reason "length") before it was '
    "complete: answer more briefly"
)


@dataclass
class _Plan:
    """How a structured call asks for its output; `mode` may step down in auto mode."""

    spec: OutputSpec
    mode: StructuredMode
    auto: bool
    tool_name: str
    strict: JSONDict | None
    """The strict form of the output schema, if it has one."""
    start: StructuredMode
    """The mode the call started in (auto mode remembers a step-down from it)."""

    def schema(self) -> tuple[JSONDict, bool]:
        """The schema to send and whether it is strict."""
        if self.strict is not None:
            return self.strict, True
        return self.spec.json_schema, False


class _Call:
    """One call in progress: its turn, options, output plan and retry budget."""

    def __init__(self, request: CallRequest, options: CallOptions, plan: _Plan | None) -> None:
        self.request = request
        self.options = options
        self.plan = plan
        self.turn = PortableTurn.start(request)
        self.retries = options.output_retries
        self.attempt = 0
        """Model requests sent so far, failed ones included (the transcript's `attempt`)."""
        self._sent: tuple[JSONDict, ...] = ()
        self._reply: JSONDict | None = None
        self._rejection: str | None = None
        self.cut_off = False
        """Whether the last reply ended at the max_tokens limit (`finish_reason: "length"`)."""
        self._capture = capture_text(plan.spec if plan is not None else None, request.on_delta)

    def deltas(self) -> _Deltas | None:
        """What one streamed reply passes to `on_delta`: its text, or the text of its `str` captures.

        Called once per attempt: a correction or a retry starts a new reply
        (after a line break, see `kedi.adapters._capture_stream`).
        """
        on_delta, capture, plan = self.request.on_delta, self._capture, self.plan
        if plan is None:
            return (
                None if on_delta is None else lambda stream, text: on_delta(text) if text else None
            )
        if capture is None:
            return None
        capture.start()
        if plan.mode != "tool":  # the JSON object is the reply's content
            return lambda stream, text: capture.feed(text) if text else None
        fed = 0  # pieces of the output tool's arguments already parsed

        def output_tool_arguments(stream: StreamAccumulator, text: str) -> None:
            nonlocal fed
            calls = [call for call in stream.tool_calls.values() if call.name == plan.tool_name]
            if calls:
                pieces = calls[0].arguments
                capture.feed("".join(pieces[fed:]))
                fed = len(pieces)

        return output_tool_arguments

    @property
    def mode(self) -> str | None:
        return self.plan.mode if self.plan is not None else None

    def sending(self) -> None:
        """Count a new request; keep what it sends for its transcript line."""
        self.attempt += 1
        if self.request.on_exchange is not None:
            self._sent = self.turn.sent_json()

    def replied(self, reply: Message) -> None:
        """Hold the request's reply until `report_reply` knows whether it validated."""
        self._reply = reply.to_json_dict()

    def report_failure(self, error: ProviderError) -> None:
        """Report the request in flight as failed with `error` (already scrubbed of the key)."""
        self.turn.report(
            self._sent,
            {"error": error.message, "status": error.status},
            mode=self.mode,
            attempt=self.attempt,
            failed=True,
            error=error.message,
        )

    def report_reply(self, rejection: str | None) -> None:
        """Report the answered request: failed when its reply was rejected (`rejection`)."""
        self.turn.report(
            self._sent,
            self._reply,
            mode=self.mode,
            attempt=self.attempt,
            failed=rejection is not None,
            error=rejection,
        )

    def take_rejection(self) -> str | None:
        """Why the last reply was sent back for correction, if it was (once)."""
        rejection, self._rejection = self._rejection, None
        return rejection

    def result(self, value: Any) -> CallResult:
        """The successful call (with the processed history if a processor rewrote it)."""
        return self.turn.result(value)

    def set_instructions(self) -> None:
        """Make the system message match the mode: prompted mode adds the schema."""
        text = self.request.instructions
        if self.plan is not None and self.plan.mode in ("prompted", "json_object"):
            schema = json.dumps(self.plan.spec.json_schema, ensure_ascii=False)
            text = join_instructions(text, _PROMPTED.format(schema=schema))
        prefix = self.turn.prefix
        history = prefix[1:] if prefix and prefix[0].role == "system" else prefix
        system = [Message(role="system", content=text)] if text else []
        self.turn.prefix = [*system, *history]

    async def handle(self, reply: Message) -> Any:
        """Act on one model reply: the call's value, or `_CONTINUE` after tools or a correction."""
        plan = self.plan
        if plan is not None and plan.mode == "tool":
            return await self._handle_output_tool(reply, plan)
        if reply.tool_calls:
            await self.turn.run_tools(reply.tool_calls)
            return _CONTINUE
        if plan is None:
            return reply.content
        text = json_text(reply.content) if plan.mode != "json_schema" else reply.content
        try:
            return decode_outputs(plan.spec, text)
        except ValidationError as error:
            self._correct(validation_problems(error), plan)
        return _CONTINUE

    async def _handle_output_tool(self, reply: Message, plan: _Plan) -> Any:
        outputs = [call for call in reply.tool_calls if call.name == plan.tool_name]
        others = [call for call in reply.tool_calls if call.name != plan.tool_name]
        if others:
            await self.turn.run_tools(others)
        if not outputs:
            if not others:
                self._correct([f"no call to the {plan.tool_name} tool; answer by calling it"], plan)
            return _CONTINUE
        try:
            value = decode_outputs(plan.spec, outputs[0].args or "{}")
        except ValidationError as error:
            problems = self._with_cause(validation_problems(error))
            # Close every output call with the errors, so the retry stays pair-valid.
            self._close(outputs, correction_text(problems, plan.spec), failed=True)
            self._spend_retry(problems)
            return _CONTINUE
        self._close(outputs, FINAL_RESULT, failed=False)
        return value

    def _close(self, calls: list[ToolCall], content: str, *, failed: bool) -> None:
        for call in calls:
            self.turn.add(
                self.turn.stamp(
                    role="tool",
                    content=content,
                    tool_call_id=call.id,
                    tool_name=call.name,
                    failed=failed,
                )
            )

    def _correct(self, problems: list[str], plan: _Plan) -> None:
        """Send `problems` back to the model in a user message, spending one retry."""
        problems = self._with_cause(problems)
        self._spend_retry(problems)
        self.turn.add(self.turn.stamp(role="user", content=correction_text(problems, plan.spec)))

    def _with_cause(self, problems: list[str]) -> list[str]:
        """`problems`, and that the reply was unfinished if `max_tokens` cut it off."""
        # The model is told to answer more briefly; the user's error names the setting.
        return [*problems, _CUT_OFF] if self.cut_off else problems

    def _spend_retry(self, problems: list[str]) -> None:
        """Spend one output retry on `problems`, or raise when none is left."""
        self._rejection = "; ".join(problems)
        if self.retries == 0:
            attempts = self.options.output_retries + 1
            limit = self.options.params.get("max_tokens")
            hint = f"; raise the max_tokens setting ({limit})" if self.cut_off else ""
            raise OutputValidationError(
                f"the reply to the call{_at(self.request)} did not validate after "
                f"{attempts} attempt{'s' if attempts > 1 else ''}: {'; '.join(problems)}{hint}",
                partial=self.turn.partial("decode"),
            )
        self.retries -= 1
        logger.info(
            "kedi: the reply to the call%s did not validate; asking again (retry %d of %d): %s",
            _at(self.request),
            self.options.output_retries - self.retries,
            self.options.output_retries,
            self._rejection,
        )


# --------------------------------------------------------------------------- HTTP helpers


@dataclass(frozen=True, slots=True)
class _Request:
    """What every attempt of one request sends."""

    content: bytes
    """The JSON body, encoded."""
    headers: httpx.Headers
    stream: bool
    """Whether the body asks for a streamed reply."""


@dataclass(frozen=True, slots=True)
class _Reply:
    message: Any
    """The reply's assistant `message` object (not yet checked)."""
    usage: Usage | None
    finish_reason: Any = None
    """Why the model stopped, as the server said (`"length"`: `max_tokens` cut it off)."""


class _ShapeRejected(Exception):
    """The server refused the request's shape (structured-output fields): never retried."""

    def __init__(self, error: ProviderError) -> None:
        super().__init__(error.message)
        self.error = error


def _pending_choice(choice: Any, answered: set[str]) -> Any:
    """The `tool_choice` to send: one that names a tool forces it until the call has a result of it.

    Forcing a named tool on every request (as the setting says) would loop
    until `request_limit`, since the model could never answer; once that
    tool has returned a result (`PortableTurn.answered`: a call with invalid
    arguments is none), the model chooses freely.
    """
    if not isinstance(choice, dict):
        return choice
    if (choice.get("function") or {}).get("name") in answered:
        return None
    return choice


def _with_hint(error: ProviderError, hint: str, *, retryable: bool | None = None) -> ProviderError:
    """A copy of `error` (same class and status) whose message ends with `hint`."""
    return type(error)(
        error.message + hint,
        status=error.status,
        retryable=error.retryable if retryable is None else retryable,
    )


def _mode_hint(plan: _Plan) -> str:
    if plan.auto:
        return "; no structured mode was accepted (json_schema, json_object, tool, prompted)"
    return (
        f"; the server refused structured_mode {plan.mode}: choose another with "
        "--structured-mode, KEDI_STRUCTURED_MODE or `> settings: structured_mode:` "
        "(json_schema, json_object, tool, prompted), or `auto`"
    )


def _not_found_hint(base_url: str, code: str) -> str:
    """What a 404 from `POST {base_url}/chat/completions` most likely means."""
    endpoint = f"POST {base_url}/chat/completions"
    path = httpx.URL(base_url).path.rstrip("/")
    if code == "model_not_found" or path.endswith("/v1"):
        return f" ({endpoint})"
    if path.endswith("/chat/completions"):  # the endpoint pasted as the base URL
        given = base_url.removesuffix("/chat/completions")
        return f" ({endpoint}; the base URL ends in /chat/completions: give it without, as {given})"
    return f" ({endpoint}; is `/v1` missing from the base URL?)"


class _Retry(Exception):
    """A failed attempt that may be retried: the error to raise if not, and the server's wait."""

    def __init__(self, error: ProviderError, after: float | None = None) -> None:
        super().__init__(error.message)
        self.error = error
        self.after = after


def _backoff(attempt: int, retry_after: float | None) -> float:
    """Seconds to wait before retry number `attempt + 1`."""
    if retry_after is not None:
        return min(retry_after, MAX_RETRY_AFTER)
    # Jitter spreads out clients that failed together.
    delay: float = min(INITIAL_BACKOFF * 2**attempt, MAX_BACKOFF)
    return delay * (1 - 0.25 * random.random())


def _base_url(url: str) -> str:
    try:
        parsed: httpx.URL | None = httpx.URL(url)
    except httpx.InvalidURL:
        parsed = None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.host:
        raise KediConfigError(f"invalid OpenAI base URL {url!r}; expected http(s)://host/path")
    if parsed.password:
        remember_secret(parsed.password)  # only the URL's own spelling is masked otherwise
    return url.rstrip("/")


def _at(request: CallRequest) -> str:
    return f" at {request.origin}" if request.origin else ""
