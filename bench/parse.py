"""Parse throughput of kedi against `ast.parse`, and the parser's start-up cost.

Run from the repository root:

    python bench/parse.py [--processes N]

It prints, in one run:

* throughput (MB/s, µs per line) parsing a generated 10,000-line program and
  the whole documentation corpus, next to `ast.parse` on Python source of
  about the same size, with the kedi/ast time ratio per byte;
* the same ratio for the lexer and LALR loop alone (every builder call replaced
  by a no-op): the floor that no builder work can go below;
* the time to import kedi's parser and parse a first program in a fresh
  process, with kedi's table cache cold (an empty `KEDI_CACHE_DIR`: Lark
  analyses the grammar) and warm.

The throughput comparisons run in N fresh processes (5 by default), each with
kedi and `ast.parse` in interleaved rounds. One process's figures are not
enough: `ast.parse` alone, best of 15 rounds on the same text, varies by up to
10% from one process to the next (memory layout and hash seeds), so the report
gives the median of the processes' ratios and their range.
"""

from __future__ import annotations

import argparse
import ast
import bisect
import functools
import itertools
import json
import os
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import textwrap
import time
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from kedi.source import SourceFile  # noqa: E402
from kedi.syntax import ast as kedi_ast  # noqa: E402
from kedi.syntax import parse  # noqa: E402
from kedi.syntax._builder import Builder  # noqa: E402
from kedi.syntax._grammar import BUILD, ParseTables, parse_tables  # noqa: E402
from kedi.syntax.parser import feed, run  # noqa: E402

CORPUS = REPO.parent / "shared" / "conformance" / "kedi-docs"
PYTHON_SOURCES = (
    "argparse.py",
    "textwrap.py",
    "string.py",
    "dataclasses.py",
    "inspect.py",
    "typing.py",
    "pathlib.py",
)
UNIT = """\
~Ticket{n}(id: int, title: str, tags: list[str] = `[]`)

@classify{n}(message: str, strict: bool = `False`) -> Ticket{n}:
  ###
  Classify one support message.
  ###
  > model: gpt-5
  > settings:
      temperature: 0.2
  [prefix] = Ticket <`len(message)`> \\#{n}
  >> Message: <message> (strict: <strict>).
  Classify it as [ticket: Ticket{n}] and rate [urgency: int].
  [summary] << Summarize <message> for <prefix> in one line.
  = `ticket`

```
LIMIT_{n} = {n} * 2
```
[note{n}: str] = <classify{n}(`"printer jammed"`, `True`)> with \\<escapes\\>
= Result <note{n}>: <`LIMIT_{n} + 1`>

"""


def generated_program(lines: int) -> str:
    """Return a realistic program of about `lines` lines, built from one repeated unit."""
    parts = []
    count = 0
    n = 0
    while count < lines:
        unit = UNIT.format(n=n)
        parts.append(unit)
        count += unit.count("\n")
        n += 1
    return "".join(parts)


def python_source(size: int) -> str:
    """Return standard-library Python of `size` bytes, cut after the top-level statement that reaches it.

    The size must match: `ast.parse` is faster per byte on smaller sources (on
    one machine 9.8 MB/s on the first 44 KB of these modules, 6.5 MB/s on all
    314 KB), so a larger comparator flatters kedi.
    """
    return _statements_from(0, size)


def python_windows(size: int, count: int) -> list[str]:
    """Return `count` texts of `size` bytes, from evenly spaced places in the modules.

    `ast.parse`'s speed per byte on 40 KB of Python depends on what the 40 KB
    hold (from 8.6 to 15 MB/s across these modules, on one machine), so one
    window would measure its content more than the parser.
    """
    step = (len(_stdlib()[0]) - size) // count
    return [_statements_from(index * step, size) for index in range(count)]


def python_pieces(sizes: list[int], selections: int) -> list[str]:
    """Return `selections` sets of standard-library snippets, one per size in each set.

    Each snippet is the smallest unused one at least its size: a function, class
    or statement of the same modules, dedented so it parses on its own. The Python
    side of a corpus of small files is as many small parses of the same sizes
    (each parse has a fixed cost, `ast.parse`'s too); several disjoint sets even
    out what the snippets hold.
    """
    text = _stdlib()[0].decode()
    lines = text.splitlines(True)
    found: dict[str, None] = {}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.stmt):
            snippet = textwrap.dedent("".join(lines[node.lineno - 1 : node.end_lineno]))
            try:
                ast.parse(snippet)
            except SyntaxError:  # a part of a statement that needs its parent (`elif`, ...)
                continue
            found[snippet] = None
    pool = sorted((len(snippet.encode()), snippet) for snippet in found)
    chosen: list[str] = []
    for _ in range(selections):
        for size in sizes:
            index = bisect.bisect_left(pool, (size, ""))
            chosen.append(pool.pop(min(index, len(pool) - 1))[1])
    return chosen


