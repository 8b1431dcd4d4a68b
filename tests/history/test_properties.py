"""Property tests: repair, sanitize, trim and budget on random histories."""

from __future__ import annotations

import copy
import json
from collections import Counter
from typing import Any
from unittest.mock import patch
from urllib.parse import urlsplit

from hypothesis import given, settings
from hypothesis import strategies as st

from kedi.errors import HistoryError
from kedi.history import (
    INTERRUPTED_RESULT,
    HistoryRepair,
    Message,
    ToolCall,
    budget_history,
    estimate_tokens,
    may_open_window,
    normalize_history,
    sanitize_history,
    trim_history,
)
from kedi.history.repair import _Pairing

# Few ids, so reuse, duplicates and collisions are common; "" never opens a call.
call_ids = st.sampled_from(["", "a", "b", "c"])
raw_args = st.one_of(
    st.sampled_from(
        ["", "  ", "{}", '{"a": 1}', '{"a":', "[1]", '"s"', "NaN", '{"a": NaN}', "{'a': 1}"]
    ),
    st.text(max_size=12),
)
urls = st.builds(
    lambda scheme, rest: scheme + rest,
    st.sampled_from(
        [
            "http:",
            "https:",
            "HTTP:",
            "Https:",
            "javascript:",
            "file:",
            "data:",
            "ftp:",
            "",
            " javascript:",
            "//",
            "/",
        ]
    ),
    st.sampled_from(["//example.com/a.png", "alert(1)", "x", "//[::1", "evil.example/p"]),
)
url_parts = st.builds(
    lambda kind, url: {"kind": kind, "url": url}, st.sampled_from(["image", "audio"]), urls
)
data_parts = st.just({"kind": "document", "data": "AAAA", "mediaType": "application/pdf"})
parts = st.lists(st.one_of(url_parts, data_parts), max_size=3)
stamps = st.sampled_from([{}, {"runId": "r1", "conversationId": "k1"}])


def tool_call(call_id: str, args: str) -> dict[str, Any]:
    # The C1 JSON form omits empty args.
    return {"id": call_id, "name": "f", **({"args": args} if args else {})}


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["system", "user", "assistant", "tool"]))
    message: dict[str, Any] = {"role": role, **draw(stamps)}
    content = draw(st.sampled_from(["", " ", "text"]))
    if content:
        message["content"] = content
    if role == "assistant":
        calls = draw(st.lists(st.builds(tool_call, call_ids, raw_args), max_size=3))
        if calls:
            message["toolCalls"] = calls
    elif role == "tool":
        message["toolCallId"] = draw(call_ids)
        if draw(st.booleans()):
            message["failed"] = True
    if role in ("user", "tool"):
        drawn = draw(parts)
        if drawn:
            message["parts"] = drawn
    return message


histories = st.lists(messages(), max_size=25)


def is_web_url(url: str) -> bool:
    try:
        return urlsplit(url).scheme.lower() in ("http", "https")
    except ValueError:
        return False


def assert_pair_valid(history: list[Message]) -> None:
    """Every call (non-empty id) is answered exactly once after it; no orphan result.

    Checked by counting, independently of the repair algorithm: per id, results
    never outnumber the calls before them, and the totals match at the end.
    """
    calls: Counter[str] = Counter()
    results: Counter[str] = Counter()
    for message in history:
        if message.role == "assistant":
            calls.update(call.id for call in message.tool_calls if call.id)
        elif message.role == "tool":
            assert message.tool_call_id, "a result with an empty id survived"
            results[message.tool_call_id] += 1
            assert results[message.tool_call_id] <= calls[message.tool_call_id], "orphan result"
    assert calls == results, "a call was left unanswered"


@settings(max_examples=100, deadline=None)
@given(histories)
def test_repair_is_pair_valid_idempotent_and_pure(history: list[dict[str, Any]]) -> None:
    before = copy.deepcopy(history)
    repaired, report = normalize_history(history)
    assert history == before
    assert_pair_valid(repaired)
    # Nothing but tool results is added or removed, and order is kept.
    full = [Message.model_validate(m) for m in history]
    assert [m for m in repaired if m.role != "tool"] == [m for m in full if m.role != "tool"]
    kept_results = len([m for m in repaired if m.role == "tool"]) - len(report.synthesized)
    assert kept_results == len([m for m in history if m["role"] == "tool"]) - len(report.dropped)

    again, second = normalize_history(repaired)
    assert again == repaired
    assert second == HistoryRepair(truncated=report.truncated)


@settings(max_examples=100, deadline=None)
@given(histories)
def test_sanitize_keeps_only_web_urls_and_is_idempotent_and_pure(
    history: list[dict[str, Any]],
) -> None:
    before = copy.deepcopy(history)
    sanitized, report = sanitize_history(history)
    assert history == before
    assert report.system_prompts == sum(m["role"] == "system" for m in history)
    expected_unsafe = [
        (index, part["kind"])
        for index, m in enumerate(history)
        if m["role"] != "system"
        for part in m.get("parts", [])
        if "url" in part and not is_web_url(part["url"])
    ]
    assert [(u.message_index, u.kind) for u in report.unsafe_parts] == expected_unsafe
    for message in sanitized:
        assert message.role != "system"
        assert not (message.role == "user" and not message.content and not message.parts)
        for part in message.parts:
            assert part.url is None or is_web_url(part.url)
    assert_pair_valid(sanitized)
    again, second = sanitize_history(sanitized)
    assert again == sanitized
    assert (second.system_prompts, second.unsafe_parts) == (0, [])
    assert second.repair == HistoryRepair(truncated=report.repair.truncated)


