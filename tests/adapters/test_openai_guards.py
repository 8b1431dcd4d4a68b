"""The `openai` adapter's guards and messages, pinned where mutation testing found them loose.

Each test names the behaviour a mutant changed without any other test
noticing (docs/testing.md, "Mutation testing"): the structured-mode step-down
and its guards, backoff bounds, error texts, the output tool's name and the
stream path's headers and timeouts.
"""

from __future__ import annotations

import gzip
import json
import logging
import random
import re
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import httpx
import pytest
from pydantic import BaseModel

from kedi.adapters import capability_cache
from kedi.adapters import openai as openai_module
from kedi.adapters.base import CallRequest, OutputSpec, ToolSpec
from kedi.adapters.openai import OpenAIAdapter, _backoff
from kedi.adapters.resources import run_scope
from kedi.errors import (
    AdapterError,
    ContextLengthError,
    HistoryProcessingValidationError,
    KediConfigError,
    ModelNotFoundError,
    OutputValidationError,
    ProviderError,
)
from kedi.history import Message
from tests.adapters.openai_server import (
    MODEL,
    OpenAIServer,
    Reply,
    chunk,
    completion,
    error_body,
    sse,
    tool_call,
)

KEY = "sk-guards-secret-777"


class City(BaseModel):
    name: str
    population: int


class Loose(BaseModel):
    """No strict form (a free-form dict): auto mode starts with the output tool."""

    name: str
    extra: dict[str, Any]


CITY = OutputSpec(City, City.model_json_schema())
LOOSE = OutputSpec(Loose, Loose.model_json_schema())
CITY_ARGS = '{"name": "Paris", "population": 1}'


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make(server: OpenAIServer, **options: Any) -> OpenAIAdapter:
    return OpenAIAdapter(MODEL, base_url=server.base_url, api_key=KEY, max_retries=0, **options)


def call(**fields: Any) -> CallRequest:
    return CallRequest(prompt="Capital?", run_id="run-1", conversation_id="conv-1", **fields)


def noop_tool(name: str) -> ToolSpec:
    async def handler(args: Any) -> Any:
        return "ok"

    return ToolSpec(name, "A tool.", {"type": "object", "properties": {}}, handler)


# --------------------------------------------------------------------------- structured-mode step-down


@pytest.mark.anyio
async def test_auto_mode_steps_down_from_the_output_tool_to_prompted(server: OpenAIServer) -> None:
    server.add(
        Reply(400, error_body("tool calling is not supported by this model")),
        Reply(body=completion('{"name": "x", "extra": {}}')),
    )
    result = await make(server).request(call(output=LOOSE))
    assert result.value == {"name": "x", "extra": {}}
    first, second = server.bodies
    assert "tools" in first and "tools" not in second
    assert "Always respond with a JSON object" in second["messages"][0]["content"]


@pytest.mark.anyio
async def test_a_422_rejection_steps_down_too(server: OpenAIServer) -> None:
    server.add(
        Reply(422, error_body("response_format json_schema unsupported")),
        Reply(body=completion(CITY_ARGS)),
    )
    assert (await make(server).request(call(output=CITY))).value == {
        "name": "Paris",
        "population": 1,
    }
    first, second = server.bodies
    assert first["response_format"]["type"] == "json_schema"
    assert second["response_format"]["type"] == "json_object"  # the next mode down


@pytest.mark.anyio
async def test_an_explicit_mode_never_steps_down(server: OpenAIServer) -> None:
    server.add(Reply(400, error_body("response_format json_schema unsupported")))
    with pytest.raises(ProviderError, match="HTTP 400"):
        await make(server, structured_mode="json_schema").request(call(output=CITY))
    assert len(server.bodies) == 1


@pytest.mark.parametrize(
    ("status", "message", "code", "error"),
    [
        (404, "no such model", None, ModelNotFoundError),  # names no request field
        (400, "the model is overloaded", None, ProviderError),  # mentions no structured mode
        (
            400,
            "response_format too long for the context window",
            "context_length_exceeded",
            ContextLengthError,
        ),
    ],
)
@pytest.mark.anyio
async def test_other_failures_do_not_step_down(
    server: OpenAIServer, status: int, message: str, code: str | None, error: type[Exception]
) -> None:
    server.add(Reply(status, error_body(message, code=code)))
    with pytest.raises(error) as raised:
        await make(server).request(call(output=CITY))
    assert type(raised.value) is error
    assert len(server.bodies) == 1


