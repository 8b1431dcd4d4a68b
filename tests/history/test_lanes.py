"""Lanes on their own: keys, cache identity and epochs, source-ordered transactions, seeding."""

from __future__ import annotations

import random
from typing import Any

import anyio
import pytest

from kedi.adapters.offline import OfflineAdapter
from kedi.errors import HistoryError, KediUsageError, TurnAbandoned
from kedi.history import Message
from kedi.history.lanes import Conversation, Lane, LaneKey, canonical_digest
from kedi.settings import TRANSPORT_SETTINGS

pytestmark = pytest.mark.anyio

KEY = LaneKey("offline", "offline", canonical_digest({}))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def turn(n: int) -> list[Message]:
    return [Message(role="user", content=f"q{n}"), Message(role="assistant", content=f"a{n}")]


async def commit(lane: Lane, ticket: int, messages: list[Message], **options: Any) -> None:
    async with lane.transaction(ticket) as txn:
        txn.commit(messages, **options)


# --------------------------------------------------------------------------- keys


def test_settings_are_canonical_in_the_key() -> None:
    adapter = OfflineAdapter()
    same = LaneKey.for_call(
        adapter, {"temperature": 1, "stop": ["a"], "extra_body": {"x": 2, "y": 3.0}}
    )
    other_spelling = LaneKey.for_call(
        adapter, {"extra_body": {"y": 3, "x": 2.0}, "stop": ("a",), "temperature": 1.0}
    )
    assert same == other_spelling
    assert LaneKey.for_call(adapter, {"temperature": 0.5}) != same
    assert LaneKey.for_call(adapter, {"seed": True}) != LaneKey.for_call(adapter, {"seed": 1})
    assert canonical_digest({"tags": {"b", "a", "c"}}) == canonical_digest(
        {"tags": frozenset("cab")}
    )


def test_transport_only_settings_share_the_lane() -> None:
    """docs/history.md, "What splits a lane": these settings never start a new lane."""
    assert TRANSPORT_SETTINGS == {
        "timeout",
        "max_retries",
        "num_retries",
        "extra_headers",
        "request_limit",
        "max_reply_bytes",
    }
    adapter = OfflineAdapter()
    shaping = {"temperature": 0.2}
    base = LaneKey.for_call(adapter, shaping)
    rotated = {"extra_headers": {"Authorization": "Bearer new"}, "timeout": 5, "max_retries": 0}
    assert (
        LaneKey.for_call(adapter, {**shaping, **rotated, "request_limit": 3, "num_retries": 1})
        == base
    )
    assert LaneKey.for_call(adapter, {"timeout": 5}) == LaneKey.for_call(adapter, {})
    assert LaneKey.for_call(adapter, {**shaping, "extra_body": {"x": 1}}) != base


def test_every_key_part_separates_lanes() -> None:
    adapter = OfflineAdapter()
    base = LaneKey.for_call(adapter, {})
    assert (base.adapter, base.model, base.format) == ("offline", "offline", "portable")
    variants = [
        LaneKey.for_call(OfflineAdapter("other-model"), {}),
        LaneKey.for_call(adapter, {"temperature": 0}),
        LaneKey.for_call(adapter, {}, tools_digest="t1"),
        LaneKey.for_call(adapter, {}, mcp_digest="m1"),
    ]
    conversation = Conversation()
    conversation.lane(base).append(turn(0))
    for key in variants:
        assert key != base and len(conversation.lane(key)) == 0
    assert len(conversation.lane(LaneKey.for_call(adapter, {}))) == 2  # returning resumes the lane


def test_the_key_remembers_the_adapters_message_format() -> None:
    from pydantic_ai.models.test import TestModel

    from kedi.adapters.pydantic_ai import PydanticAdapter

    key = LaneKey.for_call(PydanticAdapter(TestModel()), {})
    assert (key.adapter, key.format) == ("pydantic", "pydantic-ai")


# --------------------------------------------------------------------------- cache identity


