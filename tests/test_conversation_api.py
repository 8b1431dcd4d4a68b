"""Conversations as a Python API, end to end through `program.run`.

Lane identity and epochs, atomic commits under failure, cancellation and hook
refusal, source order under parallel runs, partial results and resumption,
chaining, forking, saving and continuing, and the runnable examples of
`docs/history.md`.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

import kedi
from kedi.adapters.base import Adapter, CallRequest, CallResult
from kedi.adapters.offline import OfflineAdapter
from kedi.adapters.scripted import ScriptAdapter
from kedi.errors import AdapterError, ProviderError
from kedi.history import INTERRUPTED_RESULT, Message
from kedi.history.lanes import LaneKey, canonical_digest

DOCS = Path(__file__).resolve().parents[1] / "docs" / "history.md"

TOOL_PROGRAM = (
    '```\ndef lookup(q: str) -> str:\n    """Look q up."""\n    return \'found \' + q\n```\n'
    "> history: enabled\n> use: lookup\n[a] << Look it up\n= <a>"
)
CHAT = kedi.compile("> history: enabled\n[reply] << <`args.message`>\n= <reply>")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def script(tmp_path: Path) -> Callable[[list[Any]], ScriptAdapter]:
    """A script adapter over a fresh reply file (one instance: replies are used up across runs)."""

    def make(replies: list[Any]) -> ScriptAdapter:
        path = tmp_path / f"replies{len(list(tmp_path.glob('replies*.json')))}.json"
        path.write_text(json.dumps(replies), encoding="utf-8")
        return ScriptAdapter(path)

    return make


def contents(messages: Any) -> list[str]:
    return [m.content if isinstance(m, Message) else m.get("content", "") for m in messages]


def assert_pair_valid(messages: list[dict[str, Any]]) -> None:
    """Every tool call is answered exactly once, after it; every tool result answers one."""
    open_calls: set[str] = set()
    for message in messages:
        for call in message.get("toolCalls", ()):
            open_calls.add(call["id"])
        if message["role"] == "tool":
            assert message["toolCallId"] in open_calls, f"orphan result {message}"
            open_calls.discard(message["toolCallId"])
        elif message["role"] == "user":
            assert not open_calls, f"calls {open_calls} unanswered before {message}"
    assert not open_calls


# --------------------------------------------------------------------------- conversations and lanes


def test_each_run_has_its_own_conversation_unless_one_is_passed() -> None:
    records: list[dict[str, Any]] = []
    CHAT.run_sync(args={"message": "one"}, model="offline")
    CHAT.run_sync(args={"message": "two"}, model="offline", transcript=records.append)
    assert contents(records[0]["messages"]) == ["two"]
    shared = kedi.Conversation()
    CHAT.run_sync(args={"message": "one"}, conversation=shared)
    CHAT.run_sync(args={"message": "two"}, conversation=shared, transcript=records.append)
    assert contents(records[1]["messages"]) == ["one", "[offline] one", "two"]
    assert records[1]["conversation_id"] == shared.conversation_id


def test_the_api_and_the_runtime_compute_the_same_lane_key(script: Any) -> None:
    conversation = kedi.Conversation()
    settings = {"temperature": 0.5, "stop": ["END"]}
    CHAT.run_sync(args={"message": "hot"}, conversation=conversation, settings=settings)
    CHAT.run_sync(args={"message": "plain"}, conversation=conversation, effort="high")
    adapter = script(["scripted"])
    CHAT.run_sync(args={"message": "via script"}, conversation=conversation, adapter=adapter)
    assert contents(conversation.messages(settings={"stop": ("END",), "temperature": 0.5})) == [
        "hot",
        "[offline] hot",
    ]
    assert (
        contents(conversation.messages(adapter="offline", settings={"effort": "high"}))[0]
        == "plain"
    )
    assert contents(conversation.messages(model=f"script:{adapter.path}")) == [
        "via script",
        "scripted",
    ]
    assert conversation.messages() == [] and len(conversation.lanes) == 3
    with pytest.raises(
        kedi.KediUsageError, match="settings must be a mapping of model settings, not list"
    ):
        conversation.messages(settings=[("temperature", 0.5)])  # type: ignore[arg-type]
    with pytest.raises(kedi.KediConfigError, match="unknown adapter 'nope'"):
        conversation.lane_for(adapter="nope", model="m")


class Recorder(OfflineAdapter):
    """The offline model, recording the cache key and epoch each call was given."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str | None, int]] = []

    async def request(self, request: CallRequest) -> CallResult:
        self.seen.append((request.cache_key, request.cache_epoch))
        return await super().request(request)


