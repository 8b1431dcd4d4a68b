"""A lane keeps its in-request repair and token estimate up to date at commit (O(new messages) per call)."""

from __future__ import annotations

import random

from kedi.history import Message, ToolCall, estimate_tokens, repair_for_request
from kedi.history.lanes import Lane, LaneKey
from kedi.history.repair import RequestHistory, request_history_tokens


def random_turn(rng: random.Random, number: int) -> list[Message]:
    """A user turn, sometimes a system note, tool calls answered, left open or answered twice."""
    turn = [Message(role="user", content=f"question {number} " + "x" * rng.randrange(40))]
    if rng.random() < 0.1:
        turn.insert(0, Message(role="system", content="be brief"))
    if rng.random() < 0.5:
        ids = [f"c{number}-{i}" for i in range(rng.randrange(1, 3))]
        turn.append(
            Message(
                role="assistant",
                tool_calls=[ToolCall(id=i, name="f", args='{"a": 1}') for i in ids],
            )
        )
        for call_id in ids:
            if rng.random() < 0.8:
                turn.append(Message(role="tool", tool_call_id=call_id, tool_name="f", content="ok"))
        if rng.random() < 0.1:
            turn.append(
                Message(role="tool", tool_call_id="stray", tool_name="f", content="dropped")
            )
    turn.append(Message(role="assistant", content=f"answer {number}"))
    return turn


def test_the_lane_state_equals_a_full_repair_after_every_commit() -> None:
    rng = random.Random(16)
    lane = Lane(LaneKey("offline", "offline", ""), "conversation")
    counted = 0
    for number in range(300):
        lane.append(random_turn(rng, number))
        view = lane.messages
        expected = repair_for_request(list(view))  # a plain list: the full walk
        assert repair_for_request(view) == expected
        tokens = request_history_tokens(view)
        if tokens is not None:  # None once a call is left open: the adapter counts then
            counted += 1
            assert tokens == estimate_tokens(expected)
    assert counted > 0


def test_per_call_work_reads_only_the_new_messages() -> None:
    """Counting the messages the state walks: each commit adds its own, none are walked again."""
    walked = 0

    class Counting(RequestHistory):
        def extend(self, messages):  # type: ignore[no-untyped-def]
            nonlocal walked
            walked += len(messages)
            super().extend(messages)

    lane = Lane(LaneKey("offline", "offline", ""), "conversation")
    for number in range(1000):
        lane.append(
            [Message(role="user", content=f"q{number}"), Message(role="assistant", content="a")]
        )
        lane.messages.incremental("request history", Counting)
    assert walked == 2000


def test_an_older_snapshot_and_a_rewrite_fall_back_to_the_full_walk() -> None:
    lane = Lane(LaneKey("offline", "offline", ""), "conversation")
    lane.append([Message(role="user", content="one"), Message(role="assistant", content="1")])
    old = lane.messages
    lane.append([Message(role="user", content="two"), Message(role="assistant", content="2")])
    assert request_history_tokens(old) is None
    assert [m.content for m in repair_for_request(old)] == ["one", "1"]
    lane.replace([Message(role="user", content="three")])
    assert [m.content for m in repair_for_request(lane.messages)] == ["three"]


def test_a_recorded_calls_history_digest_reads_only_the_new_messages(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Every recorded call digests its history for replay; a whole-lane digest made n calls O(n^2).

    The lane keeps the digest, equal byte for byte to the full one (stored sessions still replay).
    """
    from kedi.adapters.base import CallRequest
    from kedi.adapters.offline import OfflineAdapter
    from kedi.history.lanes import canonical_digest
    from kedi.history.persistence import dump_lane_messages
    from kedi.runtime import sessions

    dumped = 0

    def counting_dump(key, messages, adapters=()):  # type: ignore[no-untyped-def]
        nonlocal dumped
        messages = list(messages)
        dumped += len(messages)
        return dump_lane_messages(key, messages, adapters)

    monkeypatch.setattr(sessions, "dump_lane_messages", counting_dump)
    adapter = OfflineAdapter()
    key = LaneKey("offline", "offline", "")
    lane = Lane(key, "conversation")
    for number in range(200):
        lane.append(
            [Message(role="user", content=f"q{number}"), Message(role="assistant", content="a")]
        )
        rendered = sessions.render_request(adapter, key, CallRequest("next", history=lane.messages))
        full = canonical_digest([m.to_json_dict() for m in lane.messages])
        assert rendered["history"] == {"messages": len(lane), "digest": full}
    assert dumped == 400
    old = lane.messages  # an older snapshot, or a rewrite: the full digest, still right
    lane.append([Message(role="user", content="later")])
    lane.replace([Message(role="user", content="rewritten")])
    for view in (old, lane.messages):
        digest = sessions.render_request(adapter, key, CallRequest("next", history=view))["history"]
        assert digest["digest"] == canonical_digest([m.to_json_dict() for m in view])
