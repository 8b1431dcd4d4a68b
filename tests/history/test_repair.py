"""Pairing repair (C3), request building (C2, C7) and partial results (C9)."""

from __future__ import annotations

import copy
import pickle
from typing import Any

import pytest

from kedi.errors import AdapterError, HistoryError
from kedi.history import (
    INTERRUPTED_RESULT,
    HistoryRepair,
    Message,
    PartialResult,
    ToolCall,
    build_request_messages,
    join_instructions,
    normalize_history,
    repair_for_request,
)
from kedi.history.repair import _Pairing


def A(*ids: str, args: str = "{}", content: str = "") -> Message:  # noqa: N802 - reads like the spec
    return Message(
        role="assistant",
        content=content,
        tool_calls=[ToolCall(id=i, name=f"f_{i}", args=args) for i in ids],
    )


def T(call_id: str, content: str = "ok", **extra: Any) -> Message:  # noqa: N802
    return Message(role="tool", tool_call_id=call_id, content=content, **extra)


def SYN(call_id: str) -> Message:  # noqa: N802
    return Message(
        role="tool", tool_call_id=call_id, tool_name=f"f_{call_id}", content=INTERRUPTED_RESULT
    )


U = Message(role="user", content="next")
S = Message(role="system", content="be brief")


def test_spec_example_synthesized_result_goes_before_sibling_results() -> None:
    repaired, report = normalize_history([A("c1", "c2"), T("c1")])
    assert repaired == [A("c1", "c2"), SYN("c2"), T("c1")]
    assert report == HistoryRepair(synthesized=["c2"], dropped=[], truncated=[])


def test_pair_valid_history_is_unchanged() -> None:
    history = [U, A("c1", "c2"), T("c2"), T("c1"), Message(role="assistant", content="done")]
    repaired, report = normalize_history(history)
    assert repaired == history
    assert repaired is not history
    assert report == HistoryRepair()


def test_open_calls_are_closed_in_call_order_right_after_their_message() -> None:
    repaired, report = normalize_history([A("a", "b", "c"), U, A("d")])
    assert repaired == [A("a", "b", "c"), SYN("a"), SYN("b"), SYN("c"), U, A("d"), SYN("d")]
    assert report.synthesized == ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    ("history", "expected", "dropped"),
    [
        ([U, T("x")], [U], ["x"]),  # unknown id
        ([T("c1"), A("c1"), T("c1")], [A("c1"), T("c1")], ["c1"]),  # before its call
        ([A("c1"), T("c1"), T("c1", "again")], [A("c1"), T("c1")], ["c1"]),  # second result
        ([A("c1"), T(""), T("c1")], [A("c1"), T("c1")], [""]),  # empty id
        ([T("a"), T("a"), T("")], [], ["a", "a", ""]),  # repeats kept in order
    ],
)
def test_unmatched_results_are_dropped(
    history: list[Message], expected: list[Message], dropped: list[str]
) -> None:
    repaired, report = normalize_history(history)
    assert repaired == expected
    assert report.dropped == dropped
    assert report.synthesized == []


def test_call_with_empty_id_never_opens() -> None:
    history = [A(""), T("")]
    repaired, report = normalize_history(history)
    assert repaired == [A("")]
    assert report == HistoryRepair(dropped=[""])


def test_result_after_intervening_user_message_is_not_moved() -> None:
    history = [A("c1"), U, T("c1")]
    repaired, report = normalize_history(history)
    assert repaired == history
    assert report == HistoryRepair()


def test_reused_id_closes_the_nearest_earlier_open_call() -> None:
    repaired, report = normalize_history([A("x"), A("x"), T("x", "second")])
    assert repaired == [A("x"), SYN("x"), A("x"), T("x", "second")]
    assert report.synthesized == ["x"]
    assert normalize_history(repaired) == (repaired, HistoryRepair())