# --------------------------------------------------------------------------- output tool


@pytest.mark.anyio
async def test_the_output_tool_takes_a_free_name_and_the_description_names_the_output(
    server: OpenAIServer,
) -> None:
    server.add(Reply(body=completion(tool_calls=[tool_call("c1", "final_result__", CITY_ARGS)])))
    tools = (noop_tool("final_result"), noop_tool("final_result_"))
    result = await make(server, structured_mode="tool").request(call(output=CITY, tools=tools))
    assert result.value == {"name": "Paris", "population": 1}
    body = server.bodies[0]
    output = body["tools"][-1]["function"]
    assert (output["name"], output["description"]) == (
        "final_result__",
        "Give the final City answer.",
    )
    assert body["tool_choice"] == "required"  # other tools may run first


@pytest.mark.anyio
async def test_a_reply_without_the_output_call_is_corrected_and_other_calls_run(
    server: OpenAIServer,
) -> None:
    seen: list[Any] = []

    async def lookup(args: Any) -> Any:
        seen.append(args)
        return "Paris"

    tool = ToolSpec("lookup", "Look up.", {"type": "object", "properties": {}}, lookup)
    server.add(
        Reply(body=completion("I think Paris")),
        Reply(
            body=completion(
                tool_calls=[
                    tool_call("c1", "lookup", "{}"),
                    tool_call("c2", "final_result", CITY_ARGS),
                ]
            )
        ),
    )
    result = await make(server, structured_mode="tool").request(call(output=CITY, tools=(tool,)))
    assert result.value == {"name": "Paris", "population": 1} and seen == [{}]
    correction = server.bodies[1]["messages"][-1]
    assert correction["role"] == "user"
    assert "no call to the final_result tool; answer by calling it" in correction["content"]


@pytest.mark.anyio
async def test_output_retries_run_out_with_every_problem_and_the_attempt_count(
    server: OpenAIServer,
) -> None:
    server.add(Reply(body=completion(tool_calls=[tool_call("c1", "final_result", "")])))
    with pytest.raises(OutputValidationError) as raised:
        await make(server, structured_mode="tool").request(
            call(output=CITY, settings={"output_retries": 0})
        )
    message = str(raised.value)
    assert "did not validate after 1 attempt: " in message and "attempts" not in message
    assert "name: Field required; population: Field required" in message.replace("`", "")


@pytest.mark.anyio
async def test_json_schema_mode_does_not_strip_markdown_fences(server: OpenAIServer) -> None:
    fenced = f"```json\n{CITY_ARGS}\n```"
    server.add(Reply(body=completion(fenced)), Reply(body=completion(CITY_ARGS)))
    result = await make(server, structured_mode="json_schema").request(call(output=CITY))
    assert result.value == {"name": "Paris", "population": 1}
    assert len(server.bodies) == 2  # the fenced reply was corrected, not accepted


@pytest.mark.anyio
async def test_prompted_instructions_keep_non_ascii_schema_text(server: OpenAIServer) -> None:
    class Cafe(BaseModel):
        """Un café."""

        name: str

    server.add(Reply(body=completion('{"name": "Flore"}')))
    spec = OutputSpec(Cafe, Cafe.model_json_schema())
    history = (Message(role="user", content="earlier"), Message(role="assistant", content="ok"))
    await make(server, structured_mode="prompted").request(call(output=spec, history=history))
    messages = server.bodies[0]["messages"]
    assert "Un café." in messages[0]["content"]
    assert [m["content"] for m in messages[1:3]] == ["earlier", "ok"]


# --------------------------------------------------------------------------- errors and retries


