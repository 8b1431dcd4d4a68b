"""Lifecycle groups, the atomic editing ranges of history processors, and their edit rules (Part B).

A *group* is one complete user/assistant cycle with its tool exchanges. A
history processor may keep, drop or replace an eligible group only as a
whole, so grouping is the one place that decides what "whole" means.

Grouping is adapter-neutral. Each adapter describes its own native message
type through a small `Classifier` (Pydantic AI `ModelMessage`, LangChain
`BaseMessage`, kedi's portable `Message`); `PORTABLE` is the one for kedi
`Message`s. The rules, in order:

* Tool-call bookkeeping follows the pairing repair (C3): a result closes the
  nearest earlier open call with its id; a call with an empty id never opens.
  A call that is answered somewhere later stays *open* until its answer; a
  call that is never answered is *unanswered*.
* A new group starts at a user message while no (answered-later) call is
  open, and wherever the history switches between system and non-system
  messages. So leading system messages form their own group, and a tool
  result that arrives after an intervening user message stays in its call's
  group.
* A group is `closed` unless it holds an unanswered call or is the last group
  (the one holding the current request, the last message).
* A group is `protected` when any of its messages is (system, signed
  reasoning, checkpoints: whatever the classifier reports), when it holds an
  unanswered call (`pending-tool-calls`), or when it is the last group
  (`current-request`).

A group is *eligible* for editing when it is closed and not protected.

Edit rules (`validate_edit`)
----------------------------
A processor's result is checked before anything is sent; a violation is a
`HistoryProcessingValidationError` naming the processor and the offending
group or message:

* the result is a non-empty sequence of native messages (serialized dicts are
  rejected unless dicts are the native type);
* every ineligible group (system messages, checkpoints, signed reasoning,
  unanswered calls, the current group) comes back exactly, once, in its
  original order, and the current group comes back last;
* an eligible group is kept whole or not at all; it may move, but only within
  its stretch between two ineligible groups;
* anything else must be new text-only user/assistant messages (a replacement
  such as a summary) that reproduce no message of a group they do not keep
  whole, so redacting one message of a group is rejected;
* returning the input, or an equal sequence, is a no-op (`rewritten=False`).

Retained messages come back as the original objects (never the processor's
copies, which it may have edited in place); replacements are copied, so the
processor keeps no handle on what the lane stores.

Cost: grouping is linear in the number of messages, and so is validation
when the classifier supplies `MessageInfo.fingerprint` (candidates are looked
up by it and confirmed with `Classifier.same`).
"""

from __future__ import annotations

import zlib
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from kedi.errors import HistoryProcessingError, HistoryProcessingValidationError
from kedi.history.messages import Message
from kedi.history.trimming import estimate_tokens

__all__ = [
    "CHECKPOINT",
    "CURRENT_REQUEST",
    "CheckedEdit",
    "Classifier",
    "Group",
    "InfoRole",
    "MessageInfo",
    "PENDING_TOOL_CALLS",
    "PORTABLE",
    "SIGNED_THINKING",
    "SIGNED_TOOL_CALL",
    "SYSTEM",
    "copy_messages",
    "group_messages",
    "groups_from_infos",
    "validate_edit",
]

InfoRole = Literal["system", "user", "assistant", "tool", "other"]

# Protection reasons. Classifiers may report others; these are the ones kedi names.
SYSTEM = "system"
"""A system/instruction message."""
SIGNED_THINKING = "signed-thinking"
"""A reasoning block the provider signed (or encrypted) and needs back unchanged."""
SIGNED_TOOL_CALL = "signed-tool-call"
"""A tool call carrying a provider signature that must be sent back unchanged."""
CHECKPOINT = "checkpoint"
"""A provider compaction checkpoint."""
PENDING_TOOL_CALLS = "pending-tool-calls"
"""Set by grouping: the group holds a call that is never answered."""
CURRENT_REQUEST = "current-request"
"""Set by grouping: the last group, holding the current request."""
CALL_IN_PROGRESS = "call-in-progress"
"""Messages the running call has added so far (framework adapters mark them)."""


