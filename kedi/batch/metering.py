"""Where a batch meets its model calls: rate-limit gates, 429s and per-row usage.

A batch shares one adapter instance across its rows (one connection pool).
Two hooks on it see every request:

- `GatedTransport`, for the OpenAI-compatible adapter, sits under its httpx
  client: each HTTP request (retries and tool rounds included, which is what
  a provider counts) waits for the job's gate, and a 429 reply pauses the
  whole job for its `Retry-After` and lowers the concurrency.
  Under it, `ShardedPool` keeps one kept-alive connection per row in flight,
  through the proxy the environment names for the request's URL, if any
  (`HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`: httpx's client
  would ignore them, being given a transport).
- `instrument` wraps the adapter instance's `request` (the one entry point
  the runtime calls): it adds each call's usage to the row being run, charges
  its tokens to the job's budget, and, for adapters that do not speak HTTP
  through kedi, gates each call as one request. It wraps the instance, not
  the class, so the runtime still sees the adapter's own class and profile.
"""

from __future__ import annotations

import contextvars
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import httpx

from kedi.adapters._openai_wire import retry_after
from kedi.adapters.base import Adapter, CallRequest, CallResult, Usage
from kedi.batch.limits import LimiterState, RateLimiter
from kedi.errors import AdapterError, RateLimitError


class Gate(Protocol):
    """The job's limiter as one sender sees it (local, or a Ray actor far away)."""

    async def before_request(self) -> None:
        """Wait until the job may send one more request."""

    def charge(self, tokens: int) -> None:
        """Take a finished call's tokens from the job's budget."""

    def throttled(self, retry_after: float | None) -> None:
        """Report a 429."""

    def succeeded(self) -> None:
        """Report a request that went through."""


class LocalGate:
    """A `Gate` over a `RateLimiter` in this process."""

    def __init__(self, limiter: RateLimiter) -> None:
        self.limiter = limiter

    async def before_request(self) -> None:
        delay = self.limiter.reserve()
        if delay > 0:
            await anyio.sleep(delay)

    def charge(self, tokens: int) -> None:
        self.limiter.charge(tokens)

    def throttled(self, retry_after: float | None) -> None:
        self.limiter.throttled(retry_after)

    def succeeded(self) -> None:
        self.limiter.succeeded()

    def state(self) -> LimiterState:
        return self.limiter.state()


CONNECTIONS_PER_SHARD = 1
"""Connections of one httpcore pool in a `ShardedPool` (its per-request cost grows with its size)."""