async def test_cache_identity_is_stable_within_an_epoch_and_rotates_once_per_rewrite() -> None:
    lane = Conversation("c-1").lane(KEY)
    first = lane.cache_key
    for n in range(3):
        await commit(lane, lane.reserve(), turn(n))
        assert (lane.cache_key, lane.epoch) == (first, 0)
    await commit(lane, lane.reserve(), turn(3), rewritten=turn(0), rewrites=1)
    second = lane.cache_key
    assert lane.epoch == 1 and second != first
    assert [m.content for m in lane.messages] == ["q0", "a0", "q3", "a3"]
    await commit(lane, lane.reserve(), turn(4))
    assert (lane.cache_key, lane.epoch) == (second, 1)
    await commit(
        lane, lane.reserve(), turn(5), rewritten=[], rewrites=2
    )  # two rewrites in one call
    assert lane.epoch == 3
    assert len({first, second, lane.cache_key}) == 3


def test_cache_identity_is_deterministic_and_per_conversation() -> None:
    one, again, other = Conversation("c-1"), Conversation("c-1"), Conversation("c-2")
    assert one.lane(KEY).cache_key == again.lane(KEY).cache_key != other.lane(KEY).cache_key
    assert one.fork().lane(KEY).cache_key != one.lane(KEY).cache_key


# --------------------------------------------------------------------------- ordering


@pytest.mark.parametrize("seed", range(12))
async def test_transactions_commit_in_ticket_order_whatever_order_tasks_run(seed: int) -> None:
    rng = random.Random(seed)
    lane = Lane(KEY, "c")
    tickets = [lane.reserve() for _ in range(10)]
    rng.shuffle(tickets)
    delays = {ticket: rng.random() / 500 for ticket in tickets}

    async def work(ticket: int) -> None:
        await anyio.sleep(delays[ticket])  # arrive in a random order
        async with lane.transaction(ticket) as txn:
            await anyio.sleep(delays[ticket])  # and take random time to "call the model"
            txn.commit(turn(ticket))

    async with anyio.create_task_group() as group:
        for ticket in tickets:
            group.start_soon(work, ticket)
    assert [m.content for m in lane.messages][::2] == [f"q{n}" for n in range(10)]
    assert not lane.busy


async def test_a_cancelled_waiter_releases_its_ticket_and_later_tickets_proceed() -> None:
    lane = Lane(KEY, "c")
    first, second, third = lane.reserve(), lane.reserve(), lane.reserve()
    release_first = anyio.Event()
    order: list[int] = []

    async def run(ticket: int, gate: anyio.Event | None = None) -> None:
        async with lane.transaction(ticket) as txn:
            if gate is not None:
                await gate.wait()
            txn.commit(turn(ticket))
            order.append(ticket)

    async with anyio.create_task_group() as group:
        group.start_soon(run, first, release_first)
        async with anyio.create_task_group() as doomed:
            doomed.start_soon(run, second)  # waits for its turn behind the first ticket...
            await anyio.sleep(0.01)
            doomed.cancel_scope.cancel()  # ...and is cancelled while waiting
        group.start_soon(run, third)
        await anyio.sleep(0.01)
        assert order == [] and lane.busy
        release_first.set()
    assert order == [first, third]
    assert [m.content for m in lane.messages] == ["q0", "a0", "q2", "a2"]
    assert not lane.busy


async def test_cancellation_inside_a_transaction_commits_nothing_and_abandons_nothing() -> None:
    lane = Lane(KEY, "c")
    first, second = lane.reserve(), lane.reserve()

    async def slow() -> None:
        with anyio.move_on_after(0.01):
            async with lane.transaction(first) as txn:
                await anyio.sleep(10)
                txn.commit(turn(first))

    async with anyio.create_task_group() as group:
        group.start_soon(slow)
        group.start_soon(commit, lane, second, turn(second))
    assert [m.content for m in lane.messages] == ["q1", "a1"]