def test_backoff_doubles_to_its_cap_with_at_most_a_quarter_of_jitter(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for draw, factor in ((0.0, 1.0), (0.5, 0.875), (0.999999, 0.75)):
        monkeypatch.setattr(random, "random", lambda draw=draw: draw)
        waits = [_backoff(attempt, None) for attempt in range(6)]
        expected = [min(0.5 * 2**attempt, 8.0) * factor for attempt in range(6)]
        assert waits == pytest.approx(expected, abs=1e-5)
    assert _backoff(0, 90.0) == 60.0 and _backoff(3, 2.5) == 2.5


@pytest.mark.anyio
async def test_an_error_reply_that_is_not_json_reports_its_text_or_reason(
    server: OpenAIServer,
) -> None:
    long = "x" * 600
    # `events` sends raw lines: a body that is not JSON, then an empty one.
    server.add(Reply(500, events=[long]), Reply(503, events=[]))
    adapter = make(server)
    with pytest.raises(ProviderError) as first:
        await adapter.request(call())
    where = f"{server.base_url} (model {MODEL!r})"
    assert str(first.value) == f"{where} failed with HTTP 500: {'x' * 500}"
    with pytest.raises(ProviderError) as second:
        await adapter.request(call())
    assert str(second.value) == f"{where} failed with HTTP 503: Service Unavailable"


@pytest.mark.anyio
async def test_transport_failures_are_marked_retryable(server: OpenAIServer) -> None:
    dead = OpenAIAdapter(MODEL, base_url="http://127.0.0.1:9/v1", max_retries=0)
    with pytest.raises(
        ProviderError, match="cannot reach http://127.0.0.1:9/v1/chat/completions"
    ) as raised:
        await dead.request(call())
    assert raised.value.retryable is True
    server.add(Reply(body=completion("late"), delay=1.0))
    with pytest.raises(ProviderError, match="timed out after 0.2 s") as timed_out:
        await make(server, timeout=0.2).request(call())
    assert timed_out.value.retryable is True


@pytest.mark.anyio
async def test_the_request_limit_message_says_how_to_raise_it(server: OpenAIServer) -> None:
    server.add(Reply(body=completion(tool_calls=[tool_call("c1", "noop", "{}")])))
    with pytest.raises(AdapterError) as raised:
        await make(server).request(call(tools=(noop_tool("noop"),), settings={"request_limit": 1}))
    assert str(raised.value) == (
        "the call reached its request_limit of 1 model requests; raise the request_limit "
        "setting if its tool loop needs more"
    )


# --------------------------------------------------------------------------- streaming


@pytest.mark.anyio
async def test_a_stream_sends_the_key_and_honours_the_timeout(server: OpenAIServer) -> None:
    server.add(Reply(events=sse(chunk({"content": "hi"}), chunk(usage=(1, 1)))))
    result = await make(server, stream=True).request(call())
    assert result.value == "hi"
    assert server.received[0].headers["authorization"] == f"Bearer {KEY}"
    server.add(Reply(events=sse(chunk({"content": "late"})), delay=1.0))
    with pytest.raises(ProviderError, match="timed out after 0.2 s"):
        await make(server, stream=True, timeout=0.2).request(call())


@pytest.mark.anyio
async def test_a_stream_error_status_and_a_bad_chunk_are_mapped(server: OpenAIServer) -> None:
    server.add(Reply(401, error_body("bad key")), Reply(events=["data: [1]", ""]))
    adapter = make(server, stream=True)
    with pytest.raises(ProviderError, match=r"rejected the credentials \(HTTP 401\): bad key"):
        await adapter.request(call())
    with pytest.raises(
        ProviderError, match="sent a reply that is not a stream chunk in the OpenAI format"
    ):
        await adapter.request(call())


# --------------------------------------------------------------------------- construction


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"model": None},
            "the openai adapter needs a model: pass --model, use `> model:`, or OpenAIAdapter(model=...)",
        ),
        (
            {"model": MODEL, "structured_mode": "native"},
            "unknown structured_mode 'native' (structured_mode); use one of auto, json_schema, json_object, tool, prompted",
        ),
        ({"model": MODEL, "timeout": -1}, "timeout"),
        ({"model": MODEL, "base_url": "http://[::1"}, "invalid OpenAI base URL"),
    ],
)
def test_construction_errors_say_what_to_do(options: dict[str, Any], message: str) -> None:
    with pytest.raises(KediConfigError) as raised:
        OpenAIAdapter(**options)
    assert message in str(raised.value)


@pytest.mark.anyio
async def test_a_trailing_slash_is_dropped_from_the_base_url(server: OpenAIServer) -> None:
    server.add(Reply(body=completion("ok")))
    adapter = OpenAIAdapter(MODEL, base_url=server.base_url + "//", api_key=KEY)
    assert adapter.base_url == server.base_url
    assert (await adapter.request(call())).value == "ok"
    assert server.received[0].path == "/v1/chat/completions"


def test_a_base_url_password_is_masked_wherever_it_appears() -> None:
    OpenAIAdapter(MODEL, base_url="http://user:url-pass-31337@127.0.0.1:9/v1")
    assert "url-pass-31337" not in str(ProviderError("server said: url-pass-31337"))


