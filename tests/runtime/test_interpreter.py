"""The core language end to end: values, returns, procedures, scopes."""

from __future__ import annotations

import inspect

import pytest

import kedi
from kedi.errors import (
    KediCheckError,
    KediExecutionError,
    KediNameError,
    KediTypeExecutionError,
)
from tests.runtime.conftest import run

# ----------------------------------------------------------------------------- values


def test_rendered_return_joins_text_and_substitutions() -> None:
    assert (
        run("[project] = Atlas\n[status] = ready\n= Project <project> is <status>.")
        == "Project Atlas is ready."
    )


def test_sole_backtick_keeps_native_value() -> None:
    assert run("= `[1, 2] + [3]`") == [1, 2, 3]


def test_substitution_always_renders() -> None:
    assert run("[n: int] = `3`\n= <n>") == "3"


def test_mixed_text_renders_to_str() -> None:
    assert run(
        "[native: int] = `40 + 2`\n[rendered] = Answer: <`40 + 2`>\n= `(native, rendered)`"
    ) == (42, "Answer: 42")


def test_sole_procedure_call_on_assignment_is_native() -> None:
    source = "@count(items: list[str]) -> int:\n  = `len(items)`\n\n[n: int] = <count(`['a', 'b']`)>\n= `n + 1`"
    assert run(source) == 3


def test_procedure_call_on_return_renders() -> None:
    source = "@count() -> int:\n  = `7`\n\n= <count()>"
    assert run(source) == "7"


def test_escapes_and_boundary_whitespace() -> None:
    assert run("= Issue \\#42 costs \\<5\\>") == "Issue #42 costs <5>"
    assert run("= \\tIndented\\n") == "\tIndented\n"


def test_line_continuation_in_rendered_return() -> None:
    source = "@message(name: str) -> str:\n  = Hello <name>, \\\n    the deployment completed.\n\n= <message(Ada)>"
    assert run(source) == "Hello Ada, the deployment completed."


def test_first_return_wins_at_top_level() -> None:
    assert run("= first\n= second") == "first"


def test_program_without_return_gives_none() -> None:
    assert run("[x] = value") is None


def test_untyped_procedure_without_return_gives_empty_string() -> None:
    assert run("@nothing():\n  [x] = unused\n\n= `nothing()`") == ""


def test_unknown_name_is_an_error_not_empty_text() -> None:
    with pytest.raises(kedi.KediCheckError, match="unknown name `missing`"):
        run("= Hello <missing>")  # caught statically, before anything runs
    with pytest.raises(KediNameError, match="unknown name `later`"):
        run("@f() -> str:\n  = <later>\n\n= <f()>\n[later] = too late")


def test_rendering_of_containers_is_json() -> None:
    assert run("[items: list[str]] = `['a', 'b']`\n= <items>") == '["a","b"]'


# ----------------------------------------------------------------------------- procedures


def test_positional_and_keyword_calls() -> None:
    source = (
        '@label(name: str, prefix: str = `"Issue"`) -> str:\n  = <prefix>: <name>\n\n'
        '= `label("Parser") + " / " + label(name="Lexer", prefix="Bug")`'
    )
    assert run(source) == "Issue: Parser / Bug: Lexer"


def test_nested_calls_inner_first_and_native_arguments() -> None:
    source = (
        "@trim(value: str) -> str:\n  = `value.strip()`\n\n"
        '@slug(value: str) -> str:\n  = `value.lower().replace(" ", "-")`\n\n'
        "= <slug(<trim(  Release Notes  )>)>"
    )
    assert run(source) == "release-notes"


def test_escaped_comma_in_argument() -> None:
    assert (
        run("@echo(value: str) -> str:\n  = <value>\n\n= <echo(alpha\\, beta\\, gamma)>")
        == "alpha, beta, gamma"
    )


def test_defaults_are_evaluated_once_at_definition() -> None:
    source = "```\nseed = 1\n```\n\n@value(current: int = `seed`) -> int:\n  = `current`\n\n`seed = 9`\n= `value()`"
    assert run(source) == 1


