"""Faults of a misbehaving server: a reply is complete or it is a `ProviderError`.

Each test scripts the real test server (`openai_server.py`) to misbehave in
one way the fault probe of issue 18 found, and checks what a user relies on:
the failure is a `ProviderError` (retried when it may be transient), and a
cut-off reply never commits a turn. The Pydantic AI and LangChain adapters
are checked against the same server where their clients expose the fault.
"""

from __future__ import annotations

import gzip
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest

from kedi.adapters._openai_wire import DEFAULT_MAX_REPLY_BYTES
from kedi.adapters.base import CallRequest
from kedi.adapters.openai import OpenAIAdapter
from kedi.errors import KediExecutionError, ProviderError
from kedi.history.lanes import Conversation
from kedi.runtime.program import compile_program
from tests.adapters.openai_server import (
    MODEL,
    OpenAIServer,
    Reply,
    chunk,
    completion,
    error_body,
    sse,
)

PARTIAL = [f"data: {json.dumps(chunk({'content': 'PARTIAL'}))}", ""]
"""A stream that sends some content, then closes with no finish reason and no [DONE]."""


def make(server: OpenAIServer, **options: Any) -> OpenAIAdapter:
    return OpenAIAdapter(MODEL, base_url=server.base_url, **options)


def call(**settings: Any) -> CallRequest:
    return CallRequest(prompt="Hi", run_id="run-1", conversation_id="conv-1", settings=settings)


