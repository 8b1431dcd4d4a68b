"""Lifecycle grouping of native histories (spec Part B) and the portable classifier."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from kedi.history import Message, Part, ThinkingBlock, ToolCall
from kedi.history.grouping import (
    CURRENT_REQUEST,
    PENDING_TOOL_CALLS,
    PORTABLE,
    SIGNED_THINKING,
    SIGNED_TOOL_CALL,
    SYSTEM,
    Group,
    MessageInfo,
    group_messages,
)


def s(text: str = "Be terse.") -> Message:
    return Message(role="system", content=text)


def u(text: str) -> Message:
    return Message(role="user", content=text)


def a(
    text: str = "",
    *calls: str,
    thinking: list[ThinkingBlock] | None = None,
    signed_call: bool = False,
) -> Message:
    tool_calls = [
        ToolCall(id=call, name="lookup", args="{}", signature="sig" if signed_call else None)
        for call in calls
    ]
    return Message(role="assistant", content=text, tool_calls=tool_calls, thinking=thinking or [])


def t(call: str, text: str = "result") -> Message:
    return Message(role="tool", tool_call_id=call, tool_name="lookup", content=text)


def shape(groups: list[Group]) -> list[tuple[int, int, bool, tuple[str, ...]]]:
    """(start, end, closed, reasons) per group: what a processor author relies on."""
    return [(g.entry_start, g.entry_end, g.closed, g.protected_reasons) for g in groups]


def test_system_preamble_plain_turns_and_current_request() -> None:
    history = [s(), s("Use metric units."), u("q1"), a("a1"), u("q2"), a("a2"), u("now")]
    groups = group_messages(history, PORTABLE)
    assert shape(groups) == [
        (0, 2, True, (SYSTEM,)),
        (2, 4, True, ()),
        (4, 6, True, ()),
        (6, 7, False, (CURRENT_REQUEST,)),
    ]
    assert [g.eligible for g in groups] == [False, True, True, False]
    assert [g.protected for g in groups] == [True, False, False, True]


def test_tool_loop_with_parallel_calls_is_one_group_whatever_the_result_order() -> None:
    history = [
        u("weather?"),
        a("", "c1", "c2"),
        t("c2"),
        t("c1"),
        a("", "c3"),
        t("c3"),
        a("sunny"),
        u("thanks"),
        a("welcome"),
        u("now"),
    ]
    assert shape(group_messages(history, PORTABLE)) == [
        (0, 7, True, ()),
        (7, 9, True, ()),
        (9, 10, False, (CURRENT_REQUEST,)),
    ]


def test_unanswered_call_leaves_its_group_unfinished_but_later_turns_group_normally() -> None:
    history = [u("q1"), a("", "c1", "c2"), t("c1"), u("q2"), a("a2"), u("now")]
    groups = group_messages(history, PORTABLE)
    assert shape(groups) == [
        (0, 3, False, (PENDING_TOOL_CALLS,)),
        (3, 5, True, ()),
        (5, 6, False, (CURRENT_REQUEST,)),
    ]


def test_result_after_an_intervening_user_message_stays_with_its_call() -> None:
    # C3 never moves results, so the user message cannot open a group while c1 waits.
    history = [u("q1"), a("", "c1"), u("hurry"), t("c1"), a("done"), u("now")]
    assert shape(group_messages(history, PORTABLE)) == [
        (0, 5, True, ()),
        (5, 6, False, (CURRENT_REQUEST,)),
    ]


def test_signed_reasoning_protects_its_whole_group() -> None:
    signed = [ThinkingBlock(text="hmm", signature="sig")]
    redacted = [ThinkingBlock(redacted="b64")]
    history = [
        u("q1"),
        a("", "c1", thinking=signed),
        t("c1"),
        a("a1"),
        u("q2"),
        a("a2", thinking=redacted),
        u("q3"),
        a("", "c2", signed_call=True),
        t("c2"),
        a("a3", thinking=[ThinkingBlock(text="unsigned")]),
        u("now"),
    ]
    assert shape(group_messages(history, PORTABLE)) == [
        (0, 4, True, (SIGNED_THINKING,)),
        (4, 6, True, (SIGNED_THINKING,)),
        (6, 10, True, (SIGNED_TOOL_CALL,)),
        (10, 11, False, (CURRENT_REQUEST,)),
    ]


def test_current_group_of_a_tool_loop_ends_with_the_tool_results() -> None:
    history = [u("q1"), a("a1"), u("now"), a("", "c1"), t("c1")]
    assert shape(group_messages(history, PORTABLE)) == [
        (0, 2, True, ()),
        (2, 5, False, (CURRENT_REQUEST,)),
    ]


def test_system_message_inside_history_forms_a_protected_group() -> None:
    history = [u("q1"), a("a1"), s("new rules"), a("noted"), u("now")]
    assert shape(group_messages(history, PORTABLE)) == [
        (0, 2, True, ()),
        (2, 3, True, (SYSTEM,)),
        (3, 4, True, ()),
        (4, 5, False, (CURRENT_REQUEST,)),
    ]


def test_reused_ids_empty_ids_and_orphan_results() -> None:
    history = [
        u("q1"),
        a("", "c1"),
        t("c1"),
        u("q2"),
        a("", "c1"),  # the id is reused: the next result closes this call
        t("c1"),
        t("c9"),  # orphan: answers nothing, stays where it is
        u("q3"),
        a("", ""),  # an empty id never opens, so the group is not pending
        u("now"),
    ]
    assert shape(group_messages(history, PORTABLE)) == [
        (0, 3, True, ()),
        (3, 7, True, ()),
        (7, 9, True, ()),
        (9, 10, False, (CURRENT_REQUEST,)),
    ]


def test_group_ids_are_deterministic_unique_and_shape_derived() -> None:
    history = [s(), u("q1"), a("a1"), u("q2"), a("a2"), u("now")]
    first = [g.group_id for g in group_messages(history, PORTABLE)]
    again = [
        g.group_id for g in group_messages([m.model_copy(deep=True) for m in history], PORTABLE)
    ]
    assert first == again
    assert len(set(first)) == len(first)
    reshaped = [
        g.group_id
        for g in group_messages([*history[:4], a("", "c1"), t("c1"), a("a2"), u("now")], PORTABLE)
    ]
    assert reshaped[:2] == first[:2] and reshaped[2] != first[2]


def test_describe_names_the_group_its_range_and_reasons() -> None:
    groups = group_messages([s(), u("q"), a("x"), u("now")], PORTABLE)
    assert groups[0].describe() == f"group {groups[0].group_id} (message 0, system)"
    assert groups[1].describe() == f"group {groups[1].group_id} (messages 1-2)"
    assert [g.size for g in groups] == [1, 2, 1]


def test_empty_history_has_no_groups() -> None:
    assert group_messages([], PORTABLE) == []


def test_portable_classifier_infos() -> None:
    image = Part(kind="image", url="https://example.com/cat.png")
    assert PORTABLE.info(u("hi")) == MessageInfo("user", is_text_only=True)
    assert PORTABLE.info(Message(role="user", content="see", parts=[image])) == MessageInfo("user")
    assert PORTABLE.info(a("", "c1", "")) == MessageInfo("assistant", opens=("c1",))
    assert PORTABLE.info(t("c1")) == MessageInfo("tool", answers=("c1",))
    assert PORTABLE.info(s()) == MessageInfo("system", protected=(SYSTEM,), is_text_only=True)
    assert PORTABLE.info(a("plain")).is_summary_text
    assert not PORTABLE.info(s()).is_summary_text
    assert not PORTABLE.info(a("", thinking=[ThinkingBlock(text="x")])).is_summary_text


def test_portable_same_accepts_and_copy() -> None:
    message = Message(
        role="user", content="see", parts=[Part(kind="image", url="https://example.com/x.png")]
    )
    assert PORTABLE.same(message, message.model_copy(deep=True))
    assert not PORTABLE.same(message, message.model_copy(update={"content": "saw"}))
    assert not PORTABLE.same(message.to_json_dict(), message)
    assert PORTABLE.accepts(message) and not PORTABLE.accepts(message.to_json_dict())
    (copy,) = PORTABLE.copy([message])
    copy.parts.clear()  # editing a copy's lists must not reach the original
    assert len(message.parts) == 1


# Any sequence of messages, including malformed ones: grouping is total.
_any_message = st.one_of(
    st.builds(u, st.sampled_from(["q", "r"])),
    st.builds(lambda ids: a("", *ids), st.lists(st.sampled_from(["c1", "c2", ""]), max_size=2)),
    st.builds(a, st.just("answer")),
    st.builds(t, st.sampled_from(["c1", "c2", "c3"])),
    st.builds(s, st.just("sys")),
)


@given(st.lists(_any_message, min_size=1, max_size=25))
def test_groups_partition_any_history(history: list[Any]) -> None:
    groups = group_messages(history, PORTABLE)
    assert groups[0].entry_start == 0
    assert [g.entry_end for g in groups] == [g.entry_start for g in groups[1:]] + [len(history)]
    assert all(g.size > 0 for g in groups)
    assert not groups[-1].closed and CURRENT_REQUEST in groups[-1].protected_reasons
    assert all(g.protected == bool(g.protected_reasons) for g in groups)