async def test_a_failure_abandons_the_tickets_issued_before_it_finished_only() -> None:
    lane = Lane(KEY, "c")
    failing, later = lane.reserve(), lane.reserve()
    with pytest.raises(ValueError):
        async with lane.transaction(failing):
            raise ValueError("the model call failed")
    with pytest.raises(TurnAbandoned, match="an earlier call on this conversation lane failed"):
        await commit(lane, later, turn(later))
    await commit(lane, lane.reserve(), turn(2))  # a call scheduled after the failure (a new run)
    assert [m.content for m in lane.messages] == ["q2", "a2"] and not lane.busy


async def test_a_transaction_commits_once() -> None:
    lane = Lane(KEY, "c")
    async with lane.transaction(lane.reserve()) as txn:
        txn.commit(turn(0))
        with pytest.raises(RuntimeError, match="commits once"):
            txn.commit(turn(1))
    assert len(lane) == 2


async def test_a_snapshot_view_never_sees_later_commits_or_rewrites() -> None:
    lane = Lane(KEY, "c", turn(0))
    view = lane.messages
    await commit(lane, lane.reserve(), turn(1))
    await commit(lane, lane.reserve(), turn(2), rewritten=[], rewrites=1)
    assert [m.content for m in view] == ["q0", "a0"] and len(view) == 2
    assert view[-1].content == "a0" and [m.content for m in view[0:1]] == ["q0"]
    with pytest.raises(IndexError):
        view[2]
    assert [m.content for m in lane.messages] == ["q2", "a2"]


# --------------------------------------------------------------------------- seeding


async def test_seeding_an_empty_lane_keeps_its_epoch_and_a_used_one_starts_a_new_one() -> None:
    lane = Lane(KEY, "c")
    lane.seed([{"role": "user", "content": "hi"}, Message(role="assistant", content="hello")])
    assert lane.epoch == 0 and all(isinstance(m, Message) for m in lane.messages)
    before = lane.cache_key
    lane.seed(turn(7))
    assert lane.epoch == 1 and lane.cache_key != before
    assert [m.content for m in lane.messages] == ["q7", "a7"]


async def test_seeding_a_lane_while_a_call_holds_a_ticket_is_refused() -> None:
    lane = Lane(KEY, "c")
    async with lane.transaction(lane.reserve()) as txn:
        with pytest.raises(KediUsageError, match="while a call on it is in flight"):
            lane.seed(turn(0))
        txn.commit(turn(1))
    lane.seed(turn(0))
    assert lane.epoch == 1


def test_seeding_checks_messages_against_the_lane_format() -> None:
    with pytest.raises(HistoryError, match="history message 1: invalid Message"):
        Lane(KEY, "c").seed([{"role": "user", "content": "ok"}, {"role": "robot"}])
    with pytest.raises(HistoryError, match="sequence of messages, not dict"):
        Lane(KEY, "c").seed({"role": "user", "content": "ok"})  # type: ignore[arg-type]
    native = Lane(LaneKey("pydantic", "m", "s", format="pydantic-ai"), "c")
    with pytest.raises(
        HistoryError,
        match="holds pydantic-ai messages, not kedi Messages; messages are never translated",
    ):
        native.seed(turn(0))
    with pytest.raises(HistoryError, match="history message 0: .* not serialized data"):
        native.seed([{"kind": "request", "parts": []}])


def test_fork_copies_lanes_under_a_new_id_and_they_diverge() -> None:
    original = Conversation("c-1")
    original.lane(KEY).seed(turn(0))
    fork = original.fork("c-2")
    assert fork.conversation_id == "c-2" and fork.lane(KEY).conversation_id == "c-2"
    fork.lane(KEY).append(turn(1))
    original.lane(KEY).append(turn(2))
    assert [m.content for m in fork.lane(KEY).messages] == ["q0", "a0", "q1", "a1"]
    assert [m.content for m in original.lane(KEY).messages] == ["q0", "a0", "q2", "a2"]
    assert Conversation().fork().conversation_id != original.conversation_id


def test_a_conversation_id_must_be_a_non_empty_string() -> None:
    with pytest.raises(KediUsageError, match="non-empty string"):
        Conversation("")