def test_the_module_caps_retry_after_at_sixty_seconds() -> None:
    assert openai_module.MAX_RETRY_AFTER == 60.0


# --------------------------------------------------------------------------- the call in progress (_portable)


@pytest.mark.anyio
async def test_a_processor_may_not_drop_the_turns_first_part_after_a_correction(
    server: OpenAIServer,
) -> None:
    def drop_the_prompt_once_corrected(context: Any) -> list[Any]:
        messages = list(context.messages)
        # No history: [prompt, bad reply] is one whole group, which grouping lets a processor drop.
        return messages[2:] if len(messages) >= 3 else messages

    server.add(Reply(body=completion("not json")), Reply(body=completion(CITY_ARGS)))
    with pytest.raises(HistoryProcessingValidationError, match="call in progress unchanged"):
        await make(server, structured_mode="json_schema").request(
            call(output=CITY, history_processor=drop_the_prompt_once_corrected)
        )
    assert len(server.bodies) == 1


# --------------------------------------------------------------------------- error messages, word for word
# The merged code's mutation run found these texts checked only by substring:
# a hint appended to the wrong error, or a detail replaced by `None`, went unseen.

SHAPE_REJECTION = error_body("response_format json_schema unsupported")


def where(server: OpenAIServer) -> str:
    return f"{server.base_url} (model {MODEL!r})"


@pytest.mark.anyio
async def test_a_404_asks_about_v1_only_when_the_base_url_lacks_it_and_the_model_is_known(
    server: OpenAIServer,
) -> None:
    root = server.base_url.removesuffix("/v1")
    server.add(
        Reply(404, error_body("Not Found")),  # base URL with /v1, no model_not_found code
        Reply(404, error_body("no such model", code="model_not_found")),  # without /v1
    )
    with pytest.raises(ModelNotFoundError) as with_v1:
        await make(server).request(call())
    with pytest.raises(ModelNotFoundError) as unknown_model:
        await OpenAIAdapter(MODEL, base_url=root, api_key=KEY, max_retries=0).request(call())

    assert str(with_v1.value) == (
        f"{where(server)}: model or endpoint not found (HTTP 404): Not Found "
        f"(POST {server.base_url}/chat/completions)"
    )
    assert str(unknown_model.value) == (
        f"{root} (model {MODEL!r}): model or endpoint not found (HTTP 404): no such model "
        f"(POST {root}/chat/completions)"
    )
    assert with_v1.value.retryable is False and unknown_model.value.retryable is False


@pytest.mark.anyio
async def test_only_a_404_gets_the_endpoint_hint(server: OpenAIServer) -> None:
    server.add(Reply(401, error_body("bad key")))
    with pytest.raises(ProviderError) as raised:
        await make(server).request(call())
    assert str(raised.value) == (
        f"{where(server)} rejected the credentials (HTTP 401): bad key; check OPENAI_API_KEY"
    )


@pytest.mark.anyio
async def test_auto_mode_that_runs_out_of_modes_says_so(server: OpenAIServer) -> None:
    server.add(*[Reply(400, SHAPE_REJECTION)] * 4)
    with pytest.raises(ProviderError) as raised:
        await make(server).request(call(output=CITY))
    assert str(raised.value) == (
        f"{where(server)} failed with HTTP 400: response_format json_schema unsupported"
        "; no structured mode was accepted (json_schema, json_object, tool, prompted)"
    )
    assert len(server.bodies) == 4 and raised.value.retryable is False


@pytest.mark.anyio
async def test_an_explicit_mode_refused_with_a_500_is_not_retryable_and_names_the_choices(
    server: OpenAIServer,
) -> None:
    server.add(Reply(500, SHAPE_REJECTION))
    adapter = OpenAIAdapter(MODEL, base_url=server.base_url, api_key=KEY, max_retries=3)
    with pytest.raises(ProviderError) as raised:
        await adapter.request(call(output=CITY, settings={"structured_mode": "json_object"}))
    assert str(raised.value) == (
        f"{where(server)} failed with HTTP 500: response_format json_schema unsupported"
        "; the server refused structured_mode json_object: choose another with "
        "--structured-mode, KEDI_STRUCTURED_MODE or `> settings: structured_mode:` "
        "(json_schema, json_object, tool, prompted), or `auto`"
    )
    # A 500 is transient in general, but a refused shape would be refused again.
    assert raised.value.retryable is False and raised.value.status == 500
    assert len(server.bodies) == 1


