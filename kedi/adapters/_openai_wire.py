"""The OpenAI chat-completions wire format, as the `openai` adapter speaks it.

Pure functions and data, no I/O: portable messages to wire messages and back,
tools and strict JSON Schemas, call settings to request fields, and provider
error replies to kedi errors. The adapter (`kedi.adapters.openai`) does the
HTTP, the tool loop and the retries.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpx

from kedi.adapters._portable import PortableTurn, compact_json, without_lone_surrogates
from kedi.adapters.base import JSONDict, Usage
from kedi.errors import (
    AuthenticationError,
    CapabilityError,
    ContextLengthError,
    HistoryShapeError,
    KediConfigError,
    ModelNotFoundError,
    ProviderError,
    RateLimitError,
)
from kedi.history import Message, ToolCall, wire_tool_arguments
from kedi.settings import LLAMA_CPP_SETTINGS

DEFAULT_OUTPUT_RETRIES = 2
DEFAULT_REQUEST_LIMIT = 10
DEFAULT_MAX_REPLY_BYTES = 32 * 1024 * 1024
"""The largest reply body read (after content decoding), in bytes: 32 MiB."""
RETRYABLE_STATUSES = frozenset({408, 409, 429})
"""Statuses worth retrying, besides every 5xx."""

# Forwarded under the same name; `max_tokens` rather than `max_completion_tokens`
# because every compatible server accepts it (OpenAI still does, for non-reasoning models).
_BODY_SETTINGS = (
    "temperature",
    "top_p",
    "max_tokens",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "service_tier",
    # llama.cpp's sampling fields: only the local adapter takes these settings
    *sorted(LLAMA_CPP_SETTINGS),
)
_EFFORTS = {"max": "xhigh"}
"""`> effort:` values OpenAI spells differently."""
_TOOL_CHOICES = frozenset({"auto", "none", "required"})

# Provider wordings of a 400 caused by unpaired tool calls and results
# (adapters notes §4), lowercased.
_HISTORY_SHAPE = (
    "must be a response to a preceeding message with 'tool_calls'",
    "must be a response to a preceding message with 'tool_calls'",
    "must be followed by tool messages",
    "insufficient tool messages following tool_calls",
    "no tool call found for function call output",
    "ids were found without `tool_result` blocks",
    "unexpected `tool_use_id`",
)
_CONTEXT_LENGTH = ("context_length_exceeded", "maximum context length", "context window")
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True, slots=True)
class CallOptions:
    """The settings of one call, checked and mapped to the wire."""

    params: JSONDict
    """Request-body fields (temperature, stop, reasoning_effort, ...)."""
    headers: dict[str, str]
    extra_body: JSONDict
    """Merged into the body last: it may override any field."""
    tool_choice: Any
    parallel_tool_calls: bool | None
    timeout: float
    max_retries: int
    output_retries: int
    request_limit: int
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES


def call_options(
    settings: Mapping[str, Any],
    *,
    timeout: float,
    max_retries: int,
    max_reply_bytes: int = DEFAULT_MAX_REPLY_BYTES,
) -> CallOptions:
    """Check a call's settings and map them to the wire (the call layer has refused undeclared names).

    `timeout`, `max_retries` and `max_reply_bytes` are the adapter's defaults
    for the settings of those names.

    Raises:
        KediConfigError: a setting has a value the adapter cannot use.
    """
    params = {key: settings[key] for key in _BODY_SETTINGS if settings.get(key) is not None}
    stop = settings.get("stop", settings.get("stop_sequences"))
    if stop is not None:
        params["stop"] = _stop(stop)
    effort = settings.get("reasoning_effort", settings.get("effort"))
    if effort is not None:
        params["reasoning_effort"] = (
            _EFFORTS.get(effort, effort) if isinstance(effort, str) else effort
        )
    headers = settings.get("extra_headers") or {}
    if not isinstance(headers, Mapping) or not all(isinstance(v, str) for v in headers.values()):
        raise KediConfigError("the extra_headers setting must map header names to strings")
    extra_body = settings.get("extra_body") or {}
    if not isinstance(extra_body, Mapping):
        raise KediConfigError("the extra_body setting must be a mapping of request fields")
    choice = settings.get("tool_choice")
    if isinstance(choice, str) and choice not in _TOOL_CHOICES:
        choice = {"type": "function", "function": {"name": choice}}  # a tool's name
    if params or extra_body or choice is not None:  # most calls have none of them
        try:
            json.dumps([params, dict(extra_body), choice], allow_nan=False)
        except (TypeError, ValueError) as error:
            raise KediConfigError(
                f"the openai adapter's settings must be JSON values: {error}"
            ) from None
    parallel = settings.get("parallel_tool_calls")
    return CallOptions(
        params=params,
        headers={str(name): value for name, value in headers.items()},
        extra_body=dict(extra_body),
        tool_choice=choice,
        parallel_tool_calls=None if parallel is None else bool(parallel),
        timeout=seconds("timeout", settings.get("timeout", timeout)),
        max_retries=count("max_retries", settings.get("max_retries", max_retries), 0),
        output_retries=count(
            "output_retries", settings.get("output_retries", DEFAULT_OUTPUT_RETRIES), 0
        ),
        request_limit=count(
            "request_limit", settings.get("request_limit", DEFAULT_REQUEST_LIMIT), 1
        ),
        max_reply_bytes=count(
            "max_reply_bytes", settings.get("max_reply_bytes", max_reply_bytes), 1
        ),
    )


def _stop(value: Any) -> list[str]:
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list | tuple) or not all(isinstance(item, str) for item in stops):
        raise KediConfigError(
            f"the stop setting must be a string or a list of strings, not {value!r}"
        )
    return list(stops)


def count(name: str, value: Any, minimum: int) -> int:
    """`value` if it is an integer >= `minimum`, else a `KediConfigError` naming the setting."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise KediConfigError(f"the {name} setting must be an integer >= {minimum}, not {value!r}")
    return value