def test_strict_argument_validation_no_coercion() -> None:
    source = "@describe(count: int, label: str) -> str:\n  = <label>: <`str(count)`>\n\n= <describe(5, Open items)>"
    with pytest.raises(KediTypeExecutionError, match="argument `count` of `describe`"):
        run(source)
    fixed = source.replace("<describe(5,", "<describe(`2 + 3`,")
    assert run(fixed) == "Open items: 5"


def test_return_type_is_checked_without_coercion() -> None:
    with pytest.raises(KediTypeExecutionError, match="return value of `five`"):
        run('@five() -> int:\n  = "5"\n\n= `five()`')


def test_unannotated_procedure_must_return_str() -> None:
    with pytest.raises(KediTypeExecutionError, match="return value of `numbers`"):
        run("@numbers():\n  = `[1, 2]`\n\n= `numbers()`")


def test_wrong_argument_count() -> None:
    with pytest.raises(kedi.KediCheckError, match="`one` takes 1 argument but 2 were given"):
        run("@one(a: str) -> str:\n  = <a>\n\n= <one(x, y)>")  # static when the callee is known
    with pytest.raises(KediTypeExecutionError, match="too many positional arguments"):
        run('@one(a: str) -> str:\n  = <a>\n\n= `one("x", "y")`')
    with pytest.raises(KediTypeExecutionError, match="missing a required argument"):
        run("@one(a: str) -> str:\n  = <a>\n\n= `one()`")


def test_nested_procedure_closure_sees_latest_value() -> None:
    source = (
        "@make_report(title: str) -> str:\n"
        "  [state] = draft\n"
        "  @render() -> str:\n"
        "    = <title>: <state>\n"
        "  [state] = approved\n"
        "  = <render()>\n\n"
        "= <make_report(Release)>"
    )
    assert run(source) == "Release: approved"


def test_procedure_locals_do_not_leak_to_top_level() -> None:
    source = (
        "[prefix] = global\n\n"
        "@format(value: str) -> str:\n  [prefix] = local\n  [result] = <prefix>: <value>\n  = <result>\n\n"
        "= <format(item)> / <prefix>"
    )
    assert run(source) == "local: item / global"


def test_recursion_through_python() -> None:
    assert (
        run(
            "@factorial(n: int) -> int:\n  = `1 if n <= 1 else n * factorial(n - 1)`\n\n= `factorial(5)`"
        )
        == 120
    )


def test_procedure_sees_top_level_value_assigned_after_definition() -> None:
    source = "[stage] = draft\n\n@read() -> str:\n  = <stage>\n\n[stage] = final\n= <read()>"
    assert run(source) == "final"


def test_compiled_procedures_have_real_signatures_and_docstrings() -> None:
    source = (
        "@quote(destination: str, weight_kg: float, express: bool = `False`) -> float:\n"
        "  ###\n  Calculate a shipping quote.\n  ###\n"
        "  = `weight_kg * (2.0 if express else 1.0)`\n"
    )
    quote = kedi.compile(source).procedures["quote"]
    signature = inspect.signature(quote)
    assert list(signature.parameters) == ["destination", "weight_kg", "express"]
    assert signature.parameters["express"].default is False
    assert signature.parameters["weight_kg"].annotation is float
    assert signature.return_annotation is float
    assert "shipping quote" in quote.__doc__
    assert quote("Oslo", 2.0, express=True) == 4.0


@pytest.mark.anyio
async def test_compiled_procedures_are_awaitable_from_async_code() -> None:
    program = kedi.compile("@double(x: int) -> int:\n  = `x * 2`\n")
    procedures = await program.load_procedures()
    assert await procedures["double"].acall(21) == 42


# ----------------------------------------------------------------------------- python bridge


def test_python_statement_rebinds_kedi_name() -> None:
    assert (
        run(
            "@increment() -> int:\n  [count: int] = `0`\n  `count += 1`\n  = `count`\n\n= `increment()`"
        )
        == 1
    )


def test_fence_rebinds_and_new_names_stay_local() -> None:
    source = "[count: int] = `1`\n```\ncount += 1\ntemporary = 5\n```\n= `(count, 'temporary' in globals())`"
    assert run(source) == (2, False)


