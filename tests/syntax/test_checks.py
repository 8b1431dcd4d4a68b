"""`kedi check`: the static checks, from real Kedi source, with full messages pinned."""

from __future__ import annotations

import csv
import pickle
import re
import sys
import textwrap

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kedi.errors import KediCheckError, KediSyntaxError, KediUsageError
from kedi.source import SourceFile
from kedi.syntax import parse
from kedi.syntax.ast import Module
from kedi.syntax.checks import check_module, check_or_raise
from kedi.syntax.directives import (
    AGENT_DIRECTIVES,
    DIRECTIVE_NAMES,
    MODULE_DIRECTIVES,
    NOT_YET_SUPPORTED,
    PROCEDURE_ONLY_DIRECTIVES,
    PROFILE_ONLY_DIRECTIVES,
    SPECS,
    parse_byte_size,
    parse_duration,
    parse_plain_value,
)
from tests.corpus import CORPUS, needs_corpus

Found = list[tuple[int, str, str | None]]


def check(source: str, path: str | None = None, **options: object) -> Found:
    """Parse dedented `source` and return (line, message, hint) of every diagnostic."""
    module = parse(textwrap.dedent(source).lstrip("\n"), path)
    return [(d.line, d.message, d.hint) for d in check_module(module, **options)]  # type: ignore[arg-type]


def messages(source: str, path: str | None = None, **options: object) -> list[str]:
    return [message for _, message, _ in check(source, path, **options)]


# --------------------------------------------------------------------------- the docs corpus


def _corpus() -> list[dict[str, str]]:
    with (CORPUS / "INDEX.tsv").open(newline="") as index:
        rows = [row for row in csv.DictReader(index, delimiter="\t")]
    return [row for row in rows if row["file"].endswith(".kedi")]


def _parse_corpus_file(row: dict[str, str]) -> Module:
    text = (CORPUS / row["file"]).read_text()
    declared = row["declared_filename"]
    return parse(text, declared if declared != "-" else row["file"])


def _undefined_names(notes: str, kind: str = "names") -> set[str]:
    """The names the corpus notes say a fragment lacks (`undefined-names:a+b`, `undefined-types:T`)."""
    for note in notes.split("; "):
        if note.startswith(f"undefined-{kind}:"):
            return set(note.removeprefix(f"undefined-{kind}:").split("+"))
    return set()


@needs_corpus
def test_every_self_contained_docs_program_checks_clean() -> None:
    rows = [row for row in _corpus() if row["expected"] == "parse"]
    assert len(rows) > 200, "the conformance corpus must not be empty"
    print(f"{len(rows)} self-contained docs programs")
    dirty = {row["file"]: check_module(_parse_corpus_file(row)) for row in rows}
    assert {name: found for name, found in dirty.items() if found} == {}


@needs_corpus
def test_docs_fragments_report_only_the_names_they_lack() -> None:
    """Fragments lean on names defined elsewhere: those, and only those, are reported."""
    rows = [row for row in _corpus() if row["expected"] == "fragment"]
    assert len(rows) > 50
    reported_files = 0
    missing_types: set[str] = set()
    for row in rows:
        found = check_module(_parse_corpus_file(row))
        lacking = _undefined_names(row["notes"])
        text = (CORPUS / row["file"]).read_text()
        for diagnostic in found:
            quoted = set(re.findall(r"`([^`]+)`", diagnostic.message))
            if diagnostic.message.startswith("unknown type"):
                (name,) = quoted
                # The type is defined nowhere in the fragment; the notes name only some missing types.
                assert not re.search(rf"\b(class|type)\s+{name}\b", text), (row["file"], diagnostic)
                missing_types.update(quoted & _undefined_names(row["notes"], "types"))
                continue
            assert quoted & lacking, (row["file"], diagnostic)
        reported_files += bool(found)
    # Most undefined names sit inside backticks, which are deliberately not checked.
    assert reported_files == 26
    # first-program 02 (`[review: Review] = ...`) counts too: assignment types are checked like captures.
    assert missing_types == {"Review"}


CORPUS_TEXTS = sorted(path.read_text() for path in CORPUS.glob("*.kedi"))


@needs_corpus
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    texts=st.lists(st.sampled_from(CORPUS_TEXTS), min_size=1, max_size=4),
    path=st.sampled_from([None, "package.kedi"]),
    fragment=st.booleans(),
)
def test_checks_never_crash_on_combined_docs_programs(
    texts: list[str], path: str | None, fragment: bool
) -> None:
    try:
        module = parse("\n".join(texts), path)
    except KediSyntaxError:
        return  # two fences can combine into text that does not parse; not our concern
    found = check_module(module, fragment=fragment)
    assert all(d.line >= 1 and d.message for d in found)
    assert found == sorted(found, key=lambda d: (d.line, d.column, d.message))


@needs_corpus
def test_a_docs_fragment_with_a_missing_profile() -> None:
    text = (CORPUS / "agentic-engineering__subagents__04.kedi").read_text()
    found = check_module(parse(text, "subagents.kedi"), source=SourceFile(text, "subagents.kedi"))
    assert [(d.line, d.message, d.source_line) for d in found] == [
        (9, "unknown profile `researcher` in `> subagent:`", "    > subagent: researcher")
    ]


# --------------------------------------------------------------------------- names


def test_unknown_name_with_closest_name_hint() -> None:
    assert check(
        """
        [name] = Ada
        >> Greet <nme> warmly: [greeting]
        """
    ) == [(2, "unknown name `nme`", "did you mean `name`?")]


def test_unknown_call_and_unknown_argument() -> None:
    assert check("[x] = <slug(<missing>)>\n") == [
        (1, "unknown name `slug`", None),
        (1, "unknown name `missing`", None),
    ]


def test_a_name_bound_later_in_the_same_scope_resolves() -> None:
    # Value lookup is dynamic, so a binding anywhere in the scope counts.
    assert (
        check(
            """
        @show() -> str:
          = <title>
        [title] = Report
        = <show()>
        """
        )
        == []
    )


def test_parameters_captures_raw_targets_and_nested_procedures_resolve() -> None:
    assert (
        check(
            """
        @outer(topic: str) -> str:
          >> Summarize <topic>: [summary]
          [reply] << Rephrase <summary>
          @inner() -> str:
            = <topic> / <reply>
          = <inner()>
        = <outer(x)>
        """
        )
        == []
    )