def test_calls_left_open_long_pair_like_recent_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    # Calls open past `_YOUNG_LIMIT` others move to the walk's old map; an
    # id reopened later must still close nearest first, and only once each.
    monkeypatch.setattr(_Pairing, "_YOUNG_LIMIT", 2)
    history = [A("x"), A("p"), A("q"), A("x"), T("x", "2nd"), T("x", "1st"), T("x", "3rd"), T("p")]
    repaired, report = normalize_history(history)
    assert repaired == [A("x"), A("p"), A("q"), SYN("q"), A("x")] + history[4:6] + [T("p")]
    assert report == HistoryRepair(synthesized=["q"], dropped=["x"])


def test_an_id_open_in_both_maps_answers_its_newest_call_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # `x` (the very first call) moves to the old map; a later `x` is young
    # when the map ages again, so it must be chained on top of the old one:
    # the first result answers the later `x`, the second the first `x`.
    monkeypatch.setattr(_Pairing, "_YOUNG_LIMIT", 1)
    history = [A("x"), A("p"), A("x"), A("q"), T("x", "2nd"), T("x", "1st")]
    repaired, report = normalize_history(history)
    assert repaired == [A("x"), A("p"), SYN("p"), A("x"), A("q"), SYN("q")] + history[4:]
    assert report == HistoryRepair(synthesized=["p", "q"])


def test_hundreds_of_open_calls_are_answered_from_either_map() -> None:
    opened = [A(f"k{index}") for index in range(300)]  # more than the young map holds
    history = [*opened, T("k0"), T("k299"), T("k0"), T("k150")]
    repaired, report = normalize_history(history)
    assert report.dropped == ["k0"] and len(report.synthesized) == 297
    assert repaired[:2] == [A("k0"), A("k1")] and repaired[-3:] == history[-4:-2] + [T("k150")]
    assert normalize_history(repaired) == (repaired, HistoryRepair())


def test_messages_built_without_validation_pair_by_their_fields() -> None:
    # The walk reads a summary that validation stores on a message; a copy,
    # a constructed or an unpickled message gets one from its own fields.
    changed = A("x").model_copy(update={"tool_calls": [ToolCall(id="y", name="f_y")]})
    constructed = Message.model_construct(role="tool", tool_call_id="y", content="ok")
    unpickled = pickle.loads(pickle.dumps(A("z")))
    repaired, report = normalize_history([changed, constructed, unpickled, T("x")])
    assert repaired == [changed, constructed, unpickled, SYN("z")]
    assert report == HistoryRepair(synthesized=["z"], dropped=["x"])


def test_duplicate_id_within_one_message() -> None:
    repaired, report = normalize_history([A("x", "x"), T("x")])
    assert repaired == [A("x", "x"), SYN("x"), T("x")]
    assert report.synthesized == ["x"]
    assert normalize_history(repaired)[1] == HistoryRepair()


def test_failed_result_is_an_answer_and_everything_passes_through() -> None:
    failed = T("c1", "boom", failed=True, run_id="r1", conversation_id="k1")
    thinking = Message(
        role="assistant",
        tool_calls=[ToolCall(id="c1", name="f", args='{"a": ', signature="s")],
        thinking=[{"text": "hm", "signature": "t"}],  # type: ignore[list-item]
        run_id="r1",
    )
    history = [thinking, failed]
    repaired, report = normalize_history(history)
    assert repaired == history
    assert repaired[0] is thinking and repaired[1] is failed
    assert report == HistoryRepair(truncated=["c1"])


def test_truncated_calls_are_reported_on_every_pass_and_not_changed() -> None:
    history = [
        A("ok", args=' {"a": 1} '),
        A("cut", args='{"a": '),
        A("empty", args="  "),
        A("arr", args="[1]"),
    ]
    repaired, report = normalize_history(history)
    assert report.truncated == ["cut", "arr"]
    assert [m.tool_calls[0].args for m in repaired if m.role == "assistant"] == [
        ' {"a": 1} ',
        '{"a": ',
        "  ",
        "[1]",
    ]
    again, second = normalize_history(repaired)
    assert again == repaired
    assert second == HistoryRepair(truncated=["cut", "arr"])


