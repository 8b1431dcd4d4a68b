"""Lane and processor details pinned where mutation testing found them loose (docs/testing.md)."""

from __future__ import annotations

import hashlib
import re
from decimal import Decimal
from typing import Any

import anyio
import pytest

from kedi.adapters.offline import OfflineAdapter
from kedi.errors import HistoryError, KediUsageError
from kedi.history import Message
from kedi.history.grouping import PORTABLE
from kedi.history.lanes import Conversation, LaneKey, LaneView, canonical_digest
from kedi.history.processors import (
    chain_processors,
    max_messages,
    max_tokens,
    processor_name,
    run_history_processor,
)


def turn(n: int) -> list[Message]:
    return [Message(role="user", content=f"q{n}"), Message(role="assistant", content=f"a{n}")]


# --------------------------------------------------------------------------- digests (saved in files)


def test_the_digest_is_sha256_of_compact_sorted_json() -> None:
    value = {"b": [1, 2.0], "a": {"y": None, "x": "é"}}
    text = '{"a":{"x":"\\u00e9","y":null},"b":[1,2]}'
    assert canonical_digest(value) == hashlib.sha256(text.encode()).hexdigest()[:16]


def test_the_digest_takes_values_json_cannot_and_sets_of_mixed_types() -> None:
    assert canonical_digest({"price": Decimal("1.5")}) != canonical_digest(
        {"price": Decimal("2.5")}
    )
    assert canonical_digest({"tags": {1, "a"}}) == canonical_digest({"tags": {"a", 1}})
    assert canonical_digest({"tags": {"a"}}) != canonical_digest({"tags": {"b"}})


def test_key_defaults_and_labels() -> None:
    adapter = OfflineAdapter()
    key = LaneKey.for_call(adapter, {})
    assert (key.mcp, key.tools) == ("", "")
    assert re.fullmatch(r"offline/offline#[0-9a-f]{8}", key.label())  # a short digest, 8 hex digits
    others = [
        LaneKey.for_call(adapter, {"seed": 1}),
        LaneKey.for_call(adapter, {}, tools_digest="t"),
    ]
    others.append(LaneKey.for_call(adapter, {}, mcp_digest="m"))
    assert len({key.label(), *(other.label() for other in others)}) == 4


# --------------------------------------------------------------------------- views and lanes


def test_a_lane_view_indexes_like_a_sequence_of_its_snapshot() -> None:
    items = ["a", "b", "c", "later"]
    view = LaneView(items, 3)
    assert (view[0], view[1], view[-1], view[-3]) == ("a", "b", "c", "a")
    for bad in (3, -4):
        with pytest.raises(IndexError, match="^lane view index out of range$"):
            view[bad]


def test_fork_keeps_each_lanes_epoch_and_lane_for_honours_the_model() -> None:
    conversation = Conversation()
    lane = conversation.lane_for()
    lane.append(turn(0))
    lane.replace(turn(1))
    assert lane.epoch == 1
    forked = conversation.fork()
    assert forked.lane_for().epoch == 1 and list(forked.lane_for().messages) == turn(1)
    assert conversation.lane_for(adapter="offline", model="other").key.model == "other"


def test_seed_uses_the_settings_it_is_given() -> None:
    conversation = Conversation()
    conversation.seed(turn(0), adapter="offline", settings={"temperature": 0.5})
    assert len(conversation.lane_for(settings={"temperature": 0.5})) == 2
    assert len(conversation.lane_for()) == 0


def test_seeding_or_committing_twice_is_refused_with_a_reason() -> None:
    lane = Conversation().lane_for()

    async def main() -> None:
        async with lane.transaction(lane.reserve()) as txn:
            with pytest.raises(KediUsageError, match="seed before the run or after it finishes$"):
                lane.seed(turn(0))
            txn.commit(turn(1))
            with pytest.raises(RuntimeError, match="^a transaction commits once$"):
                txn.commit(turn(2))

    anyio.run(main)


# --------------------------------------------------------------------------- processors


class AsyncCallable:
    """A processor object whose __call__ is async (awaited, not run in a thread)."""

    async def __call__(self, context: Any) -> Any:
        await anyio.sleep(0)
        return context.messages[-1:]


async def _run(processor: Any, messages: list[Message]) -> Any:
    return await run_history_processor(
        processor,
        messages,
        PORTABLE,
        adapter_shortname="offline",
        model_id="m",
        request_index=3,
        cache_epoch=2,
    )


def test_async_functions_and_async_callables_are_awaited() -> None:
    async def keep_last(context: Any) -> Any:
        return context.messages[-1:]

    messages = [*turn(0), Message(role="user", content="now")]
    for processor in (keep_last, AsyncCallable()):
        outcome = anyio.run(_run, processor, messages)
        assert list(outcome.messages) == messages[-1:] and outcome.rewritten is True
    untouched = anyio.run(_run, lambda context: context.messages, messages)
    assert untouched.rewritten is False


def test_a_chain_runs_every_stage_with_the_callers_context() -> None:
    seen: list[tuple[Any, ...]] = []

    def spy(context: Any) -> Any:
        seen.append(
            (
                context.adapter_shortname,
                context.model_id,
                context.request_index,
                context.cache_epoch,
            )
        )
        return context.messages

    assert chain_processors(None, spy, None) is spy
    assert chain_processors(None, None) is None
    chain = chain_processors(spy, max_messages(1))
    messages = [*turn(0), Message(role="user", content="now")]
    outcome = anyio.run(_run, chain, messages)
    assert [m.content for m in outcome.messages] == ["now"]
    assert seen == [("offline", "m", 3, 2)]


def test_bound_errors_and_names_say_which_bound() -> None:
    with pytest.raises(HistoryError, match="max_messages"):
        max_messages(0)
    with pytest.raises(HistoryError, match="max_tokens"):
        max_tokens(-1)
    assert processor_name(max_messages(4)) == "max_messages(4)"
    unnamed = AsyncCallable()
    assert processor_name(unnamed) == repr(unnamed)
