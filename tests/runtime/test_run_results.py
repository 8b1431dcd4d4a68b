"""`program.run(..., result=True)`: run results and run/conversation identity (C8)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import kedi

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
TWO_CALLS = kedi.compile("> history: enabled\n[a] << one <`args.x`>\n[b] << two\n= <b>")


def test_a_run_result_holds_the_value_a_fresh_run_id_the_new_messages_and_usage() -> None:
    conversation = kedi.Conversation()
    first = TWO_CALLS.run_sync(args={"x": 1}, conversation=conversation, result=True)
    second = TWO_CALLS.run_sync(args={"x": 2}, conversation=conversation, result=True)
    assert isinstance(first, kedi.RunResult) and first.value == "[offline] two"
    assert (
        UUID7.match(first.run_id) and UUID7.match(second.run_id) and first.run_id != second.run_id
    )
    assert first.conversation_id == second.conversation_id == conversation.conversation_id
    assert [m.content for m in second.messages] == [
        "one 2",
        "[offline] one 2",
        "two",
        "[offline] two",
    ]
    assert {(m.run_id, m.conversation_id) for m in second.messages} == {
        (second.run_id, conversation.conversation_id)
    }
    assert second.usage.requests == 2 and second.usage.output_tokens > 0
    assert second.conversation is conversation and len(conversation.messages()) == 8
    # Without result=True a run still returns just its value.
    assert TWO_CALLS.run_sync(args={"x": 3}) == "[offline] two"


def test_a_supplied_run_id_names_the_run_and_stamps_its_messages() -> None:
    result = TWO_CALLS.run_sync(args={"x": 1}, run_id="job-7", result=True)
    assert result.run_id == "job-7" and {m.run_id for m in result.messages} == {"job-7"}
    with pytest.raises(kedi.KediUsageError, match="run_id must be a non-empty string, not ''"):
        TWO_CALLS.run_sync(run_id="")


def test_a_supplied_conversation_id_starts_or_forks_a_conversation() -> None:
    fresh = TWO_CALLS.run_sync(args={"x": 1}, conversation_id="conv-a", result=True)
    assert fresh.conversation_id == "conv-a" == fresh.conversation.conversation_id
    assert {m.conversation_id for m in fresh.messages} == {"conv-a"}
    # The same id as the conversation passed: that conversation, not a fork.
    same = TWO_CALLS.run_sync(
        args={"x": 2}, conversation=fresh.conversation, conversation_id="conv-a", result=True
    )
    assert same.conversation is fresh.conversation and len(fresh.conversation.messages()) == 8
    fork = TWO_CALLS.run_sync(
        args={"x": 3}, conversation=fresh.conversation, conversation_id="conv-b", result=True
    )
    assert fork.conversation is not fresh.conversation and fork.conversation_id == "conv-b"
    assert len(fork.conversation.messages()) == 12 and len(fresh.conversation.messages()) == 8
    assert {m.conversation_id for m in fork.messages} == {"conv-b"}


def test_pydantic_ai_messages_carry_the_run_id_of_the_run() -> None:
    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart(f"{len(messages)} messages")])

    result = TWO_CALLS.run_sync(
        args={"x": 1}, model=FunctionModel(reply), result=True, run_id="run-p"
    )
    assert result.value == "3 messages" and len(result.messages) == 4
    assert {m.run_id for m in result.messages} == {"run-p"}


def test_the_run_ids_example_shows_chained_and_forked_runs() -> None:
    script = Path(__file__).resolve().parents[2] / "examples" / "run_ids.py"
    out = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True
    ).stdout
    assert out.count("all stamped with both ids: True") == 3
    assert "run request-42" in out and "same conversation: True" in out
    assert "forked from the first two: True" in out and "the original still has 4 messages" in out


def test_an_adapter_factory_builds_the_runs_adapters_and_may_share_them_across_runs() -> None:
    """`adapter_factory` is asked for every (adapter, model) pair a run uses (`kedi batch` shares one pool)."""
    from kedi.adapters.offline import OfflineAdapter

    asked: list[tuple[object, object]] = []
    shared: dict[tuple[object, object], OfflineAdapter] = {}

    def factory(adapter: object, model: object) -> OfflineAdapter:
        asked.append((adapter, model))
        return shared.setdefault((adapter, model), OfflineAdapter(f"shared-{len(shared)}"))

    program = kedi.compile("[a] << one\n> model: other\n[b] << two\n= <b>")
    for _ in range(2):
        program.run_sync(adapter="offline", model="m", adapter_factory=factory)
    # each run asks once per pair (the run caches its adapters); the instances were the factory's
    assert asked == [("offline", "m"), ("offline", "other")] * 2 and len(shared) == 2
    # without a factory, the registry builds them as before
    assert program.run_sync(adapter="offline", model="m") == "[offline] two"


def test_a_programs_runs_share_its_compiled_python_and_still_trace_it() -> None:
    program = kedi.compile("= `1 // args.d`", path="div.kedi")
    assert program.run_sync(args={"d": 1}) == 1
    with pytest.raises(
        kedi.KediError,
        match=r"(?s)File \"div\.kedi\", line 1.*embedded Python line 1.*1 // args\.d",
    ):
        program.run_sync(args={"d": 0})
