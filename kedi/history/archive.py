"""Exact archival of long tool loops into checkpoints (`history_archive=`).

When a run of completed tool exchanges (an assistant message whose calls are
all answered by the tool messages right after it) grows past
`HistoryArchive.max_exchanges`, every exchange of the run but the last
`keep_recent` is taken out of the request and replaced by **one checkpoint
message** naming the archive. The archived messages themselves are never
lost: the lane keeps them verbatim (the adapter expands checkpoints back
into the messages they stand for before anything is committed), so they are
in the conversation and in its saved file.

Archival is deterministic (same history, same checkpoints, same ids), so it
runs again before every model request, before the history processor; the
processor sees checkpoints, which are protected (`checkpoint`): an edit that
removes one is a `HistoryProcessingValidationError`. The checkpoint's shape
is documented in docs/history.md ("Archiving long tool loops").
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kedi.errors import KediConfigError
from kedi.history.grouping import Classifier, MessageInfo

__all__ = [
    "HistoryArchive",
    "archive_exchanges",
    "archive_policy",
    "checkpoint_text",
    "expand_checkpoints",
]

CHECKPOINT_PREFIX = "kedi-checkpoint:"
"""How a checkpoint names its archive: `kedi-checkpoint:<archive id>`."""


@dataclass(frozen=True, slots=True)
class HistoryArchive:
    """When to archive tool exchanges: more than `max_exchanges` completed ones in a row."""

    max_exchanges: int = 8
    """Completed tool exchanges a run may hold before its older ones are archived."""
    keep_recent: int = 2
    """How many of the newest exchanges of an archived run stay in the request."""

    def __post_init__(self) -> None:
        if not isinstance(self.max_exchanges, int) or self.max_exchanges < 1:
            raise KediConfigError(
                f"history_archive max_exchanges must be an integer >= 1, not {self.max_exchanges!r}"
            )
        if not isinstance(self.keep_recent, int) or not 0 <= self.keep_recent < self.max_exchanges:
            raise KediConfigError(
                f"history_archive keep_recent must be an integer from 0 to max_exchanges - 1, not {self.keep_recent!r}"
            )


def archive_policy(value: HistoryArchive | int | None) -> HistoryArchive | None:
    """`history_archive=` as a policy: an int is `HistoryArchive(max_exchanges=n)`."""
    if value is None or isinstance(value, HistoryArchive):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise KediConfigError(
            f"history_archive takes a HistoryArchive or an int, not {type(value).__name__}"
        )
    return HistoryArchive(max_exchanges=value, keep_recent=min(2, value - 1))


def checkpoint_text(archive_id: str, exchanges: int, call_ids: Sequence[str]) -> str:
    """The text a checkpoint sends in place of the exchanges it archives."""
    return (
        f"[{CHECKPOINT_PREFIX}{archive_id}] {exchanges} earlier tool exchanges of this conversation "
        f"(calls {', '.join(call_ids)}) are archived verbatim in the conversation history; "
        "this note stands in for them in the request."
    )


def archive_exchanges(
    messages: Sequence[Any],
    classifier: Classifier,
    policy: HistoryArchive,
    *,
    dump: Callable[[Sequence[Any]], Any],
    make_checkpoint: Callable[[str, str], Any],
) -> tuple[list[Any], dict[str, list[Any]]]:
    """The messages with long runs of tool exchanges replaced by checkpoints, and the archives.

    `dump` serializes messages (the archive id is a digest of that JSON);
    `make_checkpoint(archive_id, text)` builds the native checkpoint message.
    Returns `(messages, {archive id: archived messages})`; the input list
    itself, and no archives, when nothing is long enough.
    """
    infos = [classifier.info(message) for message in messages]
    out: list[Any] = []
    archives: dict[str, list[Any]] = {}
    index = 0
    while index < len(messages):
        exchanges = _exchanges_from(infos, index)
        if not exchanges:
            out.append(messages[index])
            index += 1
            continue
        end = exchanges[-1][1]
        if len(exchanges) > policy.max_exchanges:
            archived = exchanges[: len(exchanges) - policy.keep_recent]
            cut = archived[-1][1]
            taken = list(messages[index:cut])
            archive_id = _digest(dump(taken))
            calls = [call for start, _ in archived for call in infos[start].opens]
            archives[archive_id] = taken
            out.append(
                make_checkpoint(archive_id, checkpoint_text(archive_id, len(archived), calls))
            )
            out.extend(messages[cut:end])
        else:
            out.extend(messages[index:end])
        index = end
    return (out, archives) if archives else (list(messages), {})


def expand_checkpoints(
    messages: Sequence[Any], archives: dict[str, list[Any]], archive_of: Callable[[Any], str | None]
) -> list[Any]:
    """The messages with each checkpoint of `archives` replaced by the messages it archived."""
    out: list[Any] = []
    for message in messages:
        archive_id = archive_of(message)
        out.extend(archives[archive_id] if archive_id in archives else [message])
    return out


def _exchanges_from(infos: Sequence[MessageInfo], start: int) -> list[tuple[int, int]]:
    """The completed tool exchanges in a row from `start`, as half-open (start, end) ranges."""
    exchanges: list[tuple[int, int]] = []
    index = start
    while index < len(infos) and infos[index].role == "assistant" and infos[index].opens:
        end = index + 1
        answered: set[str] = set()
        while end < len(infos) and infos[end].role == "tool":
            answered.update(infos[end].answers)
            end += 1
        if not set(infos[index].opens) <= answered:
            break
        exchanges.append((index, end))
        index = end
    return exchanges


def _digest(data: Any) -> str:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]
