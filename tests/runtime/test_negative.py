"""The semantic (run-time) negative cases of spec §11, each a clear kedi error."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

import kedi
from kedi.adapters.base import Adapter, AdapterProfile, CallRequest, CallResult
from kedi.cli import main
from kedi.errors import (
    CapabilityError,
    KediCheckError,
    KediExecutionError,
    KediNameError,
    KediTypeExecutionError,
    KediValueExecutionError,
)
from tests.runtime.conftest import run


def test_case_12_invalid_effort_from_python_is_a_runtime_error() -> None:
    with pytest.raises(KediValueExecutionError, match="invalid effort 'extreme'"):
        run('> effort: `"extreme"`\n>> Hi [x].')


def test_case_13_history_policy_checked_at_run_time_too() -> None:
    with pytest.raises(KediValueExecutionError, match="compaction_threshold"):
        run("> history:\n    enabled: true\n    compaction_threshold: `-5`\n>> Hi [x].")
    with pytest.raises(KediCheckError, match="enabled"):
        run("> history:\n    compaction_mode: disabled\n")


def test_case_13_native_compaction_fails_before_any_model_io() -> None:
    records: list[dict] = []
    with pytest.raises(KediExecutionError, match="compaction_mode: native") as info:
        run(
            "> history:\n    enabled: true\n    compaction_mode: native\n>> Hi [x].",
            transcript=records.append,
        )
    assert isinstance(info.value.original, CapabilityError)
    assert records == []
    # It says what to do instead, not only that kedi will not summarize.
    assert "bound the history with `max_messages: N` or `max_tokens: N`" in str(info.value)


def test_case_17_python_cannot_rebind_args() -> None:
    with pytest.raises(KediValueExecutionError, match="`args` is reserved"):
        run("```\nargs = 5\n```\n= ok")  # in the prelude
    with pytest.raises(KediValueExecutionError, match="`args` is reserved"):
        run("[x] = first\n```\nargs = 5\n```\n= ok")  # in a later block


def test_case_18_native_value_from_unannotated_procedure() -> None:
    with pytest.raises(KediTypeExecutionError, match="return value of `f`"):
        run("@f():\n  = `{'a': 1}`\n\n= <f()>")


def test_case_19_unknown_type_name() -> None:
    # Compile time when nothing can bind the name; run time when only Python might have.
    with pytest.raises(KediCheckError, match="unknown type `Nope`"):
        kedi.compile("@f(x: Nope) -> str:\n  = ok\n\n= `f(1)`")
    with pytest.raises(KediNameError, match="Nope"):
        run("```\nif False:\n    Nope = int\n```\n@f(x: Nope) -> str:\n  = ok\n\n= `f(1)`")


def test_case_21_nonlocal_for_a_kedi_binding() -> None:
    source = "@f() -> int:\n  [count: int] = `0`\n  ```\n  def bump():\n      nonlocal count\n      count += 1\n  ```\n  = `count`\n\n= `f()`"
    with pytest.raises(KediCheckError, match="`nonlocal count` cannot rebind a Kedi binding"):
        kedi.compile(source)


class TextOnly(Adapter):
    """A model without structured output (like ACP)."""

    shortname = "text-only"
    profile = AdapterProfile(structured_output=False)
    model_name = "text"
    calls = 0

    async def request(self, request: CallRequest) -> CallResult:
        TextOnly.calls += 1
        return CallResult(value="plain", new_messages=())


def test_case_22_structured_template_on_a_text_only_adapter() -> None:
    with pytest.raises(KediExecutionError, match="no structured output") as info:
        kedi.compile(">> Classify [label].").run_sync(adapter=TextOnly())
    assert isinstance(info.value.original, CapabilityError)
    assert TextOnly.calls == 0
    assert kedi.compile("[x] << Say hi.\n= <x>").run_sync(adapter=TextOnly()) == "plain"


def test_case_25_cli_usage_errors() -> None:
    result = CliRunner().invoke(main, ["run", "flow.kedi", "-c", "= ok"])
    assert result.exit_code == 2 and "either FILE or -c" in result.output


def test_assigning_a_parameter_is_rejected() -> None:
    with pytest.raises(KediValueExecutionError, match="cannot assign to parameter `value`"):
        run("@f(value: str) -> str:\n  [value] = changed\n  = <value>\n\n= <f(x)>")


def test_return_block_must_return() -> None:
    with pytest.raises(KediValueExecutionError, match="must `return`"):
        run("[x: int] = ```\ny = 1\n```")


def test_calling_a_non_procedure() -> None:
    with pytest.raises(KediTypeExecutionError, match="is not a procedure"):
        run("[name] = Ada\n= <name(x)>")


def test_a_procedure_that_never_returns_names_its_declared_type() -> None:
    with pytest.raises(KediTypeExecutionError) as info:
        run("@f(n: int) -> int:\n  [m: int] = `n`\n\n= `f(2)`")
    message = info.value.message
    assert message == (
        "return value of `f`: the procedure ended without returning a value (declared `int`)"
    )


def test_a_return_in_a_standalone_fence_is_ignored_and_the_error_says_so() -> None:
    # Spec 2.7: a standalone fence's `return` value is ignored; `= ```` returns it.
    source = "@f(n: int) -> int:\n  ```\n  if n:\n      return n * 2\n  ```\n\n= `f(2)`"
    with pytest.raises(KediTypeExecutionError) as info:
        run(source)
    assert info.value.message.splitlines()[1] == (
        "hint: the `return` in the ``` block at line 2 only ends that block "
        "(its value is ignored); to return it, open the block with = ```"
    )
    assert run(source.replace("  ```\n  if", "  = ```\n  if")) == 4


def test_a_return_inside_a_fenced_function_is_not_the_fence_returning() -> None:
    source = "@f() -> int:\n  ```\n  def g():\n      return 1\n  ```\n\n= `f()`"
    with pytest.raises(KediTypeExecutionError) as info:
        run(source)
    assert "hint" not in info.value.message


def test_a_text_argument_to_a_typed_parameter_says_how_to_pass_the_value() -> None:
    # `<f(3)>` passes the text "3" (docs/guide.md, "Procedures"): the error now says
    # how to pass the number instead of only "expected int, got str '3'".
    source = "@f(n: int, tags: list[str]) -> int:\n  = `n`\n"
    with pytest.raises(KediTypeExecutionError) as info:
        run(source + "= <f(3, x)>")
    assert info.value.message == (
        "argument `n` of `f`: expected int, got str '3'\n"
        "hint: an argument written as text passes a string; "
        "write it in backticks (`3`) to pass its value"
    )
    with pytest.raises(KediTypeExecutionError) as info:
        run(source + "= <f(`1`, a b)>")
    assert info.value.message.endswith(
        "hint: an argument written as text passes a string; pass a value in backticks"
    )
    with pytest.raises(KediTypeExecutionError) as info:  # from Python a str is a str
        run(source + '= `f("3", [])`')
    assert "hint" not in info.value.message
    with pytest.raises(KediTypeExecutionError) as info:  # an odd escape is no warning
        run(source + "= <f(`1`, '\\\\d')>")
    assert info.value.message.endswith("pass a value in backticks")