def test_cache_identity_is_stable_within_an_epoch_and_rotates_once_per_rewrite() -> None:
    # max_messages: 4 drops the oldest turn from the 3rd call on: each such call
    # is one rewrite, committed with its turn.
    program = kedi.compile(
        "> history:\n    enabled: true\n    max_messages: 4\n"
        + "".join(f"[r{n}] << q{n}\n" for n in range(5))
        + "= <r4>"
    )
    adapter, conversation = Recorder(), kedi.Conversation()
    program.run_sync(adapter=adapter, conversation=conversation)
    keys = [key for key, _ in adapter.seen]
    assert [epoch for _, epoch in adapter.seen] == [0, 0, 0, 1, 2]
    assert keys[0] == keys[1] == keys[2] and len({keys[2], keys[3], keys[4]}) == 3
    (lane,) = conversation.lanes.values()
    assert lane.epoch == 3 and lane.cache_key not in keys
    assert contents(lane.messages) == ["q3", "[offline] q3", "q4", "[offline] q4"]


# --------------------------------------------------------------------------- atomic turns


def test_a_failed_call_commits_nothing_and_carries_no_partial_when_nothing_completed(
    script: Any,
) -> None:
    adapter = script(["one", {"error": "provider down"}, "after"])
    conversation = kedi.Conversation()
    program = kedi.compile("> history: enabled\n[a] << first\n[b] << second\n[c] << third\n= <c>")
    with pytest.raises(kedi.KediExecutionError) as caught:
        program.run_sync(adapter=adapter, conversation=conversation)
    assert isinstance(caught.value.original, ProviderError) and caught.value.partial is None
    assert contents(conversation.messages(adapter=adapter)) == ["first", "one"]
    assert (
        adapter.remaining == 1
    )  # the third call, after the failure in source order, was never sent
    records: list[dict[str, Any]] = []
    CHAT.run_sync(
        args={"message": "again"},
        adapter=adapter,
        conversation=conversation,
        transcript=records.append,
    )
    assert contents(records[0]["messages"]) == ["first", "one", "again"]


def test_a_refusing_hook_commits_nothing_and_later_calls_are_not_sent() -> None:
    def refuse(event: kedi.PromptEvent) -> None:
        if "second" in event.prompt:
            raise PermissionError("not allowed")

    conversation = kedi.Conversation()
    program = kedi.compile(
        "> history: enabled\n[a] << first\n[b] << second\n[c] << third\n= <a><b><c>"
    )
    with pytest.raises(kedi.KediExecutionError, match="not allowed"):
        program.run_sync(hooks=[refuse], conversation=conversation, parallel=8)
    assert contents(conversation.messages()) == ["first", "[offline] first"]


@pytest.mark.anyio
@pytest.mark.parametrize("parallel", [None, 8])
async def test_cancelling_a_whole_run_commits_only_the_finished_turns(
    script: Any, parallel: Any
) -> None:
    adapter = script(["one", {"text": "two", "delay_ms": 5000}, "three"])
    conversation = kedi.Conversation()
    program = kedi.compile(
        "> history: enabled\n[a] << first\n[b] << second\n[c] << third\n= <a><b><c>"
    )
    with pytest.raises(TimeoutError):
        with anyio.fail_after(0.3):
            await program.run(adapter=adapter, conversation=conversation, parallel=parallel)
    (lane,) = conversation.lanes.values()
    assert contents(lane.messages) == ["first", "one"] and not lane.busy
    assert (
        await CHAT.run(args={"message": "next"}, adapter=adapter, conversation=conversation)
        == "three"
    )
    assert contents(lane.messages) == ["first", "one", "next", "three"]


class Deadline(Adapter):
    """Gives each call of the wrapped adapter at most `seconds` (a per-call timeout)."""

    def __init__(self, inner: Adapter, seconds: float) -> None:
        self.inner, self.seconds = inner, seconds
        self.shortname, self.profile, self.model_name = (
            inner.shortname,
            inner.profile,
            inner.model_name,
        )  # type: ignore[misc]

    async def request(self, request: CallRequest) -> CallResult:
        with anyio.fail_after(self.seconds):
            return await self.inner.request(request)


