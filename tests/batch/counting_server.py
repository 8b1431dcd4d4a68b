"""An OpenAI-compatible chat-completions server that counts requests, in its own process.

    python -m tests.batch.counting_server [--latency-ms 50] [--throttle N] [--retry-after S]

It prints `PORT <n>` once listening on 127.0.0.1. Every POST answers, after
`latency-ms`, a completion whose content is `{"label": "<row-N>"}`, the
prompt's first `<row-N>` (so a structured `[label]` capture validates) with usage 10/5; the
first `--throttle` requests get a 429 with `Retry-After: S` instead.
`GET /stats` returns the arrival time (Unix seconds) of every POST, of
every 429, and the last message of every answered POST. Plain asyncio
streams, in a process of its own, so the server never competes with the
client under test for one interpreter's GIL.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from typing import Any


class Counter:
    def __init__(self, latency: float, throttle: int, retry_after: float) -> None:
        self.latency = latency
        self.throttle = throttle
        self.retry_after = retry_after
        self.arrivals: list[float] = []
        self.throttled: list[float] = []
        self.prompts: list[str] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {
                    k.strip().lower(): v.strip()
                    for k, _, v in (line.partition(":") for line in lines[1:] if line)
                }
                body = await reader.readexactly(int(headers.get("content-length", 0)))
                status, payload, extra = await self.answer(method, path, body)
                data = json.dumps(payload).encode()
                head_lines = [
                    f"HTTP/1.1 {status} {'OK' if status == 200 else 'Too Many Requests'}",
                    "Content-Type: application/json",
                    f"Content-Length: {len(data)}",
                    *extra,
                ]
                writer.write(("\r\n".join(head_lines) + "\r\n\r\n").encode() + data)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def answer(self, method: str, path: str, body: bytes) -> tuple[int, Any, list[str]]:
        if method == "GET":
            return (
                200,
                {"arrivals": self.arrivals, "throttled": self.throttled, "prompts": self.prompts},
                [],
            )
        now = time.time()
        self.arrivals.append(now)
        if len(self.arrivals) <= self.throttle:
            self.throttled.append(now)
            error = {
                "error": {
                    "message": "slow down",
                    "type": "rate_limit",
                    "param": None,
                    "code": "rate_limited",
                }
            }
            return 429, error, [f"Retry-After: {self.retry_after:g}"]
        await asyncio.sleep(self.latency)
        request = json.loads(body)
        prompt = str(request["messages"][-1]["content"])
        self.prompts.append(prompt)
        found = re.search(r"<row-\d+>", prompt)
        word = found.group(0) if found else ""
        reply = {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1700000000,
            "model": request.get("model", "m"),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "logprobs": None,
                    "message": {"role": "assistant", "content": json.dumps({"label": word})},
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
        return 200, reply, []


async def serve(latency: float, throttle: int, retry_after: float) -> None:
    counter = Counter(latency, throttle, retry_after)
    server = await asyncio.start_server(counter.handle, "127.0.0.1", 0, backlog=1024)
    print(f"PORT {server.sockets[0].getsockname()[1]}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency-ms", type=float, default=0.0)
    parser.add_argument("--throttle", type=int, default=0)
    parser.add_argument("--retry-after", type=float, default=1.0)
    options = parser.parse_args()
    try:
        asyncio.run(serve(options.latency_ms / 1000, options.throttle, options.retry_after))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
