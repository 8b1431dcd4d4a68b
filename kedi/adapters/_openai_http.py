"""How the `openai` adapter puts one request on the wire: straight to an httpx
transport when nothing of httpx's client applies, else through an `httpx.AsyncClient`.

For every request, httpx's client merges its base URL, headers, cookies and
timeout into the request, runs its auth and redirect flows and event hooks,
and parses the cookies of every response; one client per run also costs its
construction. kedi's requests need none of it, and against a local server it
was a fifth of the adapter's CPU per request (bench/README.md, "The
adapter's request path"). So `DirectSender` builds the request itself (the
constant headers made once) and hands it to the transport. A client
(`ClientSender`) is kept where it does something kedi relies on:

- the environment names a proxy (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, as
  `urllib.request.getproxies` reads them): the client picks the proxy for the
  URL and honours `NO_PROXY`. (A caller's transport never had proxies: httpx's
  client ignores the environment's when it is given a transport.)
- the base URL holds credentials (`https://user:pass@host/v1`): the client
  sends them as Basic auth.

Decided for both (docs/adapters.md, "Connections"): redirects are not
followed (nor were they before: httpx's client follows none unless asked;
the adapter reports a 3xx as an error naming it), and there is no cookie jar:
a cookie a server sets is not sent back on later requests.
"""

from __future__ import annotations

import ssl
import urllib.request
from functools import cache, lru_cache
from typing import Protocol

import httpx

JSON_CONTENT = {"Content-Type": "application/json"}


class Sender(Protocol):
    """Sends the adapter's POSTs for one run (or one call made outside a run)."""

    async def send(
        self, url: httpx.URL, content: bytes, headers: httpx.Headers, timeout: float
    ) -> httpx.Response:
        """POST `content`; the response's body is left unread (the caller closes the response)."""
        ...

    async def aclose(self) -> None:
        """Close what the sender opened (never a transport a caller lent)."""
        ...


class DirectSender:
    """Sends straight to an httpx transport, without httpx's client (see the module docstring)."""

    def __init__(self, transport: httpx.AsyncBaseTransport, *, owned: bool) -> None:
        self._transport = transport
        self._owned = owned

    async def send(
        self, url: httpx.URL, content: bytes, headers: httpx.Headers, timeout: float
    ) -> httpx.Response:
        # What the client would set: each phase (connect, write, read, pool wait) gets `timeout`.
        each = {"connect": timeout, "read": timeout, "write": timeout, "pool": timeout}
        request = httpx.Request(
            "POST", url, headers=headers, content=content, extensions={"timeout": each}
        )
        response = await self._transport.handle_async_request(request)
        response.request = request
        return response

    async def aclose(self) -> None:
        if self._owned:
            await self._transport.aclose()


class ClientSender:
    """Sends through an `httpx.AsyncClient` (proxies from the environment, URL credentials)."""

    def __init__(self, client: httpx.AsyncClient) -> None:
        self._client = client

    async def send(
        self, url: httpx.URL, content: bytes, headers: httpx.Headers, timeout: float
    ) -> httpx.Response:
        # No cookie jar here either (see the module docstring): forget what replies set.
        # Nothing is awaited between this and the build, so parallel calls never see one.
        self._client.cookies.clear()
        request = self._client.build_request(
            "POST", url, content=content, headers=headers, timeout=timeout
        )
        return await self._client.send(request, stream=True)

    async def aclose(self) -> None:
        await self._client.aclose()


def shared_sender(url: httpx.URL, transport: httpx.AsyncBaseTransport | None) -> Sender | None:
    """A sender every run may share, or None: straight to a caller's `transport` (which owns
    the connections; the sender keeps nothing per run), unless `url` needs a client."""
    if transport is None or url.userinfo:
        return None
    return DirectSender(transport, owned=False)


def open_sender(url: httpx.URL, transport: httpx.AsyncBaseTransport | None) -> Sender:
    """A sender for one run's requests to `url`: over the caller's `transport` (never closed) if given."""
    shared = shared_sender(url, transport)
    if shared is not None:
        return shared
    if url.userinfo:
        lent = None if transport is None else _Borrowed(transport)
        return ClientSender(httpx.AsyncClient(transport=lent, verify=ssl_context()))
    if proxy_in_environment():
        return ClientSender(httpx.AsyncClient(verify=ssl_context()))
    return DirectSender(httpx.AsyncHTTPTransport(verify=ssl_context()), owned=True)


def proxy_in_environment() -> bool:
    """Whether httpx's client would look for a proxy (it reads the same `getproxies` keys)."""
    proxies = urllib.request.getproxies()
    return any(proxies.get(scheme) for scheme in ("http", "https", "all"))


def request_headers(api_key: str, extra: dict[str, str]) -> httpx.Headers:
    """The headers of a request: httpx's client defaults, JSON, `extra`, then the key.

    The key is set last, so an `extra_headers` setting cannot replace it.
    """
    headers = httpx.Headers(_client_defaults())
    headers.update(JSON_CONTENT)
    headers.update(extra)
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    return headers


@lru_cache(maxsize=64)
def endpoint_url(text: str) -> httpx.URL:
    """`text` parsed once (an `httpx.URL` is immutable)."""
    return httpx.URL(text)


@cache
def ssl_context() -> ssl.SSLContext:
    # Building a context loads the CA bundle (~0.1 s); every client shares this one.
    return httpx.create_ssl_context()


@cache
def _client_defaults() -> httpx.Headers:
    """The headers httpx's client adds to every request (User-Agent, Accept, Accept-Encoding, ...)."""
    return httpx.AsyncClient(transport=httpx.MockTransport(_never)).headers


def _never(request: httpx.Request) -> httpx.Response:
    raise AssertionError("the client that lends its default headers never sends")


class _Borrowed(httpx.AsyncBaseTransport):
    """A caller's transport, lent to a client of kedi's, which must not close it."""

    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self._transport = transport

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        return await self._transport.handle_async_request(request)

    async def aclose(self) -> None:
        return None
