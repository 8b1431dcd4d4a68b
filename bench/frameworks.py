"""kedi's framework adapters next to the frameworks alone, in one run.

    python bench/frameworks.py [--calls 1000] [--rounds 3]

(also run at the end of `bench/overhead.py`). Each part times, on the same
model and the same N structured calls (one `summary: str` capture each):

1. **Pydantic AI**: a kedi program of N `>>` calls on
   `PydanticAdapter(FunctionModel(answer))`, that adapter awaited directly with
   the requests the program built, and Pydantic AI's own `Agent.run` with the
   same `FunctionModel` and the same output mode (native: the adapter's `auto`
   choice for a FunctionModel), one agent for all calls.
2. **OpenAI**: the same program on the `openai` adapter, that adapter awaited
   directly, and the `openai` SDK's `AsyncOpenAI.chat.completions.parse` with
   the same schema (one client per round of N calls), all against one local
   OpenAI-compatible server (`tests.adapters.openai_server`) running in a
   child process, so the figures are the client's own cost.

Figures are per call, best of interleaved rounds, in process CPU time (wall
time too for HTTP). Target: kedi within 1.2x of the framework alone, judged on
CPU time. `report` returns True when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import anyio  # noqa: E402 - after the path set-up above
from pydantic import BaseModel, ConfigDict  # noqa: E402

import kedi  # noqa: E402
from bench.overhead import (  # noqa: E402
    Row,
    Timing,
    best_of,
    calls_source,
    check_requests,
    child_env,
    print_rows,
    recorded_requests,
    summary_prompts,
)
from kedi.adapters.base import Adapter, CallRequest  # noqa: E402

RATIO_TARGET = 1.2
REPLY = {"summary": "s"}
SERVER = """
import sys
from tests.adapters.openai_server import OpenAIServer, Reply, completion
count, content = int(sys.argv[1]), sys.argv[2]
with OpenAIServer() as server:
    server.add(*[Reply(body=completion(content))] * count)
    print(server.base_url, flush=True)
    sys.stdin.read()  # serve until the parent closes stdin
