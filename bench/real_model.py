"""kedi on a real model, side by side with calling the model without kedi, in one run.

    eval "$(.ci/start-llama)"          # llama.cpp's server on 127.0.0.1 (the kedi[local] extra)
    python bench/real_model.py [--captures 20] [--rounds 2]
    kill "$KEDI_TEST_LLAMA_PID"

1. Server: N sequential typed captures (`[n: int]`) run as a kedi program
   through the `openai` adapter (json_object mode, the mode llama.cpp takes)
   against the server `KEDI_TEST_LLAMA_URL` names, versus the same requests
   (the very bodies kedi sent, recorded by a pass-through transport) sent
   with the `openai` SDK's `AsyncOpenAI.chat.completions.create`.
2. In-process: the same captures with `--model local` (llama.cpp in this
   process) versus `llama_cpp.Llama.create_chat_completion` called directly
   with the same messages, schema and sampling settings, on the same loaded
   model.

Target: kedi within 1.05x of the direct path for both. The model's work
dominates, and the machines here are shared, so the two sides alternate
request by request (kedi first in one round, the direct call first in the
next) and each side's total is the sum of its wall times; temperature 0
with a fixed seed makes both sides decode the same tokens. Compare ratios,
not absolute times. The script exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import kedi  # noqa: E402
from kedi.adapters.local import SMALL_MODEL_DEFAULTS, LocalAdapter, default_model_path, load_llama  # noqa: E402
from kedi.adapters.openai import OpenAIAdapter  # noqa: E402

SOURCE = ">> Pick a number between 1 and 100: [n: int].\n= `n`"
SETTINGS = {"max_tokens": 16, "temperature": 0.0, "seed": 7}
TARGET = 1.05


class Recorder(httpx.AsyncBaseTransport):
    """Passes requests through to `inner` and keeps the last JSON body sent."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.last: dict[str, Any] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.last = json.loads(await request.aread())
        return await self.inner.handle_async_request(request)


async def timed(step: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = await step()
    return time.perf_counter() - start, value


async def alternate(
    kedi_step: Callable[[], Awaitable[Any]],
    direct_step: Callable[[], Awaitable[Any]],
    captures: int,
    rounds: int,
) -> tuple[float, float]:
    """Total wall time of each side over `rounds` x `captures` alternating requests."""
    await kedi_step()  # warm-up: connections, the model's prompt cache
    await direct_step()
    totals = [0.0, 0.0]
    for round_number in range(rounds):
        order = [(0, kedi_step), (1, direct_step)]
        if round_number % 2:
            order.reverse()
        for _ in range(captures):
            for side, step in order:
                elapsed, _ = await timed(step)
                totals[side] += elapsed
    return totals[0], totals[1]


async def server_pair(url: str, captures: int, rounds: int) -> tuple[float, float]:
    from openai import AsyncOpenAI

    recorder = Recorder(httpx.AsyncHTTPTransport())
    adapter = OpenAIAdapter(
        "local", base_url=url, structured_mode="json_object", transport=recorder
    )
    program = kedi.compile(SOURCE)

    async def through_kedi() -> Any:
        value = await program.run(adapter=adapter, settings=SETTINGS)
        assert isinstance(value, int), value
        return value

    await through_kedi()
    body = dict(recorder.last)
    client = AsyncOpenAI(base_url=url, api_key="not-needed")

    async def through_sdk() -> Any:
        reply = await client.chat.completions.create(**body)
        return json.loads(reply.choices[0].message.content or "")["n"]

    try:
        return await alternate(through_kedi, through_sdk, captures, rounds)
    finally:
        await client.close()


async def in_process_pair(captures: int, rounds: int) -> tuple[float, float]:
    import anyio.to_thread

    llama = load_llama(default_model_path())
    adapter = LocalAdapter("local")
    assert adapter._transport is not None
    recorder = adapter._transport = Recorder(adapter._transport)  # what kedi hands llama.cpp
    program = kedi.compile(SOURCE)

    async def through_kedi() -> Any:
        value = await program.run(adapter=adapter, settings=SETTINGS)
        assert isinstance(value, int), value
        return value

    await through_kedi()
    sent = recorder.last
    fields = {**SMALL_MODEL_DEFAULTS, **{k: v for k, v in sent.items() if k != "model"}}

    async def direct() -> Any:
        # Off the event loop, as kedi runs it: both sides pay the thread hop.
        reply = await anyio.to_thread.run_sync(lambda: llama.create_chat_completion(**fields))
        return json.loads(reply["choices"][0]["message"]["content"])["n"]

    return await alternate(through_kedi, direct, captures, rounds)


def report(name: str, kedi_seconds: float, direct_seconds: float, requests: int) -> bool:
    ratio = kedi_seconds / direct_seconds
    ok = ratio <= TARGET
    print(
        f"{name:<34} kedi {kedi_seconds:7.2f} s  direct {direct_seconds:7.2f} s  "
        f"({requests} requests each)  ratio {ratio:5.3f}x  "
        f"{'ok' if ok else 'MISSED'} (target <= {TARGET}x)"
    )
    return ok


async def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--captures", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    requests = options.captures * options.rounds
    results = []
    url = os.environ.get("KEDI_TEST_LLAMA_URL")
    if url:
        kedi_s, sdk_s = await server_pair(url, options.captures, options.rounds)
        results.append(report("openai adapter vs openai SDK", kedi_s, sdk_s, requests))
    else:
        print('server pair skipped: set KEDI_TEST_LLAMA_URL (eval "$(.ci/start-llama)")')
    kedi_s, direct_s = await in_process_pair(options.captures, options.rounds)
    results.append(report("--model local vs Llama directly", kedi_s, direct_s, requests))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