def test_a_procedure_local_is_not_visible_at_top_level() -> None:
    assert messages(
        """
        @make() -> str:
          [secret] = s
          = <secret>
        = <secret>
        """
    ) == ["unknown name `secret`"]


def test_a_sibling_procedure_does_not_see_another_ones_parameter() -> None:
    assert check(
        """
        @a(item: str) -> str:
          = <item>
        @b() -> str:
          = <item>
        """
    ) == [(4, "unknown name `item`", None)]


def test_custom_types_and_profiles_are_names() -> None:
    assert (
        check(
            """
        ~Incident(title: str)
        > profile: analyst:
            > model: m
        = <Incident> <analyst>
        """
        )
        == []
    )


def test_unknown_types_are_reported_wherever_a_type_is_written() -> None:
    """Captures, assignments, parameters, return types and custom-type fields all resolve at run time."""
    assert check(
        """
        [x: Foo] = `1`
        @f(a: Bar, b: list[Qux] = `[]`) -> Baz | None:
          = `a`
        ~Record(field: Quux)
        >> Tell me [y: Incidnt]
        """
    ) == [
        (1, "unknown type `Foo`", None),
        (2, "unknown type `Bar`", None),
        (2, "unknown type `Qux`", None),
        (2, "unknown type `Baz`", None),
        (4, "unknown type `Quux`", None),
        (5, "unknown type `Incidnt`", None),
    ]


def test_an_ellipsis_type_argument_is_not_a_name() -> None:
    assert (
        check(
            """
        [x: tuple[int, ...]] = `(1, 2)`
        @f(a: tuple[str, ...]) -> tuple[int, ...]:
          = `(1,)`
        >> Count [counts: tuple[int, ...]]
        """
        )
        == []
    )


def test_signature_types_resolve_where_the_procedure_is_defined() -> None:
    assert messages(
        """
        ~Incident(title: str)
        @outer() -> str:
          ~Local(n: int)
          @inner(i: Incident, l: Local) -> Local:
            = `l`
          = done
        @later(x: Local) -> Incident:
          = `x`
        ```
        class FromPython: pass
        ```
        [z: FromPython | Incident] = `FromPython()`
        """
    ) == ["unknown type `Local`"]


def test_names_defined_by_top_level_python_are_known() -> None:
    source = """
        ```
        import json as js
        from os import path
        import collections.abc
        LIMIT = 3
        def helper():
            global counted
        class Box: pass
        for item, (pair, other) in []: pass
        try:
            pass
        except ValueError as failure:
            pass
        match 1:
            case [first, *rest]: pass
            case {"k": inner, **extra}: pass
            case other_name: pass
        ```
        `counter = 0`
        = <js> <path> <collections> <LIMIT> <helper> <counted> <Box> <item> <pair> \\
        <failure> <first> <rest> <inner> <extra> <other_name> <counter>
        """
    assert check(source) == []


def test_python_in_a_procedure_binds_locally_except_globals() -> None:
    assert messages(
        """
        @setup() -> str:
          ```
          local_only = 1
          def f():
              global shared
          ```
          = <local_only>
        = <shared> <local_only>
        """
    ) == ["unknown name `local_only`"]


def test_python_that_does_not_parse_binds_nothing() -> None:
    assert messages(
        """
        ```
        value = (
        ```
        = <value>
        """
    ) == ["invalid Python in a fence: '(' was never closed", "unknown name `value`"]


def test_python_warnings_do_not_escape() -> None:
    # "\d" is an invalid escape: Python warns, and warnings are errors under pytest.
    assert check('```\npattern = "\\d+"\n```\n= <pattern>\n') == []


def test_backtick_python_is_not_checked() -> None:
    assert check("= `undefined_name + 1` <`also_undefined`>\n") == []


# --------------------------------------------------------------------------- embedded Python


def located(source: str) -> list[tuple[int, int, str, str]]:
    """(line, column, message, caret line) of every diagnostic of dedented `source`, checked with its text."""
    text = textwrap.dedent(source).lstrip("\n")
    found = check_module(parse(text, "flow.kedi"), source=SourceFile(text, "flow.kedi"))
    return [
        (d.line, d.column, d.message, d.render("t", "k").splitlines()[4].strip()) for d in found
    ]


def test_python_syntax_errors_in_backticks_are_reported_at_the_python_column() -> None:
    assert located(
        """
        [x: int] = `f(`
        >> Say <`1 +`> and `  2 * * 3` now [y]
        @g(a: int = `(`, b: `list[` = `[]`) -> int:
          = `a`
        ~Row(n: int = `1 +* 2`)
        `import`
        """
    ) == [
        (1, 14, "invalid Python in backticks: '(' was never closed", "^"),
        (2, 13, "invalid Python in backticks: invalid syntax", "^"),  # the end of `1 +`
        (2, 27, "invalid Python in backticks: invalid syntax", "^"),  # the second `*`
        (3, 14, "invalid Python in backticks: '(' was never closed", "^"),
        (3, 26, "invalid Python in backticks: '[' was never closed", "^"),
        (5, 19, "invalid Python in backticks: invalid syntax", "^"),
        (6, 8, "invalid Python in backticks: invalid syntax", "^"),  # just past `import`
    ]


def test_python_syntax_errors_in_fences_are_reported_at_their_kedi_line() -> None:
    assert located(
        """
        @g(a: int) -> int:
            [z] = ```
                if a
                    return 1
                ```
            = `z`
        ```
        def f():
            nonlocal q
        ```
        = ok
        """
    ) == [
        (3, 13, "invalid Python in a fence: expected ':'", "^"),  # just past `if a`
        (9, 5, "`nonlocal q` cannot rebind a Kedi binding; use `global q`", "^^^^^^^^^^"),
    ]


