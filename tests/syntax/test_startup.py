"""The command line starts light.

A warm `kedi parse` reads kedi's table cache and never imports Lark, and the
commands that need no runtime never load it. Each subprocess gets its own
`KEDI_CACHE_DIR`, so these tests see a cold cache first and never touch the
user's.
"""

from __future__ import annotations

import json
import marshal
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from kedi.syntax import _grammar, _table_cache

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import json, sys
from kedi.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    print(json.dumps(sorted(sys.modules)))
"""

FRAMEWORKS = ("pydantic_ai", "langchain_core", "openai")


def cli_modules(args: list[str], cache: Path) -> tuple[list[str], set[str]]:
    """Run `kedi ARGS` in a fresh interpreter; return its output lines and the modules it loaded.

    Lark's own cache goes to a fresh temporary directory beside `cache`, so a
    cold start is cold for Lark too, as on a machine that never ran kedi.
    """
    lark_tmp = cache.parent / f"{cache.name}-tmp"
    lark_tmp.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, _table_cache.CACHE_DIR_VARIABLE: str(cache), "TMPDIR": str(lark_tmp)}
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
        env=env,
    )
    *output, modules = proc.stdout.strip().splitlines()
    return output, set(json.loads(modules))


def probe(path: Path, cache: Path) -> dict[str, object]:
    """Run `kedi parse path` with `cache` as its table cache: was Lark imported, which frameworks?"""
    output, modules = cli_modules(["parse", str(path)], cache)
    assert output == ["Parsed successfully."]
    frameworks = sorted(m for m in modules if m.split(".")[0] in FRAMEWORKS)
    return {"lark": "lark" in modules, "frameworks": frameworks}


def kedi_packages(modules: set[str]) -> set[str]:
    """The kedi packages and top-level modules among `modules` (`kedi.syntax`, `kedi.cli`, ...)."""
    return {".".join(m.split(".")[:2]) for m in modules if m.split(".")[0] == "kedi"}


def cache_files(cache: Path) -> list[Path]:
    return sorted(cache.glob("parse-tables-*.marshal"))


@pytest.fixture
def program(tmp_path: Path) -> Path:
    """A 200-line program using most of the grammar's statements."""
    rows = []
    for i in range(40):
        rows += [
            f"@step{i}(text: str) -> str:",
            f"  >> Step {i} of <text>: [out{i}: str].",
            f"  = <out{i}>",
            "",
        ]
    rows += [f"[value{i}] = item {i}" for i in range(40)]
    assert len(rows) >= 200
    path = tmp_path / "long.kedi"
    path.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return path