class ShardedPool(httpx.AsyncBaseTransport):
    """Keep-alive connections for `connections` concurrent requests, one httpcore pool each.

    One httpx pool sized for the batch's concurrency is slow: each request
    and each returned connection scans every connection of the pool, and
    checks each idle one for a server that hung up (a system call or two
    each), so with 64 kept-alive connections the scans cost more than the
    requests. httpx's default pool (20 kept alive) is cheaper per scan but
    closes and reopens connections when more than 20 rows are in flight.
    Pools of `CONNECTIONS_PER_SHARD` connections, each request going to the
    one with the fewest in flight, keep every connection alive and every scan
    short: with one connection per pool, a request checks only its own
    connection (2 checks per request, as httpx's default pool makes, against
    4.7 with pools of 4).
    """

    def __init__(self, connections: int, proxy: str | None = None) -> None:
        shards = max(1, -(-connections // CONNECTIONS_PER_SHARD))
        limits = httpx.Limits(
            max_connections=CONNECTIONS_PER_SHARD, max_keepalive_connections=CONNECTIONS_PER_SHARD
        )
        context = httpx.create_ssl_context()  # one CA bundle load (~50 ms), not one per pool
        self._pools = [
            httpx.AsyncHTTPTransport(limits=limits, verify=context, proxy=proxy)
            for _ in range(shards)
        ]
        self._in_flight = [0] * shards

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        in_flight = self._in_flight
        shard = in_flight.index(min(in_flight))
        in_flight[shard] += 1
        try:
            response = await self._pools[shard].handle_async_request(request)
        except BaseException:
            in_flight[shard] -= 1
            raise
        # the connection is busy until the body is read and the response closed
        response.stream = _Released(response.stream, lambda: self._release(shard))
        return response

    def _release(self, shard: int) -> None:
        self._in_flight[shard] -= 1

    async def aclose(self) -> None:
        for pool in self._pools:
            await pool.aclose()


class _Released(httpx.AsyncByteStream):
    """A response body that calls `release` once, when it is closed."""

    def __init__(self, stream: Any, release: Callable[[], None]) -> None:
        self._stream = stream
        self._release: Callable[[], None] | None = release

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._stream.__aiter__()  # the body's own iterator: no generator layer per chunk

    async def aclose(self) -> None:
        try:
            await self._stream.aclose()
        finally:
            release, self._release = self._release, None
            if release is not None:
                release()


class GatedTransport(httpx.AsyncBaseTransport):
    """An httpx transport whose every request passes the job's gate first.

    Its connections (`ShardedPool`) are sized for `connections` requests in
    flight; there is one such pool per proxy the requests' URLs go through
    (`environment_proxy`), made at the first request that needs it.
    """

    def __init__(
        self, gate: Gate, connections: int, inner: httpx.AsyncBaseTransport | None = None
    ) -> None:
        self._gate = gate
        self._connections = connections
        self._inner = inner
        self._pools: dict[str | None, httpx.AsyncBaseTransport] = {}
        self._proxies: dict[tuple[bytes, bytes, int | None], str | None] = {}

    def _pool_for(self, url: httpx.URL) -> httpx.AsyncBaseTransport:
        if self._inner is not None:
            return self._inner
        origin = (url.raw_scheme, url.raw_host, url.port)
        if origin in self._proxies:
            proxy = self._proxies[origin]
        else:
            proxy = self._proxies[origin] = environment_proxy(url)
        pool = self._pools.get(proxy)
        if pool is None:
            pool = self._pools[proxy] = ShardedPool(self._connections, proxy)
        return pool

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        # The pool first: making one loads the CA bundle (~50 ms of blocked loop),
        # which must not fall between the gate's slot and the send (a burst).
        pool = self._pool_for(request.url)
        await self._gate.before_request()
        response = await pool.handle_async_request(request)
        if response.status_code == 429:
            self._gate.throttled(retry_after(response.headers))
        elif response.status_code < 500:
            self._gate.succeeded()
        return response

    async def aclose(self) -> None:
        for pool in [self._inner] if self._inner is not None else self._pools.values():
            await pool.aclose()


def environment_proxy(url: httpx.URL) -> str | None:
    """The proxy the environment names for `url` (None: go direct), as httpx's client picks it.

    `HTTPS_PROXY`/`HTTP_PROXY` by the URL's scheme, else `ALL_PROXY`; a host
    `NO_PROXY` lists goes direct; a proxy written `host:port` is `http://`.
    """
    proxies = urllib.request.getproxies()
    proxy = proxies.get(url.scheme) or proxies.get("all")
    if not proxy:
        return None
    host = url.host if url.port is None else f"{url.host}:{url.port}"
    bypass = urllib.request.proxy_bypass_environment  # type: ignore[attr-defined]  # not in typeshed
    if bypass(host, proxies):  # the stdlib's NO_PROXY matching, as `getproxies` reads it
        return None
    return proxy if "://" in proxy else f"http://{proxy}"


@dataclass(slots=True)
class RowUsage:
    """The usage of one row's calls, summed as they finish."""

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 0
    tool_calls: int = 0

    def add(self, usage: Usage | None) -> None:
        if usage is None:
            return
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.requests += usage.requests
        self.tool_calls += usage.tool_calls

    def as_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "requests": self.requests,
            "tool_calls": self.tool_calls,
        }


_row_usage: contextvars.ContextVar[RowUsage | None] = contextvars.ContextVar(
    "kedi_batch_row_usage", default=None
)


def start_row_usage() -> RowUsage:
    """Count the usage of the calls made from here on in this task (one row's run)."""
    usage = RowUsage()
    _row_usage.set(usage)
    return usage


def instrument(adapter: Adapter, gate: Gate, *, gates_requests: bool) -> Adapter:
    """Make `adapter` report usage and tokens (and, with `gates_requests`, wait for the gate)."""
    inner: Callable[[CallRequest], Awaitable[CallResult]] = adapter.request

    async def request(call: CallRequest) -> CallResult:
        if gates_requests:
            await gate.before_request()
        try:
            result = await inner(call)
        except AdapterError as error:
            _count(gate, getattr(error.partial, "usage", None))
            if gates_requests and isinstance(error, RateLimitError):
                gate.throttled(None)
            raise
        if gates_requests:
            gate.succeeded()
        _count(gate, result.usage)
        return result

    adapter.request = request  # type: ignore[method-assign,assignment]  # a per-instance wrapper that meters the adapter
    return adapter


def _count(gate: Gate, usage: Any) -> None:
    if not isinstance(usage, Usage):
        return
    row = _row_usage.get()
    if row is not None:
        row.add(usage)
    gate.charge(usage.input_tokens + usage.output_tokens)