def test_a_call_cancelled_by_its_own_timeout_commits_nothing(script: Any) -> None:
    inner = script(["one", {"text": "two", "delay_ms": 5000}, "three"])
    conversation = kedi.Conversation()
    program = kedi.compile("> history: enabled\n[a] << first\n[b] << second\n[c] << third\n= <c>")
    with pytest.raises(kedi.KediExecutionError) as caught:
        program.run_sync(adapter=Deadline(inner, 0.2), conversation=conversation)
    assert isinstance(caught.value.original, TimeoutError)
    assert contents(conversation.messages(adapter=inner)) == ["first", "one"]
    assert inner.remaining == 1  # the third call, after the failure in source order, was never sent


def test_a_call_whose_tool_blocks_past_the_cancel_deadline_commits_nothing(script: Any) -> None:
    # A sync tool runs in a thread that cancellation waits for; when it returned, the call
    # went on, committed its turn after the deadline and the cancel was lost.
    import time

    def slow(q: str) -> str:
        """Look q up slowly."""
        time.sleep(0.6)
        return "found " + q

    adapter = script(
        [{"tool_calls": [{"name": "slow", "args": {"q": "x"}, "id": "c1"}]}, "late", "next"]
    )
    program = kedi.compile(
        "> history: enabled\n> use: slow\n[a] << <`args.m`>\n= <a>", known_globals=["slow"]
    )
    conversation = kedi.Conversation()

    async def main() -> bool:
        with anyio.move_on_after(0.2) as scope:
            await program.run(
                args={"m": "go"}, adapter=adapter, env={"slow": slow}, conversation=conversation
            )
        return scope.cancelled_caught

    assert anyio.run(main) is True
    lane = next(iter(conversation.lanes.values()))
    assert len(lane) == 0 and not lane.busy
    ran = program.run_sync(
        args={"m": "again"}, adapter=adapter, env={"slow": slow}, conversation=conversation
    )
    assert ran == "next" and contents(lane.messages) == ["again", "next"]


@pytest.mark.parametrize("seed", range(15))
def test_parallel_calls_with_random_latency_commit_in_source_order(script: Any, seed: int) -> None:
    rng = random.Random(seed)
    count = 8
    replies = [
        {
            "text": f"answer {n}",
            "delay_ms": rng.uniform(0, 6),
            "when": {"prompt_contains": f"question {n}."},
        }
        for n in range(count)
    ]
    rng.shuffle(replies)
    adapter = script(replies)
    program = kedi.compile(
        "> history: enabled\n"
        + "".join(f"[r{n}] << question {n}.\n" for n in range(count))
        + "= done"
    )
    conversation = kedi.Conversation()
    assert program.run_sync(adapter=adapter, conversation=conversation, parallel=8) == "done"
    expected = [text for n in range(count) for text in (f"question {n}.", f"answer {n}")]
    assert contents(conversation.messages(adapter=adapter)) == expected


# --------------------------------------------------------------------------- partial results and resuming


def test_a_failed_tool_loop_carries_resume_ready_partial_messages(script: Any) -> None:
    adapter = script(
        [
            {"tool_calls": [{"name": "lookup", "args": {"q": "x"}, "id": "c1"}]},
            {"error": "overloaded"},
            "resumed",
        ]
    )
    conversation = kedi.Conversation()
    with pytest.raises(kedi.KediExecutionError) as caught:
        kedi.compile(TOOL_PROGRAM).run_sync(adapter=adapter, conversation=conversation)
    partial = caught.value.partial
    assert (
        isinstance(caught.value.original, ProviderError)
        and caught.value.original.partial is partial
    )
    assert (partial.stage, partial.requests, partial.tool_calls) == ("model", 2, 1)
    assert partial.conversation_id == conversation.conversation_id and partial.run_id
    assert [(m.role, m.content) for m in partial.messages] == [
        ("user", "Look it up"),
        ("assistant", ""),
        ("tool", "found x"),
    ]
    assert all(len(lane) == 0 for lane in conversation.lanes.values())  # nothing committed

    conversation.seed(partial.messages, adapter=adapter)
    records: list[dict[str, Any]] = []
    reply = kedi.compile("> history: enabled\n[a] << Go on\n= <a>").run_sync(
        adapter=adapter, conversation=conversation, transcript=records.append
    )
    assert reply == "resumed"
    sent = records[0]["messages"]
    assert contents(sent) == ["Look it up", "", "found x", "Go on"]
    assert_pair_valid(sent)


