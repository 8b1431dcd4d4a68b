"""Parallel speed-ups on simulated latency, in one run.

    python bench/parallel.py [--rounds 3] [--delay-ms 200]

Every model call is a `script:` entry matched by its output name (`when`)
with `delay_ms` of simulated latency, so a call costs that long whatever
order calls arrive in. Wall times, best of interleaved rounds:

1. 16 independent calls, sequential versus `parallel=16` (target: at least 8x
   faster).
2. 4 independent chains of 4 dependent calls (each step's prompt uses the
   previous step's capture) with `parallel=16`, versus ONE chain run
   sequentially (target: within 1.5x of that one chain).
3. The same 4x4 program with `> history: enabled`: every call shares one
   lane, whose turns commit in source order, so the run serializes. The
   figure is reported against the sequential run of the same program, and
   the order is verified from the transcript (each request must send
   exactly the earlier calls' turns, in source order).

Every run's result is checked against the scripted replies, and every chain
step's prompt must carry the previous step's value. The script exits 1 when
a target is missed.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import kedi  # noqa: E402 - after the path set-up above
from bench.overhead import Row, print_rows  # noqa: E402

WORKERS = 16
SPEEDUP_TARGET = 8.0
CHAINS_TARGET = 1.5


@dataclass(frozen=True)
class Case:
    """A benchmark program and what it must do."""

    source: str
    captures: tuple[str, ...]
    """Each call's capture name, in source order."""
    prompts: tuple[str, ...]
    """Each call's rendered prompt, in source order."""
    expected: str
    """The program's result."""


def reply(name: str) -> str:
    """The scripted value of capture `name`."""
    return f"v-{name}"


def program(
    calls: list[tuple[str, str, str]], returned: list[str], *, history: bool = False
) -> Case:
    """A `Case` from (template text, rendered prompt, capture) per call and the captures it returns."""
    lines = ["> history: enabled"] if history else []
    lines += [template for template, _, _ in calls]
    lines.append("= " + " ".join(f"<{name}>" for name in returned))
    return Case(
        "\n".join([*lines, ""]),
        tuple(name for _, _, name in calls),
        tuple(prompt for _, prompt, _ in calls),
        " ".join(map(reply, returned)),
    )


def independent(count: int) -> Case:
    """`count` one-capture calls that use nothing from each other."""
    names = [f"r{i}" for i in range(1, count + 1)]
    calls = [
        (f">> Independent call {n}: [{n}: str].", f"Independent call {n}: [{n}].", n) for n in names
    ]
    return program(calls, names)


def chains(count: int, steps: int, *, history: bool = False) -> Case:
    """`count` chains of `steps` calls; each step's prompt uses the previous step's capture."""
    calls = []
    for chain in range(1, count + 1):
        for step in range(1, steps + 1):
            name, previous = f"c{chain}s{step}", f"c{chain}s{step - 1}"
            template = after = ""
            if step > 1:
                template, after = f" after <{previous}>", f" after {reply(previous)}"
            calls.append(
                (
                    f">> Chain {chain} step {step}{template}: [{name}: str].",
                    f"Chain {chain} step {step}{after}: [{name}].",
                    name,
                )
            )
    return program(calls, [f"c{chain}s{steps}" for chain in range(1, count + 1)], history=history)


def write_script(case: Case, delay_ms: float, path: Path) -> str:
    """Write the `script:` file answering `case` (one `when` entry per call); return its model name."""
    entries = [
        {"when": {"outputs": [name]}, "outputs": {name: reply(name)}, "delay_ms": delay_ms}
        for name in case.captures
    ]
    path.write_text(json.dumps(entries), encoding="utf-8")
    return f"script:{path}"


@dataclass(frozen=True)
class Run:
    """One timed run: wall seconds and the transcript records."""

    wall: float
    records: list[dict[str, Any]]


def run(case: Case, model: str, parallel: int) -> Run:
    """Run `case` once on `model` (a fresh script adapter each run) and check what it did.

    The result must be the scripted one, and the prompts sent must be the
    expected ones (so each chain step saw the previous step's value).
    """
    compiled = kedi.compile(case.source, path="parallel.kedi")
    records: list[dict[str, Any]] = []
    started = time.perf_counter()
    result = compiled.run_sync(model=model, parallel=parallel, transcript=records.append)
    wall = time.perf_counter() - started
    if result != case.expected:
        raise SystemExit(f"bench/parallel.py: wrong result {result!r}, expected {case.expected!r}")
    if sorted(str(r["messages"][-1]["content"]) for r in records) != sorted(case.prompts):
        raise SystemExit("bench/parallel.py: the requests sent are not the program's prompts")
    return Run(wall, records)


