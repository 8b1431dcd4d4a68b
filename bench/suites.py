"""`kedi test` on examples/library against `pytest` on the same tests written in Python.

Run from the repository root:

    python bench/suites.py [--rounds N]

Both commands run as fresh processes, in interleaved rounds (7 by default),
the way a user runs them: `python -m kedi test examples/library` (three
`@test:` cases against one runtime, on the offline model) and `python -m
pytest -q -p no:cacheprovider FILE` on a Python file with the same three
tests over the same procedures written in Python (the headline's model call
replaced by the offline model's deterministic reply), once with pytest's
plugin autoloading off (bare pytest, the fair comparator) and once with the
environment's plugins. It prints the median wall times and the ratios
(target: kedi test ≤ 1.5x bare pytest).

It also times, in this process, compiling a program that imports an already
compiled module against compiling it the first time: the import costs a few
`stat` calls, no parse (the per-process module cache).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "examples" / "library"

PYTHON_TESTS = """\
from dataclasses import dataclass


@dataclass
class Headline:
    title: str
    slug: str


def _words(text):
    return "".join(c if c.isalnum() else " " for c in text.lower()).split()


def slugify(title):
    return "-".join(_words(title))


def headline(topic):
    title = "title"  # what the offline model answers
    return Headline(title=title, slug=slugify(title))


def test_joins_lower_case_words():
    assert slugify("Hello, Kedi World!") == "hello-kedi-world"


def test_empty_title_gives_empty_slug():
    assert slugify("  ?! ") == ""


def test_slug_matches_title():
    item = headline("modules")
    assert isinstance(item, Headline)
    assert item.slug == slugify(item.title)
"""


def wall(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, cwd=ROOT)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    rounds = parser.parse_args().rounds
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with tempfile.TemporaryDirectory() as directory:
        python_file = Path(directory) / "test_text_tools.py"
        python_file.write_text(PYTHON_TESTS)
        kedi_command = [sys.executable, "-m", "kedi", "test", str(LIBRARY)]
        pytest_command = [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            str(python_file),
        ]
        bare = {**env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        (
            wall(kedi_command, env),
            wall(pytest_command, bare),
        )  # warm the OS caches and kedi's table cache
        kedi_times, bare_times, plugin_times = [], [], []
        for _ in range(rounds):
            kedi_times.append(wall(kedi_command, env))
            bare_times.append(wall(pytest_command, bare))
            plugin_times.append(wall(pytest_command, env))
    kedi_median = statistics.median(kedi_times)
    bare_median, plugin_median = statistics.median(bare_times), statistics.median(plugin_times)
    print(
        f"kedi test examples/library          : {kedi_median * 1000:7.0f} ms (median of {rounds})"
    )
    print(
        f"pytest, same tests, no plugins      : {bare_median * 1000:7.0f} ms (PYTEST_DISABLE_PLUGIN_AUTOLOAD=1)"
    )
    print(f"pytest, same tests, env's plugins   : {plugin_median * 1000:7.0f} ms")
    print(
        f"ratio kedi / pytest without plugins : {kedi_median / bare_median:7.2f}x  (target <= 1.5x)"
    )
    print(f"ratio kedi / pytest with plugins    : {kedi_median / plugin_median:7.2f}x")
    import_figures()


def import_figures() -> None:
    sys.path.insert(0, str(ROOT))
    import kedi
    from kedi.syntax import linking

    main_path = LIBRARY / "main.kedi"
    text = main_path.read_text()
    kedi.compile("> import: helpers\n= warm\n")  # load the parser and runtime first
    linking._CACHE.clear()
    started = time.perf_counter()
    kedi.compile(text, path=str(main_path))
    first = time.perf_counter() - started
    again = []
    for _ in range(20):
        started = time.perf_counter()
        kedi.compile(text, path=str(main_path))
        again.append(time.perf_counter() - started)
    print(f"compile main.kedi, modules parsed   : {first * 1000:7.2f} ms")
    print(
        f"compile main.kedi, modules cached   : {statistics.median(again) * 1000:7.2f} ms (median of 20)"
    )


if __name__ == "__main__":
    main()