def test_truncated_call_with_empty_id_is_not_reported() -> None:
    assert normalize_history([A("", args="{")])[1].truncated == []


def test_synthesized_results_carry_no_stamps() -> None:
    call = Message(
        role="assistant", tool_calls=[ToolCall(id="c", name="f")], run_id="r", conversation_id="k"
    )
    synthesized = normalize_history([call])[0][1]
    assert synthesized.to_json_dict() == {
        "role": "tool",
        "content": INTERRUPTED_RESULT,
        "toolCallId": "c",
        "toolName": "f",
    }


def test_normalize_keeps_system_messages() -> None:
    assert normalize_history([S, U])[0] == [S, U]


def test_normalize_accepts_dicts_and_never_mutates_input() -> None:
    history: list[Any] = [
        {
            "role": "assistant",
            "toolCalls": [{"id": "c1", "name": "f", "args": {"q": 1}}, {"id": "c2", "name": "g"}],
        },
        {"role": "tool", "toolCallId": "c2", "content": "r"},
        {"role": "tool", "toolCallId": "zz"},
    ]
    before = copy.deepcopy(history)
    repaired, report = normalize_history(history)
    assert history == before
    assert [m.to_json_dict() for m in repaired] == [
        history[0],
        {"role": "tool", "toolCallId": "c1", "toolName": "f", "content": INTERRUPTED_RESULT},
        history[1],
    ]
    assert report == HistoryRepair(synthesized=["c1"], dropped=["zz"])


def test_normalize_rejects_bad_input_with_history_error() -> None:
    with pytest.raises(HistoryError, match="^history message 0: invalid Message: role"):
        normalize_history([{"role": "narrator"}])


# --------------------------------------------------------------------------- request building


def test_repair_for_request_drops_system_messages_then_repairs() -> None:
    assert repair_for_request([S, A("c1"), S, U]) == [A("c1"), SYN("c1"), U]


def test_build_request_messages_order_and_stamps() -> None:
    history = [S, U, A("c1", "c2"), T("c1")]
    request = build_request_messages(
        "Be kind.", history, "hello", run_id="run", conversation_id="conv"
    )
    assert request == [
        Message(role="system", content="Be kind."),
        U,
        A("c1", "c2"),
        SYN("c2"),
        T("c1"),
        Message(role="user", content="hello", run_id="run", conversation_id="conv"),
    ]


def test_build_request_messages_without_instructions_has_no_system_message() -> None:
    request = build_request_messages("", [S], "hi", run_id="r", conversation_id="c")
    assert request == [Message(role="user", content="hi", run_id="r", conversation_id="c")]


@pytest.mark.parametrize(
    ("parts", "joined"),
    [
        (("A", "B"), "A\n\nB"),
        (("A", ""), "A"),
        (("", "B"), "B"),
        (("", ""), ""),
        (("A\n", "B"), "A\n\n\nB"),
    ],
)
def test_join_instructions(parts: tuple[str, ...], joined: str) -> None:
    assert join_instructions(*parts) == joined


# --------------------------------------------------------------------------- C9


def test_partial_messages_resume_after_a_failed_tool_batch() -> None:
    partial = PartialResult(
        stage="tool", messages=[U, A("c1", "c2")], requests=1, run_id="r", conversation_id="k"
    )
    repaired, report = normalize_history(partial.messages)
    assert repaired == [U, A("c1", "c2"), SYN("c1"), SYN("c2")]
    assert report.synthesized == ["c1", "c2"]


def test_partial_result_rejects_unknown_stage() -> None:
    with pytest.raises(
        HistoryError,
        match="^unknown partial-result stage 'network'; expected one of canceled, decode",
    ):
        PartialResult(stage="network")  # type: ignore[arg-type]


def test_partial_result_travels_with_a_pickled_error() -> None:
    partial = PartialResult(
        stage="model", messages=[U, A("c1")], usage={"input": 3}, requests=1, tool_calls=0
    )
    error = pickle.loads(pickle.dumps(AdapterError("model failed", partial=partial)))
    assert error.partial == partial