def in_source_order(case: Case, records: list[dict[str, Any]]) -> bool:
    """Whether request k sent calls 1..k-1's turns (prompt, reply) in source order, then prompt k.

    Checked on the transcript of a history-enabled run whose calls share one lane.
    """
    if len(records) != len(case.captures):
        return False
    for index, record in enumerate(records):
        expected: list[Any] = []
        for name, prompt in zip(case.captures[:index], case.prompts[:index], strict=True):
            expected += [prompt, {name: reply(name)}]
        expected.append(case.prompts[index])
        sent = [
            m["content"] if m["role"] == "user" else json.loads(m["content"])
            for m in record["messages"]
        ]
        if sent != expected:
            return False
    return True


def timed_runs(cases: dict[str, tuple[Case, str, int]], rounds: int) -> dict[str, list[Run]]:
    """Every run of each (case, model, workers), over `rounds` interleaved rounds."""
    runs: dict[str, list[Run]] = {label: [] for label in cases}
    for _ in range(rounds):
        for label, (case, model, workers) in cases.items():
            runs[label].append(run(case, model, workers))
    return runs


def report(rounds: int, delay_ms: float) -> list[Row]:
    """Time the three comparisons (see the module docs); return their rows."""
    flat, grid, one, shared = (
        independent(16),
        chains(4, 4),
        chains(1, 4),
        chains(4, 4, history=True),
    )
    with tempfile.TemporaryDirectory(prefix="kedi-bench-") as folder:
        models = {
            case.source: write_script(case, delay_ms, Path(folder) / f"script{index}.json")
            for index, case in enumerate((flat, grid, one, shared))
        }
        cases = {
            "16 independent, sequential": (flat, models[flat.source], 0),
            f"16 independent, parallel={WORKERS}": (flat, models[flat.source], WORKERS),
            "1 chain of 4, sequential": (one, models[one.source], 0),
            f"4 chains of 4, parallel={WORKERS}": (grid, models[grid.source], WORKERS),
            "4x4 + history (one lane), sequential": (shared, models[shared.source], 0),
            f"4x4 + history (one lane), parallel={WORKERS}": (
                shared,
                models[shared.source],
                WORKERS,
            ),
        }
        runs = timed_runs(cases, rounds)
    best = {label: min(r.wall for r in label_runs) for label, label_runs in runs.items()}
    labels = list(cases)
    speedup = best[labels[0]] / best[labels[1]]
    chains_ratio = best[labels[3]] / best[labels[2]]
    ordered = all(in_source_order(shared, r.records) for label in labels[4:] for r in runs[label])
    return [
        *(Row(label, best[label] * 1e3, "ms") for label in labels),
        Row(
            "speed-up, 16 independent: sequential / parallel",
            speedup,
            "x",
            f">= {SPEEDUP_TARGET:g}x",
            speedup >= SPEEDUP_TARGET,
        ),
        Row(
            "4 chains parallel / 1 chain sequential",
            chains_ratio,
            "x",
            f"<= {CHAINS_TARGET:g}x",
            chains_ratio <= CHAINS_TARGET,
        ),
        Row(
            "4x4 + history: parallel / sequential (serialized)",
            best[labels[5]] / best[labels[4]],
            "x",
        ),
        Row(
            f"4x4 + history: lane in source order: {'yes' if ordered else 'NO'}",
            float(ordered),
            "",
            "yes",
            ordered,
        ),
    ]


def main() -> int:
    """Run the comparisons, print them, and return 1 if a target was missed."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rounds", type=int, default=3, help="interleaved rounds; the best counts (default 3)"
    )
    parser.add_argument(
        "--delay-ms", type=float, default=200, help="simulated latency per call (default 200)"
    )
    options = parser.parse_args()
    rows = report(options.rounds, options.delay_ms)
    print_rows(
        f"parallel speed-ups ({options.delay_ms:g} ms per call, wall, best of {options.rounds} rounds)",
        rows,
    )
    return 1 if any(not row.ok for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
