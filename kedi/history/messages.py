r"""Portable history messages: the C1 JSON contract.

`Message`, `ToolCall`, `Part` and `ThinkingBlock` are frozen pydantic models.
Python attributes are snake_case; JSON keys are lowerCamel. Dump with
`Message.to_json_dict()` (or `model_dump(mode="json", by_alias=True,
exclude_defaults=True)` / `model_dump_json(by_alias=True,
exclude_defaults=True)`); every field except `role` is omitted when empty.
Input accepts either spelling and ignores unknown keys, so the format can grow
(fields are only ever added).

Messages are frozen because lanes are append-only: a committed message is
shared by every later request and snapshot, so nobody may edit it in place.
Derive a changed message with `model_copy(update=...)`.

Tool-call arguments (the `args` rule)
-------------------------------------
In Python, `ToolCall.args` is the raw text the model produced, byte for byte,
so truncated or malformed arguments survive. A dict, list or other JSON value
given as `args` is stored as compact JSON text
(`json.dumps(value, separators=(",", ":"), ensure_ascii=False)`).

In JSON, `args` is written as:

* a JSON value (object, array, number, ...) when the raw text is strict JSON,
  is not a JSON string, and is already in that compact canonical form, i.e.
  reading the value back reproduces the raw text exactly;
* otherwise a JSON string holding the raw text verbatim (truncated text,
  text with other spacing, a JSON string literal such as `"\"hi\""`).

Reading applies one rule: a JSON string is the raw text itself; any other
value becomes its compact JSON text. Hence `load(dump(m)) == m` for every
message, and `dump(load(d))` equals `d` up to JSON equality (a string holding
canonical JSON is re-emitted as the value it denotes).

Invalid input raises `kedi.errors.HistoryError` (a `ValueError`) naming the
offending field, never a bare pydantic `ValidationError`.
"""

from __future__ import annotations

import base64
import binascii
import gc
import json
import sys
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

from kedi.errors import HistoryError

__all__ = [
    "INTERRUPTED_RESULT",
    "Message",
    "Part",
    "Role",
    "ThinkingBlock",
    "ToolCall",
    "as_messages",
    "collector_paused",
    "history_tail",
    "interrupted_result",
    "is_truncated_args",
    "iter_messages",
    "pairing_summary",
    "wire_tool_arguments",
]

Role = Literal["system", "user", "assistant", "tool"]
PartKind = Literal["image", "document", "audio", "video"]

INTERRUPTED_RESULT = (
    "Tool call was interrupted before execution; no result was produced. "
    "Call the tool again if you need its result."
)
"""Content of the tool result that closes a call which never ran (C1)."""

_MISSING = object()


# --------------------------------------------------------------------------- strict JSON


def _reject_constant(name: str) -> Any:
    # Python's json accepts NaN/Infinity by default; strict JSON does not.
    raise ValueError(f"{name} is not JSON")


# One decoder for every parse: `json.loads(..., parse_constant=...)` would build
# a new decoder (and scanner) per call, which dominates repair time.
_STRICT_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _parse_strict_json(text: str) -> Any:
    """Parse `text` as strict JSON (no NaN/Infinity); return `_MISSING` if it is not JSON."""
    try:
        return _STRICT_DECODER.decode(text)
    except ValueError:  # JSONDecodeError is a ValueError too
        return _MISSING


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _json_object(raw: str) -> dict[str, Any] | None:
    """The object `raw` denotes after trimming, or None if it is not a strict JSON object."""
    text = raw.strip()
    # A cheap first test keeps the common truncated case (cut mid-object) off the parser.
    if not (text.startswith("{") and text.endswith("}")):
        return None
    value = _parse_strict_json(text)
    return value if isinstance(value, dict) else None


def is_truncated_args(raw: str) -> bool:
    """Whether raw tool-call args are truncated: non-empty after trimming and not a JSON object."""
    return bool(raw.strip()) and _json_object(raw) is None


def wire_tool_arguments(raw: str) -> dict[str, Any]:
    """Turn stored raw args into the object sent to a provider (C4).

    Empty or whitespace-only text is `{}`; a strict JSON object is that object;
    anything else is wrapped as `{"truncated_args": raw}` (the untrimmed text),
    so a run never fails on truncated arguments and replays stay deterministic.
    """
    if not raw.strip():
        return {}
    value = _json_object(raw)
    return value if value is not None else {"truncated_args": raw}


