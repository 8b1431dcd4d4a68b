"""CPU per request: kedi's OpenAI-compatible adapter against a bare `httpx` loop.

    python bench/adapter_request.py [--requests 2000] [--parallel 64] [--latency-ms 50] [--repeat 5]

Both sides send the same chat-completions request to the counting server
(`tests/batch/counting_server.py`, a process of its own) with `--parallel`
requests in flight, and `time.process_time` measures this process's CPU per
request (the server's is not counted, so the figure moves little with the
machine's load). The sides alternate, `--repeat` times; medians are reported.

- bare: `client.post(url, json=body)` and `response.json()` on
  `httpx.AsyncClient()`, as `bench/batch.py`'s loop does.
- kedi: `OpenAIAdapter.request` for one structured call (`[label]`), each in
  a run scope of its own and over the job's `GatedTransport`, as a row of
  `kedi batch` makes it: from the call's start to its validated value.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from pydantic import ConfigDict, create_model  # noqa: E402

from kedi.adapters.base import CallRequest, OutputSpec  # noqa: E402
from kedi.adapters.openai import OpenAIAdapter  # noqa: E402
from kedi.adapters.resources import run_scope  # noqa: E402
from kedi.batch.limits import RateLimiter  # noqa: E402
from kedi.batch.metering import GatedTransport, LocalGate  # noqa: E402
from tests.batch.helpers import CountingServer  # noqa: E402

Label = create_model("Outputs", __config__=ConfigDict(strict=True), label=(str, ...))
LABEL = OutputSpec(Label, Label.model_json_schema())


def prompt(row: int) -> str:
    return f"Label this ticket: <row-{row}> [label]."


async def in_flight(requests: int, parallel: int, one: Callable[[int], Awaitable[None]]) -> float:
    """CPU seconds per request of `one(row)` for `requests` rows, `parallel` at a time."""
    rows = iter(range(requests))

    async def worker() -> None:
        for row in rows:
            await one(row)

    started = time.process_time()
    await asyncio.gather(*(worker() for _ in range(parallel)))
    return (time.process_time() - started) / requests


async def bare(base_url: str, requests: int, parallel: int) -> float:
    async with httpx.AsyncClient(timeout=60) as client:
        url = f"{base_url}/chat/completions"

        async def one(row: int) -> None:
            body = {"model": "test-model", "messages": [{"role": "user", "content": prompt(row)}]}
            reply = await client.post(url, json=body)
            reply.raise_for_status()
            label = json.loads(reply.json()["choices"][0]["message"]["content"])["label"]
            assert label == f"<row-{row}>"

        return await in_flight(requests, parallel, one)


async def kedi(base_url: str, requests: int, parallel: int) -> float:
    gate = LocalGate(RateLimiter(rpm=None, tpm=None, parallel=parallel))
    transport = GatedTransport(gate, parallel)
    adapter = OpenAIAdapter("test-model", base_url=base_url, transport=transport)

    async def one(row: int) -> None:
        request = CallRequest(prompt=prompt(row), output=LABEL, on_exchange=lambda exchange: None)
        async with run_scope():  # a row's run: its own scope, as `kedi batch` runs it
            result = await adapter.request(request)
        assert result.value == {"label": f"<row-{row}>"}

    try:
        return await in_flight(requests, parallel, one)
    finally:
        await transport.aclose()


SIDES = {"bare": bare, "kedi": kedi}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--parallel", type=int, default=64)
    parser.add_argument("--latency-ms", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--only", choices=sorted(SIDES))
    args = parser.parse_args()
    sides = [args.only] if args.only else list(SIDES)
    figures: dict[str, list[float]] = {side: [] for side in sides}
    with CountingServer("--latency-ms", str(args.latency_ms)) as server:
        for side in sides:  # warm-up: imports, first connections
            asyncio.run(SIDES[side](server.base_url, 200, args.parallel))
        for _ in range(args.repeat):
            for side in sides:
                cpu = asyncio.run(SIDES[side](server.base_url, args.requests, args.parallel))
                figures[side].append(cpu * 1000)
    load = Path("/proc/loadavg").read_text().split()[:3]
    print(
        f"{args.requests} requests x {args.repeat}, --parallel {args.parallel}, "
        f"{args.latency_ms} ms; load average {' '.join(load)}"
    )
    for side, runs in figures.items():
        listed = ", ".join(f"{ms:.3f}" for ms in runs)
        print(f"{side:5} CPU ms/request: median {statistics.median(runs):.3f} ({listed})")
    if len(sides) == 2:
        print(
            f"kedi / bare: {statistics.median(figures['kedi']) / statistics.median(figures['bare']):.2f}x"
        )


if __name__ == "__main__":
    main()