@lru_cache(maxsize=1)
def _stdlib() -> tuple[bytes, list[int]]:
    """Return the modules of `PYTHON_SOURCES` as one UTF-8 text, and where each top-level statement ends."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    text = "\n".join((stdlib / name).read_text(encoding="utf-8") for name in PYTHON_SOURCES)
    line_ends = list(itertools.accumulate(len(line.encode()) for line in text.splitlines(True)))
    ends = [line_ends[statement.end_lineno - 1] for statement in ast.parse(text).body]  # type: ignore[operator]
    return text.encode(), ends


def _statements_from(offset: int, size: int) -> str:
    """Return the modules' top-level statements from the first that starts at or after byte
    `offset` (with the comments before it) up to the one that reaches `size` bytes."""
    data, ends = _stdlib()
    start = next((end for end in [0, *ends] if end >= offset), 0)
    stop = next((end for end in ends if end - start >= size), len(data))
    return data[start:stop].decode()


def timings(functions: list[Callable[[], object]], rounds: int) -> list[list[float]]:
    """Return each function's wall times over `rounds` interleaved rounds.

    Interleaving exposes kedi and `ast.parse` to the same machine load.
    """
    times: list[list[float]] = [[] for _ in functions]
    for _ in range(rounds):
        for function, spent in zip(functions, times, strict=True):
            started = time.perf_counter()
            function()
            spent.append(time.perf_counter() - started)
    return times


@lru_cache(maxsize=1)
def tables_without_builder() -> ParseTables:
    """Return kedi's parse tables with every builder call replaced by a no-op."""
    tables = parse_tables()
    placeholder = kedi_ast.Text(value="", span=SourceFile("").span(0, 0))
    return replace(
        tables,
        rules=[
            (size, origin, mode, splice, (lambda _builder, _children: placeholder))
            if mode == BUILD
            else (size, origin, mode, splice, build)
            for size, origin, mode, splice, build in tables.rules
        ],
    )


def parse_without_builder(source: str) -> None:
    """Lex and parse `source` without building nodes: the lexer and LALR loop alone."""
    fed, added = feed(source)
    run(tables_without_builder(), Builder(SourceFile(source), fed), fed, added)


def compare(sources: list[str], pythons: dict[str, list[str]], rounds: int) -> dict[str, Any]:
    """Time kedi, its lexer and loop alone, and `ast.parse` on each Python comparator.

    Returns the best round of each (seconds) and the sizes, and per comparator the
    median of the per-round kedi/ast ratios per byte (less sensitive to when the
    load drops).
    """
    size = sum(len(text.encode()) for text in sources)
    times = timings(
        [
            functools.partial(_each, parse, sources),
            functools.partial(_each, parse_without_builder, sources),
            *(functools.partial(_each, ast.parse, texts) for texts in pythons.values()),
        ],
        rounds,
    )
    kedi, floor, *python_times = times
    comparators = {}
    for (name, texts), spent in zip(pythons.items(), python_times, strict=True):
        python_size = sum(len(text.encode()) for text in texts)
        per_round = [
            kedi_time / size / (python_time / python_size)
            for kedi_time, python_time in zip(kedi, spent, strict=True)
        ]
        comparators[name] = {
            "size": python_size,
            "parses": len(texts),
            "best": min(spent),
            "round_median": statistics.median(per_round),
        }
    return {
        "size": size,
        "lines": sum(text.count("\n") + 1 for text in sources),
        "kedi": min(kedi),
        "floor": min(floor),
        "python": comparators,
    }


def _each(parser: Callable[[str], object], texts: list[str]) -> None:
    """Parse each text and drop its tree, kedi's and Python's alike (kept trees cost GC time)."""
    for text in texts:
        parser(text)


