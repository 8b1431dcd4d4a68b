"""Rate limits and backpressure: the limiter's arithmetic, then real requests counted by a server."""

from __future__ import annotations

from pathlib import Path

from kedi.batch.limits import RateLimiter
from tests.batch.helpers import CountingServer, max_in_window, results, write_job


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_requests_are_spaced_evenly() -> None:
    clock = Clock()
    limiter = RateLimiter(rpm=120, tpm=None, parallel=4, clock=clock)
    assert [round(limiter.reserve(), 3) for _ in range(4)] == [0.0, 0.5, 1.0, 1.5]
    clock.now += 10  # idle time builds no burst
    assert [round(limiter.reserve(), 3) for _ in range(2)] == [0.0, 0.5]


def test_tokens_are_charged_after_the_call_and_debt_makes_senders_wait() -> None:
    clock = Clock()
    limiter = RateLimiter(rpm=None, tpm=600, parallel=4, clock=clock)  # 10 tokens/s, bucket of 100
    assert limiter.reserve() == 0
    limiter.charge(150)  # 50 in debt
    assert round(limiter.reserve(), 3) == 5.0
    clock.now += 5
    assert limiter.reserve() == 0


def test_a_429_pauses_everyone_halves_concurrency_and_recovery_is_slow() -> None:
    clock = Clock()
    limiter = RateLimiter(rpm=None, tpm=None, parallel=16, clock=clock)
    limiter.throttled(2.5)
    assert limiter.concurrency == 8
    assert round(limiter.reserve(), 3) == 2.5
    limiter.throttled(2.5)  # the same burst of 429s halves once
    assert limiter.concurrency == 8
    clock.now += 1.0
    limiter.throttled(None)
    assert limiter.concurrency == 4
    for _ in range(4):
        limiter.succeeded()
    assert limiter.concurrency == 4  # a round of 4 successes is not quite one more slot...
    limiter.succeeded()
    assert limiter.concurrency == 5  # ...a fifth makes it
    for _ in range(200):
        limiter.succeeded()
    assert limiter.concurrency == 16
    assert limiter.state().throttled == 3


def test_rpm_holds_against_a_real_server(tmp_path: Path) -> None:
    paths = write_job(tmp_path, 12)
    with CountingServer("--latency-ms", "20") as server:
        done = run_batch_openai(paths, server, "--rpm", "240", "--parallel", "8")
        arrivals = server.stats()["arrivals"]
    assert done.returncode == 0, done.stderr
    assert len(arrivals) == 12
    assert max_in_window(arrivals, 1.0) <= 5  # 4 a second, +1 for the window's edge
    assert (
        max(arrivals) - min(arrivals) >= 11 / 4 - 0.25
    )  # spaced, not bunched (first-connection jitter)


def test_a_429_pauses_the_whole_job_for_its_retry_after(tmp_path: Path) -> None:
    paths = write_job(tmp_path, 8)
    with CountingServer("--latency-ms", "20", "--throttle", "1", "--retry-after", "1") as server:
        done = run_batch_openai(paths, server, "--parallel", "1", quiet=False)
        stats = server.stats()
    assert done.returncode == 0, done.stderr
    (throttled_at,) = stats["throttled"]
    later = [moment for moment in stats["arrivals"] if moment > throttled_at]
    assert len(later) == 8  # the throttled row was retried, every row answered
    assert min(later) - throttled_at >= 0.95
    assert "1 throttled (429)" in done.stderr
    assert len(results(paths["out"])) == 8


def run_batch_openai(
    paths: dict[str, Path], server: CountingServer, *options: str, quiet: bool = True
):
    import subprocess

    from tests.batch.helpers import openai_batch

    command, env = openai_batch(paths, server.base_url, *options, api_key="sk-test-secret")
    if not quiet:
        command.remove("--quiet")
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
