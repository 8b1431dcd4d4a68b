"""Pairing repair (C3), sanitize (C5) and request building (C2, C7).

All functions take `Message` objects or C1 dicts, never mutate their input,
and run in time linear in the history length.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kedi.history.lanes import LaneView
from kedi.history.messages import (
    Message,
    Part,
    as_messages,
    interrupted_result,
    iter_messages,
    pairing_summary,
)
from kedi.history.trimming import message_tokens

__all__ = [
    "HistoryRepair",
    "SanitizeReport",
    "UnsafePart",
    "build_request_messages",
    "join_instructions",
    "normalize_history",
    "repair_for_request",
    "sanitize_history",
]

HistoryInput = Iterable[Message | Mapping[str, Any]]

_SAFE_SCHEMES = frozenset({"http", "https"})


@dataclass(frozen=True, slots=True)
class HistoryRepair:
    """What pairing repair did, as call ids in history order."""

    synthesized: list[str] = field(default_factory=list)
    """Calls closed with the synthesized interrupted result."""
    dropped: list[str] = field(default_factory=list)
    """Ids of tool results removed (may repeat, may contain "")."""
    truncated: list[str] = field(default_factory=list)
    """Calls whose args are not a JSON object; reported on every pass, never changed."""


@dataclass(frozen=True, slots=True)
class UnsafePart:
    """A part `sanitize_history` dropped."""

    message_index: int
    """Index of its message in the original input."""
    kind: str
    """The part's kind (image, document, audio, video)."""
    scheme: str
    """The URL scheme, lowercased; "" for relative or unparsable URLs."""


@dataclass(frozen=True, slots=True)
class SanitizeReport:
    """What `sanitize_history` removed."""

    system_prompts: int = 0
    """How many system messages were dropped."""
    unsafe_parts: list[UnsafePart] = field(default_factory=list)
    """Every dropped part, in input order."""
    repair: HistoryRepair = field(default_factory=HistoryRepair)
    """The report of the pairing repair that ran last."""


_STORED_HASHES = object()
"""A key that is not a string: in a dict that holds it, CPython stores every key's
hash in the table, so a probe compares hashes there instead of reading the id
strings, which lie scattered over a long history's memory."""