@dataclass(frozen=True, slots=True)
class MessageInfo:
    """What grouping and validation need to know about one native message."""

    role: InfoRole
    """Who speaks; `other` for messages that fit no role (they join the current group)."""
    opens: tuple[str, ...] = ()
    """Ids of the tool calls this message opens (empty ids are ignored)."""
    answers: tuple[str, ...] = ()
    """Ids of the tool calls this message answers."""
    protected: tuple[str, ...] = ()
    """Why this message must be kept exactly (e.g. `SYSTEM`, `SIGNED_THINKING`); empty if not."""
    is_text_only: bool = False
    """Whether the message is plain text: no tool traffic, media, reasoning or provider records."""
    fingerprint: Hashable = field(default=None, compare=False)
    """A cheap hashable digest, equal for messages `Classifier.same` calls equal.

    Validation looks candidates up by it, so a good one (e.g. role plus text)
    keeps validation linear; None for every message is correct but slower.
    """

    @property
    def is_summary_text(self) -> bool:
        """Whether the message may stand in a replacement group (text-only user/assistant)."""
        return (
            self.role in ("user", "assistant")
            and self.is_text_only
            and not (self.opens or self.answers or self.protected)
        )


class Classifier(Protocol):
    """Describes one framework's native message type to grouping and validation.

    Keep implementations cheap: `info` and `same` run on every message of every
    processed request. An adapter module implements this once for its type. A
    native message that mixes system content with a user prompt (a Pydantic AI
    `ModelRequest` holding both parts) reports role `user` with `SYSTEM` among
    its protection reasons, so it starts a protected group of its own.
    """

    native_name: str
    """How errors name the native type, e.g. `"kedi Message"`."""

    def accepts(self, obj: object) -> bool:
        """Whether `obj` is a native message of this framework (a dict is not, unless dicts are native)."""
        ...

    def info(self, message: Any) -> MessageInfo:
        """Classify one native message."""
        ...

    def same(self, a: Any, b: Any) -> bool:
        """Whether two native messages are structurally equal (everything that is sent or stored)."""
        ...

    def copy(self, messages: Sequence[Any]) -> list[Any]:
        """Independent copies of `messages`: editing a copy must never change the original."""
        ...

    def estimate_tokens(self, messages: Sequence[Any]) -> int:
        """A conservative, deterministic token estimate of `messages`, additive over messages."""
        ...


@dataclass(frozen=True, slots=True)
class Group:
    """One atomic editing range: `messages[entry_start:entry_end]`."""

    group_id: str
    """Deterministic: the group's ordinal and start plus a checksum of its shape (roles, call ids).

    Stable for an unchanged prefix of the history; not a hash of the text.
    """
    entry_start: int
    """Index of the group's first message."""
    entry_end: int
    """Index just past the group's last message (half-open)."""
    closed: bool
    """The cycle is complete: every call is answered and it is not the current group."""
    protected: bool
    """The group must come back exactly and in place (see `protected_reasons`)."""
    protected_reasons: tuple[str, ...]
    """Why the group is protected, in first-seen order; empty if it is not."""

    @property
    def eligible(self) -> bool:
        """Whether a processor may drop, reorder or replace the group (closed and unprotected)."""
        return self.closed and not self.protected

    @property
    def size(self) -> int:
        """How many messages the group holds."""
        return self.entry_end - self.entry_start

    def describe(self) -> str:
        """A short label for error messages: id, message range and protection reasons."""
        last = self.entry_end - 1
        where = (
            f"message {self.entry_start}"
            if last == self.entry_start
            else f"messages {self.entry_start}-{last}"
        )
        reasons = f", {', '.join(self.protected_reasons)}" if self.protected_reasons else ""
        return f"group {self.group_id} ({where}{reasons})"