def test_nested_function_with_global_syncs() -> None:
    source = (
        "@counter() -> int:\n  [count: int] = `0`\n  ```\n  def bump() -> None:\n      global count\n"
        "      count += 1\n\n  bump()\n  bump()\n  ```\n  = `count`\n\n= `counter()`"
    )
    assert run(source) == 2


def test_return_block() -> None:
    source = "[durations: list[int]] = `[14, 8, 21]`\n[p95: int] = ```\nordered = sorted(durations)\nreturn ordered[-1]\n```\n= p95\\=<p95>"
    assert run(source) == "p95=21"


def test_embedded_python_error_points_at_kedi_line() -> None:
    source = "@divide(value: int) -> int:\n  = `100 // value`\n\n= `divide(0)`"
    with pytest.raises(KediExecutionError) as info:
        run(source)
    rendered = info.value.render()
    assert 'File "test.kedi", line 4, in inline python' in rendered
    assert 'File "test.kedi", line 1, in procedure divide' in rendered
    assert 'File "test.kedi", line 2' in rendered
    assert "ZeroDivisionError" in rendered
    assert "kedi/runtime" not in rendered
    assert isinstance(info.value.original, ZeroDivisionError)


def test_assigning_args_is_rejected() -> None:
    with pytest.raises(kedi.KediError, match="`args` is reserved"):
        run("[args] = x")


def test_args_reads_missing_as_none() -> None:
    assert run("= `(args.title, args.missing)`", args={"title": "T"}) == ("T", None)


# ----------------------------------------------------------------------------- types


def test_custom_type_construction_and_strictness() -> None:
    source = '~Person(age: int, name: str, city: str)\n\n[person: Person] = `Person(30, name="Ada", city="London")`\n= `person.model_dump()`'
    assert run(source) == {"age": 30, "name": "Ada", "city": "London"}
    with pytest.raises(KediTypeExecutionError):
        run('~Person(age: int)\n\n[p: Person] = `{"age": 3}`')


def test_untyped_assignment_is_str() -> None:
    with pytest.raises(KediTypeExecutionError, match="assignment to `x`"):
        run('[x] = `int("42")`')
    # A literal's type is known before the run: the check says so (kedi check agrees).
    with pytest.raises(KediCheckError, match="assignment to `x`"):
        run("[x] = `42`")


def test_typed_assignment_does_not_coerce() -> None:
    with pytest.raises(KediTypeExecutionError):
        run("[count: int] = five")


def test_unknown_type_name_fails_loudly() -> None:
    # `kedi check` rejects a type nothing binds; here Python might have bound it, and did not.
    with pytest.raises(KediNameError, match="Missing"):
        run("```\nif False:\n    class Missing: pass\n```\n[x: Missing] = `1`")


@pytest.mark.anyio
async def test_sync_call_inside_a_running_loop_is_a_clear_usage_error() -> None:
    procedures = await kedi.compile("@double(x: int) -> int:\n  = `x * 2`\n").load_procedures()
    with pytest.raises(kedi.KediUsageError, match="use `await double.acall"):
        procedures["double"](2)


@pytest.mark.anyio
async def test_run_sync_inside_async_code_points_to_run() -> None:
    with pytest.raises(kedi.KediUsageError, match="await program.run"):
        kedi.compile("= ok\n").run_sync(model="offline")


@pytest.mark.anyio
async def test_a_sync_query_inside_async_code_points_to_async_def() -> None:
    @kedi.query
    def greet(name: str) -> str:
        """kedi
        = Hello <name>
        """

    with pytest.raises(kedi.KediUsageError, match="'greet' is a sync Kedi function"):
        greet("Ada")
    assert await kedi.compile("= ok\n").run(model="offline") == "ok"


@pytest.mark.anyio
async def test_procedures_property_inside_async_code_points_to_load_procedures() -> None:
    with pytest.raises(kedi.KediUsageError, match="load_procedures"):
        _ = kedi.compile("@f() -> str:\n  = ok\n").procedures
