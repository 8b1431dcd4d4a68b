"""Call sites: what a `>>` statement fixes once, and what it must still look up per call (B14)."""

from __future__ import annotations

import dataclasses

import pytest

import kedi
from kedi.adapters.base import CallRequest, CallResult, OutputSpec, build_request
from kedi.adapters.offline import OfflineAdapter
from kedi.runtime.values import constant_text
from kedi.syntax import ast
from tests.runtime.conftest import run

TYPED_CALL = "@ask() -> str:\n  >> Pick one [n: Num].\n  = `type(n).__name__`\n\n"


def test_a_capture_type_follows_its_name_between_calls_of_one_site() -> None:
    source = (
        TYPED_CALL
        + "[Num: type] = `int`\n[first] = <ask()>\n[Num: type] = `str`\n[second] = <ask()>\n= `(first, second)`"
    )
    assert run(source) == ("int", "str")


def test_a_capture_type_follows_its_name_between_runs_of_one_program() -> None:
    program = kedi.compile(TYPED_CALL + "= <ask()>", path="test.kedi", known_globals=["Num"])
    assert program.run_sync(model="offline", env={"Num": int}) == "int"
    assert program.run_sync(model="offline", env={"Num": bool}) == "bool"
    assert program.run_sync(model="offline", env={"Num": int}) == "int"


def test_an_unknown_capture_type_still_fails_on_every_run() -> None:
    program = kedi.compile(TYPED_CALL + "= <ask()>", path="test.kedi", known_globals=["Num"])
    assert program.run_sync(model="offline", env={"Num": int}) == "int"
    with pytest.raises(kedi.KediExecutionError, match="Num"):
        program.run_sync(model="offline")


def test_the_prompt_is_rendered_per_call_when_it_substitutes() -> None:
    seen: list[str] = []
    source = "[topic] = tides\n>> Explain <topic> [summary].\n[topic] = winds\n>> Explain <topic> [summary].\n= done"
    run(source, transcript=lambda record: seen.append(record["messages"][-1]["content"]))
    assert seen == ["Explain tides [summary].", "Explain winds [summary]."]


def test_constant_text_is_only_for_rows_without_substitutions() -> None:
    fixed = (
        ast.Row(segments=(ast.Text(value="Summarise it briefly:"),)),
        ast.Row(
            segments=(
                ast.Text(value="in one line "),
                ast.Capture(name="summary", type=None),
                ast.Text(value="."),
            )
        ),
    )
    substituting = (ast.Row(segments=(ast.Text(value="Explain "), ast.Subst(name="topic"))),)
    assert constant_text(fixed) == "Summarise it briefly:\nin one line [summary]."
    assert constant_text(substituting) is None


def test_build_request_makes_the_same_frozen_request() -> None:
    values = {field.name: f"value of {field.name}" for field in dataclasses.fields(CallRequest)}
    values["output"] = OutputSpec(model=None, json_schema={})  # type: ignore[arg-type]
    built = build_request(**values)
    assert type(built) is CallRequest
    assert built == CallRequest(**values)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.prompt = "edited"  # type: ignore[misc]


class TextOnlyModel(OfflineAdapter):
    """A custom adapter without structured output whose `request` never checks."""

    profile = dataclasses.replace(OfflineAdapter.profile, structured_output=False)
    sent: list[CallRequest]

    async def request(self, request: CallRequest) -> CallResult:
        self.sent.append(request)
        return CallResult(value="unchecked", new_messages=())


def test_kedi_checks_requests_for_an_adapter_that_does_not_check_them() -> None:
    adapter = TextOnlyModel()
    adapter.sent = []
    assert not TextOnlyModel.checks_requests  # it overrides `request` and says nothing
    with pytest.raises(kedi.KediExecutionError, match="has no structured output"):
        run(">> Pick one [n: int].\n= <n>", adapter=adapter)
    assert adapter.sent == []  # refused before the adapter saw anything
    assert run("[reply] << Say hi\n= <reply>", adapter=adapter) == "unchecked"
