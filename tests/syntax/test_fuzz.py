"""Mutated corpus programs raise nothing but `KediSyntaxError`, quickly, in the user's words."""

from __future__ import annotations

import re
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from kedi.errors import KediSyntaxError
from kedi.syntax import parse
from kedi.syntax.diagnostics import PHRASES
from tests.corpus import skip_module_without_corpus

skip_module_without_corpus()

from tests.syntax.test_conformance import kedi_files  # noqa: E402 (after the skip)

SPECIALS = list("<>[]`()#\\~=@:,|*\"' \t\n") + ["```", ">>", "> ", "[x] =", "###\n", "\r\n", "\\\n"]
MUTATIONS = (
    "delete",
    "duplicate",
    "swap",
    "insert",
    "delete line",
    "duplicate line",
    "swap lines",
    "indent line",
)
PROGRAMS = [path.read_text(encoding="utf-8") for path in kedi_files()]
_TERMINAL = re.compile(
    r"\b(?:" + "|".join(re.escape(name) for name in PHRASES if name.strip("_$").isupper()) + r")\b"
)


def mutate(text: str, mutation: str, where: int, special: str) -> str:
    """Apply one character- or line-level mutation at a position derived from `where`."""
    if mutation.endswith("line") or mutation.endswith("lines"):
        lines = text.split("\n")
        index = where % len(lines)
        other = (index + 1) % len(lines)
        if mutation == "delete line":
            del lines[index]
        elif mutation == "duplicate line":
            lines.insert(index, lines[index])
        elif mutation == "swap lines":
            lines[index], lines[other] = lines[other], lines[index]
        else:
            lines[index] = special[:1].strip() or " " + lines[index]
        return "\n".join(lines)
    index = where % (len(text) + 1)
    if mutation == "delete":
        return text[:index] + text[index + 1 :]
    if mutation == "duplicate":
        return text[:index] + text[index : index + 1] * 2 + text[index + 1 :]
    if mutation == "swap":
        return (
            text[:index] + text[index + 1 : index + 2] + text[index : index + 1] + text[index + 2 :]
        )
    return text[:index] + special + text[index:]


mutation_lists = st.lists(
    st.tuples(
        st.sampled_from(MUTATIONS),
        st.integers(min_value=0, max_value=10_000),
        st.sampled_from(SPECIALS),
    ),
    min_size=1,
    max_size=5,
)


@settings(max_examples=300, derandomize=True, deadline=None)
@given(st.sampled_from(PROGRAMS), mutation_lists)
def test_mutated_programs_fail_only_with_syntax_errors(
    program: str, mutations: list[tuple[str, int, str]]
) -> None:
    for mutation in mutations:
        program = mutate(program, *mutation)
    started = time.perf_counter()
    try:
        parse(program, path="fuzz.kedi")
    except KediSyntaxError as error:
        for diagnostic in error.diagnostics:
            assert diagnostic.span.line >= 1 and diagnostic.span.column >= 1
            for text in (diagnostic.message, diagnostic.hint or ""):
                assert not _TERMINAL.search(re.sub(r"`[^`]*`", "", text)), text
                assert "Token(" not in text and "Expected one of" not in text
        assert error.render()
    assert time.perf_counter() - started < 2.0


def test_deep_nesting_neither_recurses_nor_hangs() -> None:
    depth = 3000
    started = time.perf_counter()
    module = parse("= " + "<f(" * depth + "x" + ")>" * depth + "\n")
    assert len(module.body) == 1
    try:
        parse("= " + "<f(" * depth + "\n")
    except KediSyntaxError as error:
        assert error.diagnostics[0].message.startswith("Unbalanced `(`")
    assert time.perf_counter() - started < 10.0


def test_unclosed_backtick_before_a_distant_backtick_is_reported_at_its_opening() -> None:
    source = "= `len(items)\n" + "[a] = x\n" * 200 + "= `y`\n"
    try:
        parse(source)
    except KediSyntaxError as error:
        diagnostic = error.diagnostics[0]
        assert (diagnostic.line, diagnostic.column, diagnostic.message) == (
            1,
            3,
            "Unclosed backtick: inline Python runs onto the next line",
        )
    else:
        raise AssertionError("an unclosed backtick parsed")
