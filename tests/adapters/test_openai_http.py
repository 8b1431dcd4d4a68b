"""How the openai adapter's requests reach the server (`kedi.adapters._openai_http`).

Requests go straight to an httpx transport, without httpx's client, unless
a proxy from the environment or credentials in the base URL need the
client. These tests pin what users rely on either way, against the real
test server: the environment's proxies and `NO_PROXY`, URL credentials,
the per-phase timeouts, the headers (key last, never in an error), and the
decisions of docs/adapters.md ("Connections"): no redirect followed, no
cookie sent back.
"""

from __future__ import annotations

import base64
import traceback
from typing import Any

import httpx
import pytest

from kedi.adapters.base import CallRequest
from kedi.adapters.openai import OpenAIAdapter
from kedi.adapters.resources import run_scope
from kedi.errors import ProviderError
from tests.adapters.openai_server import MODEL, OpenAIServer, Reply, completion, error_body

KEY = "sk-test-http-path-0123456789"
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


@pytest.fixture
def no_proxies(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """An environment naming no proxy (the machine's own settings would change the path)."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    return monkeypatch


def call(**settings: Any) -> CallRequest:
    return CallRequest(prompt="Hi", run_id="run-1", conversation_id="conv-1", settings=settings)


@pytest.mark.anyio
async def test_a_proxy_in_the_environment_carries_the_request(
    server: OpenAIServer, no_proxies: pytest.MonkeyPatch
) -> None:
    # The test server stands in for the proxy: a proxied request names the whole URL.
    no_proxies.setenv("HTTP_PROXY", server.base_url.removesuffix("/v1"))
    server.add(Reply(body=completion("via the proxy")))
    adapter = OpenAIAdapter(MODEL, base_url="http://kedi-test.invalid/v1", max_retries=0)
    result = await adapter.request(call())
    assert result.value == "via the proxy"
    assert server.received[0].path == "http://kedi-test.invalid/v1/chat/completions"


@pytest.mark.anyio
async def test_no_proxy_sends_past_the_proxy(
    server: OpenAIServer, no_proxies: pytest.MonkeyPatch
) -> None:
    no_proxies.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
    no_proxies.setenv("NO_PROXY", "127.0.0.1")
    server.add(Reply(body=completion("direct")))
    result = await OpenAIAdapter(MODEL, base_url=server.base_url, max_retries=0).request(call())
    assert result.value == "direct"
    assert server.received[0].path == "/v1/chat/completions"


@pytest.mark.anyio
async def test_credentials_in_the_base_url_go_as_basic_auth_and_never_into_errors(
    server: OpenAIServer, no_proxies: pytest.MonkeyPatch
) -> None:
    password = "pw-in-the-url-4242"
    base_url = server.base_url.replace("http://", f"http://user:{password}@")
    server.add(Reply(body=completion("hello")), Reply(400, error_body(f"bad pass {password}")))
    adapter = OpenAIAdapter(MODEL, base_url=base_url, max_retries=0)
    assert (await adapter.request(call())).value == "hello"
    expected = base64.b64encode(f"user:{password}".encode()).decode()
    assert server.received[0].headers["authorization"] == f"Basic {expected}"
    with pytest.raises(ProviderError) as failure:
        await adapter.request(call())
    assert password not in failure.value.message
    assert password not in repr(adapter)


@pytest.mark.anyio
async def test_every_phase_of_a_request_gets_the_timeout(no_proxies: pytest.MonkeyPatch) -> None:
    # httpcore bounds connecting, writing, each read and the wait for a pooled connection by these.
    seen: list[dict[str, float]] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.extensions["timeout"])
        return httpx.Response(200, json=completion("ok"))

    transport = httpx.MockTransport(answer)
    adapter = OpenAIAdapter(MODEL, base_url="http://kedi-test.invalid/v1", transport=transport)
    await adapter.request(call(timeout=7))
    assert seen == [{"connect": 7.0, "read": 7.0, "write": 7.0, "pool": 7.0}]


@pytest.mark.anyio
async def test_headers_are_httpx_defaults_then_extra_headers_then_the_key(
    server: OpenAIServer, no_proxies: pytest.MonkeyPatch
) -> None:
    server.add(Reply(body=completion("ok")))
    adapter = OpenAIAdapter(MODEL, base_url=server.base_url, api_key=KEY)
    extra = {"X-Team": "labels", "Authorization": "Bearer not-the-key"}
    await adapter.request(call(extra_headers=extra))
    headers = server.received[0].headers
    assert headers["authorization"] == f"Bearer {KEY}"  # an extra header cannot replace it
    assert headers["x-team"] == "labels"
    assert headers["content-type"] == "application/json"
    defaults = httpx.AsyncClient().headers  # what httpx's client would have sent
    for name in ("user-agent", "accept", "accept-encoding"):
        assert headers[name] == defaults[name]


@pytest.mark.anyio
async def test_the_key_never_appears_in_an_error(
    server: OpenAIServer, no_proxies: pytest.MonkeyPatch
) -> None:
    server.add(Reply(401, error_body(f"invalid key Bearer {KEY}", "invalid_api_key")))
    adapter = OpenAIAdapter(MODEL, base_url=server.base_url, api_key=KEY, max_retries=0)
    with pytest.raises(ProviderError) as echoed:
        await adapter.request(call())
    assert KEY not in echoed.value.message
    assert "***" in echoed.value.message
    closed = OpenAIAdapter(MODEL, base_url="http://127.0.0.1:9/v1", api_key=KEY, max_retries=0)
    with pytest.raises(ProviderError) as unreachable:
        await closed.request(call())
    assert "cannot reach" in unreachable.value.message
    assert KEY not in unreachable.value.message
    for error in (echoed.value, unreachable.value):
        # What a user sees: the traceback (httpx's errors chained below hold the request).
        assert KEY not in "".join(traceback.format_exception(error))
    assert KEY not in repr(adapter)


@pytest.mark.anyio
async def test_a_redirect_is_reported_not_followed(
    server: OpenAIServer, no_proxies: pytest.MonkeyPatch
) -> None:
    moved = server.base_url.replace("/v1", "/v2") + "/chat/completions"
    server.add(Reply(307, {}, headers={"Location": moved}), Reply(body=completion("moved")))
    adapter = OpenAIAdapter(MODEL, base_url=server.base_url, max_retries=0)
    with pytest.raises(ProviderError) as failure:
        await adapter.request(call())
    assert "307" in failure.value.message
    assert "does not follow redirects" in failure.value.message
    assert moved in failure.value.message
    assert [request.path for request in server.received] == ["/v1/chat/completions"]


@pytest.mark.anyio
@pytest.mark.parametrize("proxied", [False, True], ids=["direct", "through-a-proxy"])
async def test_a_cookie_the_server_sets_is_not_sent_back(
    server: OpenAIServer, no_proxies: pytest.MonkeyPatch, proxied: bool
) -> None:
    server.add(
        Reply(body=completion("one"), headers={"Set-Cookie": "route=a1; Path=/"}),
        Reply(body=completion("two")),
    )
    base_url = server.base_url
    if proxied:  # httpx's client sends these: it must not keep the cookie either
        no_proxies.setenv("HTTP_PROXY", server.base_url.removesuffix("/v1"))
        base_url = "http://kedi-test.invalid/v1"
    adapter = OpenAIAdapter(MODEL, base_url=base_url, max_retries=0)
    async with run_scope():  # one run: before, its client kept a cookie jar
        await adapter.request(call())
        await adapter.request(call())
    assert "cookie" not in server.received[1].headers
