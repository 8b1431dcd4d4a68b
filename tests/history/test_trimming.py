"""trim_history, budget_history (C6) and estimate_tokens."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kedi.errors import HistoryError
from kedi.history import (
    Message,
    ThinkingBlock,
    ToolCall,
    budget_history,
    estimate_tokens,
    may_open_window,
    trim_history,
)


def user(text: str) -> Message:
    return Message(role="user", content=text)


def reply(text: str) -> Message:
    return Message(role="assistant", content=text)


def calls(*ids: str) -> Message:
    return Message(role="assistant", tool_calls=[ToolCall(id=i, name="f") for i in ids])


def result(call_id: str) -> Message:
    return Message(role="tool", tool_call_id=call_id, content="r")


def per_message(messages: list[Message]) -> int:
    """A counter where every message costs 10 tokens."""
    return 10 * len(messages)


@pytest.mark.parametrize(
    ("message", "opens"),
    [
        (user("u"), True),
        (reply("a"), True),
        (Message(role="system", content="s"), True),
        (calls("c"), False),
        (result("c"), False),
    ],
)
def test_boundary_rule(message: Message, opens: bool) -> None:
    assert may_open_window(message) is opens


# --------------------------------------------------------------------------- trim


@pytest.mark.parametrize("bad", [0, -3])
def test_trim_rejects_bounds_below_one(bad: int) -> None:
    with pytest.raises(
        HistoryError, match=f"^trim_history: max_messages must be at least 1, got {bad}$"
    ):
        trim_history(bad)


@pytest.mark.parametrize("bad", [2.5, "3", True, None])
def test_trim_rejects_non_integer_bounds(bad: Any) -> None:
    with pytest.raises(HistoryError, match="^trim_history: max_messages must be an integer"):
        trim_history(bad)


def test_trim_short_history_comes_back_unchanged_even_if_it_starts_mid_exchange() -> None:
    history = [result("c"), user("u"), reply("a")]
    assert trim_history(3)(history) == history
    assert trim_history(10)(history) == history


def test_trim_keeps_last_n() -> None:
    history = [user("1"), reply("2"), user("3"), reply("4")]
    assert trim_history(2)(history) == [user("3"), reply("4")]


def test_trim_skips_leading_messages_that_may_not_open() -> None:
    history = [user("q"), calls("a", "b"), result("a"), result("b"), reply("done"), user("more")]
    assert trim_history(4)(history) == [reply("done"), user("more")]
    assert trim_history(5)(history) == [reply("done"), user("more")]
    assert trim_history(6)(history) == history


def test_trim_error_when_nothing_can_open() -> None:
    history = [user("q"), calls("a"), result("a"), calls("b"), result("b")]
    with pytest.raises(HistoryError) as caught:
        trim_history(4)(history)
    assert str(caught.value) == (
        "trim_history(4) left no messages: each of the last 4 "
        "is a tool result or an assistant message with tool calls"
    )


def test_trim_accepts_dicts_and_does_not_mutate() -> None:
    history: list[Any] = [{"role": "user", "content": "1"}, {"role": "assistant", "content": "2"}]
    before = copy.deepcopy(history)
    assert trim_history(1)(history) == [reply("2")]
    assert history == before


# --------------------------------------------------------------------------- budget


def test_budget_rejects_missing_counter_and_bad_bound() -> None:
    with pytest.raises(
        HistoryError, match="^budget_history: counter must be a callable, got None$"
    ):
        budget_history(None, 10)
    with pytest.raises(
        HistoryError, match="^budget_history: max_tokens must be at least 1, got 0$"
    ):
        budget_history(per_message, 0)


def test_budget_empty_history_is_empty_without_counting() -> None:
    seen: list[int] = []

    def counter(messages: list[Message]) -> int:
        seen.append(len(messages))
        return 0

    assert budget_history(counter, 5)([]) == []
    assert seen == []


def test_budget_keeps_the_longest_suffix_within_budget_one_count_per_attempt() -> None:
    seen: list[int] = []

    def counter(messages: list[Message]) -> int:
        seen.append(len(messages))
        return per_message(messages)

    history = [user("1"), reply("2"), user("3"), reply("4"), user("5")]
    assert budget_history(counter, 30)(history) == [user("3"), reply("4"), user("5")]
    assert seen == [5, 4, 3]


def test_budget_within_budget_returns_everything() -> None:
    history = [user("1"), reply("2")]
    assert budget_history(per_message, 20)(history) == history


def test_budget_skips_unopenable_messages_even_when_nothing_was_cut() -> None:
    history = [result("x"), user("1"), reply("2")]
    assert budget_history(per_message, 1000)(history) == [user("1"), reply("2")]


def test_budget_skips_over_tool_exchanges_when_cutting() -> None:
    history = [user("q"), calls("a"), result("a"), reply("done")]
    assert budget_history(per_message, 30)(history) == [reply("done")]


def test_budget_error_when_nothing_can_open() -> None:
    with pytest.raises(HistoryError, match="^budget_history left no messages"):
        budget_history(per_message, 100)([calls("a"), result("a")])


def test_budget_error_when_one_message_is_over_budget_names_both_numbers() -> None:
    with pytest.raises(HistoryError) as caught:
        budget_history(per_message, 7)([user("1"), reply("2")])
    assert (
        str(caught.value)
        == "budget_history: the last message alone needs 10 tokens, over the budget of 7; "
        "raise max_tokens or shorten that message"
    )


def test_budget_wraps_counter_errors() -> None:
    def broken(messages: list[Message]) -> int:
        raise RuntimeError("tokenizer offline")

    with pytest.raises(
        HistoryError,
        match="^budget_history: the token counter failed: RuntimeError: tokenizer offline$",
    ) as caught:
        budget_history(broken, 10)([user("1")])
    assert isinstance(caught.value.__cause__, RuntimeError)


def test_budget_rejects_non_integer_counts() -> None:
    with pytest.raises(
        HistoryError, match=r"^budget_history: the token counter returned '12', not an integer$"
    ):
        budget_history(lambda messages: "12", 10)([user("1")])  # type: ignore[arg-type, return-value]


def test_budget_with_estimate_tokens() -> None:
    history = [user("x" * 40), reply("y" * 40), user("z" * 4)]  # 13, 13, 4 tokens
    assert budget_history(estimate_tokens, 20)(history) == [reply("y" * 40), user("z" * 4)]


# --------------------------------------------------------------------------- estimate


def test_estimate_tokens_counts_content_calls_and_thinking() -> None:
    message = Message(
        role="assistant",
        content="a" * 10,
        tool_calls=[ToolCall(id="ignored-id", name="abc", args='{"k":1}')],
        thinking=[ThinkingBlock(text="t" * 5), ThinkingBlock(redacted="opaque-not-counted")],
    )
    # 10 + 3 + 7 + 5 = 25 characters -> 25 // 4 + 3
    assert estimate_tokens([message]) == 9
    assert estimate_tokens([]) == 0
    assert estimate_tokens([{"role": "user"}, {"role": "user", "content": "abcd"}]) == 3 + 4


def test_trim_validates_only_the_kept_tail_and_names_original_indices() -> None:
    # Trimming runs before validation (C6): what it cuts is never inspected.
    history: list[Any] = [
        {"role": "narrator"},
        "junk",
        {"role": "user", "content": "1"},
        reply("2"),
    ]
    assert trim_history(2)(history) == [user("1"), reply("2")]
    with pytest.raises(HistoryError, match="^history message 1 is a str; expected a kedi Message"):
        trim_history(3)(history)
    with pytest.raises(HistoryError, match="^a history is a sequence of messages, not a str$"):
        trim_history(3)("not a history")


def test_trim_accepts_any_iterable() -> None:
    assert trim_history(1)(iter([user("1"), reply("2")])) == [reply("2")]


def test_a_run_names_trim_and_budget_processors_by_their_call() -> None:
    # The error read "history processor budget_history.<locals>.budget_trim failed".
    import kedi
    from kedi.history import estimate_tokens

    chat = kedi.compile("> history: enabled\n[reply] << <`args.message`>\n= <reply>")
    with pytest.raises(kedi.KediExecutionError) as caught:
        chat.run_sync(
            args={"message": "a long message " * 30},
            history_processor=budget_history(estimate_tokens, 5),
        )
    expected = "history processor budget_history(5) failed: HistoryError: budget_history: the last"
    assert expected in str(caught.value)
    assert trim_history(4).__qualname__ == "trim_history(4)"
