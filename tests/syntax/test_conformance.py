"""Every program of the Kedi documentation corpus parses.

The corpus lives beside the repository (see `tests/corpus.py`). Without it
the module skips at collection, naming the path; an empty corpus fails these
tests: they must never pass vacuously.
"""

from __future__ import annotations

import ast as python_ast
import csv
from dataclasses import fields, is_dataclass
from functools import lru_cache
from pathlib import Path

import pytest

from kedi.errors import KediSyntaxError
from kedi.syntax import parse
from kedi.syntax.docstrings import query_body_source
from tests.corpus import CORPUS, skip_module_without_corpus

skip_module_without_corpus()
_EMBEDDING_CALLS = ("parse_program", "execute")


def kedi_files() -> list[Path]:
    files = sorted(CORPUS.glob("*.kedi"))
    assert files, f"no .kedi files in {CORPUS}: the conformance corpus is missing"
    return files


def embedded_sources() -> list[tuple[str, str, str]]:
    """Return `(file, kind, kedi source)` for every Kedi text inside the corpus `.py` files."""
    found = []
    python_files = sorted(CORPUS.glob("*.py"))
    assert python_files, f"no .py files in {CORPUS}: the conformance corpus is missing"
    for path in python_files:
        tree = python_ast.parse(path.read_text(encoding="utf-8"))
        strings = _module_strings(tree)
        for node in python_ast.walk(tree):
            if isinstance(node, python_ast.FunctionDef | python_ast.AsyncFunctionDef) and _is_query(
                node
            ):
                docstring = python_ast.get_docstring(node, clean=False)
                found.append((path.name, "query docstring", query_body_source(docstring)))
            elif isinstance(node, python_ast.Call) and _call_name(node.func) in _EMBEDDING_CALLS:
                found.append(
                    (
                        path.name,
                        f"{_call_name(node.func)}()",
                        _string_argument(node.args[0], strings),
                    )
                )
    return found


def _is_query(function: python_ast.FunctionDef | python_ast.AsyncFunctionDef) -> bool:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, python_ast.Call) else decorator
        if python_ast.unparse(target) == "kedi.query":
            return True
    return False


def _call_name(func: python_ast.expr) -> str:
    if isinstance(func, python_ast.Attribute):
        return func.attr
    return func.id if isinstance(func, python_ast.Name) else ""


def _module_strings(tree: python_ast.Module) -> dict[str, str]:
    """Module-level `name = "..."` assignments, for `parse_program(source)`."""
    strings = {}
    for statement in tree.body:
        if isinstance(statement, python_ast.Assign) and isinstance(
            statement.value, python_ast.Constant
        ):
            for target in statement.targets:
                if isinstance(target, python_ast.Name) and isinstance(statement.value.value, str):
                    strings[target.id] = statement.value.value
    return strings


def _string_argument(node: python_ast.expr, strings: dict[str, str]) -> str:
    if isinstance(node, python_ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, python_ast.Name):
        return strings[node.id]
    # `"""...""".strip()`, as in the interactive-execution page
    assert isinstance(node, python_ast.Call) and isinstance(node.func, python_ast.Attribute), (
        python_ast.unparse(node)
    )
    return str(getattr(_string_argument(node.func.value, strings), node.func.attr)())


def failures(sources: list[tuple[str, str]]) -> list[str]:
    problems = []
    for name, text in sources:
        try:
            parse(text, path=name)
        except KediSyntaxError as error:
            problems.append(error.render())
    return problems


@lru_cache(maxsize=1)
def kedi_failures() -> tuple[int, list[str]]:
    files = kedi_files()
    return len(files), failures([(path.name, path.read_text(encoding="utf-8")) for path in files])


@lru_cache(maxsize=1)
def embedded_failures() -> tuple[list[str], list[str]]:
    embedded = embedded_sources()
    return [kind for _, kind, _ in embedded], failures(
        [(f"{name} ({kind})", text) for name, kind, text in embedded]
    )


def test_every_kedi_file_parses() -> None:
    assert kedi_failures()[1] == []


def test_every_kedi_file_means_the_same_with_crlf_line_breaks() -> None:
    """A program read without newline translation (`kedi.parse` of Windows text) parses to
    the same tree: CRLF is fed as space + LF, and no value, body or code keeps that space."""
    different = [
        path.name
        for path in kedi_files()
        if parse(text := path.read_text(encoding="utf-8")) != parse(text.replace("\n", "\r\n"))
    ]
    assert different == []


def test_the_index_lists_exactly_the_kedi_files() -> None:
    with (CORPUS / "INDEX.tsv").open(encoding="utf-8") as handle:
        listed = {
            row["file"]
            for row in csv.DictReader(handle, delimiter="\t")
            if row["file"].endswith(".kedi")
        }
    assert listed == {path.name for path in kedi_files()}


def test_every_embedded_kedi_source_parses() -> None:
    kinds, problems = embedded_failures()
    assert set(kinds) == {"query docstring", "parse_program()", "execute()"}
    assert problems == []


def test_conformance_summary(capsys: pytest.CaptureFixture[str]) -> None:
    files, kedi_problems = kedi_failures()
    kinds, embedded_problems = embedded_failures()
    kedi_ok = files - len(kedi_problems)
    embedded_ok = len(kinds) - len(embedded_problems)
    with capsys.disabled():
        print(
            f"\nconformance: {kedi_ok}/{files} .kedi, {embedded_ok}/{len(kinds)} embedded sources "
            f"({kinds.count('query docstring')} query docstrings)"
        )
    assert files > 0 and kinds
    assert (kedi_ok, embedded_ok) == (files, len(kinds))


def test_every_node_of_the_corpus_has_a_real_span_and_no_lark_value() -> None:
    for path in kedi_files():
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n") + 1
        pending: list[object] = [parse(text, path=path.name)]
        while pending:
            node = pending.pop()
            if isinstance(node, tuple):
                pending.extend(node)
                continue
            if not is_dataclass(node):
                # Lark tokens are `str` subclasses: only plain values may reach the AST.
                assert node is None or type(node) in (str, int, float, bool), (
                    path.name,
                    repr(node),
                )
                continue
            span = node.span  # type: ignore[attr-defined]
            assert span.path == path.name and 1 <= span.line <= span.end_line <= lines, (
                path.name,
                node,
            )
            assert (span.line, span.column) <= (span.end_line, span.end_column), (path.name, node)
            pending.extend(getattr(node, item.name) for item in fields(node) if item.name != "span")
