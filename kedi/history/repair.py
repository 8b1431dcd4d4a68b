"""Pairing repair (C3), sanitize (C5) and request building (C2, C7).

All functions take `Message` objects or C1 dicts, never mutate their input,
and run in time linear in the history length.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from kedi.history.lanes import LaneView
from kedi.history.messages import (
    Message,
    Part,
    ToolCall,
    interrupted_result,
    is_truncated_args,
    iter_messages,
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


class _Pairing:
    """The C3 walk, fed one message at a time so callers filter and repair in one pass.

    Open calls form one LIFO stack per id, kept as a linked list over parallel
    arrays (`below[p]` is the open call under call `p`), so the walk creates no
    objects per message and reads each message once: linear, and light on the
    garbage collector and the memory cache.
    """

    __slots__ = ("_answered", "_below", "_opened", "_opened_at", "_top", "kept", "open", "report")

    def __init__(self) -> None:
        self.kept: list[Message] = []
        self.report = HistoryRepair()
        self.open = 0
        """How many calls no result has answered yet."""
        # Per opened call, in compact arrays (no int object per entry): the
        # call, its message's index in `kept`, the open call with the same id
        # under it (-1 if none), and whether a result answered it.
        self._opened: list[ToolCall] = []
        self._opened_at = array("q")
        self._below = array("q")
        self._answered = bytearray()
        self._top: dict[str, int] = {}  # call id -> the nearest open call with that id

    def add(self, message: Message) -> None:
        """Walk one message: keep it, or drop it if it is an unmatched tool result."""
        role = message.role
        if role == "assistant":
            for call in message.tool_calls:
                call_id = call.id
                if call_id:
                    self._below.append(self._top.get(call_id, -1))
                    self._top[call_id] = len(self._opened)
                    self._opened.append(call)
                    self._opened_at.append(len(self.kept))
                    self._answered.append(0)
                    self.open += 1
                    if is_truncated_args(call.args):
                        self.report.truncated.append(call_id)
        elif role == "tool":
            nearest = self._top.get(message.tool_call_id, -1)
            if nearest < 0:
                self.report.dropped.append(message.tool_call_id)
                return
            self._answered[nearest] = 1
            self.open -= 1
            under = self._below[nearest]
            if under < 0:
                # Forget closed ids so the map holds only open calls: it stays
                # small (and in cache) however long the history is.
                del self._top[message.tool_call_id]
            else:
                self._top[message.tool_call_id] = under
        self.kept.append(message)

    def finish(self) -> tuple[list[Message], HistoryRepair]:
        """Close every call still open right after its message; return history and report."""
        repaired, closed_ids = self.closed()
        self.report.synthesized.extend(closed_ids)
        return repaired, self.report

    def closed(self) -> tuple[list[Message], list[str]]:
        """The kept history with every open call closed, and the closed calls' ids.

        Changes nothing, so a growing history can be closed again after more
        messages; with no call open it is a copy of `kept`.
        """
        if not self.open:
            return list(self.kept), []
        synthesized: dict[int, list[Message]] = {}
        ids: list[str] = []
        for position, closed in enumerate(self._answered):
            if not closed:
                call = self._opened[position]
                synthesized.setdefault(self._opened_at[position], []).append(
                    interrupted_result(call)
                )
                ids.append(call.id)
        repaired: list[Message] = []
        for index, message in enumerate(self.kept):
            repaired.append(message)
            closing = synthesized.get(index)
            if closing:
                repaired.extend(closing)
        return repaired, ids


class RequestHistory:
    """`repair_for_request` of a lane, kept up to date as turns commit (see `LaneView.incremental`).

    Also keeps the token estimate of the repaired history (`estimate_tokens`),
    so a call on a long lane costs its new messages, not the lane.
    """

    __slots__ = ("_pairing", "_tokens")

    def __init__(self) -> None:
        self._pairing = _Pairing()
        self._tokens = 0

    def extend(self, messages: Iterable[Message | Mapping[str, Any]]) -> None:
        """Walk appended messages (system messages are not sent, so not kept)."""
        pairing = self._pairing
        for message in iter_messages(messages):
            if message.role != "system":
                kept = len(pairing.kept)
                pairing.add(message)
                if len(pairing.kept) != kept:
                    self._tokens += message_tokens(message)

    def messages(self) -> list[Message]:
        """The history a request sends: what `repair_for_request` returns for the lane."""
        return self._pairing.closed()[0]

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
    pairing = _Pairing()
    for message in iter_messages(messages):
        pairing.add(message)
    return pairing.finish()


def repair_for_request(messages: HistoryInput) -> list[Message]:
    """The silent in-request repair: drop every system message, then repair (C2 step 4).

    A lane's snapshot (`LaneView`) is repaired incrementally: O(new messages) per call.
    """
    if isinstance(messages, LaneView):
        state = messages.incremental(_REQUEST_HISTORY, RequestHistory)
        if state is not None:
            return state.messages()
    pairing = _Pairing()
    for message in iter_messages(messages):
        if message.role != "system":
            pairing.add(message)
    return pairing.finish()[0]


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
    for index, message in enumerate(iter_messages(messages)):
        if message.role == "system":
            system_prompts += 1
            continue
        if message.parts:
            message = _without_unsafe_parts(message, index, unsafe)
        if message.role == "user" and not message.content and not message.parts:
            continue
        pairing.add(message)
    repaired, repair = pairing.finish()
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