_collector_lock = threading.Lock()
_collector_pauses = 0
_collector_was_enabled = False


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while building many acyclic objects.

    Building a long history (a million messages from a saved document) makes
    the collector scan every message built so far again and again: two thirds
    of the loading time. Messages hold no reference cycles, so nothing is lost
    by waiting. Nested and concurrent pauses are counted; the collector is
    switched back on when the last one ends, and only if it was on before.
    """
    global _collector_pauses, _collector_was_enabled
    with _collector_lock:
        if _collector_pauses == 0:
            _collector_was_enabled = gc.isenabled()
            gc.disable()
        _collector_pauses += 1
    try:
        yield
    finally:
        with _collector_lock:
            _collector_pauses -= 1
            if _collector_pauses == 0 and _collector_was_enabled:
                gc.enable()


# --------------------------------------------------------------------------- models


@contextmanager
def _as_history_error(model: type[BaseModel]) -> Iterator[None]:
    try:
        yield
    except ValidationError as error:
        problems = []
        for item in error.errors(include_url=False):
            where = ".".join(str(piece) for piece in item["loc"])
            message = item["msg"].removeprefix("Value error, ")
            problems.append(f"{where}: {message}" if where else message)
        raise HistoryError(f"invalid {model.__name__}: " + "; ".join(problems)) from None


_FIELD_SETS: dict[frozenset[str], set[str]] = {}
"""One shared fields-set per combination of given fields (a model has at most 10 fields: 1,024)."""


def _share_fields_set(model: BaseModel) -> None:
    """Point `model` at the shared set equal to its fields-set (about 200 bytes saved per instance).

    A frozen model never changes its set in place, and `model_copy` gives the
    copy a set of its own, so sharing is invisible.
    """
    given = model.__pydantic_fields_set__
    object.__setattr__(
        model, "__pydantic_fields_set__", _FIELD_SETS.setdefault(frozenset(given), given)
    )


class _PortableModel(BaseModel):
    """Shared configuration; turns validation failures into `HistoryError`."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="ignore",
    )

    # Hidden from type checkers so they keep the field-derived signatures.
    if not TYPE_CHECKING:

        def __init__(self, **data: Any) -> None:
            with _as_history_error(type(self)):
                super().__init__(**data)

        # Tells pydantic this __init__ only wraps the base one, so nested and
        # `model_validate` validation stay in pydantic-core (fast, wrapped once).
        __init__.__pydantic_base_init__ = True

        @classmethod
        def model_validate(cls, *args: Any, **kwargs: Any) -> Any:
            with _as_history_error(cls):
                return super().model_validate(*args, **kwargs)

        @classmethod
        def model_validate_json(cls, *args: Any, **kwargs: Any) -> Any:
            with _as_history_error(cls):
                return super().model_validate_json(*args, **kwargs)

    def to_json_dict(self) -> dict[str, Any]:
        """The C1 JSON form: lowerCamel keys, empty fields omitted."""
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True)


def _empty_to_none(value: Any) -> Any:
    # "" and None both mean "absent", so only one of them can reach the JSON form.
    return None if value == "" else value


def _args_from_json(value: Any) -> Any:
    return value if isinstance(value, str) else _compact(value)


def _args_to_json(raw: str) -> Any:
    value = _parse_strict_json(raw)
    if value is _MISSING or isinstance(value, str) or _compact(value) != raw:
        return raw
    return value


# Annotated rather than field_serializer: a field_serializer defeats
# `exclude_defaults` in pydantic 2.13, which would write `"args": ""`.
RawArgs = Annotated[
    str, BeforeValidator(_args_from_json), PlainSerializer(_args_to_json, when_used="json")
]
"""Raw tool-call argument text; JSON form per the module docs."""


class ToolCall(_PortableModel):
    """One tool call requested by an assistant message."""

    id: str
    """The provider's call id; a call with an empty id never opens (C3)."""
    name: str
    """The tool's name."""
    args: RawArgs = ""
    """The raw argument text, exactly as the model produced it (see module docs)."""
    signature: str | None = None
    """An opaque provider signature that must be sent back unchanged."""

    @field_validator("signature", mode="before")
    @classmethod
    def _signature_empty(cls, value: Any) -> Any:
        return _empty_to_none(value)

    @model_validator(mode="after")
    def _shared(self) -> ToolCall:
        _share_fields_set(self)
        return self

    @property
    def truncated(self) -> bool:
        """Whether `args` is truncated (non-empty and not a strict JSON object)."""
        return is_truncated_args(self.args)