def seconds(name: str, value: Any) -> float:
    """`value` if it is a positive number, else a `KediConfigError` naming the setting."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise KediConfigError(f"the {name} setting must be a number of seconds > 0, not {value!r}")
    return float(value)


# --------------------------------------------------------------------------- requests


def wire_messages(messages: Sequence[Message]) -> list[JSONDict]:
    """Portable messages as wire messages (stamps and thinking blocks are never sent).

    A failed tool result is sent as `Error: <content>`, since the wire has no
    failure flag.

    Raises:
        CapabilityError: a message carries parts other than images on a user message.
    """
    return [_wire_message(message) for message in messages]


def _wire_message(message: Message) -> JSONDict:
    if message.role == "assistant":
        # Always a string, `""` beside tool calls: OpenAI and the openai SDK's
        # types accept `""` or `null` there, but llama.cpp's server rejects
        # `null` (HTTP 500 on the next request), so one rule serves every server.
        wire: JSONDict = {"role": "assistant", "content": message.content}
        if message.tool_calls:
            wire["tool_calls"] = [_wire_call(call) for call in message.tool_calls]
        return wire
    if message.parts and message.role != "user":
        raise CapabilityError(f"the openai adapter cannot send parts on {message.role} messages")
    if message.role == "tool":
        content = f"Error: {message.content}" if message.failed else message.content
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": content}
    if message.parts:
        return {"role": message.role, "content": _content_parts(message)}
    return {"role": message.role, "content": message.content}


def _wire_call(call: ToolCall) -> JSONDict:
    # C4, with `arguments` a JSON string: an object goes back as the model wrote it
    # (trimmed); empty or truncated text as the object `wire_tool_arguments` makes.
    raw = call.args.strip()
    arguments = raw if raw and not call.truncated else compact_json(wire_tool_arguments(call.args))
    return {
        "id": call.id,
        "type": "function",
        "function": {"name": call.name, "arguments": arguments},
    }


def _content_parts(message: Message) -> list[JSONDict]:
    parts: list[JSONDict] = [{"type": "text", "text": message.content}] if message.content else []
    for part in message.parts:
        if part.kind != "image":
            raise CapabilityError(f"the openai adapter cannot send {part.kind} parts, only images")
        url = part.url if part.url is not None else f"data:{part.media_type};base64,{part.data}"
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def function_tool(
    name: str, description: str, parameters: JSONDict, strict: bool = False
) -> JSONDict:
    """A `tools` entry offering one function."""
    function: JSONDict = {"name": name, "description": description, "parameters": parameters}
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def json_object_format(schema: JSONDict) -> JSONDict:
    """The `response_format` of `json_object` mode: JSON, with the schema where a server takes it.

    llama.cpp (and servers built on it) constrain decoding to `schema`; others
    ignore the extra field or reject it, which `auto` mode treats as a shape
    rejection like any other.
    """
    return {"type": "json_object", "schema": schema}


def response_format(name: str, schema: JSONDict, strict: bool) -> JSONDict:
    """The `response_format` asking for JSON matching `schema`."""
    # OpenAI accepts names matching `^[a-zA-Z0-9_-]{1,64}$`.
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", name)[:64] or "output"
    return {
        "type": "json_schema",
        "json_schema": {"name": safe, "schema": schema, "strict": strict},
    }


def strict_schema(schema: JSONDict) -> JSONDict | None:
    """A copy of `schema` in OpenAI's strict subset, or None when it has no strict form.

    Strict mode needs every object closed (`additionalProperties: false`) with
    all its properties required, so defaults are dropped (every field is then
    given). A free-form object (a dict type, or no properties) has no strict form.
    """
    try:
        return _strict(schema)
    except _NotStrict:
        return None


_STRICT_FORMS: dict[int, tuple[JSONDict, JSONDict | None]] = {}
"""`strict_schema` of the schemas seen, by `id`; each entry holds its schema, so an id is never reused while cached."""
_MAX_STRICT_FORMS = 1024


def cached_strict_schema(schema: JSONDict) -> JSONDict | None:
    """`strict_schema(schema)`, made once per schema object (a call site's output schema is built once).

    The schema and its strict form are never changed once made: both are only serialized.
    """
    cached = _STRICT_FORMS.get(id(schema))
    if cached is not None and cached[0] is schema:
        return cached[1]
    if len(_STRICT_FORMS) >= _MAX_STRICT_FORMS:
        _STRICT_FORMS.clear()
    strict = strict_schema(schema)
    _STRICT_FORMS[id(schema)] = (schema, strict)
    return strict


class _NotStrict(Exception):
    pass


def _strict(node: JSONDict) -> JSONDict:
    out = {key: value for key, value in node.items() if key != "default"}
    for key in ("properties", "$defs", "definitions"):
        if isinstance(out.get(key), dict):
            out[key] = {name: _strict(sub) for name, sub in out[key].items()}
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(out.get(key), list):
            out[key] = [_strict(sub) for sub in out[key]]
    for key in ("items", "not"):
        if isinstance(out.get(key), dict):
            out[key] = _strict(out[key])
    if out.get("type") == "object" or "properties" in out:
        if "properties" not in out or out.get("additionalProperties", False) is not False:
            raise _NotStrict
        out["additionalProperties"] = False
        out["required"] = list(out["properties"])
    return out


# --------------------------------------------------------------------------- replies


def assistant_message(turn: PortableTurn, message: Any) -> Message:
    """The portable, stamped form of a reply's `message`; tool-call args stay raw text.

    A refusal becomes the content. A call without an id, which could never be
    answered (C3), is named by its position (`call_<request>_<n>`). A lone
    surrogate (a `"\\ud800"` escape in the reply's JSON) becomes U+FFFD, so
    the turn can be sent again and saved (docs/history.md).
    """
    if not isinstance(message, dict):
        message = {}
    message = without_lone_surrogates(message)
    calls = []
    for number, call in enumerate(message.get("tool_calls") or (), start=1):
        if not isinstance(call, dict):
            continue
        function = call.get("function")
        if not isinstance(function, dict):
            function = {}
        calls.append(
            ToolCall(
                id=str(call.get("id") or f"call_{turn.usage.requests + 1}_{number}"),
                name=str(function.get("name") or ""),
                args=str(function.get("arguments") or ""),
            )
        )
    content = message.get("content") or message.get("refusal") or ""
    if isinstance(content, list):  # some servers answer with content parts
        content = "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return turn.stamp(role="assistant", content=str(content), tool_calls=calls)


class IncompleteReply(Exception):
    """A reply that parsed but holds no finished assistant turn (the text says what is missing)."""


def completion_message(data: Any) -> dict[str, Any]:
    """The assistant `message` of a parsed chat completion.

    Raises:
        ValueError: `data` is not a chat completion at all.
        IncompleteReply: no choice, a `null` message, or neither content nor tool calls.
    """
    if not isinstance(data, dict) or "choices" not in data:
        raise ValueError("not a chat completion")
    choices = data["choices"]
    if not isinstance(choices, list) or not choices:
        raise IncompleteReply("it has no choices")
    choice = choices[0]
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(message, dict):
        raise IncompleteReply("its choice has no message")
    calls = message.get("tool_calls")
    if (
        not isinstance(message.get("content"), str | list)
        and not isinstance(message.get("refusal"), str)
        and not (isinstance(calls, list) and calls)
    ):
        raise IncompleteReply("its message has neither content nor tool calls")
    return message


def json_text(text: str) -> str:
    """The JSON object in a prompted reply: inside a Markdown fence, or from `{` to `}`."""
    fenced = _FENCE.search(text)
    if fenced:
        return fenced.group(1)
    start, end = text.find("{"), text.rfind("}")
    return text[start : end + 1] if 0 <= start < end else text


def reply_usage(data: Any) -> Usage | None:
    """The token counts of a reply's `usage` object, or None if it has none."""
    if not isinstance(data, dict):
        return None
    prompt, completion = data.get("prompt_tokens"), data.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    return Usage(input_tokens=prompt, output_tokens=completion)


# --------------------------------------------------------------------------- errors


def error_fields(data: Any) -> tuple[str, str]:
    """(code, message) of an error body: `{"error": {...}}`, `{"error": "..."}` or `{...}`."""
    error = data.get("error", data) if isinstance(data, dict) else data
    if not isinstance(error, dict):
        return "", str(error)[:500]
    code = str(error.get("code") or error.get("type") or "")
    message = error.get("message")
    return code, str(message) if message else json.dumps(error)[:500]


_SHAPE_FIELD = re.compile(
    r"\b(response_format|json_schema|json_object|tool_choice|tools|functions"
    r"|tool[ _-]?call(?:s|ing)?|function[ _-]?call(?:s|ing)?)\b",
    re.IGNORECASE,
)
"""Request fields whose rejection means the structured-output *shape* was refused."""


def rejects_shape(status: int, data: Any, noise: Sequence[str]) -> bool:
    """Whether an error reply refuses the request's shape (its structured-output fields).

    Decided from the status and the JSON body only: 400, 404, 422 or a 5xx
    whose `param` or `code` names a shape field (`response_format`, `tools`,
    `tool_choice`, ...), or whose body mentions one once the `noise` (the base
    URL, the model name) is removed, so a model called `x-tool-use` or a URL
    path never counts. llama.cpp's server answers an unsupported
    `response_format` with a 500 that names it.
    """
    if status not in (400, 404, 422) and status < 500:
        return False
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        for key in ("param", "code"):
            value = error.get(key)
            if isinstance(value, str) and _SHAPE_FIELD.search(value.replace(".", " ")):
                return True
    text = json.dumps(data, ensure_ascii=False) if not isinstance(data, str) else data
    for word in sorted(filter(None, noise), key=len, reverse=True):
        text = text.replace(word, " ")
    return _SHAPE_FIELD.search(text) is not None


OPENAI_KEY_HINT = "check OPENAI_API_KEY"
"""What a refused key's error tells the openai adapter's user to check."""

_WORDING: dict[type[ProviderError], str] = {
    AuthenticationError: "{where} rejected the credentials{http}: {detail}; {key_hint}",
    ModelNotFoundError: "{where}: model or endpoint not found{http}: {detail}",
    RateLimitError: "{where} is rate limiting requests{http}: {detail}",
    ContextLengthError: "{where}: the request exceeds the context window: {detail}",
    HistoryShapeError: "{where} rejected the message sequence (tool calls and results unpaired): {detail}",
}
"""How each kind of provider failure reads, on every adapter (`{http}`: ` (HTTP 401)` when known)."""


def timed_out(
    where: str,
    seconds: float | None,
    *,
    per_attempt: bool = False,
    partial: Any = None,
) -> ProviderError:
    """A request that outlived its `timeout` setting, worded alike on every adapter (retryable)."""
    bound = f" after {seconds:g} s" if seconds is not None else ""
    per = " per attempt" if per_attempt and bound else ""
    return ProviderError(
        f"the request to {where} timed out{bound}{per}", retryable=True, partial=partial
    )


def worded_error(
    kind: type[ProviderError],
    where: str,
    detail: str,
    *,
    status: int | None,
    key_hint: str = OPENAI_KEY_HINT,
    partial: Any = None,
) -> ProviderError:
    """A provider failure whose kind is known (by HTTP status, or a framework's error category).

    Worded the same on every adapter: `where` (model, endpoint, file:line),
    what happened, the HTTP status when known, the provider's `detail`; only
    a rate limit is retryable.
    """
    http = "" if status is None else f" (HTTP {status})"
    message = _WORDING[kind].format(where=where, http=http, detail=detail, key_hint=key_hint)
    return kind(message, status=status, retryable=kind is RateLimitError, partial=partial)


def provider_error(
    status: int, code: str, detail: str, where: str, key_hint: str = OPENAI_KEY_HINT
) -> ProviderError:
    """The kedi error for an HTTP error reply; `detail` is the provider's message."""
    kind: type[ProviderError] | None = None
    if status in (401, 403):
        kind = AuthenticationError
    elif status == 404:
        kind = ModelNotFoundError
    elif status == 429:
        kind = RateLimitError
    elif status < 500 and any(marker in f"{code} {detail}".lower() for marker in _CONTEXT_LENGTH):
        kind = ContextLengthError
    elif status < 500 and any(marker in detail.lower() for marker in _HISTORY_SHAPE):
        kind = HistoryShapeError
    if kind is not None:
        return worded_error(kind, where, detail, status=status, key_hint=key_hint)
    retryable = status in RETRYABLE_STATUSES or status >= 500
    return ProviderError(
        f"{where} failed with HTTP {status}: {detail}", status=status, retryable=retryable
    )


def refused_output_format(error: ProviderError, setting: str, choices: str) -> ProviderError:
    """`error`, saying how to ask for structured output otherwise when the server refused how it was asked.

    Some OpenAI-compatible servers take no `response_format` of type
    `json_schema` (llama-cpp-python's answers HTTP 500 with its validation
    error). The framework adapters send one by default for a typed capture;
    their error then names the setting (`setting`: one of `choices`) that
    asks another way. Not retryable: the same request fails the same way.
    """
    if "response_format" not in error.message:
        return error
    return type(error)(
        f"{error.message}; the server refused the response_format kedi's structured output "
        f"sent: ask another way with the {setting} setting ({choices})",
        status=error.status,
        partial=error.partial,
    )


def retry_after(headers: httpx.Headers) -> float | None:
    """The wait a reply asks for, in seconds: `retry-after-ms`, else `Retry-After` (seconds or a date).

    None (use the backoff schedule) when neither header holds a usable wait:
    a value that is not a number or a date, NaN, infinite, negative, or a
    date in the past. A long wait is capped by the caller.
    """
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            wait = float(value) * scale
        except ValueError:
            continue
        return wait if math.isfinite(wait) and wait >= 0 else None
    value = headers.get("retry-after")
    try:
        when = parsedate_to_datetime(value) if value else None
    except (TypeError, ValueError, IndexError, OverflowError):
        when = None
    if when is None:
        return None
    if when.tzinfo is None:  # HTTP dates are GMT
        when = when.replace(tzinfo=UTC)
    wait = (when - datetime.now(UTC)).total_seconds()
    return wait if wait >= 0 else None


# --------------------------------------------------------------------------- framework clients


def string_content_http_client() -> Any:
    """An HTTP client for the openai SDK that sends `content: null` on assistant messages as `""`.

    The rule kedi's own wire follows (`_wire_message`), for the frameworks'
    OpenAI clients (Pydantic AI's chat model, LangChain's ChatOpenAI), which
    send `null` beside tool calls: llama.cpp's server refuses that with an
    HTTP 500 on every request whose history holds a tool call. Built on the
    SDK's own httpx (httpx2 for openai>=3); imports openai when called.
    """
    from importlib import import_module

    import openai

    sdk_httpx: Any = import_module(
        openai.DefaultAsyncHttpxClient.__mro__[1].__module__.split(".")[0]
    )

    class StringContent(sdk_httpx.AsyncHTTPTransport):
        async def handle_async_request(self, request: Any) -> Any:
            if request.method == "POST" and request.url.path.endswith("/chat/completions"):
                body = json.loads(await request.aread())
                nulls = [
                    m
                    for m in body.get("messages", ())
                    if isinstance(m, dict)
                    and m.get("role") == "assistant"
                    and m.get("content") is None
                ]
                if nulls:
                    for message in nulls:
                        message["content"] = ""
                    headers = [
                        (k, v) for k, v in request.headers.raw if k.lower() != b"content-length"
                    ]
                    request = sdk_httpx.Request(
                        request.method,
                        request.url,
                        headers=headers,
                        content=json.dumps(body).encode(),
                    )
            return await super().handle_async_request(request)

    return openai.DefaultAsyncHttpxClient(transport=StringContent())
