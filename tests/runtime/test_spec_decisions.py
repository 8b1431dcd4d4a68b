"""Decisions on the language spec's open questions (§12) that no other test pins.

Each test names its question (A3, B15, ...); docs/language.md, "Decisions on
the spec's open questions", lists every question with its decision and test.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import kedi
from kedi.adapters.base import Adapter, AdapterProfile, CallRequest, CallResult
from kedi.errors import (
    CapabilityError,
    KediCheckError,
    KediExecutionError,
    KediTypeExecutionError,
)
from kedi.syntax.directives import DIRECTIVE_NAMES
from tests.runtime.conftest import run


def sent(source: str, **options: Any) -> list[list[tuple[str, str]]]:
    """Run `source` on the offline model; the (role, content) messages of each request."""
    records: list[dict[str, Any]] = []
    run(source, transcript=records.append, **options)
    return [[(m["role"], m["content"]) for m in record["messages"]] for record in records]


# --------------------------------------------------------------------------- syntax


def test_a3_angle_name_in_backticks_is_the_kedi_value_only_when_python_cannot_read_it() -> None:
    assert run('[prefix] = id\n[n: int] = `7`\n= `<prefix> + ":" + str(<n>)`') == "id:7"
    compact = '[count: int] = `2`\n[label] = items\n= `<f"{count}{label}" if True else "">`'
    assert run(compact) == "2items"  # a whole expression wrapped in <...>
    # Valid Python keeps its meaning: a chained comparison, not three Kedi values.
    assert run("[a: int] = `1`\n[b: int] = `2`\n[c: int] = `3`\n= `a <b> c`") is False


def test_a4_quotes_in_kedi_text_are_ordinary_characters() -> None:
    assert run('[value] = "  Ready "\n= `value`') == '"  Ready "'
    assert run('[value] = `"  Ready "`\n= `value.strip().lower()`') == "ready"


def test_a5_a_nested_procedure_renders_what_its_code_says_with_the_latest_value() -> None:
    """The documented closure example returns `title: approved`, not `title [approved]`."""
    source = (
        "@make_report(title: str) -> str:\n  [state] = draft\n  @render() -> str:\n"
        "    = <title>: <state>\n  [state] = approved\n  = <render()>\n\n= <make_report(title)>"
    )
    assert run(source) == "title: approved"


def test_a6_inline_python_spans_lines_only_inside_brackets_or_a_triple_quoted_string() -> None:
    assert run("[x: int] = `(1 +\n  2)`\n= `x`") == 3
    assert run('[x] = `"""a\nb"""`\n= `x`') == "a\nb"
    with pytest.raises(kedi.KediSyntaxError) as caught:
        kedi.parse("[x: int] = `1 +\n  2`\n")
    (diagnostic,) = caught.value.diagnostics
    assert (diagnostic.line, diagnostic.column) == (1, 12)
    assert diagnostic.message == "Unclosed backtick: inline Python runs onto the next line"


def test_a9_the_directive_set_is_the_union_of_every_page() -> None:
    documented = {"adapter", "agent", "model", "effort", "system", "settings", "history"}
    documented |= {"artifacts", "approval", "mcp", "use", "skills", "codemode", "profile"}
    documented |= {"subagent", "max_agents", "workflow", "import", "export", "package"}
    documented |= {"optimize", "auto", "case", "data", "test_data", "metric"}
    assert documented == DIRECTIVE_NAMES
    with pytest.raises(kedi.KediSyntaxError, match="Unknown directive"):
        kedi.parse("> skill: enabled\n")


def test_a10_a_capture_is_sent_as_its_name_and_its_type_goes_in_the_schema() -> None:
    records: list[dict[str, Any]] = []
    run(">> Severity: [severity: int].\n", transcript=records.append)
    (record,) = records
    assert record["messages"][-1]["content"] == "Severity: [severity]."
    assert record["output_schema"]["properties"]["severity"]["type"] == "integer"


def test_a12_output_fields_in_call_arguments_are_a_parse_error() -> None:
    with pytest.raises(kedi.KediSyntaxError) as caught:
        kedi.parse("= <classify(apple is a [category])>\n", path="f.kedi")
    (diagnostic,) = caught.value.diagnostics
    assert (diagnostic.line, diagnostic.column) == (1, 24)
    assert diagnostic.message == "Output fields are not allowed in call arguments"


# --------------------------------------------------------------------------- values and names


def test_b13_a_lone_substitution_on_an_assignment_renders() -> None:
    assert run("[n: int] = `3`\n[x] = <n>\n= `x`") == "3"
    with pytest.raises(KediTypeExecutionError, match="expected int, got str '3'"):
        run("[n: int] = `3`\n[x: int] = <n>\n= `x`")  # the native value needs backticks


def test_b15_lookup_precedence_first_match_wins() -> None:
    source = (
        '```\nlabel = "prelude"\nlen = lambda x: "prelude len"\n```\n'
        "[title] = top\n"
        "@inner() -> str:\n  [title] = frame\n  = <title>\n"
        "@outer() -> str:\n  [title] = outer\n  @nested() -> str:\n    = <title>\n  = <nested()>\n"
        "= `(inner(), outer(), title, label, len([1]), env_only, abs(-1))`"
    )
    assert run(source, env={"label": "env", "env_only": "env"}) == (
        "frame",  # the procedure's own frame over the top level
        "outer",  # an enclosing procedure's frame over the top level
        "top",
        "prelude",  # a prelude name over an `env=` value
        "prelude len",  # a prelude name over a Python builtin
        "env",  # an `env=` value nothing else binds
        1,  # Python builtins last
    )


def test_b16_embedded_python_may_rebind_a_parameter_for_the_rest_of_the_invocation() -> None:
    source = '@f(value: str) -> str:\n  `value = value.strip()`\n  = (<value>)\n\n= <f(`"  x  "`)>'
    assert run(source) == "(x)"
    with pytest.raises(KediExecutionError, match="cannot assign to parameter `value`"):
        run("@f(value: str) -> str:\n  [value] = y\n  = <value>\n\n= <f(x)>")


# --------------------------------------------------------------------------- definitions in source order


def test_d1_a_procedure_used_above_its_definition_fails_the_compile_at_the_use() -> None:
    with pytest.raises(KediCheckError) as caught:
        kedi.compile("[x] = <f()>\n\n@f() -> str:\n  = hi\n\n= <x>")
    (problem,) = caught.value.diagnostics
    assert (problem.line, problem.message) == (1, "`f` is defined below, at line 3")
    # Moved above its use, the same program runs.
    assert run("@f() -> str:\n  = hi\n\n[x] = <f()>\n\n= <x>") == "hi"


def test_d2_a_second_definition_replaces_the_first_from_where_it_is_written() -> None:
    source = (
        "@f() -> str:\n  = one\n"
        "~T(a: int)\n"
        "[before] = <f()>\n"
        "[t1: T] = `T(a=1)`\n"
        "@f() -> str:\n  = two\n"
        "~T(b: int)\n"
        "[t2: T] = `T(b=2)`\n"
        "@outer() -> str:\n"
        "  @g() -> str:\n    = first\n"
        "  [x] = <g()>\n"
        "  @g() -> str:\n    = second\n"
        "  = <x> <g()>\n"
        "= `(before, f(), sorted(type(t1).model_fields), sorted(T.model_fields), outer())`"
    )
    assert run(source) == ("one", "two", ["a"], ["b"], "first second")


# --------------------------------------------------------------------------- history


def test_b17_a_structured_turn_is_the_prompt_and_the_json_object_of_its_outputs() -> None:
    requests = sent("> history: enabled\n>> Pick [a] and [n: int].\n[why] << Why?\n")
    assert requests[1] == [
        ("user", "Pick [a] and [n]."),
        ("assistant", '{"a":"a","n":0}'),
        ("user", "Why?"),
    ]


def test_b18_procedures_capture_the_history_flag_where_defined_and_share_the_lane() -> None:
    source = (
        "@early() -> str:\n  >> Early [e].\n  = <e>\n"  # defined before history is on
        "> history: enabled\n"
        ">> First [a].\n"
        "@late() -> str:\n  >> Late [l].\n  = <l>\n"
        "@aside() -> str:\n  > history: disabled\n  >> Aside [s].\n  = <s>\n"
        "= <early()> <late()> <aside()> <late()>"
    )
    first, early, late, aside, late_again = sent(source)
    assert early == [("user", "Early [e].")]  # no history where `early` was defined
    assert late == [("user", "First [a]."), ("assistant", '{"a":"a"}'), ("user", "Late [l].")]
    assert aside == [("user", "Aside [s].")]  # a disabled scope reads nothing ...
    # ... and writes nothing; a second invocation continues the same conversation.
    assert late_again == [*late, ("assistant", '{"l":"l"}'), ("user", "Late [l].")]
    assert first == [("user", "First [a].")]


class NoTools(Adapter):
    """A model that can answer but cannot call tools."""

    shortname = "no-tools"
    profile = AdapterProfile(tools=False)
    model_name = "plain"
    calls = 0

    async def request(self, request: CallRequest) -> CallResult:
        NoTools.calls += 1
        return CallResult(value={"answer": "x"}, new_messages=())


def test_b24_tools_on_an_adapter_without_tools_fail_before_any_model_io() -> None:
    source = "@lookup(key: str) -> str:\n  = <key>\n> use: lookup\n>> Look it up [answer].\n"
    with pytest.raises(KediExecutionError, match="does not support tools") as caught:
        kedi.compile(source).run_sync(adapter=NoTools())
    assert isinstance(caught.value.original, CapabilityError)
    assert NoTools.calls == 0
    assert kedi.compile(">> Look it up [answer].\n= <answer>").run_sync(adapter=NoTools()) == "x"


# --------------------------------------------------------------------------- programs


def test_b29_args_is_empty_under_query_and_bind(tmp_path: Path) -> None:
    @kedi.query
    def from_query(topic: str) -> Any:
        """kedi
        = `(topic, args.topic, args.anything)`
        """

    flow = tmp_path / "flow.kedi"
    flow.write_text("= `(args.topic, topic)`\n")

    @kedi.bind(flow)
    def from_bind(topic: str) -> Any: ...

    assert from_query("tides") == ("tides", None, None)
    assert from_bind("tides") == (None, "tides")  # call arguments are globals, not `args`


# --------------------------------------------------------------------------- history spec


def test_history_keys_are_the_specs_plus_two_bounds_and_no_processor_key() -> None:
    """history.md A1: kedi adds `max_messages` and `max_tokens`; processors come from Python."""
    bounded = "> history:\n    enabled: true\n    max_messages: 4\n    max_tokens: 500\n= ok\n"
    assert kedi.compile(bounded).run_sync(model="offline") == "ok"
    with pytest.raises(kedi.KediCheckError) as caught:
        kedi.compile("> history:\n    enabled: true\n    processor: mine.trim\n= ok\n")
    (diagnostic,) = caught.value.diagnostics
    assert diagnostic.message == "unknown key `processor` in `> history:`"
    assert diagnostic.hint == (
        "`> history:` takes `enabled`, `compaction_mode`, `compaction_threshold`, "
        "`max_messages`, `max_tokens`"
    )


def test_runs_never_sanitize_supplied_history_on_their_own() -> None:
    """history.md C5: the embedder sanitizes at its trust boundary; a run only drops system messages."""
    conversation = kedi.Conversation()
    unsafe: dict[str, Any] = {
        "role": "user",
        "content": "look",
        "parts": [{"kind": "image", "url": "file:///x"}],
    }
    supplied: list[dict[str, Any]] = [
        {"role": "system", "content": "old rules"},
        unsafe,
        {"role": "assistant", "content": "ok"},
    ]
    conversation.seed(supplied, model="offline")
    requests = sent("> history: enabled\n[r] << Next.\n", conversation=conversation)
    records: list[dict[str, Any]] = []
    run("> history: enabled\n[r] << Again.\n", conversation=conversation, transcript=records.append)
    assert requests[0][:2] == [("user", "look"), ("assistant", "ok")]
    assert records[0]["messages"][0]["parts"] == [{"kind": "image", "url": "file:///x"}]
    clean, report = kedi.sanitize_history(supplied)
    assert [m.role for m in clean] == ["user", "assistant"] and not clean[0].parts
    assert report.system_prompts == 1 and report.unsafe_parts[0].scheme == "file"