class Part(_PortableModel):
    """Non-text content of a user or tool message: exactly one of `url` or `data`."""

    kind: PartKind
    """What the content is."""
    url: str | None = None
    """Where the content lives (sanitize keeps only http/https URLs)."""
    data: str | None = None
    """The content inline, base64-encoded; needs `media_type`."""
    media_type: str | None = None
    """The MIME type, e.g. `image/png`."""

    @field_validator("url", "data", "media_type", mode="before")
    @classmethod
    def _empty(cls, value: Any) -> Any:
        return _empty_to_none(value)

    @model_validator(mode="after")
    def _check(self) -> Part:
        _share_fields_set(self)
        if (self.url is None) == (self.data is None):
            raise HistoryError(f"a part of kind {self.kind!r} needs exactly one of url or data")
        if self.data is not None:
            if self.media_type is None:
                raise HistoryError(
                    f"a part of kind {self.kind!r} with inline data needs a mediaType"
                )
            try:
                base64.b64decode(self.data, validate=True)
            except (binascii.Error, ValueError):
                raise HistoryError(
                    f"the data of a part of kind {self.kind!r} is not valid base64"
                ) from None
        return self


class ThinkingBlock(_PortableModel):
    """A reasoning block of an assistant message, kept for providers that need it back."""

    text: str | None = None
    """Readable reasoning text."""
    signature: str | None = None
    """The provider's signature over the block."""
    redacted: str | None = None
    """Opaque (encrypted) reasoning, sent back as is."""

    @field_validator("text", "signature", "redacted", mode="before")
    @classmethod
    def _empty(cls, value: Any) -> Any:
        return _empty_to_none(value)

    @model_validator(mode="after")
    def _check(self) -> ThinkingBlock:
        _share_fields_set(self)
        if self.text is None and self.signature is None and self.redacted is None:
            raise HistoryError("a thinking block needs text, signature or redacted")
        if self.text is not None and self.redacted is not None:
            raise HistoryError("a thinking block is either readable text or redacted, not both")
        return self


class _EmptyList(list[Any]):
    """The one shared, unchangeable empty list: the default of `Message`'s list fields.

    A message without parts, tool calls or thinking (nearly every message)
    points at this one object instead of three new lists of its own, which
    saves about 170 bytes and three objects the garbage collector would scan,
    per message. It is still a `list` equal to `[]`; changing it raises, as
    changing any field of a frozen message should.
    """

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(
            "a message's empty default list cannot be changed; use model_copy(update=...)"
        )

    append = extend = insert = remove = pop = clear = sort = reverse = _refuse
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _refuse

    def __copy__(self) -> _EmptyList:
        return self

    def __deepcopy__(self, memo: Any) -> _EmptyList:
        return self

    def __reduce__(self) -> str:
        return "_EMPTY_LIST"  # unpickles as the module's shared instance


_EMPTY_LIST = _EmptyList()


def _empty_list() -> list[Any]:
    """The shared empty list (see `_EmptyList`).

    A Python function rather than a lambda or the builtin `list`, because
    pydantic reads a default factory's signature, and for a builtin that means
    tokenizing its text signature: 15 million instructions, about 1% of a
    `kedi run` start.
    """
    return _EMPTY_LIST


# Which role may carry which optional field (C1); checked on every message.
_ROLE_FIELDS: tuple[tuple[str, str, frozenset[str]], ...] = (
    ("parts", "parts", frozenset({"user", "tool"})),
    ("tool_calls", "toolCalls", frozenset({"assistant"})),
    ("thinking", "thinking", frozenset({"assistant"})),
    ("tool_call_id", "toolCallId", frozenset({"tool"})),
    ("tool_name", "toolName", frozenset({"tool"})),
    ("failed", "failed", frozenset({"tool"})),
)


_ANY_ROLE_FIELDS = frozenset({"role", "content", "run_id", "conversation_id"})
"""Fields every role may carry."""


PairingSummary = str | tuple[Any, ...] | None
"""What the pairing walk (C3) reads of a message; see `pairing_summary`."""