class _Pairing:
    """The C3 walk, fed one message at a time so callers filter and repair in one pass.

    The walk only decides: which results it drops (their positions among
    the messages walked) and which calls stay open. `closed` then assembles
    the repaired history from the walked messages in slices, so a long
    history makes one new list, not a list of the kept messages and then
    the repaired one: each young list of history length is one more that
    the garbage collector walks item by item, and at 100k messages those
    items lie out of the memory cache (bench/README.md, "Repair scaling").

    Open calls form one LIFO stack per id, kept as a linked list over parallel
    arrays (`below[p]` is the open call under call `p`), so the walk creates no
    objects per message and reads each message once (its `pairing_summary`,
    not its fields): linear, and light on the garbage collector and the
    memory cache. The arrays hold numbers, not references: a list of the
    opened calls would be one more container the collector walks item by item
    (each item a call object scattered over a long history's memory) and
    would write the reference count of every call.

    The map from id to the top of its stack has two generations: `_young`
    holds the calls opened lately, `_old` the calls that stayed open while
    `_YOUNG_LIMIT` others were opened. An id may have open calls in both: the
    young ones are newer, so a result looks in `_young` first, and opening a
    call reads only `_young`; `_age` chains an id's young calls on top of its
    old ones when it moves them. A result nearly always answers a young call,
    so the map a message touches stays small and in cache however many calls
    a long history leaves open, and deletions (every answer) happen in the
    small map, so the old one does not fill with deleted slots.
    """

    __slots__ = (
        "_answered",
        "_below",
        "_old",
        "_opened_at",
        "_slot",
        "_young",
        "dropped_at",
        "open",
        "report",
        "walked",
    )

    _YOUNG_LIMIT = 256
    """Open calls the young map holds before they move to the old one."""

    def __init__(self) -> None:
        self.report = HistoryRepair()
        self.walked = 0
        """How many messages the walk has read."""
        self.dropped_at = array("q")
        """The positions (among the walked messages) of the results dropped."""
        self.open = 0
        """How many calls no result has answered yet."""
        # Per opened call, in compact arrays (no object per entry): its
        # message's position among the walked ones, where the call is in that
        # message's summary, the open call with the same id under it (-1 if
        # none), and whether a result answered it.
        self._opened_at = array("q")
        self._slot = array("q")
        self._below = array("q")
        self._answered = bytearray()
        # call id -> the nearest open call with that id, in one of the two maps
        self._young: dict[object, int] = {}
        self._old: dict[object, int] = {}  # str keys, and `_STORED_HASHES`

    def add(self, message: Message) -> None:
        """Walk one message: it is kept, unless it is a tool result that answers no open call."""
        try:
            summary = message._pairing  # type: ignore[attr-defined]  # see pairing_summary
        except AttributeError:  # built without validation: summarize it once
            summary = pairing_summary(message)
        at = self.walked
        self.walked = at + 1
        if summary is None:
            return
        if summary.__class__ is str:  # a tool result answering call `summary`
            top = self._young
            nearest = top.get(summary, -1)
            if nearest < 0:
                top = self._old
                if not top or (nearest := top.get(summary, -1)) < 0:
                    self.report.dropped.append(summary)
                    self.dropped_at.append(at)
                    return
            self._answered[nearest] = 1
            self.open -= 1
            under = self._below[nearest]
            if under < 0:
                del top[summary]  # the map holds only open calls
            else:
                top[summary] = under
        else:  # an assistant message opening calls: (id, truncated, call) each
            young = self._young
            for index in range(0, len(summary), 3):
                call_id = summary[index]
                self._below.append(young.get(call_id, -1))
                young[call_id] = len(self._opened_at)
                self._opened_at.append(at)
                self._slot.append(index + 2)
                self._answered.append(0)
                self.open += 1
                if summary[index + 1]:
                    self.report.truncated.append(call_id)
            if len(young) > self._YOUNG_LIMIT:
                self._age()

    def _age(self) -> None:
        """Move the young map's calls into the old map, above the old calls with the same ids."""
        young, old, below = self._young, self._old, self._below
        if not old:
            old[_STORED_HASHES] = -1
        for call_id, top in young.items():
            older = old.get(call_id, -1)
            if older >= 0:  # the id's young calls are all newer: chain them on top
                bottom = top
                while below[bottom] >= 0:
                    bottom = below[bottom]
                below[bottom] = older
            old[call_id] = top
        young.clear()

    def finish(self, walked: Sequence[Message]) -> tuple[list[Message], HistoryRepair]:
        """End the walk of `walked`: the repaired history (a new list) and the report."""
        repaired, closed_ids = self.closed(walked)
        report = self.report
        return repaired, HistoryRepair(closed_ids, report.dropped, report.truncated)

    def closed(self, walked: Sequence[Message]) -> tuple[list[Message], list[str]]:
        """`walked` (the messages walked, in order) repaired, and the ids of the calls closed.

        Dropped results are left out; each call still open is closed by the
        interrupted result right after its message, in call order. Changes
        nothing, so a growing history can be closed again after more messages.
        """
        # The results first, so no new list of history length is alive (and
        # walked by the collector) while they are made; their lists grow as
        # they are made, so each collection meanwhile walks only the results
        # made so far. The array is made at its final length instead: grown
        # item by item, an array is copied about sixteen times its length.
        count = self.open
        results: list[Message] = []
        ids: list[str] = []
        after = array("q", bytes(8 * count))  # the walked position each result follows
        opened_at, slot, answered = self._opened_at, self._slot, self._answered
        position = -1
        for number in range(count):  # the open calls, in history order
            position = answered.find(0, position + 1)
            at = opened_at[position]
            call = walked[at]._pairing[slot[position]]  # type: ignore[attr-defined]  # add() set it
            results.append(interrupted_result(call))
            ids.append(call.id)
            after[number] = at
        repaired: list[Message] = []
        dropped = self.dropped_at
        copied = 0  # walked[:copied] is in `repaired` already, or dropped
        next_drop = next_result = 0
        end = len(walked)
        while next_drop < len(dropped) or next_result < len(results):
            # A dropped result is never an assistant message that a result follows.
            drop = dropped[next_drop] if next_drop < len(dropped) else end
            follows = after[next_result] if next_result < len(results) else end
            if drop < follows:
                repaired += walked[copied:drop]
                copied = drop + 1
                next_drop += 1
            else:
                repaired += walked[copied : follows + 1]
                copied = follows + 1
                repaired.append(results[next_result])
                next_result += 1
        if repaired:
            repaired += walked[copied:]
        else:  # nothing dropped or synthesized (a lane's usual request): one copy, not two
            repaired = list(walked[copied:]) if copied else list(walked)
        return repaired, ids


class RequestHistory:
    """`repair_for_request` of a lane, kept up to date as turns commit (see `LaneView.incremental`).

    Also keeps the token estimate of the repaired history (`estimate_tokens`),
    so a call on a long lane costs its new messages, not the lane.
    """

    __slots__ = ("_pairing", "_tokens", "_walked")

    def __init__(self) -> None:
        self._pairing = _Pairing()
        self._walked: list[Message] = []
        self._tokens = 0

    def extend(self, messages: Iterable[Message | Mapping[str, Any]]) -> None:
        """Walk appended messages (system messages are not sent, so not walked)."""
        pairing = self._pairing
        for message in iter_messages(messages):
            if message.role != "system":
                dropped = len(pairing.dropped_at)
                pairing.add(message)
                self._walked.append(message)
                if len(pairing.dropped_at) == dropped:
                    self._tokens += message_tokens(message)

    def messages(self) -> list[Message]:
        """The history a request sends: what `repair_for_request` returns for the lane."""
        return self._pairing.closed(self._walked)[0]

    def tokens(self) -> int | None:
        """`estimate_tokens(self.messages())`, or None when open calls get synthesized results."""
        return None if self._pairing.open else self._tokens