def test_python_the_runtime_accepts_is_not_reported() -> None:
    assert (
        check(
            """
        ```
        import json
        ```
        [prefix] = id
        [key] = `<prefix> + ":" + json.dumps(1)`
        [total: int] = ```
            total = 0
            for n in range(3):
                if n == 2:
                    return total
                total += n
            return -1
            ```
        `await_later = lambda: None`
        >> Sort <`sorted([3, 1], key=lambda n: -n)`> [order: list[int]]
        @test: check_me:
          > case: passes:
            `assert check_me() == 1`
        @check_me() -> int:
          = `1`
        = ```
        return <total>
        ```
        """
        )
        == []
    )


def test_a_python_syntax_error_in_a_test_case_is_left_to_kedi_test() -> None:
    """A broken case fails alone, at its line, when `kedi test` runs the others."""
    assert (
        check(
            """
        @double(n: int) -> int:
          = `n * 2`
        @test: double:
          > case: broken:
            `assert double(2) == `
        """
        )
        == []
    )


def test_nonlocal_for_a_kedi_binding_says_what_the_runtime_says() -> None:
    assert located(
        """
        [count: int] = `0`
        ```
        nonlocal count
        def bump():
            nonlocal count
        ```
        = ok
        """
    ) == [
        (
            3,
            1,
            "`nonlocal count` cannot rebind a Kedi binding; use `global count`",
            "^^^^^^^^^^^^^^",
        )
    ]


def test_a_nul_byte_in_python_is_reported_not_raised() -> None:
    assert messages("= `1\x00`\n") == [
        "invalid Python in backticks: source code string cannot contain null bytes"
    ]


def test_python_nested_deeper_than_cpython_compiles_is_reported_not_left_to_the_run() -> None:
    # CPython refuses it (RecursionError) at the default limit, which a fresh `kedi check`
    # has; deep procedure calls earlier in this process may have raised the limit.
    deep = "+".join(["1"] * 5000)
    raised = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    try:
        found = located(f"[x: int] = `{deep}`\n= `x`\n")
    finally:
        sys.setrecursionlimit(raised)
    assert found == [
        (
            1,
            13,
            "invalid Python in backticks: too deeply nested for Python to compile "
            "(maximum recursion depth exceeded during ast construction)",
            "^",
        )
    ]
    assert messages("= `" + "+".join(["1"] * 700) + "`\n") == []  # deep, but Python compiles it


def test_builtins_args_and_known_globals_resolve() -> None:
    source = "= <len> <args> <tool_from_python>\n"
    assert messages(source) == ["unknown name `tool_from_python`"]
    assert check(source, known_globals=["tool_from_python"]) == []


def test_known_globals_feed_the_hint() -> None:
    assert check("= <titel>\n", known_globals={"title"}) == [
        (1, "unknown name `titel`", "did you mean `title`?")
    ]


def test_an_import_of_every_export_turns_the_name_check_off() -> None:
    assert check("> import: services/users\n= <find_user(x)>\n") == []


def test_a_python_star_import_turns_the_name_check_off() -> None:
    assert check("```\nfrom helpers import *\n```\n= <anything>\n") == []


def test_selectively_imported_names_resolve() -> None:
    assert messages(
        """
        > import: services/users:
            find_user
        = <find_user(x)> <other>
        """
    ) == ["unknown name `other`"]


def test_expected_and_the_dataset_are_visible_only_in_the_metric() -> None:
    assert check(
        """
        @echo(text: str) -> str:
          = <text>
        @eval: echo:
          > data: rows:
            = <expected>
          > metric: exact(rows):
            = <rows> <expected> <echo(<rows>)>
        """
    ) == [(5, "unknown name `expected`", None)]


def test_directive_values_resolve_against_every_scope() -> None:
    # Agent state is rendered where it is materialized, possibly inside a procedure.
    assert messages(
        """
        > system: Help <user> with <task>.
        @run(user: str) -> str:
          = done
        """
    ) == ["unknown name `task`"]


def test_names_in_settings_values_are_checked() -> None:
    assert messages("> settings:\n    cwd: <root>\n") == ["unknown name `root`"]


def test_use_resolves_procedures_python_names_and_profiles() -> None:
    assert (
        check(
            """
        ```
        def search(query): return query
        ```
        @lookup(key: str) -> str:
          = <key>
        > profile: helper:
            > model: m
        > use: lookup
        > use: `search`
        > use: helper
        > use:
            lookup
            search
        """
        )
        == []
    )


def test_unknown_use_names() -> None:
    assert check(
        """
        @lookup(key: str) -> str:
          = <key>
        > use: lokup
        > use:
            lookup
            missing_tool
        """
    ) == [
        (3, "unknown tool or profile `lokup`", "did you mean `lookup`?"),
        (6, "unknown tool `missing_tool`", None),
    ]


def test_an_indented_use_list_does_not_apply_profiles() -> None:
    assert check(
        """
        > profile: reviewer:
            > model: m
        > use:
            reviewer
        """
    ) == [
        (
            4,
            "`reviewer` is a profile, but an indented `> use:` list registers tools only",
            "apply the profile with `> use: reviewer` on its own line",
        )
    ]


def test_export_names_must_be_top_level() -> None:
    assert check(
        """
        @make() -> str:
          [inner] = x
          = <inner>
        > export:
            make
            inner
        """
    ) == [(6, "unknown name `inner` in `> export:`", None)]


def test_names_listed_twice_in_import_and_export() -> None:
    assert messages(
        """
        > import: labels:
            first
            first
        > export:
            first
            first
        """
    ) == [
        "`first` is listed twice in `> import: labels:`",
        "`first` is listed twice in `> export:`",
    ]


# --------------------------------------------------------------------------- calls


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("<greet()>", "`greet` takes 1 to 2 arguments but 0 were given"),
        ("<greet(a, b, c)>", "`greet` takes 1 to 2 arguments but 3 were given"),
        ("<pair(a)>", "`pair` takes 2 arguments but 1 was given"),
        ("<one(a, b)>", "`one` takes 1 argument but 2 were given"),
        ("<none(a)>", "`none` takes no arguments but 1 was given"),
    ],
)
def test_call_arity_against_kedi_procedures(call: str, message: str) -> None:
    source = f"""
        @greet(name: str, title: str = `"Dr"`) -> str:
          = <title> <name>
        @pair(a, b) -> str:
          = <a><b>
        @one(a) -> str:
          = <a>
        @none() -> str:
          = x
        [out] = {call}
        """
    name = message.split("`")[1]
    lines = {"greet": 1, "pair": 3, "one": 5, "none": 7}
    params = {"greet": "name, title", "pair": "a, b", "one": "a", "none": ""}
    hint = f"`@{name}({params[name]})` is defined on line {lines[name]}"
    assert check(source) == [(9, message, hint)]


