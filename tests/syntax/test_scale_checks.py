"""Checks at scale: any nesting the parser accepts, and capped, screen-sized diagnostics."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import kedi
from kedi.cli import main
from kedi.errors import KediCheckError
from kedi.syntax import parse
from kedi.syntax.checks import MAX_NESTING
from kedi.syntax.dump import dumps, to_json

REPO = Path(__file__).resolve().parents[2]


def nested_procedures(depth: int) -> str:
    lines = ["  " * i + f"@p{i}(x: str) -> str:" for i in range(depth)]
    lines.append("  " * depth + "= `x`")
    lines += ["  " * i + f"= <p{i}(<x>)>" for i in range(depth - 1, 0, -1)]
    return "\n".join([*lines, "= <p0(hi)>", ""])


def nested_calls(depth: int) -> str:
    return "@f(x: str) -> str:\n  = `x`\n= " + "<f(" * depth + "a" + ")>" * depth + "\n"


@pytest.mark.parametrize("program", [nested_procedures, nested_calls])
def test_nesting_up_to_the_limit_compiles_and_runs(program) -> None:
    result = kedi.compile(program(MAX_NESTING), path="deep.kedi").run_sync(model="offline")
    assert result in ("hi", "a")


@pytest.mark.parametrize(
    ("program", "depth", "line"),
    [
        (nested_procedures, 500, 101),
        (nested_calls, 1000, 3),
        (nested_procedures, MAX_NESTING + 1, 101),
    ],
)
def test_deeper_nesting_is_a_located_check_error_not_a_recursion_error(
    program, depth: int, line: int
) -> None:
    with pytest.raises(KediCheckError) as caught:
        kedi.compile(program(depth), path="deep.kedi")
    (diagnostic,) = caught.value.diagnostics
    assert (
        diagnostic.message
        == f"nested too deeply: more than {MAX_NESTING} levels of procedures, calls and types"
    )
    assert diagnostic.span.line == line


def kedi_parse_json(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kedi", "parse", "--json", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


@pytest.mark.parametrize(
    ("program", "depth", "line"), [(nested_calls, 1000, 3), (nested_procedures, 500, 101)]
)
def test_kedi_parse_json_refuses_deeper_nesting_than_check_with_its_located_error(
    tmp_path: Path, program, depth: int, line: int
) -> None:
    """No RecursionError traceback, and no output that grows with the square of the depth."""
    path = tmp_path / "deep.kedi"
    path.write_text(program(depth))
    done = kedi_parse_json(path)
    assert done.returncode == 1 and done.stdout == ""
    assert "Traceback" not in done.stderr
    assert f'File "{path}", line {line}' in done.stderr
    assert f"nested too deeply: more than {MAX_NESTING} levels" in done.stderr


@pytest.mark.parametrize("program", [nested_procedures, nested_calls])
def test_kedi_parse_json_prints_nesting_up_to_the_limit(tmp_path: Path, program) -> None:
    path = tmp_path / "deep.kedi"
    path.write_text(program(MAX_NESTING))
    done = kedi_parse_json(path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == to_json(parse(program(MAX_NESTING), str(path)))


def test_the_json_dump_walks_any_depth_without_recursing() -> None:
    """The Python API (`dumps`, `to_json`) has no depth limit: it keeps a stack of its own."""
    module = parse(nested_calls(1000), "deep.kedi")
    assert dumps(module).count('"type": "Call"') == 1000
    compact = dumps(module, indent=None)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)  # json.loads and == recurse, unlike the dump
    try:
        assert json.loads(compact) == to_json(module)
    finally:
        sys.setrecursionlimit(limit)


def test_ten_thousand_problems_on_one_40_kb_line_render_twenty_screen_lines() -> None:
    source = ">> " + "<y>" * 10_000 + "\n"
    started = time.process_time()
    result = CliRunner().invoke(main, ["check", "-c", source])
    elapsed = time.process_time() - started
    assert result.exit_code == 1
    output = result.output
    assert output.count("unknown name `y`") == 20
    assert output.rstrip().endswith("and 9980 more problems")
    assert max(len(line) for line in output.splitlines()) <= 110
    assert len(output) < 10_000  # it was 601 MB
    assert elapsed < 1.0  # CPU time (it took 10.3 s)


def test_a_long_line_is_cut_around_the_column_with_the_caret_under_the_problem() -> None:
    source = '[a] = `"1"`\n>> ' + "x" * 300 + " <nope> " + "x" * 300 + "\n"
    with pytest.raises(KediCheckError) as caught:
        kedi.compile(source, path="long.kedi")
    text = caught.value.render()
    source_line, caret = text.splitlines()[3:5]
    assert source_line.startswith("  ...") and source_line.endswith("...")
    assert source_line[caret.index("^") : caret.index("^") + 6] == "<nope>"
