"""Where the 100k excess of normalize/sanitize goes: `python bench/repair_excess.py [normalize|sanitize]`.

A diagnostic for the "repair scaling" figures of `bench/scale.py` (issue 16),
not a benchmark with a target. For one sample of 100,000 messages at each
size, the way `bench/history.py`'s `scaling` takes it (one 100k run; ten
runs on the 100k history's 10k slices; and the previous method: ten runs on
one separate 10k history, a collection before each, with that history built
before and after the 100k one), it prints the best CPU
time over the rounds and, for that best sample: the cyclic collector's
collections per generation and their time (`gc.callbacks`), the minor page
faults (`getrusage`), and then, in one untimed pass, how many items of
lists longer than 1,000 the collections walked (each such list is walked
item by item, and at 100k its items lie out of cache).

Run with `PYTHONMALLOC=malloc MALLOC_TRIM_THRESHOLD_=4000000000
MALLOC_MMAP_THRESHOLD_=4000000000 MALLOC_TOP_PAD_=200000000` to see the
figures without page faults (glibc then keeps freed memory), or with
`KEDI_BENCH_NO_GC=1` to switch the collector off throughout.
"""

from __future__ import annotations

import gc
import os
import resource
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from history import LARGE, SMALL, make_history  # noqa: E402

from kedi.history import Message, normalize_history, sanitize_history  # noqa: E402

ROUNDS = 20


@dataclass
class Sample:
    """One sample's figures."""

    seconds: float = 0.0
    faults: int = 0
    collections: list[int] = field(default_factory=lambda: [0, 0, 0])
    collector_seconds: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])


class CollectorClock:
    """A `gc.callbacks` hook adding each collection's count and duration to a sample."""

    def __init__(self) -> None:
        self.sample = Sample()
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            generation = info["generation"]
            self.sample.collections[generation] += 1
            self.sample.collector_seconds[generation] += time.perf_counter() - self._started


def run_sample(
    operation: Callable[[list[Message]], object],
    histories: list[list[Message]],
    collect_each: bool,
    clock: CollectorClock,
) -> Sample:
    """Time one sample as `bench/history.py` does; collection counts and faults come along."""
    clock.sample = sample = Sample()
    for index, history in enumerate(histories):
        if collect_each or index == 0:  # the bench's own collections are not counted
            gc.callbacks.remove(clock)
            gc.collect()
            gc.callbacks.append(clock)
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.process_time()
        result = operation(history)
        sample.seconds += time.process_time() - start
        sample.faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
        del result
    return sample


def list_items_walked(
    operation: Callable[[list[Message]], object], histories: list[list[Message]], collect_each: bool
) -> int:
    """Items of lists longer than 1,000 in the generations each collection of one sample walks."""
    walked = 0

    def count(phase: str, info: dict[str, Any]) -> None:
        nonlocal walked
        if phase == "start":
            for generation in range(info["generation"] + 1):
                for item in gc.get_objects(generation):
                    if type(item) is list and len(item) > 1_000:
                        walked += len(item)

    gc.collect()
    for history in histories:
        if collect_each:
            gc.collect()
        gc.callbacks.append(count)
        result = operation(history)
        gc.callbacks.remove(count)
        del result
    return walked


def main() -> None:
    """Print the figures for the operation named on the command line (normalize by default)."""
    name = sys.argv[1] if len(sys.argv) > 1 else "normalize"
    operation = {"normalize": normalize_history, "sanitize": sanitize_history}[name]
    old_history = make_history(SMALL)  # before the 100k one, as bench/history.py builds it
    large = make_history(LARGE)
    samples = {
        "100k: one run": ([large], True),
        "10k: ten slices, one collection (current)": (
            [large[start : start + SMALL] for start in range(0, LARGE, SMALL)],
            False,
        ),
        "10k: one history ten times, collection before each (old)": (
            [old_history] * (LARGE // SMALL),
            True,
        ),
        # The same as the old method, on a 10k history built after the 100k one:
        # where its objects lie in memory changes its figure.
        "10k: the old method, history built after the 100k one": (
            [make_history(SMALL)] * (LARGE // SMALL),
            True,
        ),
    }
    gc.collect()
    gc.freeze()
    if os.environ.get("KEDI_BENCH_NO_GC"):
        gc.disable()
    clock = CollectorClock()
    gc.callbacks.append(clock)
    best: dict[str, Sample] = {}
    for _ in range(ROUNDS):
        for label, (histories, collect_each) in samples.items():
            sample = run_sample(operation, histories, collect_each, clock)
            if label not in best or sample.seconds < best[label].seconds:
                best[label] = sample
    gc.callbacks.remove(clock)
    per_10k = 10_000 / LARGE * 1000  # ms per 10k messages, from a sample's seconds
    large_seconds = best["100k: one run"].seconds
    print(f"{name}_history, best of {ROUNDS} rounds, per 10k messages")
    for label, sample in best.items():
        walked = list_items_walked(operation, *samples[label])
        collector = " / ".join(f"{seconds * per_10k:.2f}" for seconds in sample.collector_seconds)
        print(
            f"  {label:<58} {sample.seconds * per_10k:6.2f} ms"
            f"  (100k / this {large_seconds / sample.seconds:.3f})\n"
            f"      collections gen0/1/2 {sample.collections}, their time {collector} ms,"
            f" minor faults {sample.faults}, list items walked {walked:,}"
        )


if __name__ == "__main__":
    main()