def _answer_positions(infos: Sequence[MessageInfo]) -> list[list[int | None]]:
    """For each message, for each call it opens: the index of its answer, or None."""
    answers: list[list[int | None]] = [[None] * len(info.opens) for info in infos]
    open_calls: dict[str, list[tuple[int, int]]] = {}
    for index, info in enumerate(infos):
        for call_id in info.answers:
            waiting = open_calls.get(call_id)
            if waiting:
                # C3: a result closes the nearest earlier open call with its id.
                opener, slot = waiting.pop()
                answers[opener][slot] = index
        for slot, call_id in enumerate(info.opens):
            if call_id:
                open_calls.setdefault(call_id, []).append((index, slot))
    return answers


def _group_id(ordinal: int, start: int, end: int, infos: Sequence[MessageInfo]) -> str:
    # Derived from position and shape (roles, call ids), not from the text: hashing
    # native messages would cost more than grouping itself on every request.
    shape = ";".join(
        f"{info.role}:{','.join(info.opens)}:{','.join(info.answers)}" for info in infos[start:end]
    )
    return f"g{ordinal}@{start}-{zlib.crc32(shape.encode()):08x}"


def groups_from_infos(infos: Sequence[MessageInfo]) -> list[Group]:
    """Group messages already classified, one `MessageInfo` per message."""
    answers = _answer_positions(infos)
    bounds: list[tuple[int, int, bool]] = []  # (start, end, has an unanswered call)
    start, reach, unanswered = 0, -1, False
    for index, info in enumerate(infos):
        if index > start and reach < index:
            starts_system = infos[start].role == "system"
            if info.role == "user" or (info.role == "system") != starts_system:
                bounds.append((start, index, unanswered))
                start, unanswered = index, False
        for answer in answers[index]:
            if answer is None:
                unanswered = True
            else:
                reach = max(reach, answer)
    if infos:
        bounds.append((start, len(infos), unanswered))
    groups = []
    for ordinal, (first, end, pending) in enumerate(bounds):
        is_last = end == len(infos)
        reasons = dict.fromkeys(reason for info in infos[first:end] for reason in info.protected)
        if pending:
            reasons[PENDING_TOOL_CALLS] = None
        if is_last:
            reasons[CURRENT_REQUEST] = None
        groups.append(
            Group(
                group_id=_group_id(ordinal, first, end, infos),
                entry_start=first,
                entry_end=end,
                closed=not (pending or is_last),
                protected=bool(reasons),
                protected_reasons=tuple(reasons),
            )
        )
    return groups


def group_messages(messages: Sequence[Any], classifier: Classifier) -> list[Group]:
    """Cut native `messages` into lifecycle groups (see the module docs for the rules)."""
    return groups_from_infos([classifier.info(message) for message in messages])


# --------------------------------------------------------------------------- edit validation


@dataclass(frozen=True, slots=True)
class CheckedEdit:
    """A validated processor result: the history to send."""

    messages: Sequence[Any]
    """The input sequence itself when `rewritten` is false."""
    origins: tuple[int | None, ...]
    """`origins[i]`: the input index of `messages[i]`, or None for a replacement message."""
    rewritten: bool
    """Whether the result differs from the input."""


def copy_messages(classifier: Classifier, messages: Sequence[Any], processor: str) -> list[Any]:
    """`classifier.copy(messages)`; a failure is a `HistoryProcessingError` naming `processor`."""
    try:
        return classifier.copy(messages)
    except Exception as error:
        raise HistoryProcessingError(
            f"copying the history for history processor {processor} failed: {type(error).__name__}: {error}"
        ) from error