def test_calls_that_fit_the_signature_pass() -> None:
    assert (
        check(
            """
        @greet(name: str, title: str = `"Dr"`) -> str:
          = <title> <name>
        = <greet(Ada)> <greet(Ada, Prof)>
        """
        )
        == []
    )


def test_arity_is_not_checked_when_the_callee_is_not_statically_one_procedure() -> None:
    assert (
        check(
            """
        @f(a) -> str:
          = <a>
        ```
        def f(*values): return ""
        ```
        @g(a) -> str:
          = <a>
        @g(a, b) -> str:
          = <a>
        @h(a) -> str:
          [f] = shadowed
          = <f(1, 2, 3)>
        = <f(1, 2)> <g(1, 2)> <h(<len(x)>)>
        """
        )
        == []
    )


def test_a_nested_procedure_call_is_checked_against_the_nested_signature() -> None:
    assert messages(
        """
        @f(a) -> str:
          = <a>
        @outer() -> str:
          @f(a, b) -> str:
            = <a>
          = <f(1, 2)> <f(1)>
        """
    ) == ["`f` takes 2 arguments but 1 was given"]


def test_a_procedure_or_type_read_above_its_definition_is_reported_at_the_read() -> None:
    # Spec 5.1: a definition takes effect where it appears, so these reads would
    # fail at run time with "unknown name"; the check names the definition's line.
    hint = (
        "move the {} definition above its first use: a definition takes effect where it is written"
    )
    assert check(
        """
        [early] = <f()>
        [t: T] = `T(a=1)`
        ~Pair(first: T, second: T)
        @f() -> str:
          = f
        ~T(a: int)
        @outer() -> str:
          [x] = <inner()>
          @inner() -> str:
            = in
          = <x>
        = <early>
        """
    ) == [
        (1, "`f` is defined below, at line 4", hint.format("procedure")),
        (2, "`T` is defined below, at line 6", hint.format("type")),
        (3, "`T` is defined below, at line 6", hint.format("type")),
        (3, "`T` is defined below, at line 6", hint.format("type")),
        (8, "`inner` is defined below, at line 9", hint.format("procedure")),
    ]


def test_reads_that_run_after_the_definition_or_find_another_binding_are_not_reported() -> None:
    assert (
        check(
            """
            ```
            def helper(): return "python"
            ```
            [first] = <helper()>
            @helper() -> str:
              = kedi
            @countdown(n: int, t: Later) -> str:
              = <countdown(1, t)> <defined_after()>
            ~Later(a: int)
            ~Node(children: list[Node] = `[]`)
            @defined_after() -> str:
              = ok
            @outer() -> str:
              [x] = <defined_after()>
              @defined_after() -> str:
                = shadowing an outer procedure
              = <x>
            [value] = <later()>
            [later] = `lambda: 1`
            @later() -> str:
              = redefined
            @eval: helper:
              > data: rows:
                = <cases()>
              > metric: exact(rows):
                = `1.0`
            @cases() -> str:
              = none
            = <first>
            """
        )
        == []
    )


# --------------------------------------------------------------------------- outputs and args


def test_duplicate_output_names_in_one_template() -> None:
    assert check(
        """
        >> Title: [title]
        Another title: [title: str]
        >> A separate call may reuse it: [title]
        """
    ) == [
        (
            2,
            "duplicate output name `title` in one template",
            "the fields of one `>>` block form one output schema; rename one of them",
        )
    ]


def test_duplicate_output_names_in_an_optimize_span() -> None:
    assert messages(
        """
        @extract(doc: str) -> str:
          > optimize: fields:
            >> Read <doc>: [title] and [title]
          = <title>
        """
    ) == ["duplicate output name `title` in one template"]


def test_every_way_of_binding_args_is_rejected() -> None:
    found = check(
        """
        [args] = x
        [args] << hi
        >> [args]
        @args(args) -> str:
          = x
        ~args(field: int)
        """
    )
    reserved = ("`args` is reserved for program arguments", "choose another name")
    assert found == [(line, *reserved) for line in (1, 2, 3, 4, 4, 6)]


def test_reading_args_is_fine() -> None:
    assert check("= <args>\n") == []


# --------------------------------------------------------------------------- placement


@pytest.mark.parametrize(
    ("source", "line", "message", "hint"),
    [
        (
            "> subagent: x\n",
            1,
            "`> subagent:` is not allowed at top level",
            "`> subagent:` belongs in a profile body",
        ),
        (
            "> max_agents: 2\n",
            1,
            "`> max_agents:` is not allowed at top level",
            "`> max_agents:` belongs in a profile body",
        ),
        (
            "@f() -> str:\n  > workflow: delegate\n  = x\n",
            2,
            "`> workflow:` is not allowed in a procedure body",
            "`> workflow:` belongs in a profile body",
        ),
        (
            "> optimize: span:\n  >> Hi [x]\n",
            1,
            "`> optimize:` is not allowed at top level",
            "`> optimize:` belongs in a procedure body",
        ),
        (
            "> auto:\n  Do it.\n",
            1,
            "`> auto:` is not allowed at top level",
            "`> auto:` belongs in a procedure body",
        ),
        (
            "@f() -> str:\n  > profile: p:\n      > model: m\n  = x\n",
            2,
            "`> profile:` is not allowed in a procedure body",
            "`> profile:` belongs at top level",
        ),
        (
            "@f() -> str:\n  > import: mod\n  = x\n",
            2,
            "`> import:` is not allowed in a procedure body",
            "`> import:` belongs at top level",
        ),
        (
            "@f() -> str:\n  > export: *\n  = x\n",
            2,
            "`> export:` is not allowed in a procedure body",
            "`> export:` belongs at top level",
        ),
        (
            "@f() -> str:\n  @test: f:\n    > case: c:\n      `assert f()`\n  = x\n",
            2,
            "`@test:` is not allowed in a procedure body",
            "`@test:` belongs at top level",
        ),
        (
            "@f() -> str:\n  @eval: f:\n    > data: d:\n      = `[1]`\n"
            "    > metric: m(d):\n      = `1`\n  = x\n",
            2,
            "`@eval:` is not allowed in a procedure body",
            "`@eval:` belongs at top level",
        ),
    ],
)
def test_directives_outside_their_placement(
    source: str, line: int, message: str, hint: str
) -> None:
    assert check(source) == [(line, message, hint)]