def report(label: str, runs: list[dict[str, Any]], rounds: int) -> None:
    """Print one comparison over the processes' results."""
    first = runs[0]
    size, lines = first["size"], first["lines"]
    kedi = statistics.median(run["kedi"] for run in runs)
    print(f"{label}: {size:,} bytes, {lines:,} lines")
    print(
        f"  ({len(runs)} processes, {rounds} interleaved rounds each; medians of their best rounds)"
    )
    print(
        f"  kedi.parse  {size / kedi / 1e6:7.3f} MB/s  {kedi / lines * 1e6:7.1f} µs/line  ({kedi * 1e3:.1f} ms)"
    )
    for name, python in first["python"].items():
        ratios = [_ratio(run, "kedi", name) for run in runs]
        best = statistics.median(run["python"][name]["best"] for run in runs)
        print(
            f"  ast.parse   {python['size'] / best / 1e6:7.3f} MB/s  on {name}"
            f" ({python['size']:,} bytes, {python['parses']} parse{'s' if python['parses'] > 1 else ''})"
        )
        print(
            f"    kedi/ast time per byte: {statistics.median(ratios):.2f}x"
            f" (processes {min(ratios):.2f}x to {max(ratios):.2f}x; median of per-round ratios"
            f" {statistics.median(run['python'][name]['round_median'] for run in runs):.2f}x)"
        )
        floor = statistics.median(_ratio(run, "floor", name) for run in runs)
        print(f"    lexer and LALR loop alone (no-op builder): {floor:.2f}x")


def _ratio(run: dict[str, Any], key: str, name: str) -> float:
    """Return kedi's time per byte (`key`: `kedi` or `floor`) over `ast.parse`'s on comparator `name`."""
    compared = run["python"][name]
    return float(run[key]) / run["size"] / (compared["best"] / compared["size"])


def child() -> None:
    """Measure both comparisons in this process and print them as one JSON line."""
    corpus = [path.read_text(encoding="utf-8") for path in sorted(CORPUS.glob("*.kedi"))]
    if not corpus:
        raise SystemExit(f"no corpus in {CORPUS}")
    print(
        json.dumps(
            {
                "generated": compare(
                    [program := generated_program(10_000)],
                    {"stdlib Python of the same size": [python_source(len(program.encode()))]},
                    rounds=GENERATED_ROUNDS,
                ),
                "corpus": compare(
                    corpus,
                    {
                        f"stdlib snippets of the files' sizes, {SELECTIONS} sets": python_pieces(
                            [len(text.encode()) for text in corpus], SELECTIONS
                        ),
                        f"stdlib texts of the corpus's total size, {SELECTIONS} windows": (
                            python_windows(sum(len(text.encode()) for text in corpus), SELECTIONS)
                        ),
                    },
                    rounds=CORPUS_ROUNDS,
                ),
                "files": len(corpus),
            }
        )
    )


GENERATED_ROUNDS = 9
CORPUS_ROUNDS = 15
SELECTIONS = 5
"""How many Python comparators of the corpus's size, from different code (see `python_pieces`)."""


STARTUP = """
import time
started = time.perf_counter()
from kedi.syntax import _grammar, parse
imported = time.perf_counter()
_grammar.parse_tables()
loaded = time.perf_counter()
parse("> model: gpt-5\\n>> Hello <name> [reply]\\n= <reply>\\n")
done = time.perf_counter()
print(f"{imported - started:.3f} {loaded - imported:.3f} {done - loaded:.3f}")
"""


def startup(cache_dir: str) -> tuple[float, ...]:
    """Run a fresh interpreter that imports the parser and parses once; return its timings."""
    env = {**os.environ, "KEDI_CACHE_DIR": cache_dir, "TMPDIR": cache_dir, "PYTHONPATH": str(REPO)}
    output = subprocess.run(
        [sys.executable, "-c", STARTUP], env=env, check=True, capture_output=True, text=True
    )
    return tuple(float(value) for value in output.stdout.split())


def main() -> None:
    """Run every measurement and print the report."""
    options = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    options.add_argument("--processes", type=int, default=5, help="fresh processes to measure in")
    options.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = options.parse_args()
    if args.child:
        child()
        return
    print(f"Python {sys.version.split()[0]}, interleaved rounds in {args.processes} processes\n")
    runs = [
        json.loads(
            subprocess.run(
                [sys.executable, __file__, "--child"], check=True, capture_output=True, text=True
            ).stdout
        )
        for _ in range(args.processes)
    ]
    report("generated program", [run["generated"] for run in runs], GENERATED_ROUNDS)
    print()
    report(
        f"documentation corpus ({runs[0]['files']} files)",
        [run["corpus"] for run in runs],
        CORPUS_ROUNDS,
    )
    print()
    with tempfile.TemporaryDirectory() as cache_dir:
        cold = startup(cache_dir)
        warm = min((startup(cache_dir) for _ in range(3)), key=sum)
    print("fresh process: import kedi.syntax / load grammar / first parse (seconds)")
    print(f"  table cache cold: {cold[0]:.3f} / {cold[1]:.3f} / {cold[2]:.3f}")
    print(f"  table cache warm: {warm[0]:.3f} / {warm[1]:.3f} / {warm[2]:.3f}")


if __name__ == "__main__":
    main()
