"""History benchmarks: `python bench/history.py`.

Each entry of `BENCHMARKS` is a function returning `Row`s; `main` runs them in
order and prints one line per row. The operations part measures normalize,
sanitize and trim on 10k- and 100k-message histories and reports the time per
10k messages at both sizes and their ratio: the operations are linear, so the
ratio must stay at or below `MAX_RATIO` (the script exits 1 otherwise).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kedi.history import (  # noqa: E402 - after the path set-up above
    Message,
    Part,
    ToolCall,
    normalize_history,
    sanitize_history,
    trim_history,
)

SMALL = 10_000
LARGE = 100_000
MAX_RATIO = 1.3
ROUNDS = 6
SMALL_RUNS_PER_ROUND = LARGE // SMALL
"""Both sizes are timed in interleaved rounds (so background load hits both
alike) on process CPU time, and the best run counts: the least disturbed."""


@dataclass(frozen=True)
class Row:
    """One printed figure."""

    name: str
    value: float
    unit: str
    ok: bool = True
    """False when the figure breaks its limit (makes the script fail)."""


def make_history(size: int) -> list[Message]:
    """A realistic history of `size` messages, cycling through a 6-message turn.

    Each turn: a user prompt (every other one with an http part and an unsafe
    file part), an assistant message with two calls (one with truncated args),
    one result, a result for an unknown call, and the final reply; so repair
    synthesizes one result and drops one per turn, and sanitize drops a part.
    """
    history: list[Message] = []
    turn = 0
    while len(history) < size:
        run = f"run-{turn}"
        parts = []
        if turn % 2 == 0:
            parts = [
                Part(kind="image", url=f"https://example.com/{turn}.png"),
                Part(kind="image", url=f"file:///tmp/{turn}.png"),
            ]
        calls = [
            ToolCall(id=f"a{turn}", name="lookup", args=f'{{"q": "item {turn}"}}'),
            ToolCall(id=f"b{turn}", name="search", args='{"q": "trunc'),
        ]
        history += [
            Message(role="user", content=f"question {turn}", parts=parts, run_id=run),
            Message(role="assistant", tool_calls=calls, run_id=run),
            Message(role="tool", tool_call_id=f"a{turn}", tool_name="lookup", content="found", run_id=run),
            Message(role="tool", tool_call_id=f"ghost{turn}", content="stray", run_id=run),
            Message(role="assistant", content=f"answer {turn}", run_id=run),
            Message(role="user", content="thanks", run_id=run),
        ]
        turn += 1
    return history[:size]


def cpu_time(operation: Callable[[list[Message]], object], history: list[Message]) -> float:
    """CPU seconds of one run of `operation` on `history`."""
    start = time.process_time()
    operation(history)
    return time.process_time() - start


def scaling(name: str, operation: Callable[[list[Message]], object]) -> list[Row]:
    """Time `operation` per 10k messages at both sizes, and their ratio."""
    small, large = make_history(SMALL), make_history(LARGE)
    best_small = best_large = float("inf")
    for _ in range(ROUNDS):
        for _ in range(SMALL_RUNS_PER_ROUND):
            best_small = min(best_small, cpu_time(operation, small))
        best_large = min(best_large, cpu_time(operation, large))
    per_10k_small = best_small * 10_000 / SMALL
    per_10k_large = best_large * 10_000 / LARGE
    ratio = per_10k_large / per_10k_small
    return [
        Row(f"{name}: per 10k messages, 10k history", per_10k_small * 1000, "ms"),
        Row(f"{name}: per 10k messages, 100k history", per_10k_large * 1000, "ms"),
        Row(f"{name}: ratio 100k/10k (limit {MAX_RATIO})", ratio, "x", ratio <= MAX_RATIO),
    ]


def bench_normalize() -> list[Row]:
    """normalize_history (C3 repair)."""
    return scaling("normalize", normalize_history)


def bench_sanitize() -> list[Row]:
    """sanitize_history (C5)."""
    return scaling("sanitize", sanitize_history)


def bench_trim() -> list[Row]:
    """trim_history(1000) (C6)."""
    return scaling("trim(1000)", trim_history(1000))


BENCHMARKS: list[Callable[[], list[Row]]] = [
    bench_normalize,
    bench_sanitize,
    bench_trim,
    # Lead: add the lane benchmarks here ("commit cost per turn",
    # "memory per 1,000 turns"), each a function returning Rows.
]


def main() -> int:
    """Run every benchmark, print its rows, and return 1 if any row broke its limit."""
    failed = False
    for benchmark in BENCHMARKS:
        for row in benchmark():
            mark = "" if row.ok else "  <-- over the limit"
            print(f"{row.name:<48} {row.value:10.3f} {row.unit}{mark}")
            failed = failed or not row.ok
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
