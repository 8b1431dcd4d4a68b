"""docs/language.md's table of decisions covers every open question and names real tests."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LANGUAGE = REPO / "docs" / "language.md"
SD = "tests/runtime/test_spec_decisions.py"

QUESTIONS = [f"A{n}" for n in range(1, 13)] + [f"B{n}" for n in range(13, 31)]
"""The language spec's §12 open questions: A1-A12 (syntax), B13-B30 (semantics).

Rows D1, D2, ... (questions users raised that the spec answers only in
passing) and H1, H2, ... (the history contract) are checked like these.
"""


def rows() -> dict[str, list[str]]:
    """Question → the cells of its row in the decisions table."""
    table = LANGUAGE.read_text(encoding="utf-8").split("## Decisions on the spec's open questions")[
        1
    ]
    found: dict[str, list[str]] = {}
    for line in table.split("\n## ")[0].splitlines():
        match = re.match(r"\| ([ABDH]\d+) \| (.*) \|$", line)
        if match:
            found[match[1]] = match[2].split(" | ")
    return found


def named_tests(cell: str) -> list[tuple[str, str | None]]:
    """(file, test name or None) for each test a cell names; `::name` reuses the last file."""
    named: list[tuple[str, str | None]] = []
    current = ""
    for token in re.findall(r"`([^`]+)`", cell):
        token = token.replace("SD::", f"{SD}::", 1) if token.startswith("SD::") else token
        if token.startswith("tests/"):
            current, _, name = token.partition("::")
            named.append((current, name or None))
        elif token.startswith("::") and current:
            named.append((current, token[2:]))
    return named


def test_every_open_question_has_a_row_with_a_decision_a_place_and_a_test() -> None:
    table = rows()
    assert [q for q in QUESTIONS if q not in table] == []
    for question, cells in table.items():
        assert len(cells) == 4, f"{question}: question | decision | written in | test"
        assert all(cell.strip() for cell in cells), question
        assert named_tests(cells[3]), f"{question} names no test"


def test_every_test_the_table_names_exists() -> None:
    missing = []
    for question, cells in rows().items():
        for path, name in named_tests(cells[3]):
            file = REPO / path
            if not file.is_file():
                missing.append(f"{question}: {path}")
                continue
            if name is None:
                continue
            tree = ast.parse(file.read_text(encoding="utf-8"))
            defined = {
                node.name
                for node in ast.walk(tree)
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            }
            if name not in defined:
                missing.append(f"{question}: {path}::{name}")
    assert missing == []
