"""Cache misses of the "repair scaling" figures, simulated: `python bench/repair_cachegrind.py [normalize|sanitize]`.

A diagnostic for `bench/scale.py`'s repair scaling (issue 16) that does not
depend on the machine's load: under valgrind's callgrind, with its cache
simulator set to this VM's first-level data cache (48 KiB) and its 2 MiB
second-level cache as the last level, it counts the instructions and the
simulated misses of one 10k sample (one run on each of the 100k history's
ten 10k slices) and of one 100k run, taken as `bench/history.py`'s
`scaling` takes them (the histories frozen, one collection before each
sample, results freed untimed, after one warm-up run of each). Page faults
are not simulated; `bench/repair_excess.py` counts them.

Each run is timed inside `functools.reduce`, which callgrind is told to
count (`--toggle-collect`) and to dump after, so the set-up (about 3 s
natively) runs uninstrumented. Takes about 2.5 minutes; needs valgrind.
"""

from __future__ import annotations

import functools
import gc
import glob
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVENTS = ("Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw")


def child(name: str) -> None:
    """Under callgrind: switch instrumentation on after the set-up, then run the two samples."""
    sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
    from history import LARGE, SMALL, make_history

    from kedi.history import normalize_history, sanitize_history

    operation = {"normalize": normalize_history, "sanitize": sanitize_history}[name]
    large = make_history(LARGE)
    lanes = [large[start : start + SMALL] for start in range(0, LARGE, SMALL)]
    gc.collect()
    gc.freeze()
    subprocess.run(
        ["callgrind_control", "-i", "on", str(os.getpid())], check=True, capture_output=True
    )
    for history in [*lanes, large]:  # warm-up, not counted
        operation(history)

    def run(_: object, history: object) -> object:
        return operation(history)  # type: ignore[arg-type]

    for sample in (lanes, [large]):
        gc.collect()
        for history in sample:
            result = functools.reduce(run, [history], None)  # counted and dumped
            del result  # freed untimed, as in the bench


def totals(path: str) -> list[int]:
    """The event totals of one callgrind dump."""
    for line in Path(path).read_text().splitlines():
        if line.startswith("totals:"):
            return [int(value) for value in line.split()[1:]]
    raise ValueError(f"no totals in {path}")


def main() -> None:
    """Run the child under callgrind and print both samples' figures per 100k messages."""
    name = sys.argv[1] if len(sys.argv) > 1 else "normalize"
    with tempfile.TemporaryDirectory() as directory:
        out = os.path.join(directory, "callgrind.out")
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={out}",
                "--instr-atstart=no",
                "--collect-atstart=no",
                "--toggle-collect=functools_reduce",
                "--dump-after=functools_reduce",
                "--cache-sim=yes",
                "--D1=49152,12,64",
                "--LL=2097152,16,64",
                sys.executable,
                __file__,
                "--child",
                name,
            ],
            check=True,
            capture_output=True,
        )
        dumps = sorted(glob.glob(out + ".*"), key=lambda path: int(path.rsplit(".", 1)[1]))
        small = [sum(column) for column in zip(*(totals(path) for path in dumps[:-1]), strict=True)]
        large = totals(dumps[-1])
    figures = {
        label: dict(zip(EVENTS, sample, strict=True))
        for label, sample in (("10k", small), ("100k", large))
    }
    print(f"{name}_history, per 100k messages (10k: ten slices; 100k: one run)")
    for label, events in figures.items():
        print(
            f"  {label:>4}: instructions {events['Ir'] / 1e6:7.1f} M,"
            f" first-level misses {(events['D1mr'] + events['D1mw']) / 1e3:7.1f} k,"
            f" 2 MiB-level misses {(events['DLmr'] + events['DLmw']) / 1e3:7.1f} k"
        )
    extra = {event: figures["100k"][event] - figures["10k"][event] for event in EVENTS}
    print(
        f"  100k - 10k: instructions {extra['Ir'] / 1e6:+.1f} M,"
        f" 2 MiB-level misses {(extra['DLmr'] + extra['DLmw']) / 1e3:+.1f} k"
    )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
    else:
        main()
