"""Group-safe retention processors (C6) and a deterministic token estimate.

Both processors keep a suffix of the history that starts at a message which
may open a window: anything but a tool result or an assistant message with
tool calls, so a kept window never begins inside a tool exchange.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from kedi.errors import HistoryError
from kedi.history.messages import Message, as_messages, history_tail

__all__ = ["budget_history", "estimate_tokens", "may_open_window", "trim_history"]

HistoryInput = Iterable[Message | Mapping[str, Any]]
Processor = Callable[[HistoryInput], list[Message]]
TokenCounter = Callable[[list[Message]], int]


def may_open_window(message: Message) -> bool:
    """Whether `message` may be the first of a kept window (C6 boundary rule)."""
    return not (
        message.role == "tool" or (message.role == "assistant" and bool(message.tool_calls))
    )


def _first_opening(messages: list[Message], start: int) -> int:
    """Index of the first message at or after `start` that may open a window."""
    while start < len(messages) and not may_open_window(messages[start]):
        start += 1
    return start


def _check_bound(owner: str, name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise HistoryError(f"{owner}: {name} must be an integer, got {value!r}")
    if value < 1:
        raise HistoryError(f"{owner}: {name} must be at least 1, got {value}")
    return value


def _is_context(argument: Any) -> bool:
    return hasattr(argument, "groups") and hasattr(argument, "request_index")


def _history_of(argument: Any) -> Any:
    """The messages to trim: the argument itself, or a processor context's `messages`.

    So `trim_history(n)` and `budget_history(...)` work both on a plain list
    and passed directly as `history_processor=` (which receives a
    `HistoryProcessorContext`).
    """
    return argument.messages if _is_context(argument) else argument


def _whole_groups(argument: Any, kept: list[Message]) -> list[Message]:
    """As a history processor, keep whole lifecycle groups: move the cut forward to a group start.

    Moving the start later only removes messages, so a trim stays within
    its count and a budget within its tokens; the current request (last)
    always stays.
    """
    if not _is_context(argument):
        return kept
    messages = list(argument.messages)
    cut = len(messages) - len(kept)
    starts = sorted(group.entry_start for group in argument.groups if group.entry_start >= cut)
    start = starts[0] if starts else len(messages) - 1
    return as_messages(messages[start:])


def trim_history(max_messages: int) -> Processor:
    """A processor keeping at most the last `max_messages` messages, at a safe boundary.

    A history of at most `max_messages` messages comes back unchanged.
    Otherwise the last `max_messages` are kept, minus leading messages that may
    not open a window. Raises `HistoryError` if `max_messages < 1`, or (when
    processing) if nothing is left.
    """
    limit = _check_bound("trim_history", "max_messages", max_messages)

    def trim(argument: HistoryInput) -> list[Message]:
        return _whole_groups(argument, _trim(_history_of(argument)))

    def _trim(messages: HistoryInput) -> list[Message]:
        # Only the tail is coerced: trimming runs before validation (C6), and
        # skipping the rest keeps trim cheap on long lanes.
        length, history = history_tail(messages, limit)
        if length <= limit:
            return history
        start = _first_opening(history, 0)
        if start == len(history):
            raise HistoryError(
                f"trim_history({limit}) left no messages: each of the last {limit} "
                "is a tool result or an assistant message with tool calls"
            )
        return history[start:]

    trim.__qualname__ = f"trim_history({limit})"  # how a processor error names it
    return trim


def budget_history(counter: TokenCounter | None, max_tokens: int) -> Processor:
    """A processor keeping the longest safe suffix that `counter` puts within `max_tokens`.

    Starting from the whole history, it skips messages that may not open a
    window, counts the rest with one `counter` call, and drops one more
    message from the front until the count fits. The counter is called once
    per attempt, so its cost decides the processor's. Raises `HistoryError`
    for a missing counter, `max_tokens < 1`, a history that leaves no
    openable message, a single message over budget, or a counter failure
    (wrapping the cause).
    """
    if counter is None or not callable(counter):
        raise HistoryError(f"budget_history: counter must be a callable, got {counter!r}")
    budget = _check_bound("budget_history", "max_tokens", max_tokens)

    def count(window: list[Message]) -> int:
        try:
            tokens = counter(window)
        except Exception as error:
            raise HistoryError(
                f"budget_history: the token counter failed: {type(error).__name__}: {error}"
            ) from error
        if isinstance(tokens, bool) or not isinstance(tokens, int):
            raise HistoryError(
                f"budget_history: the token counter returned {tokens!r}, not an integer"
            )
        return tokens

    def budget_trim(argument: HistoryInput) -> list[Message]:
        return _whole_groups(argument, _budget(_history_of(argument)))

    def _budget(messages: HistoryInput) -> list[Message]:
        history = as_messages(messages)
        if not history:
            return history
        start = 0
        while True:
            start = _first_opening(history, start)
            if start == len(history):
                raise HistoryError(
                    "budget_history left no messages: none of the remaining messages may open "
                    "the window (each is a tool result or an assistant message with tool calls)"
                )
            window = history[start:]
            tokens = count(window)
            if tokens <= budget:
                return window
            if len(window) == 1:
                raise HistoryError(
                    f"budget_history: the last message alone needs {tokens} tokens, "
                    f"over the budget of {budget}; raise max_tokens or shorten that message"
                )
            start += 1

    budget_trim.__qualname__ = f"budget_history({budget})"  # how a processor error names it
    return budget_trim


def _text_length(message: Message) -> int:
    length = len(message.content)
    for call in message.tool_calls:
        length += len(call.name) + len(call.args)
    for block in message.thinking:
        length += len(block.text or "")
    return length


def message_tokens(message: Message) -> int:
    """The estimate of one message: `len(text) // 4 + 3` (see `estimate_tokens`)."""
    return _text_length(message) // 4 + 3


def estimate_tokens(messages: HistoryInput) -> int:
    """A deterministic token estimate: `len(text) // 4 + 3` per message.

    The text of a message is its content, tool-call names and args, and
    thinking text.
    """
    return sum(_text_length(message) // 4 + 3 for message in as_messages(messages))