@pytest.mark.anyio
async def test_an_error_body_that_is_not_utf8_is_shown_with_replacement_characters(
    server: OpenAIServer,
) -> None:
    server.add(Reply(502, raw=b"\xff\xfe bad gateway \xff"))
    with pytest.raises(ProviderError) as raised:
        await make(server).request(call())
    assert (
        str(raised.value)
        == f"{where(server)} failed with HTTP 502: \ufffd\ufffd bad gateway \ufffd"
    )


@pytest.mark.anyio
async def test_a_retry_is_logged_with_its_wait_number_and_error(
    server: OpenAIServer, caplog: pytest.LogCaptureFixture
) -> None:
    server.add(
        Reply(503, error_body("busy"), headers={"Retry-After": "0"}),
        Reply(503, error_body("still busy"), headers={"Retry-After": "0"}),
        Reply(body=completion("ok")),
    )
    adapter = OpenAIAdapter(MODEL, base_url=server.base_url, api_key=KEY, max_retries=2)
    with caplog.at_level(logging.INFO, logger="kedi"):
        assert (await adapter.request(call())).value == "ok"
    assert [r.getMessage() for r in caplog.records if r.name == "kedi"] == [
        f"kedi: retrying in 0.0 s (retry 1 of 2): {where(server)} failed with HTTP 503: busy",
        f"kedi: retrying in 0.0 s (retry 2 of 2): {where(server)} failed with HTTP 503: still busy",
    ]


@pytest.mark.anyio
async def test_a_secret_in_an_extra_header_is_masked_when_the_server_echoes_it(
    server: OpenAIServer,
) -> None:
    # Fresh per run: the registry of known secrets is process-wide, so a value an
    # earlier run of this test remembered would be masked whatever `_send` does.
    secret = f"hdr-secret-{uuid.uuid4().hex}"
    server.add(Reply(400, error_body(f"unknown key {secret}")))
    with pytest.raises(ProviderError) as raised:
        await make(server).request(call(settings={"extra_headers": {"X-Api-Key": secret}}))
    assert server.received[0].headers["x-api-key"] == secret
    assert secret not in str(raised.value) and "unknown key" in str(raised.value)


# --------------------------------------------------------------------------- transport failures


def failing_transport(error: Exception) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        raise error

    return httpx.MockTransport(handler)


URL = "http://kedi.test/v1"


@pytest.mark.parametrize(
    ("error", "message"),
    [
        (
            httpx.ConnectError("connection refused here"),
            f"cannot reach {URL}/chat/completions: connection refused here",
        ),
        (httpx.ConnectError(""), f"cannot reach {URL}/chat/completions: ConnectError"),
        (
            httpx.DecodingError("bad brotli"),
            f"{URL} sent a reply that cannot be decoded: bad brotli",
        ),
        (
            httpx.TooManyRedirects("Exceeded maximum allowed redirects."),
            f"the request to {URL}/chat/completions failed: Exceeded maximum allowed redirects.",
        ),
        (
            httpx.TooManyRedirects(""),
            f"the request to {URL}/chat/completions failed: TooManyRedirects",
        ),
    ],
)
@pytest.mark.anyio
async def test_a_transport_failure_names_the_url_and_the_cause(
    error: Exception, message: str
) -> None:
    adapter = OpenAIAdapter(MODEL, base_url=URL, max_retries=0, transport=failing_transport(error))
    with pytest.raises(ProviderError) as raised:
        await adapter.request(call())
    assert str(raised.value) == message


@pytest.mark.anyio
async def test_a_body_broken_off_midway_is_a_cut_off_reply_naming_the_cause() -> None:
    class BreaksOff(httpx.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b'{"choices": ['
            raise httpx.ReadError("connection reset by peer")

    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=BreaksOff()))
    adapter = OpenAIAdapter(MODEL, base_url=URL, max_retries=0, transport=transport)
    with pytest.raises(ProviderError) as raised:
        await adapter.request(call())
    assert str(raised.value) == f"{URL}: reply cut off after 13 bytes (connection reset by peer)"
    assert raised.value.retryable is True


