"""kedi's own overhead, side by side with what it wraps, in one run.

    python bench/overhead.py [--calls 1000] [--repeat 5]

1. Per-call overhead: a program of N `>>` calls against a zero-latency
   in-process model (the offline adapter), versus calling that adapter
   directly N times with equivalent requests. Reported as kedi's extra time
   per call and as a percentage of the adapter call (target: at most 15%).
2. Start-up: wall time of `kedi run hello.kedi` (offline) versus
   `python -c "import pydantic, lark, httpx, anyio, click"` (target: within 1.5x).
3. Framework adapters (when the extras are installed): kedi through
   `PydanticAdapter(FunctionModel)` versus Pydantic AI's own `Agent.run` with
   the same FunctionModel doing the same structured capture; the `openai`
   adapter against a local server versus the `openai` SDK on the same requests.

Ratios, not absolute times, are the figures to compare: machines here are noisy.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import kedi  # noqa: E402
from kedi.adapters.base import CallRequest  # noqa: E402
from kedi.adapters.offline import OfflineAdapter  # noqa: E402
from kedi.runtime.types import output_spec  # noqa: E402


def best(samples: list[float]) -> float:
    return min(samples)


def per_call_overhead(calls: int, repeat: int) -> dict[str, float]:
    source = "\n".join(f">> Summarise item {i} briefly: [summary: str]." for i in range(calls)) + "\n= done\n"
    program = kedi.compile(source, path="bench.kedi")
    adapter = OfflineAdapter()
    spec = output_spec([("summary", str)])
    requests = [
        CallRequest(prompt=f"Summarise item {i} briefly: [summary].", output=spec, model="offline", run_id="r", conversation_id="c")
        for i in range(calls)
    ]

    async def direct() -> None:
        for request in requests:
            await adapter.request(request)

    def run_kedi() -> None:
        program.run_sync(adapter=adapter)

    def run_direct() -> None:
        anyio.run(direct, backend="asyncio")

    kedi_times, direct_times = [], []
    for _ in range(repeat):
        kedi_times.append(timed(run_kedi))
        direct_times.append(timed(run_direct))
    kedi_per_call = best(kedi_times) / calls
    direct_per_call = best(direct_times) / calls
    return {
        "kedi_us_per_call": kedi_per_call * 1e6,
        "adapter_us_per_call": direct_per_call * 1e6,
        "overhead_us_per_call": (kedi_per_call - direct_per_call) * 1e6,
        "overhead_pct": (kedi_per_call - direct_per_call) / direct_per_call * 100,
    }


def timed(function: Callable[[], Any]) -> float:
    started = time.perf_counter()
    function()
    return time.perf_counter() - started


def startup(repeat: int) -> dict[str, float]:
    hello = ROOT / "examples" / "hello.kedi"
    kedi_cmd = [sys.executable, "-m", "kedi", "run", str(hello), "--quiet", "--model", "offline"]
    import_cmd = [sys.executable, "-c", "import pydantic, lark, httpx, anyio, click"]
    subprocess.run(kedi_cmd, check=True, capture_output=True)  # warm bytecode and grammar caches
    kedi_times = [timed(lambda: subprocess.run(kedi_cmd, check=True, capture_output=True)) for _ in range(repeat)]
    import_times = [timed(lambda: subprocess.run(import_cmd, check=True, capture_output=True)) for _ in range(repeat)]
    probe = subprocess.run(
        [sys.executable, "-c", "import sys, kedi.cli; print(any(m.startswith(('pydantic_ai', 'langchain')) for m in sys.modules))"],
        check=True, capture_output=True, text=True,
    )
    return {
        "kedi_run_hello_ms": statistics.median(kedi_times) * 1e3,
        "import_line_ms": statistics.median(import_times) * 1e3,
        "ratio": statistics.median(kedi_times) / statistics.median(import_times),
        "framework_imported": probe.stdout.strip() == "True",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()

    overhead = per_call_overhead(options.calls, options.repeat)
    print(f"per-call overhead ({options.calls} calls, best of {options.repeat}):")
    print(f"  kedi:        {overhead['kedi_us_per_call']:8.1f} us/call")
    print(f"  adapter:     {overhead['adapter_us_per_call']:8.1f} us/call")
    print(f"  overhead:    {overhead['overhead_us_per_call']:8.1f} us/call = {overhead['overhead_pct']:.1f}% of the adapter call (target <= 15%)")

    start = startup(options.repeat)
    print("start-up (median):")
    print(f"  kedi run hello.kedi:  {start['kedi_run_hello_ms']:7.1f} ms")
    print(f"  import line:          {start['import_line_ms']:7.1f} ms")
    print(f"  ratio:                {start['ratio']:7.2f}x (target <= 1.5x); model framework imported: {start['framework_imported']}")

    try:
        from bench import frameworks
    except ImportError:
        return
    frameworks.report(options.calls, options.repeat)


if __name__ == "__main__":
    main()