class Message(_PortableModel):
    """One portable history message (C1)."""

    __slots__ = ("_pairing",)  # see `pairing_summary`; a slot, not a field

    role: Role
    """Who speaks: system, user, assistant or tool."""
    content: str = ""
    """The text (for a failed tool result: the reason)."""
    parts: list[Part] = Field(default_factory=_empty_list)
    """Non-text content; user and tool messages only."""
    tool_calls: list[ToolCall] = Field(default_factory=_empty_list)
    """Calls the assistant requested; assistant messages only."""
    tool_call_id: str = ""
    """Tool messages: the id of the call answered."""
    tool_name: str = ""
    """Tool messages: the name of the call answered."""
    failed: bool = False
    """Tool messages: the tool failed definitively (`content` is the reason)."""
    thinking: list[ThinkingBlock] = Field(default_factory=_empty_list)
    """Reasoning blocks; assistant messages only."""
    run_id: str = ""
    """The run that recorded the message (metadata, never sent to a provider)."""
    conversation_id: str = ""
    """The conversation the message belongs to (metadata, never sent)."""

    @field_validator("content", mode="before")
    @classmethod
    def _content_null(cls, value: Any) -> Any:
        # OpenAI-style dicts carry `"content": null` on assistant tool-call turns.
        return "" if value is None else value

    @model_validator(mode="after")
    def _check_roles(self) -> Message:
        _share_fields_set(self)
        if self.__pydantic_fields_set__ <= _ANY_ROLE_FIELDS:
            # The common message (text, ids): nothing role-specific to check,
            # and it opens no call (a tool result without an id answers none).
            object.__setattr__(self, "_pairing", "" if self.role == "tool" else None)
            return self
        for attribute, key, roles in _ROLE_FIELDS:
            if getattr(self, attribute) and self.role not in roles:
                allowed = " and ".join(sorted(roles))
                raise HistoryError(
                    f"{key} is only allowed on {allowed} messages, not on {self.role}"
                )
        object.__setattr__(self, "_pairing", _summarize_pairing(self))
        return self


def _interned(text: str) -> str:
    return sys.intern(text) if type(text) is str else text


def _summarize_pairing(message: Message) -> PairingSummary:
    if message.role == "tool":
        return _interned(message.tool_call_id)
    opened: list[Any] = []
    if message.role == "assistant":
        for call in message.tool_calls:
            if call.id:  # a call with an empty id never opens (C3)
                opened += (_interned(call.id), is_truncated_args(call.args), call)
    return tuple(opened) if opened else None


def pairing_summary(message: Message) -> PairingSummary:
    """All the tool-call pairing walk (C3) needs of `message`, computed once per message.

    A tool result's summary is the id of the call it answers; an assistant
    message with calls has a flat tuple `(id, truncated, call, id, truncated,
    call, ...)` of the calls that open (non-empty id, in order); any other
    message has None. Ids are interned, so matching a result to its call is
    an identity test.

    Validation stores it in the message (a slot, outside the fields), so the
    walk over a long history reads one attribute of the message object
    instead of following its field dict, lists and calls: a message is
    frozen, so the summary cannot go stale. A message built without
    validation (`model_copy`, `model_construct`, unpickling) gets it here, on
    first use.
    """
    try:
        return message._pairing  # type: ignore[attr-defined]  # the slot
    except AttributeError:
        summary = _summarize_pairing(message)
        object.__setattr__(message, "_pairing", summary)
        return summary


def interrupted_result(call: ToolCall, *, run_id: str = "", conversation_id: str = "") -> Message:
    """The tool result closing `call`, which never ran (C1); unstamped unless ids are given."""
    if run_id or conversation_id or type(call.id) is not str or type(call.name) is not str:
        return Message(
            role="tool",
            content=INTERRUPTED_RESULT,
            tool_call_id=call.id,
            tool_name=call.name,
            run_id=run_id,
            conversation_id=conversation_id,
        )
    # Repair closes every open call of a history this way: copy a validated
    # result and set two strings a validated call holds, 10x faster than
    # validating each result (which was two thirds of `normalize_history`).
    # The copy has what validation would give it (tests compare the two).
    result = Message.__new__(Message)
    fields = (_unstamped_fields or _untracked_unstamped_fields()).copy()
    fields["tool_call_id"] = call.id
    fields["tool_name"] = call.name
    object.__setattr__(result, "__dict__", fields)
    object.__setattr__(result, "__pydantic_fields_set__", _UNSTAMPED_INTERRUPTED.model_fields_set)
    object.__setattr__(result, "__pydantic_extra__", None)
    object.__setattr__(result, "__pydantic_private__", None)
    object.__setattr__(result, "_pairing", _interned(call.id))
    return result


_UNSTAMPED_INTERRUPTED = Message(
    role="tool",
    content=INTERRUPTED_RESULT,
    tool_call_id="-",
    tool_name="-",
    run_id="",
    conversation_id="",
)
"""What `interrupted_result` copies for an unstamped result (built as the stamped path builds one)."""

