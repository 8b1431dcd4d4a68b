"""CPU per row of `kedi batch` on the local engine: without HTTP, and against the bare loop.

    python bench/batch_cpu.py [--rows 2000] [--latency-ms 50] [--repeat 3]

1. Without HTTP: the job of `bench/batch.py` on the `offline` model, which
   sends nothing, so what is measured is kedi's own work per row (the
   program run, the ledger's writer thread, RESULTS): `time.process_time`
   per row over the rows, split into the main thread (`time.thread_time`)
   and the rest (the writer thread).
2. With HTTP: the bare `asyncio` + `httpx` loop and `kedi batch` on the
   openai adapter against the counting server (`latency-ms`), back to back
   in this process: CPU per row of each, and of kedi's main thread.

CPU per row moves much less with the machine's load than rows per second
do; `--repeat` runs of each, medians printed. Start-up (imports, compiling
the program, opening the store) is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for entry in (ROOT, ROOT / "bench"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from batch import httpx_loop, kedi_rate, open_job, request_body  # noqa: E402

from kedi.batch.engine import LocalEngine, run_batch  # noqa: E402
from kedi.batch.limits import RateLimiter  # noqa: E402
from kedi.batch.worker import BatchSpec  # noqa: E402
from tests.batch.helpers import CountingServer, write_job  # noqa: E402

Cpu = tuple[float, float]
"""CPU milliseconds per row: the process, its main thread."""


def _clocks() -> Cpu:
    return time.process_time(), time.thread_time()


def _per_row(start: Cpu, end: Cpu, rows: int) -> Cpu:
    return tuple((after - before) / rows * 1000 for before, after in zip(start, end, strict=True))  # type: ignore[return-value]


def offline_cpu(folder: Path, job: str, parallel: int) -> Cpu:
    """The job in `folder` on the offline model: CPU per row from the rows' start to their end."""
    program, source, rows, store, ledger = open_job(folder, job)
    spec = BatchSpec(
        job=job, program_source=source, program_path=str(program), store=store, model="offline"
    )
    engine = LocalEngine(spec, RateLimiter(rpm=None, tpm=None, parallel=parallel))
    clocks: list[Cpu] = []
    session = engine.session

    @asynccontextmanager
    async def metered() -> AsyncIterator[None]:
        async with session():
            clocks.append(_clocks())
            yield
            clocks.append(_clocks())

    engine.session = metered  # type: ignore[method-assign]  # counted from the rows' start to their end
    out = folder / f"{job}.jsonl"
    asyncio.run(
        run_batch(job=job, rows=rows, total=len(rows), ledger=ledger, engine=engine, out=out)
    )
    ledger.close()
    assert len(out.read_text().splitlines()) == len(rows), "rows missing from RESULTS"
    return _per_row(clocks[0], clocks[1], len(rows))


def measured(run: Callable[[], Any], rows: int) -> Cpu:
    start = _clocks()
    run()
    return _per_row(start, _clocks(), rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--parallel", type=int, default=64)
    parser.add_argument("--latency-ms", type=float, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    options = parser.parse_args()
    figures: dict[str, list[float]] = {}

    def note(name: str, value: float) -> None:
        figures.setdefault(name, []).append(value)

    with (
        tempfile.TemporaryDirectory() as temp,
        CountingServer("--latency-ms", str(options.latency_ms)) as server,
    ):
        folder = Path(temp)
        write_job(folder, options.rows)
        (folder / "warm").mkdir()
        write_job(folder / "warm", 200)
        offline_cpu(folder / "warm", "warm-offline", options.parallel)
        kedi_rate(folder / "warm", server.base_url, options.parallel, "warm-http")
        for trial in range(options.repeat):
            total, main = offline_cpu(folder, f"offline-{trial}", options.parallel)
            note("no HTTP: total", total)
            note("no HTTP: main thread", main)
            note("no HTTP: other threads (writer)", total - main)
            bare, _ = measured(
                lambda: asyncio.run(
                    httpx_loop(server.base_url, options.rows, options.parallel, request_body)
                ),
                options.rows,
            )
            note("HTTP: bare loop", bare)
            total, main = measured(
                partial(kedi_rate, folder, server.base_url, options.parallel, f"http-{trial}"),
                options.rows,
            )
            note("HTTP: kedi batch, total", total)
            note("HTTP: kedi batch, main thread", main)
            print(
                f"run {trial + 1}: "
                + ", ".join(f"{name} {values[-1]:.2f}" for name, values in figures.items()),
                flush=True,
            )
    print(
        f"\n{options.rows} rows, --parallel {options.parallel}, {options.latency_ms:g} ms latency, load {os.getloadavg()[0]:.1f}"
    )
    print("| CPU per row (ms) | median | runs |\n| --- | --- | --- |")
    for name, values in figures.items():
        print(
            f"| {name} | {statistics.median(values):.2f} | {', '.join(f'{v:.2f}' for v in values)} |"
        )


if __name__ == "__main__":
    main()