class _EditValidator:
    """Matches one processor result against the groups of its input (single use).

    Candidates are looked up by `MessageInfo.fingerprint` and `same` decides,
    so matching stays linear however many messages a processor replaces.
    """

    def __init__(
        self,
        result: Any,
        originals: Sequence[Any],
        infos: Sequence[MessageInfo],
        groups: Sequence[Group],
        classifier: Classifier,
        name: str,
    ) -> None:
        self.result = result
        self.originals = originals
        self.infos = infos
        self.groups = groups
        self.classifier = classifier
        self.name = name
        self.used = [False] * len(groups)
        self.fixed = [k for k, group in enumerate(groups) if not group.eligible]
        # stretch[k]: how many ineligible groups precede group k; group_of[i]: message i's group.
        self.stretch: list[int] = []
        self.group_of: list[int] = []
        passed = 0
        for k, group in enumerate(groups):
            self.stretch.append(passed)
            passed += not group.eligible
            self.group_of.extend([k] * group.size)
        self.by_fingerprint: dict[Hashable, list[int]] = {}
        for index, info in enumerate(infos):
            self.by_fingerprint.setdefault(info.fingerprint, []).append(index)
        self.result_infos: list[MessageInfo] = []

    def invalid(self, problem: str) -> HistoryProcessingValidationError:
        """The error for `problem`, naming the processor."""
        return HistoryProcessingValidationError(
            f"history processor {self.name} returned an invalid history: {problem}"
        )

    def check(self) -> CheckedEdit:
        """Validate the result; return the history to send."""
        result = self._shape()
        same = self.classifier.same
        if len(result) == len(self.originals) and all(map(same, result, self.originals)):
            return CheckedEdit(self.originals, tuple(range(len(result))), rewritten=False)
        body = self._check_current(result)
        self.result_infos = [self.classifier.info(message) for message in result]
        segments = self._segment(result, body)
        self._check_fixed_present()
        self._check_foreign(segments)
        self._check_order(segments)
        self._check_reproductions(segments)
        return self._assemble(result, segments)

    def _shape(self) -> Sequence[Any]:
        result = self.result
        native = self.classifier.native_name
        if result is None:
            raise self.invalid(
                "it returned None; return the messages to send (`ctx.messages` keeps them all)"
            )
        if isinstance(result, (str, bytes, bytearray, Mapping)) or not isinstance(result, Sequence):
            raise self.invalid(
                f"it returned a {type(result).__name__}, not a list or tuple of {native} objects"
            )
        if not result:
            raise self.invalid(
                "it returned no messages; the current request must always come back, last"
            )
        for index, message in enumerate(result):
            if not self.classifier.accepts(message):
                hint = (
                    " (serialized dicts are rejected; return native messages)"
                    if isinstance(message, Mapping)
                    else ""
                )
                raise self.invalid(
                    f"message {index} is a {type(message).__name__}, not a {native}{hint}"
                )
        return result

    def _check_current(self, result: Sequence[Any]) -> int:
        """Check the current group closes the result; return where it starts."""
        current = self.groups[-1]
        start = len(result) - current.size
        if not self.classifier.same(result[-1], self.originals[-1]):
            raise self.invalid(
                "the current request (the last message) must come back exactly, as the last message"
            )
        if start < 0 or not self._matches(result, start, current, len(result)):
            raise self.invalid(f"the current {current.describe()} must come back whole, at the end")
        self.used[-1] = True
        return start

    def _matches(self, result: Sequence[Any], start: int, group: Group, end: int) -> bool:
        """Whether `group` occurs whole at `result[start:end]`."""
        if start + group.size > end:
            return False
        same, originals = self.classifier.same, self.originals
        return all(
            same(result[start + i], originals[group.entry_start + i]) for i in range(group.size)
        )

    def _origins(self, position: int) -> list[int]:
        """Indices of the input messages equal to result message `position`, in input order."""
        candidates = self.by_fingerprint.get(self.result_infos[position].fingerprint, ())
        message = self.result[position]
        return [i for i in candidates if self.classifier.same(message, self.originals[i])]

    def _segment(self, result: Sequence[Any], body: int) -> list[tuple[int, int | None]]:
        """Split `result` into (start, group index) runs; None marks a single unmatched message.

        Among equal candidates the first group at or after the last match wins,
        so a result that keeps its groups in order matches them in order and
        duplicate content resolves to the group nearest its old place.
        """
        segments: list[tuple[int, int | None]] = []
        cursor = index = 0
        while index < body:
            starts = [
                self.group_of[i]
                for i in self._origins(index)
                if self.groups[self.group_of[i]].entry_start == i
            ]
            found = next(
                (
                    k
                    for k in sorted(starts, key=lambda k: (k < cursor, k))
                    if not self.used[k] and self._matches(result, index, self.groups[k], body)
                ),
                None,
            )
            segments.append((index, found))
            if found is None:
                index += 1
            else:
                self.used[found] = True
                cursor = found + 1
                index += self.groups[found].size
        segments.append((body, len(self.groups) - 1))
        return segments

    def _check_fixed_present(self) -> None:
        for k in self.fixed:
            if not self.used[k]:
                group = self.groups[k]
                raise self.invalid(
                    f"the protected {group.describe()} was removed or altered; it must come back exactly"
                )

    def _partial(self, position: int, origin: int) -> str:
        group = self.groups[self.group_of[origin]]
        kind = "an orphan tool result" if self.infos[origin].answers else "a message"
        return (
            f"message {position} is {kind} taken from {group.describe()} (input message {origin}), "
            "but that group is not kept whole (partial lifecycle group); keep all of its messages "
            "in order, or replace the whole group with new text-only user/assistant messages"
        )

    def _check_foreign(self, segments: list[tuple[int, int | None]]) -> None:
        """Reject unmatched messages that are not text-only user/assistant messages."""
        for position, k in segments:
            info = self.result_infos[position]
            if k is not None or info.is_summary_text:
                continue
            origins = self._origins(position)
            if not origins:
                raise self.invalid(self._foreign_problem(position, info))
            dropped = [i for i in origins if not self.used[self.group_of[i]]]
            if dropped:
                raise self.invalid(self._partial(position, dropped[0]))
            group = self.groups[self.group_of[origins[0]]]
            raise self.invalid(
                f"message {position} repeats input message {origins[0]}, already kept in "
                f"{group.describe()}; tool traffic and protected records may appear only once"
            )

    @staticmethod
    def _foreign_problem(position: int, info: MessageInfo) -> str:
        if info.protected:
            reasons = ", ".join(info.protected)
            return f"message {position} is a {reasons} record that is not in the input (fabricated provider or checkpoint record)"
        if info.answers:
            calls = ", ".join(repr(call) for call in info.answers)
            return f"message {position} is a tool result for call {calls} that belongs to no retained group (orphan tool result)"
        if info.opens:
            calls = ", ".join(repr(call) for call in info.opens)
            return (
                f"message {position} opens tool call {calls}, which is not in the input; "
                "replacement messages must be text-only user/assistant messages"
            )
        return (
            f"message {position} ({info.role}) is not in the input and is not a text-only "
            "user/assistant message, the only kind a replacement may hold"
        )

    def _check_order(self, segments: list[tuple[int, int | None]]) -> None:
        passed = 0  # ineligible groups seen so far
        for position, k in segments:
            if k is None:
                continue
            group = self.groups[k]
            if not group.eligible:
                if k != self.fixed[passed]:
                    expected = self.groups[self.fixed[passed]]
                    raise self.invalid(
                        f"message {position} starts {group.describe()}, but {expected.describe()} "
                        "must come first: protected groups keep their order"
                    )
                passed += 1
            elif self.stretch[k] != passed:
                boundary = self.groups[self.fixed[min(self.stretch[k], passed)]]
                raise self.invalid(
                    f"{group.describe()} was moved across the protected {boundary.describe()}; "
                    "retained groups may be reordered only between protected groups"
                )

    def _check_reproductions(self, segments: list[tuple[int, int | None]]) -> None:
        """Reject replacement text that copies a message of a group not kept whole."""
        for position, k in segments:
            if k is not None:
                continue
            dropped = [i for i in self._origins(position) if not self.used[self.group_of[i]]]
            if dropped:
                raise self.invalid(self._partial(position, dropped[0]))

    def _assemble(
        self, result: Sequence[Any], segments: list[tuple[int, int | None]]
    ) -> CheckedEdit:
        replacements = iter(
            copy_messages(self.classifier, [result[p] for p, k in segments if k is None], self.name)
        )
        messages: list[Any] = []
        origins: list[int | None] = []
        for _, k in segments:
            if k is None:
                messages.append(next(replacements))
                origins.append(None)
            else:
                group = self.groups[k]
                messages.extend(self.originals[group.entry_start : group.entry_end])
                origins.extend(range(group.entry_start, group.entry_end))
        return CheckedEdit(messages, tuple(origins), rewritten=True)