def test_agent_directives_are_valid_everywhere() -> None:
    members = """\
        > adapter: pydantic
        > model: m
        > effort: low
        > system: Be brief.
        > settings:
            temperature: 0.2
        > approval: deny
        > mcp:
            command: server
        > history: enabled
        > artifacts:
            threshold: 1kb
        > skills: enabled
        > codemode: disabled
        """
    body = textwrap.dedent(members)
    nested = textwrap.indent(body, "  ")
    profile = textwrap.indent(body, "    ")
    source = f"{body}@f() -> str:\n{nested}  = x\n> profile: p:\n{profile}"
    assert check(source) == []


def test_profile_only_directives_in_a_profile() -> None:
    assert (
        check(
            """
        > profile: lead:
            > subagent: helper
            > max_agents: 3
            > workflow: dynamic
        > profile: helper:
            > model: m
        """
        )
        == []
    )


@pytest.mark.parametrize(
    ("source", "path", "label"),
    [
        ("> export: *\n", None, "`> export:`"),
        ("@f() -> str:\n  = x\n@test: f:\n  > case: c:\n    `assert f()`\n", None, "`@test:`"),
        (
            "@f() -> str:\n  = x\n@eval: f:\n  > data: d:\n    = `[1]`\n"
            "  > metric: m(d):\n    = `1`\n",
            None,
            "`@eval:`",
        ),
        ("> package: demo:\n    version: 1.0\n", "package.kedi", "`> package:`"),
    ],
)
def test_interactive_fragments_reject_exports_suites_and_packages(
    source: str, path: str | None, label: str
) -> None:
    assert check(source, path) == []
    found = messages(source, path, fragment=True)
    assert found == [f"{label} is not allowed in an interactive fragment"]


# --------------------------------------------------------------------------- packages


def test_package_outside_package_kedi() -> None:
    assert check("> package: demo:\n    version: 1.0\n", "main.kedi") == [
        (
            1,
            "`> package:` is only allowed in a file named `package.kedi`",
            "a package manifest lives in its own `package.kedi` file",
        )
    ]


def test_a_valid_manifest() -> None:
    source = """
        > package: demo_pkg:
            version: 1.0.0
            source: src
            python: python@3.11-3.13
            author: Ada
            python_dependencies:
              pydantic>=2
        """
    assert check(source, "project/package.kedi") == []


def test_package_kedi_holds_only_one_manifest() -> None:
    assert check(
        """
        > package: demo:
            version: 1.0
        > package: other:
            version: 2.0
        [x] = y
        """,
        "package.kedi",
    ) == [
        (3, "`package.kedi` holds more than one `> package:`", None),
        (
            5,
            "`package.kedi` may hold only its `> package:` manifest",
            "move program code into the package's source directory",
        ),
    ]


def test_manifest_name_and_fields() -> None:
    assert check(
        """
        > package: Demo:
            python: 3.11
            version: 1.0
            version: 2.0
            licence: MIT
        """,
        "package.kedi",
    ) == [
        (1, "the package name must be a name matching `[a-z][a-z0-9_]*`, not `Demo`", None),
        (
            2,
            "`python` in `> package:` must be `python@X.Y` or a range `python@X.Y-X.Z`, not `3.11`",
            None,
        ),
        (4, "duplicate key `version` in `> package:`", None),
        (5, "unknown key `licence` in `> package:`", "did you mean `license`?"),
    ]


# --------------------------------------------------------------------------- directive values


@pytest.mark.parametrize(
    ("line", "message", "hint"),
    [
        (
            "> effort: hgh",
            "`> effort:` must be one of `minimal`, `low`, `medium`, `high`, `xhigh` or `max`, not `hgh`",
            "did you mean `high`?",
        ),
        ("> history: on", "`> history:` must be `enabled` or `disabled`, not `on`", None),
        (
            "> skills: enable",
            "`> skills:` must be `enabled` or `disabled`, not `enable`",
            "did you mean `enabled`?",
        ),
        ("> codemode: off", "`> codemode:` must be `enabled` or `disabled`, not `off`", None),
        ("> approval: edit", "`> approval:` must be `allow` or `deny`, not `edit`", None),
        (
            "> adapter: pydantc",
            "`> adapter:` must be one of `dspy`, `langchain`, `offline`, `openai`, `pydantic` or `script`, not `pydantc`",
            "did you mean `pydantic`?",
        ),
        (
            "> adapter: claude",
            "`claude` is an agent harness, not a framework adapter",
            "write `> agent: claude`",
        ),
        (
            "> adapter: acp",
            "`acp` is an agent harness, not a framework adapter",
            "write `> agent:` with an indented `acp: <command>` row",
        ),
        (
            "> agent: pydantic",
            "`pydantic` is a framework adapter, not an agent harness",
            "write `> adapter: pydantic`",
        ),
        (
            "> agent: acp",
            "`> agent: acp` needs a command",
            "write `> agent:` with an indented `acp: <command>` row",
        ),
        (
            "> agent: claud",
            "`> agent:` must be `claude` or `codex`, not `claud`",
            "did you mean `claude`?",
        ),
    ],
)
def test_invalid_one_line_values(line: str, message: str, hint: str | None) -> None:
    assert check(line + "\n") == [(1, message, hint)]


@pytest.mark.parametrize(
    "line",
    [
        "> effort: `level`",
        "> adapter: `selected_backend`",
        "> history: `mode`",
        "> effort: xhigh",
        "> agent: codex",
        "> model: anything:goes/here",
    ],
)
def test_backtick_and_valid_one_line_values_pass(line: str) -> None:
    assert check(f"[level] = x\n[selected_backend] = y\n[mode] = z\n{line}\n") == []