CUT_OFF = [
    pytest.param(Reply(events=PARTIAL), True, id="stream-without-finish"),
    pytest.param(
        Reply(events=[": keep-alive", "", ": keep-alive", ""]), True, id="keep-alives-only"
    ),
    pytest.param(Reply(events=["data: [DONE]", ""]), True, id="done-without-reply"),
    pytest.param(Reply(body={"choices": [{"message": None}]}), False, id="null-message"),
    pytest.param(Reply(body={"choices": []}), False, id="no-choices"),
    pytest.param(
        Reply(body={"choices": [{"message": {"role": "assistant"}}]}), False, id="no-content"
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("reply", "stream"), CUT_OFF)
async def test_a_cut_off_reply_is_a_retried_provider_error(
    server: OpenAIServer, reply: Reply, stream: bool
) -> None:
    server.add(reply, reply)
    with pytest.raises(ProviderError, match=r"reply cut off after \d+ bytes") as caught:
        await make(server, stream=stream, max_retries=1).request(call())
    assert caught.value.retryable and len(server.received) == 2  # retried once, like a 5xx

    good = Reply(events=sse(chunk({"content": "whole"}), chunk(finish_reason="stop")))
    server.add(reply, good if stream else Reply(body=completion("whole")))
    assert (await make(server, stream=stream).request(call())).value == "whole"


def test_a_cut_off_reply_commits_no_turn(server: OpenAIServer) -> None:
    conversation = Conversation()
    program = compile_program("> history: enabled\n>> First\n>> Second\n")
    good = Reply(events=sse(chunk({"content": "one"}), chunk(finish_reason="stop")))
    server.add(good, *[Reply(events=PARTIAL)] * 2)
    adapter = make(server, stream=True, max_retries=1)
    with pytest.raises(KediExecutionError, match="reply cut off"):
        program.run_sync(adapter=adapter, conversation=conversation, quiet=True)
    (lane,) = conversation.lanes.values()
    # Only the first, finished turn; nothing of PARTIAL.
    assert [(m.role, m.content) for m in lane.messages] == [("user", "First"), ("assistant", "one")]


@pytest.mark.anyio
async def test_the_timeout_bounds_the_whole_request_not_each_read(server: OpenAIServer) -> None:
    # A keep-alive every 0.1 s for 4 s: no single read waits 0.5 s.
    server.add(Reply(events=[": keep-alive"] * 40, interval=0.1))
    started = time.monotonic()
    with pytest.raises(ProviderError, match=r"timed out after 0\.5 s") as caught:
        await make(server, stream=True, max_retries=0).request(call(timeout=0.5))
    assert time.monotonic() - started < 3 and caught.value.retryable  # the stream lasts 4 s


@pytest.mark.anyio
@pytest.mark.parametrize("stream", [False, True])
async def test_a_reply_over_max_reply_bytes_is_refused(server: OpenAIServer, stream: bool) -> None:
    text = "x" * 5000
    if stream:
        big = Reply(events=sse(chunk({"content": text}), chunk(finish_reason="stop")))
    else:
        big = Reply(body=completion(text))
    server.add(big)
    with pytest.raises(ProviderError, match="larger than the max_reply_bytes setting"):
        await make(server, stream=stream).request(call(max_reply_bytes=1000))
    assert len(server.received) == 1  # the same reply again would fail again: not retried

    server.add(big)  # the setting raises the cap
    assert (await make(server, stream=stream, max_reply_bytes=10_000).request(call())).value == text
    assert DEFAULT_MAX_REPLY_BYTES == 32 * 1024 * 1024


@pytest.mark.anyio
async def test_a_gzip_bomb_is_capped_after_decoding(server: OpenAIServer) -> None:
    bomb = gzip.compress(b" " * 2_000_000)  # 2 MB of JSON whitespace in about 2 KB
    server.add(Reply(raw=bomb, headers={"Content-Encoding": "gzip"}))
    with pytest.raises(ProviderError, match="max_reply_bytes"):
        await make(server).request(call(max_reply_bytes=100_000))


@pytest.mark.anyio
@pytest.mark.parametrize("value", ["nan", "-5", "inf", "Mon, 01 Jan 1990 00:00:00 GMT", "junk"])
async def test_a_bad_retry_after_falls_back_to_the_backoff(
    server: OpenAIServer, value: str, sleeps: list[float]
) -> None:
    server.add(Reply(503, {"error": {"message": "busy"}}, headers={"Retry-After": value}))
    server.add(Reply(body=completion("after backoff")))
    assert (await make(server).request(call())).value == "after backoff"
    (wait,) = sleeps
    assert 0.375 <= wait <= 0.5  # the first backoff step, with its jitter


FAULTS = [
    pytest.param(
        Reply(raw=b"this is not gzip", headers={"Content-Encoding": "gzip"}),
        "cannot be decoded",
        id="junk-gzip",
    ),
    pytest.param(
        Reply(raw=b'{"choices": [', declared_length=4000), "cut off after 13 bytes", id="short-body"
    ),
    pytest.param(Reply(raw=b"{not json"), "not a chat completion", id="bad-json"),
    pytest.param(
        Reply(raw=b"[" * 100_000 + b"]" * 100_000), "not a chat completion", id="deep-json"
    ),
    pytest.param(Reply(raw=b"\xff\xfe{}"), "not a chat completion", id="bad-utf8"),
    pytest.param(Reply(raw=b'{"choices": 5}'), "cut off", id="choices-not-a-list"),
    pytest.param(
        Reply(
            events=[
                "data: " + json.dumps({"choices": 7}),
                "",
                "data: " + json.dumps({"choices": [{"delta": []}]}),
            ]
        ),
        "cut off",
        id="stream-of-wrong-types",
    ),
    pytest.param(
        Reply(events=["data: " + "[" * 100_000, ""]), "not a stream chunk", id="deep-chunk"
    ),
    pytest.param(
        Reply(raw=b"x" * 10, headers={"Content-Type": "text/event-stream"}),
        "cut off",
        id="junk-stream",
    ),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("reply", "message"), FAULTS)
async def test_every_server_fault_is_a_provider_error(
    server: OpenAIServer, reply: Reply, message: str
) -> None:
    stream = reply.events is not None or reply.headers.get("Content-Type") == "text/event-stream"
    server.add(reply)
    with pytest.raises(ProviderError, match=message):
        await make(server, stream=stream, max_retries=0).request(call())


# --------------------------------------------------------------------------- through the frameworks

FRAMEWORK_FAULTS = [
    pytest.param(Reply(body={"choices": [{"message": None}]}), {"pydantic"}, id="null-message"),
    pytest.param(Reply(body={"choices": []}), {"pydantic"}, id="no-choices"),
    pytest.param(
        Reply(raw=b"this is not gzip", headers={"Content-Encoding": "gzip"}),
        {"pydantic", "langchain"},
        id="junk-gzip",
    ),
    pytest.param(
        Reply(raw=b'{"choices": [', declared_length=4000),
        {"pydantic", "langchain"},
        id="short-body",
    ),
    pytest.param(Reply(raw=b"{not json"), set(), id="bad-json"),
    pytest.param(Reply(raw=b"[" * 100_000 + b"]" * 100_000), set(), id="deep-json"),
    pytest.param(
        Reply(503, {"error": {"message": "busy"}}, headers={"Retry-After": "nan"}),
        {"pydantic", "langchain"},
        id="retry-after-nan",
    ),
    pytest.param(Reply(body=completion("late"), delay=3), {"pydantic", "langchain"}, id="timeout"),
]
"""Each fault, and the frameworks whose client lets kedi tell it is transient (`retryable`)."""


@asynccontextmanager
async def framework_adapter(name: str, server: OpenAIServer) -> AsyncIterator[Any]:
    """The adapter `name` over the openai SDK pointed at the test server (no SDK retries, 1 s timeout).

    The SDK client is closed before the test's event loop ends (a client
    collected later would close its connections on a closed loop).
    """
    if name == "pydantic":
        pytest.importorskip(
            "pydantic_ai", reason="needs the pydantic-ai extra: pip install 'kedi[pydantic-ai]'"
        )
        from openai import AsyncOpenAI
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        from kedi.adapters.pydantic_ai import PydanticAdapter

        client = AsyncOpenAI(base_url=server.base_url, api_key="k", max_retries=0, timeout=1.0)
        try:
            yield PydanticAdapter(
                OpenAIChatModel(MODEL, provider=OpenAIProvider(openai_client=client))
            )
        finally:
            await client.close()
        return
    pytest.importorskip(
        "langchain_openai",
        reason="needs langchain-openai: pip install 'kedi[langchain]' langchain-openai",
    )
    from langchain_openai import ChatOpenAI

    from kedi.adapters.langchain import LangChainAdapter

    # An HTTP client of this test's own: langchain-openai caches one per base URL.
    http = httpx.AsyncClient(timeout=1.0)
    chat = ChatOpenAI(
        model=MODEL,
        base_url=server.base_url,
        api_key="k",
        max_retries=0,
        timeout=1.0,
        http_async_client=http,
    )
    try:
        yield LangChainAdapter(chat)
    finally:
        await http.aclose()


@pytest.mark.anyio
@pytest.mark.parametrize("framework", ["pydantic", "langchain"])
@pytest.mark.parametrize(("reply", "transient"), FRAMEWORK_FAULTS)
async def test_the_same_faults_are_provider_errors_through_the_frameworks(
    server: OpenAIServer, framework: str, reply: Reply, transient: set[str]
) -> None:
    server.add(reply)
    async with framework_adapter(framework, server) as adapter:
        with pytest.raises(ProviderError) as caught:
            await adapter.request(CallRequest(prompt="Hi"))
    assert caught.value.retryable == (framework in transient)


@pytest.mark.anyio
async def test_a_timed_out_pydantic_request_says_after_how_long(server: OpenAIServer) -> None:
    # It read "model 'test-model' ... failed: Request timed out.", without the bound.
    server.add(Reply(body=completion("late"), delay=3))
    async with framework_adapter("pydantic", server) as adapter:
        with pytest.raises(ProviderError) as caught:
            await adapter.request(
                CallRequest(prompt="Hi", origin="flow.kedi:2", settings={"timeout": 0.3})
            )
    assert str(caught.value).startswith(f"the request to model 'openai:{MODEL}' at flow.kedi:2 ")
    assert str(caught.value).endswith("timed out after 0.3 s per attempt")
    assert caught.value.retryable


LLAMA_CPP_REFUSAL = Reply(
    500,
    error_body(
        "1 validation error: {'type': 'literal_error', 'loc': ('body', 'response_format', 'type'), "
        "'msg': \"Input should be 'text' or 'json_object'\", 'input': 'json_schema'}",
        kind="internal_server_error",
    ),
)
"""What llama-cpp-python's server answers a `response_format` of type `json_schema`."""


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("framework", "advice"),
    [
        ("pydantic", "the output_mode setting (tool, prompted)"),
        ("langchain", "the structured_method setting (function_calling, json_mode)"),
    ],
)
async def test_a_server_refusing_the_response_format_names_the_setting_to_change(
    server: OpenAIServer, framework: str, advice: str
) -> None:
    """Through the frameworks a typed capture asks for json_schema by default; the error said only HTTP 500."""
    from tests.adapters.helpers import spec

    server.add(LLAMA_CPP_REFUSAL)
    async with framework_adapter(framework, server) as adapter:
        with pytest.raises(ProviderError) as caught:
            await adapter.request(CallRequest(prompt="Hi", output=spec(label=(str, ...))))
    assert caught.value.status == 500 and not caught.value.retryable
    assert str(caught.value).endswith(
        "the server refused the response_format kedi's structured output sent: "
        f"ask another way with {advice}"
    )
    server.add(LLAMA_CPP_REFUSAL)
    async with framework_adapter(framework, server) as adapter:  # a text call sends none
        with pytest.raises(ProviderError) as caught:
            await adapter.request(CallRequest(prompt="Hi"))
    assert "ask another way" not in str(caught.value)