def test_resuming_from_an_unfinished_tool_batch_closes_the_open_calls(script: Any) -> None:
    rounds = [
        {"tool_calls": [{"name": "lookup", "args": {"q": str(n)}, "id": f"c{n}"}]} for n in range(9)
    ]
    adapter = script([*rounds, "resumed"])
    with pytest.raises(kedi.KediExecutionError) as caught:
        kedi.compile(TOOL_PROGRAM).run_sync(adapter=adapter)
    partial = caught.value.partial
    assert isinstance(caught.value.original, AdapterError) and partial.stage == "loop"
    assert partial.messages[-1].tool_calls[0].id == "c8"  # requested, never run

    conversation = kedi.Conversation()
    conversation.seed(partial.messages, adapter=adapter)
    records: list[dict[str, Any]] = []
    kedi.compile("> history: enabled\n[a] << Go on\n= <a>").run_sync(
        adapter=adapter, conversation=conversation, transcript=records.append
    )
    sent = records[0]["messages"]
    assert sent[-3:] == [
        {
            "role": "assistant",
            "toolCalls": [{"id": "c8", "name": "lookup", "args": {"q": "8"}}],
            "runId": partial.run_id,
            "conversationId": partial.conversation_id,
        },
        {"role": "tool", "toolCallId": "c8", "toolName": "lookup", "content": INTERRUPTED_RESULT},
        {
            "role": "user",
            "content": "Go on",
            "runId": sent[-1]["runId"],
            "conversationId": conversation.conversation_id,
        },
    ]
    assert_pair_valid(sent)


# --------------------------------------------------------------------------- chaining and forking


def test_runs_chain_by_passing_one_runs_messages_to_the_next(script: Any) -> None:
    first = kedi.Conversation()
    CHAT.run_sync(args={"message": "My name is Ada."}, conversation=first)
    adapter = script(["You are Ada."])
    second = kedi.Conversation()
    second.seed(first.messages(), adapter=adapter)
    records: list[dict[str, Any]] = []
    assert (
        CHAT.run_sync(
            args={"message": "Who am I?"},
            adapter=adapter,
            conversation=second,
            transcript=records.append,
        )
        == "You are Ada."
    )
    assert contents(records[0]["messages"]) == [
        "My name is Ada.",
        "[offline] My name is Ada.",
        "Who am I?",
    ]
    assert contents(second.messages(adapter=adapter))[-2:] == ["Who am I?", "You are Ada."]
    assert contents(first.messages()) == ["My name is Ada.", "[offline] My name is Ada."]


def test_a_fork_copies_the_lanes_and_its_new_turns_carry_the_new_id() -> None:
    original = kedi.Conversation()
    CHAT.run_sync(args={"message": "shared"}, conversation=original)
    fork = original.fork()
    assert fork.conversation_id != original.conversation_id
    records: list[dict[str, Any]] = []
    CHAT.run_sync(args={"message": "fork turn"}, conversation=fork, transcript=records.append)
    CHAT.run_sync(args={"message": "original turn"}, conversation=original)
    assert records[0]["conversation_id"] == fork.conversation_id
    forked, kept = fork.messages(), original.messages()
    assert contents(forked) == ["shared", "[offline] shared", "fork turn", "[offline] fork turn"]
    assert contents(kept) == [
        "shared",
        "[offline] shared",
        "original turn",
        "[offline] original turn",
    ]
    assert {m.conversation_id for m in forked[:2]} == {
        original.conversation_id
    }  # copied turns keep their stamps
    assert {m.conversation_id for m in forked[2:]} == {fork.conversation_id}


# --------------------------------------------------------------------------- saving and continuing


def test_a_saved_conversation_continues_after_loading(script: Any, tmp_path: Path) -> None:
    adapter = script(["Noted.", "Blue."])
    conversation = kedi.Conversation()
    CHAT.run_sync(
        args={"message": "My favourite colour is blue."}, adapter=adapter, conversation=conversation
    )
    path = tmp_path / "chat.json"
    conversation.save(path)
    loaded = kedi.Conversation.load(path)
    (before,), (after,) = conversation.lanes.values(), loaded.lanes.values()
    assert after.cache_key == before.cache_key
    records: list[dict[str, Any]] = []
    reply = kedi.compile("> history: enabled\n[a] << Which colour do I like?\n= <a>").run_sync(
        adapter=adapter, conversation=loaded, transcript=records.append
    )
    assert reply == "Blue."
    assert contents(records[0]["messages"]) == [
        "My favourite colour is blue.",
        "Noted.",
        "Which colour do I like?",
    ]
    assert {m.conversation_id for m in after.messages} == {conversation.conversation_id}


