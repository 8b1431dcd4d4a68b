"""One job's rate limits and backpressure: requests and tokens per minute, 429s.

`RateLimiter` is plain synchronous state with no I/O, so the local engine
holds it directly and the Ray engine holds one in a single actor that every
worker asks (one bucket for the whole job, whichever machine sends). Callers
ask for a *reservation*: the limiter says how long to wait before sending and
books the slot at once, so concurrent callers never race for one slot.

- Requests are spaced evenly (`60 / rpm` seconds apart, no burst): any window
  of W seconds holds at most `W * rpm / 60 + 1` requests.
- Tokens are a bucket of `tpm / 6` (ten seconds' worth) that refills at
  `tpm / 60` per second. A call's tokens are known only when it returns, so
  they are charged afterwards and the bucket may go into debt; a request
  waits while the bucket is in debt.
- A 429 pauses every sender until its `Retry-After` (else 1 s) and halves the
  allowed concurrency (at most once a second, so one burst of 429s counts
  once); each success then adds `1 / concurrency`, about one more slot per
  round of successful requests (additive increase, multiplicative decrease).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_PAUSE = 1.0
"""Seconds every sender waits after a 429 that names no `Retry-After`."""
MAX_PAUSE = 60.0
"""The longest pause a `Retry-After` can impose."""


@dataclass(frozen=True, slots=True)
class LimiterState:
    """What the progress display shows about the limits."""

    concurrency: int
    throttled: int
    """429 replies seen so far."""
    paused_for: float
    """Seconds until senders may resume (0 when not paused)."""
    token_debt: float


class RateLimiter:
    """Job-wide request spacing, token budget and adaptive concurrency."""

    def __init__(
        self,
        *,
        rpm: float | None,
        tpm: float | None,
        parallel: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._clock = clock
        self._interval = 60.0 / rpm if rpm else 0.0
        self._next_request = 0.0
        self._token_rate = tpm / 60.0 if tpm else 0.0
        self._token_capacity = tpm / 6.0 if tpm else 0.0
        self._tokens = self._token_capacity
        self._tokens_at = clock()
        self._paused_until = 0.0
        self._max_concurrency = max(1, parallel)
        self._concurrency = float(self._max_concurrency)
        self._last_decrease = -1e9
        self.throttled_count = 0

    @property
    def max_concurrency(self) -> int:
        """The concurrency the job asked for (`--parallel`)."""
        return self._max_concurrency

    @property
    def concurrency(self) -> int:
        """How many rows may be in flight now."""
        return int(self._concurrency)

    def reserve(self) -> float:
        """Book the next request; return the seconds to wait before sending it."""
        now = self._clock()
        start = max(now, self._paused_until)
        if self._token_rate:
            self._refill(now)
            if self._tokens < 0:
                start = max(start, now - self._tokens / self._token_rate)
        if self._interval:
            start = max(start, self._next_request)
            self._next_request = start + self._interval
        return start - now

    def charge(self, tokens: int) -> None:
        """Take a finished call's tokens from the budget (it may go into debt)."""
        if self._token_rate and tokens:
            self._refill(self._clock())
            self._tokens -= tokens

    def throttled(self, retry_after: float | None) -> None:
        """A 429: pause every sender and halve the concurrency."""
        now = self._clock()
        self.throttled_count += 1
        pause = DEFAULT_PAUSE if retry_after is None else min(max(retry_after, 0.0), MAX_PAUSE)
        self._paused_until = max(self._paused_until, now + pause)
        if now - self._last_decrease >= 1.0:
            self._concurrency = max(1.0, self._concurrency / 2)
            self._last_decrease = now

    def succeeded(self) -> None:
        """A request went through: raise the concurrency slowly towards its maximum."""
        if self._concurrency < self._max_concurrency:
            self._concurrency = min(
                float(self._max_concurrency), self._concurrency + 1 / self._concurrency
            )

    def state(self) -> LimiterState:
        """A snapshot for the progress display."""
        now = self._clock()
        if self._token_rate:
            self._refill(now)
        return LimiterState(
            concurrency=self.concurrency,
            throttled=self.throttled_count,
            paused_for=max(0.0, self._paused_until - now),
            token_debt=max(0.0, -self._tokens),
        )

    def _refill(self, now: float) -> None:
        elapsed = now - self._tokens_at
        self._tokens_at = now
        self._tokens = min(self._token_capacity, self._tokens + elapsed * self._token_rate)