def test_unknown_settings_keys() -> None:
    assert check(
        """
        > settings:
            tempreature: 0.2
            codemode: true
            max_tokens: 100
            max_tokens: 200
            colour: red
        """
    ) == [
        (2, "unknown setting `tempreature`", "did you mean `temperature`?"),
        (3, "unknown setting `codemode`", "CodeMode is not a model setting; use `> codemode:`"),
        (5, "duplicate key `max_tokens` in `> settings:`", None),
        (6, "unknown setting `colour`", None),
    ]


def test_literal_setting_values_an_adapter_would_refuse_are_check_errors() -> None:
    # Before, these passed `kedi check` and failed at the first model call's
    # line (or at the provider, for `temperature: hot`), not at the setting.
    assert check(
        """
        > settings:
            temperature: hot
            top_p: 1
            max_tokens: 0
            output_retries: lots
            request_limit: 2.5
            timeout: 0
            seed: -3
            max_retries: 0
            frequency_penalty: -0.5
            seed: 1.5
        """
    ) == [
        (2, "`temperature` in `> settings:` must be a number, not `hot`", None),
        (4, "`max_tokens` in `> settings:` must be a positive integer, not `0`", None),
        (5, "`output_retries` in `> settings:` must be an integer of at least 0, not `lots`", None),
        (6, "`request_limit` in `> settings:` must be a positive integer, not `2.5`", None),
        (7, "`timeout` in `> settings:` must be a positive number of seconds, not `0`", None),
        (11, "`seed` in `> settings:` must be an integer, not `1.5`", None),
        (11, "duplicate key `seed` in `> settings:`", None),
    ]


def test_literal_mapping_settings_must_be_mappings() -> None:
    # `extra_body: foo` passed the check; Pydantic AI and LangChain then failed
    # mid-run with "TypeError: 'str' object is not a mapping".
    assert check(
        """
        > settings:
            extra_body: foo
            extra_headers: {"X-Team": "search"}
            logit_bias: 12
        """
    ) == [
        (
            2,
            '`extra_body` in `> settings:` must be a mapping, e.g. `{"key": "value"}`, not `foo`',
            None,
        ),
        (
            4,
            '`logit_bias` in `> settings:` must be a mapping, e.g. `{"key": "value"}`, not `12`',
            None,
        ),
    ]


def test_every_adapter_setting_is_accepted() -> None:
    keys = ["temperature", "stop_sequences", "reasoning_effort", "sandbox", "permission_mode"]
    keys += ["stop", "output_retries", "tool_retries", "request_limit", "max_retries", "cwd"]
    body = "".join(f"    {key}: `value`\n" for key in keys)
    assert check("[value] = v\n> settings:\n" + body) == []


def test_history_expanded_form() -> None:
    assert (
        check(
            """
        > history:
            enabled: true
            compaction_mode: native
            compaction_threshold: `100_000`
            max_messages: 40
            max_tokens: 8000
        """
        )
        == []
    )


@pytest.mark.parametrize(
    ("body", "found"),
    [
        (
            "compaction_mode: native",
            [(1, "`> history:` is missing the required key `enabled`", None)],
        ),
        (
            "enabled: yes",
            [(2, "`enabled` in `> history:` must be `true` or `false`, not `yes`", None)],
        ),
        (
            "enabled: true\n    compaction_threshold: 0",
            [
                (
                    3,
                    "`compaction_threshold` in `> history:` must be a positive integer, not `0`",
                    None,
                )
            ],
        ),
        (
            "enabled: true\n    compaction_threshold: 1.5",
            [
                (
                    3,
                    "`compaction_threshold` in `> history:` must be a positive integer, not `1.5`",
                    None,
                )
            ],
        ),
        (
            "enabled: true\n    compaction_mode: disabled\n    compaction_threshold: 1000",
            [
                (
                    4,
                    "`compaction_threshold` cannot be combined with `compaction_mode: disabled`",
                    "disabled compaction has no threshold; remove one of the two",
                )
            ],
        ),
        (
            "enabled: true\n    compaction_mode: summarize",
            [
                (
                    3,
                    "`compaction_mode` in `> history:` must be `native` or `disabled`, not `summarize`",
                    None,
                )
            ],
        ),
        (
            "enabled: true\n    max_messages: -1\n    max_tokens: many",
            [
                (3, "`max_messages` in `> history:` must be a positive integer, not `-1`", None),
                (4, "`max_tokens` in `> history:` must be a positive integer, not `many`", None),
            ],
        ),
        (
            "enabled: true\n    compaction: native",
            [
                (
                    3,
                    "unknown key `compaction` in `> history:`",
                    "did you mean `compaction_mode`?",
                )
            ],
        ),
        (
            "enabled: true\n    keep: 3",
            [
                (
                    3,
                    "unknown key `keep` in `> history:`",
                    "`> history:` takes `enabled`, `compaction_mode`, `compaction_threshold`, "
                    "`max_messages`, `max_tokens`",
                )
            ],
        ),
    ],
)
def test_history_expanded_form_errors(body: str, found: Found) -> None:
    assert check(f"> history:\n    {body}\n") == found


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("command: server", None),
        ("transport: stdio\n    command: uv\n    args: `['run']`", None),
        ("transport: streamable-http\n    url: https://x", None),
        ("transport: sse\n    url: https://x", None),
        ("transport: `kind`\n    name: dynamic", None),
        ("name: docs", "`> mcp:` needs a `command` (stdio) or a `transport` and a `url`"),
        ("url: https://x", "`> mcp:` with a `url` needs `transport: http` or `transport: sse`"),
        (
            "transport: stdio\n    url: https://x",
            "`> mcp:` with `transport: stdio` needs a `command`",
        ),
        ("transport: http\n    command: server", "`> mcp:` with `transport: http` needs a `url`"),
        (
            "transport: websocket\n    url: wss://x",
            "`transport` in `> mcp:` must be one of `stdio`, `sse`, `http` or `streamable-http`, not `websocket`",
        ),
        ("command: server\n    timeout: 5", "unknown key `timeout` in `> mcp:`"),
    ],
)
def test_mcp_fields_and_transport_rules(body: str, message: str | None) -> None:
    assert messages(f"[kind] = k\n> mcp:\n    {body}\n") == ([message] if message else [])