@pytest.mark.anyio
async def test_each_read_is_bounded_by_the_timeout_too() -> None:
    timeouts: list[Any] = []

    def handler(request: httpx.Request) -> httpx.Response:
        timeouts.append(request.extensions["timeout"])
        return httpx.Response(200, json=completion("ok"))

    adapter = OpenAIAdapter(
        MODEL, base_url=URL, timeout=7.5, transport=httpx.MockTransport(handler)
    )
    assert (await adapter.request(call())).value == "ok"
    assert timeouts == [{"connect": 7.5, "read": 7.5, "write": 7.5, "pool": 7.5}]


# --------------------------------------------------------------------------- reply size and completeness


@pytest.mark.anyio
async def test_a_declared_length_over_the_cap_is_refused_before_the_body_is_read(
    server: OpenAIServer,
) -> None:
    # The body is shorter than declared: reading it would end as a cut-off reply instead.
    server.add(Reply(raw=b'{"choices": [', declared_length=5000))
    with pytest.raises(ProviderError) as raised:
        await make(server).request(call(settings={"max_reply_bytes": 1000}))
    assert str(raised.value) == (
        f"{server.base_url} sent a reply larger than the max_reply_bytes setting (1000 bytes); "
        "raise that setting to accept it"
    )


@pytest.mark.anyio
async def test_a_reply_exactly_at_the_cap_is_accepted(server: OpenAIServer) -> None:
    body = json.dumps(completion("ok")).encode()
    server.add(Reply(raw=body))
    assert (await make(server).request(call(settings={"max_reply_bytes": len(body)}))).value == "ok"


@pytest.mark.anyio
async def test_a_compressed_length_over_the_cap_is_no_refusal_when_the_decoded_body_fits(
    server: OpenAIServer,
) -> None:
    body = json.dumps({"choices": [{"message": {"content": "ok"}, "finish_reason": "stop"}]})
    packed = gzip.compress(body.encode())
    assert len(packed) > len(body)  # gzip's header outweighs what it saves on a tiny body
    server.add(Reply(raw=packed, headers={"Content-Encoding": "gzip"}))
    assert (await make(server).request(call(settings={"max_reply_bytes": len(body)}))).value == "ok"


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (Reply(body={"choices": []}), "it has no choices"),
        (
            Reply(events=[f"data: {json.dumps(chunk({'content': 'PART'}))}", ""]),
            "the stream ended without a finish reason",
        ),
        (Reply(events=[": keep-alive", ""]), "the stream held no reply"),
    ],
)
@pytest.mark.anyio
async def test_a_cut_off_reply_says_why(server: OpenAIServer, reply: Reply, why: str) -> None:
    server.add(reply)
    with pytest.raises(ProviderError) as raised:
        await make(server, stream=reply.events is not None).request(call())
    assert re.fullmatch(
        rf"{re.escape(server.base_url)}: reply cut off after \d+ bytes \({why}\)", str(raised.value)
    )


# --------------------------------------------------------------------------- streamed text


@pytest.mark.anyio
async def test_a_streamed_text_reply_reaches_on_delta_piece_by_piece(server: OpenAIServer) -> None:
    pieces = ["Hel", "lo"]
    server.add(
        Reply(events=sse(*[chunk({"content": p}) for p in pieces], chunk(finish_reason="stop")))
    )
    seen: list[str] = []
    result = await make(server).request(call(on_delta=seen.append))
    assert result.value == "Hello" and seen == pieces
    assert server.bodies[0]["stream"] is True


@pytest.mark.anyio
async def test_a_str_capture_streams_from_the_output_tools_arguments(server: OpenAIServer) -> None:
    def argument_piece(text: str, first: bool = False) -> dict[str, Any]:
        call = {"index": 0, "function": {"arguments": text}}
        if first:
            call |= {
                "id": "c1",
                "type": "function",
                "function": {"name": "final_result", "arguments": text},
            }
        return chunk({"tool_calls": [call]})

    server.add(
        Reply(
            events=sse(
                argument_piece('{"name": "Pa', first=True),
                argument_piece('ris", "population": 1}'),
                chunk(finish_reason="tool_calls"),
            )
        )
    )
    seen: list[str] = []
    result = await make(server, structured_mode="tool").request(
        call(output=CITY, on_delta=seen.append)
    )
    assert result.value == {"name": "Paris", "population": 1}
    assert seen == ["Pa", "ris"]


# --------------------------------------------------------------------------- the transcript