_unstamped_fields: dict[str, Any] = {}
"""The field dict of `_UNSTAMPED_INTERRUPTED`, outside the cyclic collector; made on first use."""


def _untracked_unstamped_fields() -> dict[str, Any]:
    """Make `_unstamped_fields`: the template's fields in a dict whose copies are small and unscanned.

    Each synthesized result is a `Message` and a copy of this dict, so the
    dict decides two costs of a repair that closes many calls:

    - *Size.* A copy of an ordinary dict copies its key table too: 272
      bytes here, three quarters of a result. This one is made from the
      attributes of an instance of `_FieldsHolder`, whose key table all its
      instances share, so it and its copies hold only their values (152
      bytes): in CPython an instance's values array has room for the shared
      table's keys plus its spare slots, and each instance made takes one
      spare slot off (down to one), hence the instances made below.
    - *The cyclic collector.* CPython's collector scans every young
      container, and a dict holding a list is one, even the shared empty
      ones (`_EmptyList`): so each result was two objects to scan, and each
      scan of the dict read the call's id and name, which lie in the
      history's memory (out of the memory cache in a long one:
      bench/README.md, "Repair scaling"). A dict copy keeps its source's
      tracking, so copies of this untracked dict stay outside the collector
      until a container is stored in one, when CPython tracks the copy again
      (`model_copy(update=...)` with new parts, say). Leaving them out is
      safe: such a dict holds strings, a bool and the shared empty lists,
      which hold nothing, so it is never part of a reference cycle. Python
      has no call for this; CPython's C one is reached via ctypes, imported
      here rather than at start-up (about 2 ms).

    Elsewhere than CPython 3.11, the copies may be as large and tracked as
    before; they are equal either way (tests compare them with validation).
    """
    global _unstamped_fields
    holder = _FieldsHolder()
    for name, value in _UNSTAMPED_INTERRUPTED.__dict__.items():
        setattr(holder, name, value)
    for _ in range(_FieldsHolder.SPARE_SLOTS):
        _FieldsHolder()  # each takes a spare slot off the shared key table
    fields = vars(holder)
    if sys.implementation.name == "cpython":
        try:
            import ctypes

            ctypes.pythonapi.PyObject_GC_UnTrack(ctypes.py_object(fields))
        except (ImportError, AttributeError, OSError):  # a build without ctypes or its C API
            pass
    _unstamped_fields = fields
    return fields


class _FieldsHolder:
    """Its instances' attributes give `_untracked_unstamped_fields` a dict on a shared key table."""

    SPARE_SLOTS = 32
    """Instances to make after the keys are in: CPython 3.11 starts a shared table with 30 slots."""


def _check_history(history: object) -> None:
    if isinstance(history, (str, bytes, Mapping)) or not isinstance(history, Iterable):
        raise HistoryError(f"a history is a sequence of messages, not a {type(history).__name__}")


def _coerce(item: object, index: int) -> Message:
    """`item` (at `index` in its history) as a `Message`; dicts are validated."""
    if isinstance(item, Message):
        return item
    if isinstance(item, Mapping):
        try:
            return Message.model_validate(item)
        except HistoryError as error:
            raise HistoryError(f"history message {index}: {error}") from None
    raise HistoryError(
        f"history message {index} is a {type(item).__name__}; expected a kedi Message or a dict in the C1 shape"
    )


def iter_messages(history: Iterable[Message | Mapping[str, Any]]) -> Iterator[Message]:
    """Yield the items of `history` as `Message` objects, validating dicts on the way.

    `Message` objects are yielded as they are (they are immutable). Raises
    `HistoryError` naming the index of a bad item. Lazy, so an operation can
    coerce and process a long history in a single pass.
    """
    _check_history(history)
    for index, item in enumerate(history):
        yield _coerce(item, index)


def as_messages(history: Iterable[Message | Mapping[str, Any]]) -> list[Message]:
    """Coerce a history of `Message` objects and C1 dicts into a new list of `Message`."""
    return list(iter_messages(history))


def history_tail(
    history: Iterable[Message | Mapping[str, Any]], count: int
) -> tuple[int, list[Message]]:
    """The length of `history` and its last `count` items as `Message` objects.

    Items before the tail are not inspected, and a sequence (a list, a lane
    view) is not even copied, so trimming a long lane costs only its tail.
    """
    _check_history(history)
    items = history if isinstance(history, Sequence) else list(history)
    length = len(items)
    return length, [_coerce(items[index], index) for index in range(max(0, length - count), length)]
