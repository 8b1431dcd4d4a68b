"""Linear records: a request's repeated messages kept once, later records referring back.

With history on, each model request resends its lane's whole history, so
records that keep every message a request sent (transcript lines, the
store's `exchanges` column) grow quadratically with a session. A *linear*
record holds only what is new, plus a reference to the record it repeats:
`"messages_from": {"index": J, "start": A, "stop": B, "at": P}` means its full
messages are `messages[:P] + base(J)[A:B] + messages[P:]`, where `base(J)` is
record J's full messages followed by its `response` (when that is a message).
Every other field is kept as given.

`shorten` makes a linear record from a full one and the base of the record
before it; `Expander` rebuilds full records in order. The transcript writer
(`kedi.runtime.transcripts`) indexes records by their line number; the
history store (`kedi.history.store.exchanges`) by `[turn seq, position]`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kedi.errors import HistoryError

__all__ = ["REFERENCE", "Expander", "MissingBase", "base_of", "shorten"]

REFERENCE = "messages_from"
"""The record field naming where a linear record's repeated messages are."""


def base_of(record: dict[str, Any]) -> list[Any]:
    """What a later record may refer to (a new list): its full messages and its response."""
    full = record.get("messages") or ()
    response = record.get("response")
    return [*full, response] if _is_message(response) else list(full)


def shorten(record: dict[str, Any], previous: tuple[Any, Sequence[Any]] | None) -> dict[str, Any]:
    """`record` with the messages it repeats from `previous` (the index and base of an earlier record) replaced by a reference.

    Returns `record` itself when there is nothing to shorten, else a new dict.
    A leading system message (the instructions, which may change from call to
    call) is skipped on both sides.
    """
    messages = record.get("messages")
    if previous is None or not isinstance(messages, list):
        return record
    index, earlier = previous
    at = 1 if messages and _role(messages[0]) == "system" else 0
    start = 1 if earlier and _role(earlier[0]) == "system" else 0
    shared = _common_prefix(earlier, start, messages, at)
    if shared == 0:
        return record
    reference = {"index": index, "start": start, "stop": start + shared, "at": at}
    return {**record, "messages": messages[:at] + messages[at + shared :], REFERENCE: reference}


def _common_prefix(earlier: Sequence[Any], start: int, messages: Sequence[Any], at: int) -> int:
    """How many messages from `at` repeat `earlier` from `start`.

    With history on, a request repeats the whole earlier base (its messages
    and response): one list comparison in C checks that, and the
    message-by-message walk runs only when it fails.
    """
    limit = min(len(earlier) - start, len(messages) - at)
    if limit == len(earlier) - start and earlier[start:] == messages[at : at + limit]:
        return limit
    count = 0
    while count < limit and earlier[start + count] == messages[at + count]:
        count += 1
    return count


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("role"), str)


def _role(value: Any) -> Any:
    return value.get("role") if isinstance(value, dict) else None


def _key(index: Any) -> Any:
    """A reference's index as a dict key (JSON gives `[seq, position]` back as a list)."""
    return tuple(index) if isinstance(index, list) else index


class MissingBase(HistoryError):
    """A linear record refers to a record that is not there (callers say which file or turn)."""

    def __init__(self, index: Any) -> None:
        super().__init__(f"a linear record refers to record {index!r}, which is not there")
        self.index = index


class Expander:
    """Rebuilds full records from linear ones, fed in the order they were written."""

    def __init__(self) -> None:
        self._bases: dict[Any, list[Any]] = {}

    def expand(self, record: dict[str, Any], index: Any) -> dict[str, Any]:
        """`record` with every message its request sent; it becomes the base named `index`.

        Returns `record` itself when it holds no reference. Raises
        `MissingBase` when the record it refers to was not fed before it.
        """
        reference = record.get(REFERENCE)
        messages = record.get("messages")
        if isinstance(reference, dict):
            referred = reference.get("index")
            base = self._bases.get(_key(referred))
            if base is None:
                raise MissingBase(referred)
            at = reference["at"]
            own = list(messages or ())
            messages = own[:at] + base[reference["start"] : reference["stop"]] + own[at:]
            record = {name: value for name, value in record.items() if name != REFERENCE}
            record["messages"] = messages
        if index is not None:
            self._bases[_key(index)] = base_of(record)
        return record