def test_a_saved_pydantic_ai_conversation_continues_after_loading() -> None:
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from kedi.adapters.pydantic_ai import PydanticAdapter

    seen: list[list[ModelMessage]] = []

    def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(messages)
        return ModelResponse(parts=[TextPart(f"reply {len(seen)}")])

    conversation = kedi.Conversation()
    adapter = PydanticAdapter(FunctionModel(reply, model_name="probe"))
    CHAT.run_sync(args={"message": "first"}, adapter=adapter, conversation=conversation)
    CHAT.run_sync(args={"message": "second"}, adapter=adapter, conversation=conversation)
    document = json.loads(conversation.dumps())
    assert [lane["format"] for lane in document["lanes"]] == ["pydantic-ai"]

    loaded = kedi.Conversation.loads(json.dumps(document))
    fresh = PydanticAdapter(FunctionModel(reply, model_name="probe"))
    assert CHAT.run_sync(args={"message": "third"}, adapter=fresh, conversation=loaded) == "reply 3"
    prompts = [
        part.content for m in seen[-1] for part in m.parts if isinstance(part, UserPromptPart)
    ]
    answers = [part.content for m in seen[-1] for part in m.parts if isinstance(part, TextPart)]
    assert (prompts, answers) == (["first", "second", "third"], ["reply 1", "reply 2"])

    # A native lane can also be seeded with its serialized form, never with kedi Messages.
    seeded = kedi.Conversation()
    lane = seeded.seed(document["lanes"][0]["messages"], adapter=fresh)
    assert lane.key.format == "pydantic-ai" and list(lane.messages) == list(
        conversation.lanes[lane.key].messages
    )
    with pytest.raises(kedi.HistoryError, match="holds pydantic-ai messages, not kedi Messages"):
        seeded.seed([Message(role="user", content="hi")], adapter=fresh)


def test_saved_conversations_hold_no_settings_values() -> None:
    conversation = kedi.Conversation()
    settings = {
        "temperature": 0.2,
        "extra_body": {"api_key": "sk-live-123"},
        "extra_headers": {"Authorization": "Bearer tok-456"},
    }
    CHAT.run_sync(args={"message": "hi"}, conversation=conversation, settings=settings)
    text = conversation.dumps()
    assert "sk-live-123" not in text and "tok-456" not in text and "temperature" not in text
    # extra_headers is transport-only: the lane key leaves it out.
    shaping = {"temperature": 0.2, "extra_body": {"api_key": "sk-live-123"}}
    assert json.loads(text)["lanes"][0]["key"]["settings"] == canonical_digest(shaping)


# --------------------------------------------------------------------------- the docs run


def test_the_python_examples_in_the_history_docs_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocks = re.findall(
        r"^```python\n(.*?)^```", DOCS.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL
    )
    assert len(blocks) >= 5, "docs/history.md lost its Python examples"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "docs_history"}
    for number, block in enumerate(blocks, start=1):
        exec(compile(block, f"docs/history.md python block {number}", "exec"), namespace)


def test_rotating_a_token_or_a_timeout_continues_the_history() -> None:
    """The repro of issue 17: three runs with new transport settings, one lane of 6 messages."""
    conversation = kedi.Conversation()
    for token, timeout in (("tok-1", 30), ("tok-2", 30), ("tok-2", 90)):
        settings = {
            "temperature": 0.2,
            "extra_headers": {"Authorization": f"Bearer {token}"},
            "timeout": timeout,
        }
        CHAT.run_sync(args={"message": token}, conversation=conversation, settings=settings)
    assert [len(lane) for lane in conversation.lanes.values()] == [6]


def test_credentials_in_the_base_url_do_not_split_lanes() -> None:
    from kedi.adapters.openai import OpenAIAdapter

    first = OpenAIAdapter("m", base_url="http://user:old-pass@127.0.0.1:9/v1", api_key="k1")
    second = OpenAIAdapter("m", base_url="http://user:new-pass@127.0.0.1:9/v1", api_key="k2")
    assert LaneKey.for_call(first, {}) == LaneKey.for_call(second, {})