"""


class Summary(BaseModel):
    """The framework-side output type: what kedi builds for `[summary: str]` (strict)."""

    model_config = ConfigDict(strict=True)
    summary: str


def comparison(
    name: str,
    framework: str,
    cases: dict[str, Callable[[], object]],
    calls: int,
    rounds: int,
    *,
    wall: bool = False,
) -> list[Row]:
    """Time `cases` (kedi program, kedi adapter, framework) and rate kedi against the framework.

    The last case is the framework alone; the first is the kedi program,
    whose CPU ratio to the framework is held to the target.
    """
    best = best_of(cases, rounds)
    labels = list(cases)
    base = best[labels[-1]]
    rows = []
    for label in labels:
        timing: Timing = best[label]
        rows.append(Row(f"{label}, CPU", timing.cpu / calls * 1e6, "us/call"))
        if wall:
            rows.append(Row(f"{label}, wall", timing.wall / calls * 1e6, "us/call"))
    for label in labels[:-1]:
        ratio = best[label].cpu / base.cpu
        headline = label == labels[0]
        target = f"<= {RATIO_TARGET:g}x" if headline else ""
        rows.append(
            Row(
                f"ratio {label} / {framework}, CPU",
                ratio,
                "x",
                target,
                not headline or ratio <= RATIO_TARGET,
            )
        )
    print_rows(f"{name} ({calls} structured calls, best of {rounds} rounds)", rows)
    return rows


def direct(adapter: Adapter, requests: list[CallRequest]) -> Callable[[], object]:
    """A case awaiting `adapter` with `requests`, one after the other."""

    async def run() -> None:
        for request in requests:
            await adapter.request(request)

    return lambda: anyio.run(run, backend="asyncio")


# --------------------------------------------------------------------------- Pydantic AI


def pydantic_ai(calls: int, rounds: int) -> list[Row]:
    """kedi on `PydanticAdapter(FunctionModel)` versus `Agent.run` on the same model."""
    from pydantic_ai import Agent, NativeOutput
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from kedi.adapters.pydantic_ai import PydanticAdapter

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if info.output_tools:
            return ModelResponse(parts=[ToolCallPart(info.output_tools[0].name, REPLY)])
        return ModelResponse(parts=[TextPart(json.dumps(REPLY))])

    program = kedi.compile(calls_source(calls), path="frameworks.kedi")
    adapter = PydanticAdapter(FunctionModel(answer))
    requests = recorded_requests(program, adapter)
    check_requests(requests, calls)
    if adapter.output_mode != "native":
        raise SystemExit(f"bench: expected native output, the adapter chose {adapter.output_mode}")
    agent = Agent(FunctionModel(answer), output_type=NativeOutput(Summary))
    prompts = summary_prompts(calls)

    async def framework() -> None:
        for prompt in prompts:
            result = await agent.run(prompt)
            assert result.output.summary == REPLY["summary"]

    return comparison(
        "Pydantic AI, FunctionModel",
        "Agent.run",
        {
            "kedi program, PydanticAdapter": lambda: program.run_sync(adapter=adapter),
            "PydanticAdapter awaited directly": direct(adapter, requests),
            "Agent.run alone": lambda: anyio.run(framework, backend="asyncio"),
        },
        calls,
        rounds,
    )


# --------------------------------------------------------------------------- OpenAI


@contextmanager
def openai_server(replies: int) -> Iterator[str]:
    """A local OpenAI-compatible server in a child process; yields its base URL."""
    with subprocess.Popen(
        [sys.executable, "-c", SERVER, str(replies), json.dumps(REPLY)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=child_env(),
    ) as server:
        assert server.stdin is not None and server.stdout is not None
        try:
            yield server.stdout.readline().strip()
        finally:
            server.stdin.close()
            server.wait(timeout=10)


def openai(calls: int, rounds: int) -> list[Row]:
    """kedi's `openai` adapter versus the `openai` SDK, against one local server."""
    from openai import AsyncOpenAI

    from kedi.adapters.openai import OpenAIAdapter
    from tests.adapters.openai_server import MODEL

    program = kedi.compile(calls_source(calls), path="frameworks.kedi")
    prompts = summary_prompts(calls)
    # One reply per request: the recording run, then three cases per round.
    with openai_server(calls * (1 + 3 * rounds)) as base_url:
        adapter = OpenAIAdapter(MODEL, base_url=base_url, api_key="bench", max_retries=0)
        requests = recorded_requests(program, adapter)
        check_requests(requests, calls)

        async def framework() -> None:
            async with AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0) as client:
                for prompt in prompts:
                    reply = await client.chat.completions.parse(
                        model=MODEL,
                        messages=[{"role": "user", "content": prompt}],
                        response_format=Summary,
                    )
                    parsed = reply.choices[0].message.parsed
                    assert parsed is not None and parsed.summary == REPLY["summary"]

        return comparison(
            "OpenAI, local server in a child process",
            "SDK",
            {
                "kedi program, openai adapter": lambda: program.run_sync(adapter=adapter),
                "openai adapter awaited directly": direct(adapter, requests),
                "AsyncOpenAI ...parse alone": lambda: anyio.run(framework, backend="asyncio"),
            },
            calls,
            rounds,
            wall=True,
        )


# --------------------------------------------------------------------------- main


def report(calls: int, rounds: int) -> bool:
    """Run both comparisons; return True when a target was missed."""
    rows = pydantic_ai(calls, rounds) + openai(calls, rounds)
    return any(not row.ok for row in rows)


def main() -> int:
    """Command-line entry: run `report`, exit 1 when a target was missed."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--calls", type=int, default=1000, help="model calls per timed run (default 1000)"
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="interleaved rounds; the best counts (default 3)"
    )
    options = parser.parse_args()
    return 1 if report(options.calls, options.rounds) else 0


if __name__ == "__main__":
    sys.exit(main())
