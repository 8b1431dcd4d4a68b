"""Tools: `> use:` exposes procedures and Python callables to the model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import kedi
from kedi.errors import KediUsageError
from kedi.runtime.tools import ToolBuilder, parse_docstring


def run_with(tmp_path: Path, source: str, replies: list, **options):
    script = tmp_path / "replies.json"
    script.write_text(json.dumps(replies), encoding="utf-8")
    records: list[dict] = []
    result = kedi.compile(source, path="tools.kedi").run_sync(
        model=f"script:{script}", transcript=records.append, **options
    )
    return result, records


PROGRAM = """
@lookup_release(version: str) -> str:
  ###
  Return release notes for one exact version.

  Args:
    version: The exact version string, e.g. 1.4.0.
  ###
  = Notes for <version>: faster parser.

> use: lookup_release
>> Find release 1.4.0 and return [answer: str].
= <answer>
"""


def test_procedure_tool_round_trip(tmp_path: Path) -> None:
    replies = [
        {"tool_calls": [{"name": "lookup_release", "args": {"version": "1.4.0"}, "id": "c1"}]},
        {"outputs": {"answer": "1.4.0 has a faster parser"}},
    ]
    result, records = run_with(tmp_path, PROGRAM, replies)
    assert result == "1.4.0 has a faster parser"
    assert records[0]["tools"] == ["lookup_release"]
    tool_message = records[1]["messages"][-1]
    assert (
        tool_message["role"] == "tool"
        and tool_message["content"] == "Notes for 1.4.0: faster parser."
    )


def test_tool_argument_validation_failure_goes_back_to_the_model(tmp_path: Path) -> None:
    replies = [
        {"tool_calls": [{"name": "lookup_release", "args": {"version": 14}, "id": "c1"}]},
        {"outputs": {"answer": "sorry"}},
    ]
    _, records = run_with(tmp_path, PROGRAM, replies)
    tool_message = records[1]["messages"][-1]
    assert tool_message["failed"] is True and "invalid arguments" in tool_message["content"]


def test_python_tool_exception_is_a_failed_result(tmp_path: Path) -> None:
    source = (
        '```\ndef flaky(city: str) -> str:\n    """Weather for a city."""\n    raise RuntimeError(\'service down\')\n```\n'
        "> use: flaky\n>> Weather? [w].\n= <w>"
    )
    replies = [
        {"tool_calls": [{"name": "flaky", "args": {"city": "Oslo"}}]},
        {"outputs": {"w": "unknown"}},
    ]
    result, records = run_with(tmp_path, source, replies)
    assert result == "unknown"
    assert records[1]["messages"][-1]["content"] == "service down"


def test_tool_contract_is_part_of_the_lane_key(tmp_path: Path) -> None:
    source = (
        "> history: enabled\n@t(x: str) -> str:\n  = <x>\n\n>> Plain [a].\n"
        "@with_tool() -> str:\n  > use: t\n  >> Tooled [b].\n  = <b>\n[z] = <with_tool()>\n>> Plain again [c].\n= <c>"
    )
    replies = [{"outputs": {"a": "1"}}, {"outputs": {"b": "2"}}, {"outputs": {"c": "3"}}]
    _, records = run_with(tmp_path, source, replies)
    assert records[1]["lane"] != records[0]["lane"]
    assert records[2]["lane"] == records[0]["lane"]
    assert len(records[1]["messages"]) == 1 and len(records[2]["messages"]) == 3


def test_tool_schema_from_signature_and_docstring() -> None:
    program = kedi.compile(PROGRAM)
    procedure = program.procedures["lookup_release"]
    spec, digest = ToolBuilder(lambda proc, expr: str).spec("lookup_release", procedure)
    assert spec.description == "Return release notes for one exact version."
    assert (
        spec.parameters["properties"]["version"]["description"]
        == "The exact version string, e.g. 1.4.0."
    )
    assert spec.parameters["required"] == ["version"]
    assert spec.parameters["additionalProperties"] is False
    assert len(digest) == 16


def test_parse_docstring_google_and_rest() -> None:
    summary, params = parse_docstring(
        "Quote shipping.\n\nArgs:\n    destination: Country.\n    weight_kg: Weight in kg;\n        must be positive.\n\nReturns:\n    Price."
    )
    assert summary == "Quote shipping."
    assert params == {"destination": "Country.", "weight_kg": "Weight in kg; must be positive."}
    assert parse_docstring("Do it.\n:param x: the x\n:return: y")[1] == {"x": "the x"}


def test_kedi_tool_decorator_options() -> None:
    @kedi.tool(name="find", risk="read_only")
    def lookup(q: str) -> str:
        """Find things."""
        return q

    assert lookup.__kedi_tool__.name == "find"
    with pytest.raises(KediUsageError):
        kedi.tool(retries=-1)
    with pytest.raises(KediUsageError):
        kedi.tool(risk="dangerous")


def test_query_tools_and_argument_collision() -> None:
    def search_docs(query: str) -> str:
        """Search the docs."""
        return "found"

    @kedi.query(tools=[search_docs], model="offline")
    def answer(question: str) -> str:
        """kedi
        > use: search_docs
        >> Answer <question> [a].
        = <a>
        """

    assert answer("why?") == "a"
    with pytest.raises(KediUsageError, match="share a name with a tool"):

        @kedi.query(tools=[search_docs])
        def clash(search_docs: str) -> str:
            """kedi
            = ok
            """


def test_the_tool_digest_covers_the_argument_schema() -> None:
    """Lanes are keyed by the tool contract: a changed argument type is a new lane (issue 17)."""
    from kedi.runtime.tools import ToolBuilder

    def by_number(city: int) -> str:
        """Look a city up."""
        return str(city)

    def by_name(city: str) -> str:
        """Look a city up."""
        return city

    builder = ToolBuilder(lambda procedure, expr: expr)
    assert builder.spec("lookup", by_number)[1] != builder.spec("lookup", by_name)[1]
