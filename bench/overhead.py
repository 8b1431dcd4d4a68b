"""kedi's own overhead, side by side with what it wraps, in one run.

    python bench/overhead.py [--calls 1000] [--rounds 7] [--framework-rounds 3] [--no-frameworks]

1. Per-call overhead: a program of N `>>` calls against a zero-latency
   in-process model (the offline adapter), versus calling that adapter
   directly N times with the same prompts and output schema (recorded from a
   first run of the program, so both sides do the same model work). Calling
   an adapter directly means building each request, as any caller must: the
   prompt, the output schema and one conversation id for the run (kedi's
   calls share one), built with kedi's own fast constructor (`build_request`,
   the same `CallRequest` as `CallRequest(...)` at a fifth of the cost), so
   request building costs both sides the same; the adapter makes each call's
   run id itself, where kedi's requests carry one kedi made.
   kedi's extra time per call is reported as a percentage of that direct call
   (target: at most 15%). Two cross-checks: the adapter awaited with kedi's
   own requests, built before the clock starts (a stricter baseline that
   counts request building as kedi's), and a null adapter (a canned reply, no
   model work), which times the interpreter alone.
2. Start-up: wall time of `python -m kedi run examples/hello.kedi` on the
   offline model versus `python -c "import pydantic, lark, httpx, anyio,
   click"` (target: within 1.5x). For scale: `kedi check` on the same file
   (start-up without the run), `import kedi`, the import line without httpx
   (which kedi's offline path never loads) and a bare interpreter. A probe
   checks that no model framework is imported on that path.
3. Framework adapters (`bench/frameworks.py`, also runnable alone).

In-process figures are process CPU time, best of interleaved rounds: the
machines here are noisy, and CPU time of a single-threaded loop is the least
disturbed by other processes. Compare ratios, not absolute times. The script
exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import kedi  # noqa: E402 - after the path set-up above
from kedi.adapters.base import Adapter, CallRequest, CallResult, build_request  # noqa: E402
from kedi.adapters.offline import OfflineAdapter  # noqa: E402
from kedi.history.identity import new_id  # noqa: E402

OVERHEAD_TARGET_PCT = 15.0
STARTUP_TARGET = 1.5
MODEL_FRAMEWORKS = ("pydantic_ai", "langchain", "langchain_core", "openai")
"""Top-level packages that must stay unimported on the offline path."""


# --------------------------------------------------------------------------- reporting


@dataclass(frozen=True)
class Row:
    """One printed figure, with its target when it has one."""

    name: str
    value: float
    unit: str
    target: str = ""
    """The target in words, e.g. `<= 15%`; empty for context figures."""
    ok: bool = True
    """False when the figure misses its target."""


def print_rows(title: str, rows: Sequence[Row]) -> None:
    """Print a section: one aligned line per row, targets marked met or MISSED."""
    print(title)
    for row in rows:
        verdict = ""
        if row.target:
            verdict = f"  (target {row.target}: {'met' if row.ok else 'MISSED'})"
        print(f"  {row.name:<60} {row.value:10.2f} {row.unit}{verdict}")


# --------------------------------------------------------------------------- timing


@dataclass(frozen=True)
class Timing:
    """Best seconds of one case: process CPU time and wall time (each the best round)."""

    cpu: float
    wall: float


def timed(function: Callable[[], object]) -> Timing:
    """CPU and wall seconds of one call of `function`, after a full collection."""
    gc.collect()
    cpu, wall = time.process_time(), time.perf_counter()
    function()
    return Timing(time.process_time() - cpu, time.perf_counter() - wall)


def best_of(cases: Mapping[str, Callable[[], object]], rounds: int) -> dict[str, Timing]:
    """The best CPU and wall seconds of each case over `rounds` interleaved rounds.

    Interleaving makes a burst of background load hit every case alike; the
    best round is the least disturbed one.
    """
    best = {name: Timing(math.inf, math.inf) for name in cases}
    for _ in range(rounds):
        for name, case in cases.items():
            timing = timed(case)
            best[name] = Timing(min(best[name].cpu, timing.cpu), min(best[name].wall, timing.wall))
    return best


def recorded_requests(program: kedi.Program, adapter: Adapter) -> list[CallRequest]:
    """Run `program` on `adapter` once and return every request the adapter was sent."""
    requests: list[CallRequest] = []
    send = adapter.request

    async def recording(request: CallRequest) -> CallResult:
        requests.append(request)
        return await send(request)

    adapter.request = recording  # type: ignore[method-assign]
    try:
        program.run_sync(adapter=adapter)
    finally:
        del adapter.request
    return requests


# --------------------------------------------------------------------------- per-call overhead


def calls_source(calls: int) -> str:
    """A program of `calls` independent one-capture `>>` calls."""
    lines = [f">> Summarise item {i} briefly: [summary: str]." for i in range(calls)]
    return "\n".join([*lines, "= done", ""])


class NullAdapter(OfflineAdapter):
    """Answers every call with one canned result: no model work at all."""

    RESULT = CallResult(value={"summary": "s"}, new_messages=())

    async def request(self, request: CallRequest) -> CallResult:
        """Return the canned result."""
        return self.RESULT


def summary_prompts(calls: int) -> list[str]:
    """The prompts `calls_source(calls)` sends, in source order."""
    return [f"Summarise item {i} briefly: [summary]." for i in range(calls)]


def check_requests(requests: Sequence[CallRequest], calls: int) -> None:
    """Stop unless `requests` are the program's `calls` one-capture calls, in source order."""
    if [r.prompt for r in requests] != summary_prompts(calls) or any(
        r.output is None or r.output.fields != ("summary",) for r in requests
    ):
        raise SystemExit("bench: the program did not send the expected requests")


