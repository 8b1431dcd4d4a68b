"""Run and conversation identity (C8)."""

from __future__ import annotations

import re
import threading
import time
import uuid

from kedi.history import Message, new_id, resolve_conversation_id, resolve_run_id

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def test_new_id_is_a_lowercase_uuid7() -> None:
    value = new_id()
    assert UUID7.match(value), value
    parsed = uuid.UUID(value)
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122


def test_new_id_embeds_unix_milliseconds() -> None:
    before = time.time_ns() // 1_000_000
    value = new_id()
    after = time.time_ns() // 1_000_000
    stamp = uuid.UUID(value).int >> 80
    # The monotonic counter may borrow at most a millisecond ahead.
    assert before <= stamp <= after + 1


def test_new_ids_are_unique_and_strictly_increasing() -> None:
    values = [new_id() for _ in range(20_000)]
    assert len(set(values)) == len(values)
    assert values == sorted(values)
    assert all(UUID7.match(v) for v in values)


def test_new_ids_are_unique_across_threads() -> None:
    results: list[list[str]] = [[] for _ in range(4)]

    def work(bucket: list[str]) -> None:
        bucket.extend(new_id() for _ in range(2_000))

    threads = [threading.Thread(target=work, args=(bucket,)) for bucket in results]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [value for bucket in results for value in bucket]
    assert len(set(everything)) == 8_000
    assert all(bucket == sorted(bucket) for bucket in results)


def test_ids_are_not_predictable_across_milliseconds() -> None:
    first = new_id()
    time.sleep(0.003)
    second = new_id()
    # A fresh millisecond draws fresh random bits rather than counting on.
    assert (uuid.UUID(second).int & ((1 << 62) - 1)) != (uuid.UUID(first).int & ((1 << 62) - 1)) + 1


def test_run_id_is_explicit_or_fresh_never_inherited() -> None:
    assert resolve_run_id("run-1") == "run-1"
    fresh = resolve_run_id(None)
    assert UUID7.match(fresh)
    assert UUID7.match(resolve_run_id(""))
    assert resolve_run_id(None) != fresh


def test_conversation_id_explicit_wins() -> None:
    history = [Message(role="user", content="x", conversation_id="old")]
    assert resolve_conversation_id("new", history) == "new"


def test_conversation_id_comes_from_the_last_stamped_message() -> None:
    history = [
        Message(role="user", conversation_id="first"),
        Message(role="assistant", conversation_id="second"),
        Message(role="user", content="unstamped"),
    ]
    assert resolve_conversation_id(None, history) == "second"
    assert resolve_conversation_id("", history) == "second"


def test_conversation_id_from_dicts_and_iterators() -> None:
    history = [
        {"role": "user", "conversationId": "a"},
        {"role": "user", "conversation_id": "b"},
        {"role": "user"},
    ]
    assert resolve_conversation_id(None, history) == "b"
    assert resolve_conversation_id(None, iter(history[:1])) == "a"


def test_conversation_id_is_fresh_without_stamps() -> None:
    first = resolve_conversation_id(None, [Message(role="user", content="x")])
    assert UUID7.match(first)
    assert resolve_conversation_id(None, []) != first