@pytest.mark.anyio
async def test_transcript_records_each_failed_attempt_and_every_problem_of_a_rejected_reply(
    server: OpenAIServer,
) -> None:
    server.add(
        Reply(503, error_body("busy"), headers={"Retry-After": "0"}),
        Reply(503, error_body("busy again"), headers={"Retry-After": "0"}),
        Reply(body=completion("{}")),
        Reply(body=completion(CITY_ARGS)),
    )
    exchanges: list[Any] = []
    adapter = OpenAIAdapter(MODEL, base_url=server.base_url, api_key=KEY, max_retries=2)
    request = call(
        output=CITY, settings={"structured_mode": "json_object"}, on_exchange=exchanges.append
    )
    assert (await adapter.request(request)).value == {"name": "Paris", "population": 1}

    assert [(e.attempt, e.failed) for e in exchanges] == [
        (1, True),
        (2, True),
        (3, True),
        (4, False),
    ]
    second = f"{where(server)} failed with HTTP 503: busy again"
    assert exchanges[1].response == {"error": second, "status": 503}
    assert exchanges[1].error == second
    assert exchanges[2].error.replace("`", "") == "name: Field required; population: Field required"


@pytest.mark.anyio
async def test_retries_stop_after_max_retries_when_the_server_keeps_failing() -> None:
    attempts: list[int] = []

    def always_busy(request: httpx.Request) -> httpx.Response:
        attempts.append(1)
        return httpx.Response(503, headers={"Retry-After": "0"}, json=error_body("busy"))

    transport = httpx.MockTransport(always_busy)
    adapter = OpenAIAdapter(MODEL, base_url=URL, max_retries=2, transport=transport)
    with anyio.fail_after(10), pytest.raises(ProviderError, match="HTTP 503: busy"):
        await adapter.request(call())  # a retry loop that never ends fails here, not hangs
    assert len(attempts) == 3


# --------------------------------------------------------------------------- the second batch: the rest of the full run


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": 0}, "the timeout setting must be a number of seconds > 0, not 0"),
        ({"max_reply_bytes": 0}, "the max_reply_bytes setting must be an integer >= 1, not 0"),
    ],
)
def test_construction_errors_name_the_option(options: dict[str, Any], message: str) -> None:
    with pytest.raises(KediConfigError) as raised:
        OpenAIAdapter(MODEL, **options)
    assert str(raised.value) == message


@pytest.mark.anyio
async def test_the_constructors_reply_cap_applies_and_may_be_one_byte(server: OpenAIServer) -> None:
    assert OpenAIAdapter(MODEL, max_reply_bytes=1).max_reply_bytes == 1
    server.add(Reply(body=completion("x" * 2000)))
    adapter = OpenAIAdapter(MODEL, base_url=server.base_url, max_retries=0, max_reply_bytes=1000)
    with pytest.raises(ProviderError, match=r"max_reply_bytes setting \(1000 bytes\)"):
        await adapter.request(call())


@pytest.mark.anyio
async def test_a_bad_structured_mode_setting_is_named_as_the_setting(server: OpenAIServer) -> None:
    with pytest.raises(KediConfigError) as raised:
        await make(server).request(call(output=CITY, settings={"structured_mode": "native"}))
    assert str(raised.value) == (
        "unknown structured_mode 'native' (the structured_mode setting); "
        "use one of auto, json_schema, json_object, tool, prompted"
    )


@pytest.mark.anyio
async def test_an_auto_call_that_needs_no_step_down_remembers_nothing(server: OpenAIServer) -> None:
    server.add(Reply(body=completion(CITY_ARGS)))
    await make(server).request(call(output=CITY))
    assert server.bodies[0]["response_format"]["type"] == "json_schema"
    assert capability_cache.remembered_mode(server.base_url, MODEL) is None


@pytest.mark.anyio
async def test_the_base_url_keeps_its_path_and_loses_only_trailing_slashes() -> None:
    paths: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        paths.append(request.url.path)
        return httpx.Response(200, json=completion("ok"))

    base = "http://kedi.test/proxy/X//"
    adapter = OpenAIAdapter(MODEL, base_url=base, transport=httpx.MockTransport(handler))
    assert adapter.base_url == "http://kedi.test/proxy/X"
    await adapter.request(call())
    assert paths == ["/proxy/X/chat/completions"]