_REQUEST_HISTORY = "request history"


def normalize_history(messages: HistoryInput) -> tuple[list[Message], HistoryRepair]:
    """Repair tool-call pairing (C3); return the new history and what changed.

    A tool result closes the nearest earlier open call with its id; any other
    tool result is dropped. Calls still open at the end get the interrupted
    result right after their assistant message, in call order. Results are
    never moved and nothing else is rewritten. System messages are kept.
    Deterministic and idempotent.
    """
    # The repaired history is assembled from the walked messages: the input
    # list itself while it holds only `Message` objects (no copy of a long
    # history); from the first other item on, a new list of `Message` objects.
    if type(messages) is list:
        pairing = _Pairing()
        for message in messages:
            if message.__class__ is not Message:
                break
            pairing.add(message)
        else:
            return pairing.finish(messages)
    walked = as_messages(messages)
    pairing = _Pairing()
    for message in walked:
        pairing.add(message)
    return pairing.finish(walked)


def repair_for_request(messages: HistoryInput) -> list[Message]:
    """The silent in-request repair: drop every system message, then repair (C2 step 4).

    A lane's snapshot (`LaneView`) is repaired incrementally: O(new messages) per call.
    """
    if isinstance(messages, LaneView):
        state = messages.incremental(_REQUEST_HISTORY, RequestHistory)
        if state is not None:
            return state.messages()
    pairing = _Pairing()
    walked = []
    for message in iter_messages(messages):
        if message.role != "system":
            pairing.add(message)
            walked.append(message)
    return pairing.finish(walked)[0]


def request_history_tokens(messages: HistoryInput) -> int | None:
    """`estimate_tokens(repair_for_request(messages))` when a lane keeps it, else None (then count)."""
    if isinstance(messages, LaneView):
        state = messages.incremental(_REQUEST_HISTORY, RequestHistory)
        if state is not None:
            return state.tokens()
    return None


def _scheme(url: str) -> str:
    try:
        return urlsplit(url).scheme.lower()
    except ValueError:  # e.g. a malformed IPv6 host
        return ""


def _without_unsafe_parts(message: Message, index: int, unsafe: list[UnsafePart]) -> Message:
    """`message` keeping only parts with inline data or an http(s) URL; report the rest."""
    safe: list[Part] = []
    for part in message.parts:
        if part.url is None:
            safe.append(part)
            continue
        scheme = _scheme(part.url)
        if scheme in _SAFE_SCHEMES:
            safe.append(part)
        else:
            unsafe.append(UnsafePart(index, part.kind, scheme))
    return (
        message if len(safe) == len(message.parts) else message.model_copy(update={"parts": safe})
    )


def sanitize_history(messages: HistoryInput) -> tuple[list[Message], SanitizeReport]:
    """Clean history that crossed a trust boundary (C5).

    Drops system messages, parts whose URL scheme is not http or https, and
    user messages left with no content and no parts; then repairs pairing.
    Runs never call this on their own: the embedder does, at the boundary.
    """
    system_prompts = 0
    unsafe: list[UnsafePart] = []
    pairing = _Pairing()
    walked: list[Message] = []
    for index, message in enumerate(iter_messages(messages)):
        if message.role == "system":
            system_prompts += 1
            continue
        if message.parts:
            message = _without_unsafe_parts(message, index, unsafe)
        if message.role == "user" and not message.content and not message.parts:
            continue
        pairing.add(message)
        walked.append(message)
    repaired, repair = pairing.finish(walked)
    return repaired, SanitizeReport(system_prompts, unsafe, repair)


def join_instructions(*parts: str) -> str:
    """Join instruction parts (static, dynamic) with a blank line, skipping empty ones (C7)."""
    return "\n\n".join(part for part in parts if part)


def build_request_messages(
    instructions: str,
    history: HistoryInput,
    prompt: str,
    *,
    run_id: str,
    conversation_id: str,
) -> list[Message]:
    """The messages of one request (C2 steps 3-4, C7).

    One system message with `instructions` first (only if non-empty), then the
    history with every system message removed and pairing repaired, then the
    user prompt stamped with the call's run and conversation ids.
    """
    request = [Message(role="system", content=instructions)] if instructions else []
    request.extend(repair_for_request(history))
    request.append(
        Message(role="user", content=prompt, run_id=run_id, conversation_id=conversation_id)
    )
    return request