def test_artifacts_skills_and_codemode_fields() -> None:
    assert check(
        """
        > artifacts:
            enabled: false
            store: disk
            threshold: 100kb
            ttl: 0s
            idle_ttl: none
            session_quota: lots
            cleanup_interval: 1m
            preview_chars: 0
        > skills:
            cwd: workspace
            max_skills: 101
        > codemode:
            max_search_limit: 50
            request_timeout: 0
        """
    ) == [
        (3, "`store` in `> artifacts:` must be `memory` or `file`, not `disk`", None),
        (
            5,
            "`ttl` in `> artifacts:` must be a positive duration such as `30s` (units ms, s, m, h, d), not `0s`",
            None,
        ),
        (
            7,
            "`session_quota` in `> artifacts:` must be a size such as `100kb` "
            "(units b, kb, mb, gb, kib, mib, gib), not `lots`",
            None,
        ),
        (10, "`> skills:` is missing the required key `enabled`", None),
        (12, "`max_skills` in `> skills:` must be an integer from 1 to 100, not `101`", None),
        (15, "`request_timeout` in `> codemode:` must be a positive number, not `0`", None),
    ]


def test_agent_block_needs_an_acp_command() -> None:
    assert check("> agent:\n    acp: npx codex-acp\n") == []
    assert check("> agent:\n    command: npx codex-acp\n") == [
        (1, "`> agent:` is missing the required key `acp`", None),
        (2, "unknown key `command` in `> agent:`", "`> agent:` takes `acp`"),
    ]


def test_a_config_key_written_without_a_value() -> None:
    assert messages("> history:\n    enabled:\n") == [
        "`enabled` in `> history:` must be `true` or `false`"
    ]


# --------------------------------------------------------------------------- backends and profiles


def test_adapter_and_agent_in_one_scope() -> None:
    hint = (
        "a scope selects either a framework adapter or an agent harness; "
        "switch in a nested procedure or profile instead"
    )
    assert check(
        """
        > agent: codex
        > model: gpt-5
        > adapter: pydantic
        """
    ) == [(3, "`> adapter:` cannot be combined with `> agent:` in the same scope", hint)]


def test_a_nested_scope_may_switch_backend_kind() -> None:
    assert (
        check(
            """
        > adapter: pydantic
        > profile: harness:
            > agent: claude
        @review() -> str:
          > agent: codex
          = x
        > adapter: langchain
        """
        )
        == []
    )


def test_adapter_and_agent_in_one_procedure_or_profile() -> None:
    assert messages(
        """
        @review() -> str:
          > adapter: pydantic
          > agent: codex
          = x
        > profile: mixed:
            > agent: claude
            > adapter: dspy
        """
    ) == [
        "`> agent:` cannot be combined with `> adapter:` in the same scope",
        "`> adapter:` cannot be combined with `> agent:` in the same profile `mixed`",
    ]


def test_duplicate_singleton_members_in_a_profile() -> None:
    assert check(
        """
        > profile: reviewer:
            > model: a
            > use: helper
            > use: helper
            > mcp:
                command: one
            > mcp:
                command: two
            > model: b
        @helper() -> str:
          = x
        """
    ) == [
        (
            9,
            "`> model:` is set twice in profile `reviewer`",
            "a profile sets each scalar member once",
        )
    ]


def test_a_profile_defined_twice_is_rebinding_not_an_error() -> None:
    assert (
        check(
            """
        > profile: reviewer:
            > model: a
        > profile: reviewer:
            > model: b
        > use: reviewer
        """
        )
        == []
    )


def test_subagents_must_name_profiles_forward_references_allowed() -> None:
    assert check(
        """
        > profile: lead:
            > subagent: researcher
            > subagent: reseacher
        > profile: researcher:
            > model: m
        """
    ) == [(3, "unknown profile `reseacher` in `> subagent:`", "did you mean `researcher`?")]


def test_an_imported_or_known_subagent_is_accepted() -> None:
    source = """
        > import: team:
            researcher
        > profile: lead:
            > subagent: researcher
            > subagent: auditor
        """
    assert messages(source) == ["unknown profile `auditor` in `> subagent:`"]
    assert check(source, known_globals=["auditor"]) == []


def test_dynamic_workflow_needs_a_subagent() -> None:
    assert check(
        """
        > profile: lead:
            > workflow: dynamic
        """
    ) == [
        (
            2,
            "`> workflow: dynamic` needs a `> subagent:` in profile `lead`",
            "a dynamic workflow runs the profile's direct children",
        )
    ]


def test_max_agents_must_be_positive() -> None:
    assert messages("> profile: lead:\n    > max_agents: 0\n") == [
        "`> max_agents:` must be a positive integer, not `0`"
    ]


CYCLE_HINT = "a profile cannot use or delegate to itself, directly or through others"


def test_profile_cycles_through_use_and_subagent() -> None:
    assert check(
        """
        > profile: a:
            > use: b
        > profile: b:
            > subagent: c
        > profile: c:
            > use: a
        > profile: loner:
            > subagent: loner
        """
    ) == [
        (2, "profile cycle: `a` → `b` → `c` → `a`", CYCLE_HINT),
        (8, "profile cycle: `loner` → `loner`", CYCLE_HINT),
    ]


def test_use_of_a_procedure_with_a_profile_name_is_not_a_cycle() -> None:
    # `> use:` resolves procedures before profiles, so `a` here is a tool.
    assert (
        check(
            """
        > profile: a:
            > use: a
        @a() -> str:
          = x
        """
        )
        == []
    )


def test_a_diamond_of_profiles_is_not_a_cycle() -> None:
    assert (
        check(
            """
        > profile: top:
            > use: left
            > use: right
        > profile: left:
            > use: base
        > profile: right:
            > use: base
        > profile: base:
            > model: m
        """
        )
        == []
    )


# --------------------------------------------------------------------------- suites


def test_suites_must_name_procedures_of_the_module() -> None:
    assert check(
        """
        @slugify(title: str) -> str:
          = `title.lower()`
        @test: slugfy:
          > case: lower:
            `assert slugify("A") == "a"`
        """
    ) == [
        (
            3,
            "`@test: slugfy` names `slugfy`, which is not a procedure in this module",
            "did you mean `slugify`?",
        )
    ]