@pytest.mark.anyio
async def test_a_forced_tool_stays_forced_after_another_tools_result(server: OpenAIServer) -> None:
    server.add(
        Reply(body=completion(tool_calls=[tool_call("c1", "other", "{}")])),
        Reply(body=completion(tool_calls=[tool_call("c2", "wanted", "{}")])),
        Reply(body=completion("done")),
    )
    tools = (noop_tool("other"), noop_tool("wanted"))
    await make(server).request(call(tools=tools, settings={"tool_choice": "wanted"}))
    forced = {"type": "function", "function": {"name": "wanted"}}
    assert [body.get("tool_choice") for body in server.bodies] == [forced, forced, None]


@pytest.mark.anyio
async def test_a_refused_shape_after_a_tool_round_carries_the_completed_turn(
    server: OpenAIServer,
) -> None:
    server.add(
        Reply(body=completion(tool_calls=[tool_call("c1", "noop", "{}")])),
        Reply(400, SHAPE_REJECTION),
    )
    with pytest.raises(ProviderError) as raised:
        await make(server, structured_mode="json_schema").request(
            call(output=CITY, tools=(noop_tool("noop"),))
        )
    partial = raised.value.partial
    assert partial is not None and partial.stage == "model"
    assert [m.role for m in partial.messages] == ["user", "assistant", "tool"]


@pytest.mark.anyio
async def test_the_transcript_marks_the_last_reply_failed_when_output_retries_run_out(
    server: OpenAIServer,
) -> None:
    server.add(Reply(body=completion("{}")))
    exchanges: list[Any] = []
    request = call(
        output=CITY,
        settings={"structured_mode": "json_schema", "output_retries": 0},
        on_exchange=exchanges.append,
    )
    with pytest.raises(OutputValidationError) as raised:
        await make(server).request(request)
    [exchange] = exchanges
    assert exchange.failed is True and exchange.error == raised.value.message


@pytest.mark.anyio
async def test_instructions_and_the_whole_history_are_sent_again_with_a_correction(
    server: OpenAIServer,
) -> None:
    server.add(Reply(body=completion("not json")), Reply(body=completion(CITY_ARGS)))
    history = (Message(role="user", content="earlier"), Message(role="assistant", content="ok"))
    await make(server, structured_mode="json_schema").request(
        call(output=CITY, history=history, instructions="Be brief.")
    )
    second = server.bodies[1]["messages"]
    assert [m["role"] for m in second] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert [m["content"] for m in second[:4]] == ["Be brief.", "earlier", "ok", "Capital?"]


@pytest.mark.anyio
async def test_a_str_capture_streams_from_the_json_content(server: OpenAIServer) -> None:
    pieces = ['{"name": "Pa', 'ris", "population": 1}']
    server.add(
        Reply(events=sse(*[chunk({"content": p}) for p in pieces], chunk(finish_reason="stop")))
    )
    seen: list[str] = []
    result = await make(server, structured_mode="json_schema").request(
        call(output=CITY, on_delta=seen.append)
    )
    assert result.value == {"name": "Paris", "population": 1} and seen == ["Pa", "ris"]


@pytest.mark.anyio
async def test_a_str_capture_streams_whole_when_the_tool_name_comes_after_its_arguments(
    server: OpenAIServer,
) -> None:
    first = {"index": 0, "id": "c1", "type": "function", "function": {"arguments": '{"name": "Pa'}}
    named = {"index": 0, "function": {"name": "final_result", "arguments": 'ris", '}}
    rest = {"index": 0, "function": {"arguments": '"population": 1}'}}
    server.add(
        Reply(
            events=sse(
                *[chunk({"tool_calls": [piece]}) for piece in (first, named, rest)],
                chunk(finish_reason="tool_calls"),
            )
        )
    )
    seen: list[str] = []
    result = await make(server, structured_mode="tool").request(
        call(output=CITY, on_delta=seen.append)
    )
    assert result.value == {"name": "Paris", "population": 1}
    assert seen == ["Paris"]  # both pieces parsed together once the call is known


@pytest.mark.anyio
async def test_each_adapter_of_a_run_keeps_its_own_client() -> None:
    seen: list[str] = []

    def answering(label: str) -> httpx.MockTransport:
        def handler(request: httpx.Request) -> httpx.Response:
            seen.append(label)
            return httpx.Response(200, json=completion(label))

        return httpx.MockTransport(handler)

    first = OpenAIAdapter(MODEL, base_url=URL, transport=answering("first"))
    second = OpenAIAdapter(MODEL, base_url=URL, transport=answering("second"))
    async with run_scope():
        values = [(await adapter.request(call())).value for adapter in (first, second, first)]
    assert values == seen == ["first", "second", "first"]