def test_a_cold_start_analyses_with_lark_and_a_warm_start_never_imports_it(
    program: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    assert probe(program, cache) == {"lark": True, "frameworks": []}
    (written,) = cache_files(cache)
    stamp = written.stat().st_mtime_ns
    assert probe(program, cache) == {"lark": False, "frameworks": []}
    assert cache_files(cache) == [written] and written.stat().st_mtime_ns == stamp


def test_a_corrupt_cache_file_is_rebuilt_and_rewritten(program: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    probe(program, cache)
    (written,) = cache_files(cache)
    written.write_bytes(b"\x00not marshal data")
    assert probe(program, cache) == {"lark": True, "frameworks": []}
    assert probe(program, cache) == {"lark": False, "frameworks": []}


def test_an_unwritable_cache_only_costs_the_analysis(program: Path, tmp_path: Path) -> None:
    not_a_directory = tmp_path / "file"
    not_a_directory.write_text("", encoding="utf-8")
    assert probe(program, not_a_directory) == {"lark": True, "frameworks": []}


def test_help_loads_neither_the_parser_nor_the_runtime(tmp_path: Path) -> None:
    output, modules = cli_modules(["--help"], tmp_path)
    assert output[0].startswith("Usage:")
    assert kedi_packages(modules) == {
        "kedi",
        "kedi._lazy",
        "kedi.cli",
        "kedi.cli_options",  # the endpoint options `kedi run` and `kedi chat` share
        "kedi.errors",
        "kedi.source",
    }
    assert not {"pydantic", "lark", "anyio", "difflib"} & {m.split(".")[0] for m in modules}


def test_parse_loads_the_parser_but_not_the_runtime(program: Path, tmp_path: Path) -> None:
    _, modules = cli_modules(["parse", str(program)], tmp_path)
    assert kedi_packages(modules) == {
        "kedi",
        "kedi._frozen",
        "kedi._lazy",
        "kedi.cli",
        "kedi.cli_options",
        "kedi.errors",
        "kedi.settings",
        "kedi.source",
        "kedi.syntax",
    }
    assert not {"pydantic", "anyio"} & {m.split(".")[0] for m in modules}


def test_check_loads_the_checks_but_not_the_runtime(program: Path, tmp_path: Path) -> None:
    output, modules = cli_modules(["check", str(program)], tmp_path / "cache")
    assert output == ["Checked successfully."]
    assert "kedi.runtime" not in kedi_packages(modules)
    assert not {"pydantic", "anyio"} & {m.split(".")[0] for m in modules}


EXIT_PROBE = """
import atexit, gc, sys
from kedi.cli import main
try:
    main(sys.argv[2:], standalone_mode=sys.argv[1] == "standalone")
except SystemExit:
    pass
atexit._run_exitfuncs()
print(gc.get_freeze_count() > 0)
"""


@pytest.mark.parametrize(("mode", "frozen"), [("standalone", "True"), ("in-process", "False")])
def test_only_the_kedi_command_skips_the_collections_at_exit(
    mode: str, frozen: str, program: Path
) -> None:
    """`kedi` freezes the collector as it exits; a host calling `main` keeps its collector."""
    proc = subprocess.run(
        [sys.executable, "-c", EXIT_PROBE, mode, "parse", str(program)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    assert proc.stdout.splitlines() == ["Parsed successfully.", frozen]


# --------------------------------------------------------------------------- in process

KEY = "0123456789abcdef0123456789abcdef"


def _rewrite(path: Path, key: str, change: Callable[[dict[str, Any]], object]) -> None:
    """Write a well-formed cache file at `path`: the real tables, `change`d, under `key`."""
    tables = _grammar.analyse_grammar()
    changed = change(tables)
    _table_cache.write_tables(key, tables if changed is None else changed)
    written = _table_cache.cache_file(key)
    assert written is not None
    written.replace(path)


def _forget_a_builder(tables: dict[str, Any]) -> None:
    size, origin, mode, splice, _ = tables["rules"][-1]
    tables["rules"][-1] = (size, origin, mode, splice, "no_such_builder_method")


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))


DAMAGE: dict[str, Callable[[Path], None]] = {
    "empty": lambda path: path.write_bytes(b""),
    "garbage": lambda path: path.write_bytes(os.urandom(4096)),
    "cut short": lambda path: path.write_bytes(path.read_bytes()[:5000]),
    "a flipped byte": _flip_a_byte,
    "not a triple": lambda path: path.write_bytes(marshal.dumps([KEY, {}])),
    "another key": lambda path: _rewrite(path, "f" * 32, lambda tables: None),
    "a missing field": lambda path: _rewrite(path, KEY, lambda tables: {"actions": []}),
    "a stale builder": lambda path: _rewrite(path, KEY, _forget_a_builder),
}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(_table_cache.CACHE_DIR_VARIABLE, str(tmp_path))
    return tmp_path


def test_the_cached_tables_are_the_analysed_tables(cache: Path) -> None:
    _table_cache.write_tables(KEY, _grammar.analyse_grammar())
    cached = _grammar._cached_tables(KEY)
    assert cached is not None
    analysed = _grammar.parse_tables()
    for name in ("start_state", "actions", "gotos", "rules", "patterns"):
        assert getattr(cached, name) == getattr(analysed, name), name
    assert cached.lexer_terminals == analysed.lexer_terminals
    assert cached.root_terminals == analysed.root_terminals


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE)
def test_a_damaged_or_stale_cache_file_reads_as_a_miss(
    cache: Path, damage: Callable[[Path], None]
) -> None:
    _table_cache.write_tables(KEY, _grammar.analyse_grammar())
    path = _table_cache.cache_file(KEY)
    assert path is not None and path.is_file()
    damage(path)
    assert _grammar._cached_tables(KEY) is None


def test_a_write_keeps_only_the_most_recent_table_files(cache: Path) -> None:
    """One file per grammar version: upgrades must not pile up files in the user's cache."""
    stale = []
    for number in range(_table_cache.KEPT_FILES + 3):
        key = f"{number:032x}"
        _table_cache.write_tables(key, {"n": number})
        path = _table_cache.cache_file(key)
        assert path is not None
        os.utime(path, ns=(number * 10**9, number * 10**9))  # written in this order
        stale.append(key)
    _table_cache.write_tables(KEY, {"n": "now"})
    kept = {path.name for path in cache.glob("parse-tables-*.marshal")}
    assert len(kept) == _table_cache.KEPT_FILES
    assert f"parse-tables-{KEY}.marshal" in kept
    newest = stale[-(_table_cache.KEPT_FILES - 1) :]
    assert kept == {f"parse-tables-{key}.marshal" for key in [*newest, KEY]}
    assert _table_cache.read_tables(KEY) == {"n": "now"}
    unrelated = cache / "notes.txt"
    unrelated.write_text("mine")
    _table_cache.write_tables("e" * 32, {})
    assert unrelated.read_text() == "mine"


def test_the_key_follows_the_grammar_text() -> None:
    text = _grammar.grammar_path().read_text(encoding="utf-8")
    assert _grammar.tables_key(text) == _grammar.tables_key(text)
    assert _grammar.tables_key(text) != _grammar.tables_key(text + "\n")