def per_call_overhead(calls: int, rounds: int) -> list[Row]:
    """kedi over the offline adapter versus the adapter called directly (see the module docs)."""
    import anyio

    program = kedi.compile(calls_source(calls), path="overhead.kedi")
    adapter, null = OfflineAdapter(), NullAdapter()
    requests = recorded_requests(program, adapter)
    check_requests(requests, calls)
    calls_made = [(request.prompt, request.output) for request in requests]

    async def direct() -> None:
        conversation_id = new_id()
        for prompt, output in calls_made:
            await adapter.request(
                build_request(prompt=prompt, output=output, conversation_id=conversation_id)
            )

    async def prebuilt() -> None:
        for request in requests:
            await adapter.request(request)

    best = best_of(
        {
            "kedi": lambda: program.run_sync(adapter=adapter),
            "adapter": lambda: anyio.run(direct, backend="asyncio"),
            "prebuilt": lambda: anyio.run(prebuilt, backend="asyncio"),
            "null": lambda: program.run_sync(adapter=null),
        },
        rounds,
    )
    per_call = {name: timing.cpu / calls * 1e6 for name, timing in best.items()}
    overhead = per_call["kedi"] - per_call["adapter"]
    percent = overhead / per_call["adapter"] * 100
    strict = (per_call["kedi"] - per_call["prebuilt"]) / per_call["prebuilt"] * 100
    return [
        Row("kedi program, offline adapter", per_call["kedi"], "us/call"),
        Row(
            "offline adapter called directly (request built per call)",
            per_call["adapter"],
            "us/call",
        ),
        Row("kedi overhead (difference)", overhead, "us/call"),
        Row(
            "kedi overhead / adapter call",
            percent,
            "%",
            f"<= {OVERHEAD_TARGET_PCT:g}%",
            percent <= OVERHEAD_TARGET_PCT,
        ),
        Row(
            "cross-check: adapter awaited with kedi's prebuilt requests",
            per_call["prebuilt"],
            "us/call",
        ),
        Row("cross-check: kedi overhead over the prebuilt requests", strict, "%"),
        Row("cross-check: kedi program, null adapter", per_call["null"], "us/call"),
    ]


# --------------------------------------------------------------------------- start-up


def child_env(pycache: str | None = None) -> dict[str, str]:
    """The environment of child processes: this checkout importable.

    With `pycache`, bytecode goes to that private cache, so kedi starts from
    compiled bytecode as an installed package does, even where the
    environment says PYTHONDONTWRITEBYTECODE, and nothing is written into the
    checkout.
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = pycache
    return env


def run_child(command: Sequence[str], env: Mapping[str, str]) -> tuple[float, float]:
    """Run `command` to completion; return its (wall, CPU) seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, cwd=ROOT, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