def test_duplicate_cases_and_datasets() -> None:
    assert messages(
        """
        @f(x: str) -> str:
          = <x>
        @test: f:
          > case: same:
            `assert f("a") == "a"`
          > case: same:
            `assert f("b") == "b"`
        @eval: f:
          > data: rows:
            = `[("a", "a")]`
          > test_data: rows:
            = `[("b", "b")]`
          > data: rows:
            = `[("c", "c")]`
          > metric: exact(rows):
            = `f(rows) == expected`
        """
    ) == ["duplicate case `same` in `@test: f`", "duplicate `> data: rows` in `@eval: f`"]


def test_eval_metric_problems() -> None:
    assert check(
        """
        @f(x: str) -> str:
          = <x>
        @eval: f:
          > data: rows:
            = `[1]`
        @eval: f:
          > data: rows:
            = `[1]`
          > metric: exact(row):
            = `1`
        """
    ) == [
        (3, "`@eval: f` has no `> metric:`", None),
        (
            9,
            "metric `exact` reads dataset `row`, which `@eval: f` does not define",
            "did you mean `rows`?",
        ),
    ]


def test_a_legacy_metric_without_dataset() -> None:
    assert (
        check(
            """
        @f() -> str:
          = x
        @eval: f:
          > data: rows:
            = `[1]`
          > metric: score:
            = `1.0`
        """
        )
        == []
    )


# --------------------------------------------------------------------------- API


def test_diagnostics_are_sorted_and_carry_the_source_line() -> None:
    text = "> effort: loud\n= <b> <a>\n"
    module = parse(text, "prog.kedi")
    found = check_module(module, source=SourceFile(text, "prog.kedi"))
    assert [(d.line, d.column, d.message, d.source_line) for d in found] == [
        (
            1,
            1,
            "`> effort:` must be one of `minimal`, `low`, `medium`, `high`, `xhigh` or `max`, not `loud`",
            "> effort: loud",
        ),
        (2, 3, "unknown name `b`", "= <b> <a>"),
        (2, 7, "unknown name `a`", "= <b> <a>"),
    ]
    assert found[1].path == "prog.kedi"


def test_check_or_raise_raises_one_error_with_every_diagnostic() -> None:
    text = "= <b> <a>\n"
    with pytest.raises(KediCheckError) as caught:
        check_or_raise(parse(text, "prog.kedi"), source=SourceFile(text, "prog.kedi"))
    error = caught.value
    assert [d.message for d in error.diagnostics] == ["unknown name `b`", "unknown name `a`"]
    assert str(error) == "prog.kedi:1:3: unknown name `b`"
    assert error.render().splitlines()[:8] == [
        "Kedi check error:",
        "",
        '  File "prog.kedi", line 1, column 3',
        "  = <b> <a>",
        "    ^^^",
        "",
        "Kedi error: CheckError",
        "  unknown name `b`",
    ]
    assert pickle.loads(pickle.dumps(error)).diagnostics == error.diagnostics


def test_check_module_wants_a_module() -> None:
    with pytest.raises(KediUsageError, match=r"^check_module\(\) expects a Module, not str$"):
        check_module("= <x>\n")  # type: ignore[arg-type]


def test_check_or_raise_is_silent_on_a_clean_program() -> None:
    assert check_or_raise(parse("[a] = x\n= <a>\n")) is None


# --------------------------------------------------------------------------- directive specs


def test_every_directive_has_a_spec_and_the_documented_placement() -> None:
    assert set(SPECS) == DIRECTIVE_NAMES
    assert NOT_YET_SUPPORTED < DIRECTIVE_NAMES
    placements = {name: SPECS[name].placements for name in SPECS}
    assert {placements[name] for name in AGENT_DIRECTIVES} == {
        frozenset({"top", "procedure", "profile"})
    }
    assert {placements[name] for name in PROFILE_ONLY_DIRECTIVES} == {frozenset({"profile"})}
    assert {placements[name] for name in MODULE_DIRECTIVES} == {frozenset({"top"})}
    assert {placements[name] for name in PROCEDURE_ONLY_DIRECTIVES} == {frozenset({"procedure"})}


PLAIN_DIRECTIVES = sorted(
    name for name, spec in SPECS.items() if spec.body in ("line", "config", "line_or_config")
)


@pytest.mark.parametrize("name", PLAIN_DIRECTIVES)
def test_the_parser_accepts_exactly_the_body_shapes_of_the_spec(name: str) -> None:
    spec = SPECS[name]
    context = (
        "> profile: p:\n" if "profile" in spec.placements and "top" not in spec.placements else ""
    )
    indent = "    " if context else ""

    def parses(text: str) -> bool:
        try:
            parse(context + textwrap.indent(text, indent))
        except KediSyntaxError:
            return False
        return True

    assert parses(f"> {name}: value\n") is spec.accepts_line
    assert parses(f"> {name}:\n    key: value\n") is spec.accepts_config


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("true", True),
        ("FALSE", False),
        ("null", None),
        ("None", None),
        ("42", 42),
        ("100_000", 100_000),
        ("0.5", 0.5),
        ("[1, 2]", [1, 2]),
        ("{'a': 1}", {"a": 1}),
        ("'quoted'", "quoted"),
        ('"\\d"', "\\d"),
        ("hello world", "hello world"),
        ("  padded  ", "padded"),
    ],
)
def test_plain_directive_values(text: str, value: object) -> None:
    assert parse_plain_value(text) == value
    assert type(parse_plain_value(text)) is type(value)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("100kb", 100_000),
        ("1b", 1),
        ("2 KiB", 2048),
        ("1.5mb", 1_500_000),
        ("4096", 4096),
        ("1gib", 1024**3),
    ],
)
def test_byte_sizes(text: str, size: int) -> None:
    assert parse_byte_size(text) == size


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1h", 3600.0), ("250ms", 0.25), ("1m", 60.0), ("2d", 172_800.0), ("60", 60.0), ("1.5s", 1.5)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["10 parsecs", "-1kb", "kb", "", "1e3b"])
def test_bad_quantities(text: str) -> None:
    with pytest.raises(ValueError):
        parse_byte_size(text)
    with pytest.raises(ValueError):
        parse_duration(text)