@settings(max_examples=100, deadline=None)
@given(histories, st.integers(min_value=1, max_value=30))
def test_trim_respects_its_bound_and_boundary(history: list[dict[str, Any]], limit: int) -> None:
    before = copy.deepcopy(history)
    full = [Message.model_validate(m) for m in history]
    try:
        trimmed = trim_history(limit)(history)
    except HistoryError:
        assert not any(may_open_window(m) for m in full[-limit:])
        return
    assert history == before
    assert trimmed == full[len(full) - len(trimmed) :]
    if len(full) <= limit:
        assert trimmed == full
    else:
        assert 1 <= len(trimmed) <= limit
        assert may_open_window(trimmed[0])


@settings(max_examples=100, deadline=None)
@given(histories, st.integers(min_value=1, max_value=60))
def test_budget_respects_its_bound_and_boundary(history: list[dict[str, Any]], budget: int) -> None:
    full = [Message.model_validate(m) for m in history]
    try:
        kept = budget_history(estimate_tokens, budget)(history)
    except HistoryError as error:
        message = str(error)
        assert "left no messages" in message or "over the budget" in message
        return
    assert kept == full[len(full) - len(kept) :]
    if full:
        assert kept and may_open_window(kept[0])
        assert estimate_tokens(kept) <= budget
        # Longest: the next longer openable suffix would not have fit.
        longer = [i for i in range(len(full) - len(kept)) if may_open_window(full[i])]
        if longer:
            assert estimate_tokens(full[longer[-1] :]) > budget


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=12,
)


@settings(max_examples=100, deadline=None)
@given(
    st.one_of(
        st.text(),
        json_values.map(lambda v: json.dumps(v, separators=(",", ":"), ensure_ascii=False)),
    )
)
def test_raw_args_round_trip_through_json(raw: str) -> None:
    message = Message(role="assistant", tool_calls=[ToolCall(id="c", name="f", args=raw)])
    text = message.model_dump_json(by_alias=True, exclude_defaults=True)
    assert Message.model_validate_json(text).tool_calls[0].args == raw
    assert Message.model_validate(json.loads(text)) == message


@settings(max_examples=100, deadline=None)
@given(json_values)
def test_json_args_values_round_trip(value: Any) -> None:
    data = {"role": "assistant", "toolCalls": [{"id": "c", "name": "f", "args": value}]}
    once = Message.model_validate(data).to_json_dict()
    twice = Message.model_validate(once).to_json_dict()
    assert once == twice
    # The value's meaning survives: a string is raw text, kept verbatim;
    # anything else is stored as its compact JSON and written back as the value.
    args = Message.model_validate(once).tool_calls[0].args
    if isinstance(value, str):
        assert args == value
    else:
        assert json.loads(args) == value
        assert once["toolCalls"][0]["args"] == value


# --------------------------------------------------------------------------- repair vs a plain model


def reference_repair(history: list[Message]) -> tuple[list[Message], HistoryRepair]:
    """C3 as the spec states it, with a list of open calls per id and no speed tricks."""
    open_calls: dict[str, list[int]] = {}
    opened: list[tuple[int, ToolCall]] = []  # (index in `kept`, call) per opened call
    answered: set[int] = set()
    kept: list[Message] = []
    report = HistoryRepair()
    for message in history:
        if message.role == "assistant":
            for call in message.tool_calls:
                if call.id:
                    open_calls.setdefault(call.id, []).append(len(opened))
                    opened.append((len(kept), call))
                    if call.truncated:
                        report.truncated.append(call.id)
        elif message.role == "tool":
            calls = open_calls.get(message.tool_call_id)
            if not calls:
                report.dropped.append(message.tool_call_id)
                continue
            answered.add(calls.pop())
        kept.append(message)
    closing: dict[int, list[ToolCall]] = {}
    for key, (at, call) in enumerate(opened):
        if key not in answered:
            closing.setdefault(at, []).append(call)
    repaired: list[Message] = []
    for index, message in enumerate(kept):
        repaired.append(message)
        for call in closing.get(index, []):
            repaired.append(
                Message(
                    role="tool",
                    content=INTERRUPTED_RESULT,
                    tool_call_id=call.id,
                    tool_name=call.name,
                )
            )
            report.synthesized.append(call.id)
    return repaired, report


long_call_ids = st.sampled_from(["", "a", "b", "c", "d", "e"])


@st.composite
def pairing_messages(draw: st.DrawFn) -> Message:
    role = draw(st.sampled_from(["user", "assistant", "assistant", "tool", "tool", "system"]))
    if role == "assistant":
        calls = draw(st.lists(st.builds(tool_call, long_call_ids, raw_args), max_size=4))
        return Message.model_validate({"role": role, "toolCalls": calls})
    if role == "tool":
        return Message(role="tool", tool_call_id=draw(long_call_ids), content="r")
    return Message(role=role, content="text")


@settings(max_examples=150, deadline=None)
@given(st.lists(pairing_messages(), max_size=120), st.sampled_from([0, 1, 2, 5]))
def test_repair_matches_a_plain_model_when_calls_stay_open_long(
    history: list[Message], young_limit: int
) -> None:
    # A small young map moves open calls to the old map after a few messages,
    # so answers, reused ids and dropped results cross the two generations.
    with patch.object(_Pairing, "_YOUNG_LIMIT", young_limit):
        assert normalize_history(history) == reference_repair(history)
        pairing = _Pairing()
        for message in history:
            pairing.add(message)
        assert pairing.closed(history) == pairing.closed(history)  # closing again changes nothing