def validate_edit(
    result: Any,
    originals: Sequence[Any],
    infos: Sequence[MessageInfo],
    groups: Sequence[Group],
    classifier: Classifier,
    processor: str,
) -> CheckedEdit:
    """Check a processor's `result` against its input and return the history to send.

    `originals` are the messages the processor was given copies of, `infos`
    and `groups` their classification and grouping. Retained messages come
    back as the original objects and replacements as copies. Raises
    `HistoryProcessingValidationError` naming `processor` and the offending
    group or message (see `kedi.history.processors` for the rules).
    """
    return _EditValidator(result, originals, infos, groups, classifier, processor).check()


# --------------------------------------------------------------------------- portable messages


class _PortableClassifier:
    """The `Classifier` of kedi's portable `Message`."""

    native_name = "kedi Message"

    def accepts(self, obj: object) -> bool:
        """Whether `obj` is a `Message`."""
        return isinstance(obj, Message)

    def info(self, message: Message) -> MessageInfo:
        """Classify a portable message."""
        key = (message.role, message.content, message.tool_call_id)
        if message.role == "system":
            return MessageInfo("system", protected=(SYSTEM,), is_text_only=True, fingerprint=key)
        if message.role == "tool":
            return MessageInfo("tool", answers=(message.tool_call_id,), fingerprint=key)
        if message.role == "user":
            return MessageInfo("user", is_text_only=not message.parts, fingerprint=key)
        reasons = []
        # Redacted (encrypted) reasoning is as provider-bound as a signed block.
        if any(block.signature or block.redacted for block in message.thinking):
            reasons.append(SIGNED_THINKING)
        if any(call.signature for call in message.tool_calls):
            reasons.append(SIGNED_TOOL_CALL)
        return MessageInfo(
            "assistant",
            opens=tuple(call.id for call in message.tool_calls if call.id),
            protected=tuple(reasons),
            is_text_only=not (message.tool_calls or message.thinking),
            fingerprint=key,
        )

    def same(self, a: Any, b: Any) -> bool:
        """Field-by-field equality of two `Message`s (stamps included)."""
        return type(a) is Message and type(b) is Message and a == b

    def copy(self, messages: Sequence[Message]) -> list[Message]:
        """Copies with fresh lists.

        Messages and their parts, calls and thinking blocks are frozen, so only
        the lists holding them can be edited; giving each copy new lists is as
        safe as a deep copy at a quarter of the cost.
        """
        return [
            message.model_copy(
                update={
                    "parts": list(message.parts),
                    "tool_calls": list(message.tool_calls),
                    "thinking": list(message.thinking),
                }
            )
            for message in messages
        ]

    def estimate_tokens(self, messages: Sequence[Message]) -> int:
        """`kedi.history.estimate_tokens`."""
        return estimate_tokens(messages)


PORTABLE: Classifier = _PortableClassifier()
"""The classifier of kedi's portable `Message` (native and offline adapters)."""