HELLO = ("examples/hello.kedi", "--quiet", "--model", "offline")
IMPORT_LINE = "import pydantic, lark, httpx, anyio, click"
FRAMEWORK_PROBE = """
import sys
from kedi.cli import main
main(["run", *sys.argv[1:]], standalone_mode=False)
print(",".join(sorted({name.split(".")[0] for name in sys.modules})))
"""


def frameworks_imported(env: Mapping[str, str]) -> list[str]:
    """Model frameworks imported by a whole `kedi run` of the hello program (should be none)."""
    probe = subprocess.run(
        [sys.executable, "-c", FRAMEWORK_PROBE, *HELLO],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    return [
        name
        for name in probe.stdout.strip().splitlines()[-1].split(",")
        if name in MODEL_FRAMEWORKS
    ]


def startup(rounds: int) -> list[Row]:
    """`kedi run` on the hello program versus the import line (see the module docs)."""
    python = sys.executable
    kedi_run, import_line = "kedi run examples/hello.kedi (offline)", f"python -c '{IMPORT_LINE}'"
    commands = {
        kedi_run: [python, "-m", "kedi", "run", *HELLO],
        "kedi check examples/hello.kedi": [python, "-m", "kedi", "check", HELLO[0]],
        "python -c 'import kedi'": [python, "-c", "import kedi"],
        import_line: [python, "-c", IMPORT_LINE],
        "the same without httpx": [python, "-c", IMPORT_LINE.replace(" httpx,", "")],
        "python -c pass (interpreter start)": [python, "-c", "pass"],
    }
    with tempfile.TemporaryDirectory(prefix="kedi-bench-pyc-") as pycache:
        env = child_env(pycache)
        for command in commands.values():  # fill the bytecode cache (and kedi's parse-table cache)
            run_child(command, env)
        wall = dict.fromkeys(commands, math.inf)
        cpu = dict.fromkeys(commands, math.inf)
        for _ in range(rounds):
            for name, command in commands.items():
                seconds, cpu_used = run_child(command, env)
                wall[name], cpu[name] = min(wall[name], seconds), min(cpu[name], cpu_used)
        imported = frameworks_imported(env)
    ratio = wall[kedi_run] / wall[import_line]
    return [
        *(Row(f"{name}, wall", seconds * 1e3, "ms") for name, seconds in wall.items()),
        Row(
            "ratio kedi run / import line, wall",
            ratio,
            "x",
            f"<= {STARTUP_TARGET:g}x",
            ratio <= STARTUP_TARGET,
        ),
        Row("ratio kedi run / import line, CPU", cpu[kedi_run] / cpu[import_line], "x"),
        Row(
            f"model frameworks imported: {', '.join(imported) or 'none'}",
            len(imported),
            "",
            "none",
            not imported,
        ),
    ]


# --------------------------------------------------------------------------- main


def main() -> int:
    """Run every part, print its rows, and return 1 if any target was missed."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--calls", type=int, default=1000, help="model calls per timed run (default 1000)"
    )
    parser.add_argument(
        "--rounds", type=int, default=7, help="interleaved rounds; the best counts (default 7)"
    )
    parser.add_argument(
        "--framework-rounds", type=int, default=3, help="rounds of bench/frameworks.py (default 3)"
    )
    parser.add_argument("--no-frameworks", action="store_true", help="skip bench/frameworks.py")
    options = parser.parse_args()

    sections = [
        (
            f"per-call overhead ({options.calls} calls, CPU, best of {options.rounds} rounds)",
            per_call_overhead(options.calls, options.rounds),
        ),
        (f"start-up (best of {options.rounds} rounds)", startup(options.rounds)),
    ]
    for title, rows in sections:
        print_rows(title, rows)
    missed = any(not row.ok for _, rows in sections for row in rows)
    if not options.no_frameworks:
        from bench import frameworks

        missed = frameworks.report(options.calls, options.framework_rounds) or missed
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
