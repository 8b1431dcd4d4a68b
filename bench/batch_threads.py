"""CPU per row of one `kedi batch` run, by process and by thread (Linux `/proc`).

    python bench/batch_threads.py [--engine ray|local] [--rows 3000] [--actors 2] [--latency-ms 50]

The job of `bench/batch.py` against the counting server, `--parallel 64`,
measured from the rows' start to their end: every process of the engine
(the driver and, on Ray, the cluster's processes and actors), each thread
named as the kernel and, for the driver and the row actors, as Python names
it (`py-spy dump`, when py-spy is installed). The counting server's own CPU
is printed apart. Where `bench/batch.py` says how fast, this says where the
CPU goes.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for entry in (ROOT, ROOT / "bench"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from batch import open_job  # noqa: E402

from kedi.batch.engine import Engine, LocalEngine, run_batch  # noqa: E402
from kedi.batch.limits import RateLimiter  # noqa: E402
from kedi.batch.worker import BatchSpec  # noqa: E402
from tests.batch.helpers import CountingServer, private_ray, write_job  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
Threads = dict[tuple[int, int], tuple[str, float]]
"""(pid, tid) -> (the thread's kernel name, CPU seconds so far)."""


def _stat(path: Path) -> tuple[str, list[str]]:
    text = path.read_text()
    return text[text.find("(") + 1 : text.rfind(")")], text[text.rfind(")") + 2 :].split()


def family(root: int, exclude: int) -> dict[int, str]:
    """`root` and its descendants but `exclude`, each with its command line."""
    parents: dict[int, int] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            parents[int(entry)] = int(_stat(Path(f"/proc/{entry}/stat"))[1][1])
        except OSError:  # it ended meanwhile
            continue
    found, queue = {}, [root]
    while queue:
        pid = queue.pop()
        try:
            found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        queue += [child for child, parent in parents.items() if parent == pid and child != exclude]
    return found


def threads(pids: dict[int, str]) -> Threads:
    used: Threads = {}
    for pid in pids:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                name, fields = _stat(Path(f"/proc/{pid}/task/{tid}/stat"))
                used[pid, int(tid)] = (name, (int(fields[11]) + int(fields[12])) / TICK)
        except OSError:
            continue
    return used


def python_names(pids: dict[int, str]) -> dict[int, str]:
    """Thread id -> Python's name for it, for the driver and the row actors (needs py-spy)."""
    names: dict[int, str] = {}
    if shutil.which("py-spy") is None:
        return names
    for pid, command in pids.items():
        if pid == os.getpid() or "RowActor" in command:
            dump = subprocess.run(
                ["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=60
            ).stdout
            for match in re.finditer(r'Thread (\d+) \([^)]*\)(?:: "([^"]*)")?', dump):
                names[int(match.group(1))] = match.group(2) or ""
    return names


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--engine", choices=("ray", "local"), default="ray")
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--actors", type=int, default=2)
    parser.add_argument("--latency-ms", type=float, default=50)
    options = parser.parse_args()
    os.environ.update(private_ray(Path(tempfile.mkdtemp(prefix="kedi-bench-"))))
    with (
        CountingServer("--latency-ms", str(options.latency_ms)) as server,
        tempfile.TemporaryDirectory() as temp,
    ):
        folder = Path(temp)
        write_job(folder, options.rows)
        program, source, rows, store, ledger = open_job(folder, options.engine)
        spec = BatchSpec(
            job=options.engine,
            program_source=source,
            program_path=str(program),
            store=store,
            adapter="openai",
            model="test-model",
            base_url=server.base_url,
        )
        if options.engine == "ray":
            from kedi.batch.ray_engine import RayEngine

            engine: Engine = RayEngine(
                spec, address="local", actors=options.actors, rpm=None, tpm=None, parallel=64
            )
        else:
            engine = LocalEngine(spec, RateLimiter(rpm=None, tpm=None, parallel=64))
        clocks: list[Threads] = []
        server_cpu: list[float] = []
        processes: dict[int, str] = {}
        names: dict[int, str] = {}
        session = engine.session

        def server_seconds() -> float:
            fields = _stat(Path(f"/proc/{server.pid}/stat"))[1]
            return (int(fields[11]) + int(fields[12])) / TICK

        @asynccontextmanager
        async def metered() -> AsyncIterator[None]:
            async with session():
                processes.update(family(os.getpid(), server.pid))
                names.update(python_names(processes))
                clocks.append(threads(processes))
                server_cpu.append(server_seconds())
                yield
                clocks.append(threads(processes))
                server_cpu.append(server_seconds())

        engine.session = metered  # type: ignore[method-assign]  # counted from the rows' start to their end
        summary = asyncio.run(
            run_batch(
                job=options.engine,
                rows=rows,
                total=len(rows),
                ledger=ledger,
                engine=engine,
                out=folder / "out.jsonl",
            )
        )
        ledger.close()
    before, after = clocks
    per_row = 1000 / len(rows)
    print(
        f"{options.engine}, {len(rows)} rows: {summary.counts.rate():,.0f} rows/s, "
        f"load {os.getloadavg()[0]:.1f}; ms CPU per row"
    )
    total = 0.0
    for pid, command in processes.items():
        spent = {
            tid: (name, seconds - before.get((pid, tid), (name, 0.0))[1])
            for (owner, tid), (name, seconds) in after.items()
            if owner == pid
        }
        process_total = sum(seconds for _, seconds in spent.values())
        total += process_total
        if process_total * per_row < 0.01:
            continue
        label = "driver" if pid == os.getpid() else command[:50].strip()
        print(f"{pid} {label}: {process_total * per_row:.2f}")
        for tid, (name, seconds) in sorted(spent.items(), key=lambda item: -item[1][1]):
            if seconds * per_row >= 0.01:
                print(f"    {tid} {name:16} {names.get(tid, ''):28} {seconds * per_row:.2f}")
    print(
        f"all: {total * per_row:.2f}; the counting server: {(server_cpu[1] - server_cpu[0]) * per_row:.2f}"
    )


if __name__ == "__main__":
    main()
