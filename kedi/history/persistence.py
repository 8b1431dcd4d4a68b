"""Saving conversations as versioned JSON and loading them back.

The document (version 1) is one JSON object:

    {"version": 1,
     "conversation_id": "<id>",
     "lanes": [{"key": {"adapter": "script", "model": "replies.json",
                        "settings": "<digest>", "mcp": "", "tools": "<digest>"},
                "epoch": 0,
                "format": "portable",
                "messages": [...]}]}

- **Portable lanes** (offline, `script:`, OpenAI-compatible) hold C1 message
  JSON, readable with no adapter at all.
- **Native lanes** hold what their adapter's own serializer wrote
  (`Adapter.dump_messages`: Pydantic AI's `ModelMessagesTypeAdapter`,
  LangChain's `messages_to_dict`), and `format` names it. Loading one needs
  that adapter's module, imported lazily by the key's short name through the
  adapter registry, or an adapter given in `adapters=`.
- **No secrets**: model settings appear only as the digest in the key.
- **Additive**: readers ignore unknown keys, so later versions may add fields;
  a different `version` is refused rather than guessed at.

`save` writes a temporary file in the target's directory and moves it into
place with `os.replace`, so a reader never sees a half-written file and a
failed save leaves the old file as it was. The file is created readable by
its owner only (conversations hold user data). A failed save removes its
temporary file; one left by a killed process (its name carries the pid) is
removed by the next save to the same path once that process is gone.

**Untrusted documents** (`loads`, `load`, `load_conversation`) are refused
with `HistoryError`, never another exception: text that is not UTF-8 JSON,
nesting too deep for the parser, a wrong type anywhere (a boolean is not a
number: `"version": true` is refused), and lone surrogates (`"\\ud800"`, in
the text or as a JSON escape), which no UTF-8 file can hold. Lone surrogates
are refused, not replaced: replacing would change a message's text behind the
user's back; the error names the place. `save` refuses them the same way
before writing, so a conversation that saves always loads.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter, ValidationError

from kedi.errors import HistoryError, KediConfigError, KediUsageError
from kedi.history.lanes import PORTABLE, AdapterRegistry, Conversation, Lane, LaneKey, LaneOwner
from kedi.history.messages import Message, as_messages, collector_paused
from kedi.redaction import redact

__all__ = [
    "FORMAT_VERSION",
    "dump_conversation",
    "dump_lane_messages",
    "dumps",
    "load_lane_messages",
    "load",
    "load_conversation",
    "loads",
    "save",
    "write_atomic",
]

FORMAT_VERSION = 1
"""The version this kedi writes and the only one it reads."""

_KEY_FIELDS = ("adapter", "model", "settings", "mcp", "tools")
_KEY_DEFAULTS = {"mcp": "", "tools": ""}
"""Key fields a document may leave out (older writers, lanes without MCP or tools)."""
_NON_EMPTY = frozenset({"adapter", "settings"})
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate: paired, it is one character; alone, it is refused."""


# --------------------------------------------------------------------------- writing


def dump_conversation(
    conversation: Conversation, *, adapters: Iterable[Any] = ()
) -> dict[str, Any]:
    """The JSON-compatible document of `conversation` (every lane, empty ones too)."""
    given = tuple(adapters)
    return {
        "version": FORMAT_VERSION,
        "conversation_id": conversation.conversation_id,
        "lanes": [_dump_lane(lane, given) for lane in conversation.lanes.values()],
    }


def _dump_lane(lane: Lane, adapters: Sequence[Any]) -> dict[str, Any]:
    key = lane.key
    messages = dump_lane_messages(key, lane.messages, adapters)
    return {
        "key": {name: getattr(key, name) for name in _KEY_FIELDS},
        "epoch": lane.epoch,
        "format": key.format,
        # A store keeps no secret a message may quote (a pasted key, a bearer header).
        "messages": redact(messages),
    }


def dump_lane_messages(
    key: LaneKey, messages: Iterable[Any], adapters: Sequence[Any] = ()
) -> list[Any]:
    """Messages of the lane `key` as JSON data: C1 dicts, or the adapter's own dump for a native lane.

    The one encoding of lane messages, shared by `save` and the history store.
    """
    if key.format == PORTABLE:
        return [message.to_json_dict() for message in as_messages(messages)]
    return _serializer(key, adapters, f"lane {key.label()}").dump_messages(list(messages))


def load_lane_messages(
    key: LaneKey, data: list[Any], adapters: Sequence[Any] = (), where: str = ""
) -> list[Any]:
    """Inverse of `dump_lane_messages`; raises `HistoryError` naming `where`."""
    try:
        if key.format == PORTABLE:
            return _portable_messages(data)
        return list(_serializer(key, adapters, where or f"lane {key.label()}").load_messages(data))
    except HistoryError as error:
        text = str(error)
        if where and not text.startswith(where):  # the serializer may have named it already
            text = f"{where}.messages: {text}"
        raise HistoryError(text) from None


def dumps(conversation: Conversation, *, adapters: Iterable[Any] = ()) -> str:
    """`dump_conversation` as JSON text."""
    return json.dumps(dump_conversation(conversation, adapters=adapters), ensure_ascii=False)


def save(
    conversation: Conversation, path: str | os.PathLike[str], *, adapters: Iterable[Any] = ()
) -> None:
    """Write `dumps(conversation)` to `path` atomically.

    Raises `HistoryError` (and writes nothing) when a message holds a lone
    surrogate, which the file could not hold and `load` would refuse.
    """
    document = dump_conversation(conversation, adapters=adapters)
    text = json.dumps(document, ensure_ascii=False)
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise HistoryError(
            f"cannot save to {os.fspath(path)}: {_surrogate_problem(document)}"
        ) from None
    write_atomic(path, data)


def write_atomic(path: str | os.PathLike[str], text: str | bytes) -> None:
    """Replace `path` with `text` (UTF-8) all at once: a temporary sibling file, then `os.replace`.

    Raises `KediUsageError` naming the path when it cannot be written (or
    `text` cannot be encoded); the temporary file never outlives a failure.
    """
    target = Path(path)
    try:
        data = text.encode("utf-8") if isinstance(text, str) else text
    except UnicodeEncodeError as error:
        raise KediUsageError(
            f"cannot save to {os.fspath(path)}: {error.reason} in the text"
        ) from None
    _sweep_temporaries(target)
    try:
        prefix = f".{target.name}.{os.getpid()}."
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=prefix, suffix=".tmp")
    except OSError as error:
        raise KediUsageError(
            f"cannot save to {os.fspath(path)}: {error.strerror or error}"
        ) from None
    try:
        with os.fdopen(handle, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise KediUsageError(
                f"cannot save to {os.fspath(path)}: {error.strerror or error}"
            ) from None
        raise


def _sweep_temporaries(target: Path) -> None:
    """Remove the temporary files of saves to `target` whose process is gone (killed mid-save)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(target.parent):
            name = entry.name
            if not (name.startswith(f".{target.name}.") and name.endswith(".tmp")):
                continue
            pid = name[len(target.name) + 2 :].partition(".")[0]
            if pid.isdigit() and not _alive(int(pid)):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # it exists, owned by someone else
        return True
    return True


# --------------------------------------------------------------------------- reading


def load_conversation(data: Any, *, adapters: Iterable[Any] = ()) -> Conversation:
    """The conversation a `dump_conversation` document describes.

    Raises `HistoryError` naming the first problem (`lanes[1].key.model: ...`).
    """
    return _load_document(data, adapters, parsed_here=False)


def _load_document(data: Any, adapters: Iterable[Any], *, parsed_here: bool) -> Conversation:
    """`load_conversation`; `parsed_here`: `data` was parsed by `loads`, so nobody else holds it.

    Then a portable lane keeps its validated C1 dicts and builds each `Message`
    when it is first read (`LaneView`): a million loaded messages take about
    250 MB instead of 650 MB. A caller's own document is never kept.
    """
    document = _object(data, "the conversation document")
    version = document.get("version")
    if type(version) is not int or version != FORMAT_VERSION:  # `true` and `1.0` are not 1
        raise HistoryError(
            f"unsupported conversation format version {version!r} (this kedi reads version {FORMAT_VERSION})"
        )
    conversation_id = _string(document, "conversation_id", "the conversation document")
    lanes = document.get("lanes")
    if not isinstance(lanes, list):
        raise HistoryError(f"lanes: expected a list of lanes, not {json_kind(lanes)}")
    conversation = Conversation(conversation_id)
    given = tuple(adapters)
    for index, item in enumerate(lanes):
        where = f"lanes[{index}]"
        try:
            lane = _load_lane(item, conversation_id, given, where, parsed_here)
        except HistoryError:
            raise
        except Exception as error:  # a native serializer's own failure on untrusted data
            raise HistoryError(f"{where}: {type(error).__name__}: {error}") from None
        if lane.key in conversation.lanes:
            raise HistoryError(f"lanes[{index}]: a second lane with the key of an earlier one")
        conversation._lanes[lane.key] = lane
    return conversation


def _load_lane(
    item: Any, conversation_id: str, adapters: Sequence[Any], where: str, parsed_here: bool
) -> Lane:
    lane = _object(item, where)
    raw_key = _object(lane.get("key"), f"{where}.key")
    fields = {
        name: _string(
            raw_key,
            name,
            f"{where}.key",
            default=_KEY_DEFAULTS.get(name),
            empty=name not in _NON_EMPTY,
        )
        for name in _KEY_FIELDS
    }
    message_format = _string(lane, "format", where)
    key = LaneKey(**fields, format=message_format)
    epoch = lane.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise HistoryError(f"{where}.epoch: expected an integer >= 0, not {epoch!r}")
    data = lane.get("messages")
    if not isinstance(data, list):
        raise HistoryError(f"{where}.messages: expected a list, not {json_kind(data)}")
    if parsed_here and key.format == PORTABLE:
        messages = _validated_c1_dicts(data, where)
    else:
        messages = load_lane_messages(key, data, adapters, where)
    return Lane(key, conversation_id, messages, epoch)


_MESSAGE_LIST = TypeAdapter(list[Message])


_CHECK_CHUNK = 10_000
"""Messages validated (and dropped) at a time by `_validated_c1_dicts`: a few MB at once."""


def _validated_c1_dicts(data: list[Any], where: str) -> list[Any]:
    """`data` itself once every item validates as a `Message` (else `HistoryError` naming it).

    The messages built to check are dropped chunk by chunk; the lane builds
    them again, each when first read.
    """
    try:
        with collector_paused():
            for start in range(0, len(data), _CHECK_CHUNK):
                _MESSAGE_LIST.validate_python(data[start : start + _CHECK_CHUNK])
    except (ValidationError, HistoryError) as error:
        try:
            as_messages(data)  # raises the error naming the bad item
        except HistoryError as named:
            raise HistoryError(f"{where}.messages: {named}") from None
        raise HistoryError(str(error)) from None  # pragma: no cover - both validate alike
    return data


def _portable_messages(data: list[Any]) -> list[Message]:
    """`as_messages(data)`, validated in one call into pydantic-core (a long lane loads about 2x faster).

    On an invalid item, `as_messages` runs to raise the error naming it.
    """
    try:
        with collector_paused():
            return _MESSAGE_LIST.validate_python(data)
    except (ValidationError, HistoryError) as error:
        as_messages(data)  # raises the error naming the bad item
        raise HistoryError(str(error)) from None  # pragma: no cover - both validate alike


def loads(text: str | bytes, *, adapters: Iterable[Any] = ()) -> Conversation:
    """The conversation in `dumps` text (bytes are UTF-8); raises `HistoryError` on anything else.

    See the module docs for what untrusted text is refused.
    """
    if isinstance(text, bytes | bytearray):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            raise HistoryError(f"a saved conversation must be UTF-8: {error}") from None
    if not isinstance(text, str):
        raise HistoryError(f"a saved conversation is text, not {type(text).__name__}")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise HistoryError(
            f"a saved conversation cannot hold the lone surrogate {text[error.start]!r} (at character {error.start})"
        ) from None
    try:
        data = json.loads(text, object_hook=_shared_role)
    except json.JSONDecodeError as error:
        raise HistoryError(f"a saved conversation must be JSON: {error}") from None
    except RecursionError:
        raise HistoryError(
            "a saved conversation must be JSON nested less deeply than this"
        ) from None
    if _SURROGATE_ESCAPE.search(text):
        problem = _surrogate_problem(data)
        if problem:
            raise HistoryError(problem)
    return _load_document(data, adapters, parsed_here=True)


_ROLES = {role: role for role in ("system", "user", "assistant", "tool")}


def _shared_role(item: dict[str, Any]) -> dict[str, Any]:
    """Point a parsed message's `role` at the one shared string (the parser makes a new one each time)."""
    role = item.get("role")
    if role.__class__ is str:
        item["role"] = _ROLES.get(role, role)
    return item


def load(path: str | os.PathLike[str], *, adapters: Iterable[Any] = ()) -> Conversation:
    """The conversation saved at `path`; `KediUsageError` if the file cannot be read."""
    try:
        text = Path(path).read_bytes()
    except OSError as error:
        raise KediUsageError(
            f"cannot read conversation file {os.fspath(path)}: {error.strerror or error}"
        ) from None
    try:
        return loads(text, adapters=adapters)
    except HistoryError as error:
        raise HistoryError(f"{os.fspath(path)}: {error}") from None


# --------------------------------------------------------------------------- helpers


def _serializer(key: LaneKey, adapters: Sequence[Any], where: str) -> LaneOwner:
    """The adapter whose `dump_messages` / `load_messages` handle a native lane.

    An adapter (instance or class) given with the short name wins; else the
    registry's class, imported now. A class is used without being constructed
    (constructors want a live model), which the serializers allow: they are
    pure functions of the messages in every adapter.
    """
    found = next((a for a in adapters if getattr(a, "shortname", None) == key.adapter), None)
    if found is None:
        AdapterRegistry.ensure()
        if AdapterRegistry.lookup is None:  # pragma: no cover - importing kedi registers it
            raise KediUsageError("no adapter registry: import kedi before loading conversations")
        try:
            found = AdapterRegistry.lookup(key.adapter)
        except KediConfigError as error:
            raise HistoryError(
                f"{where}: {key.format} messages of adapter {key.adapter!r} need that adapter to be read "
                f"or written ({error}); pass it as adapters=[...]"
            ) from None
    if isinstance(found, type):
        found = found.__new__(found)  # type: ignore[call-overload]  # an adapter class: its serializers need no __init__
    actual = found.profile.message_format
    if actual != key.format:
        raise HistoryError(
            f"{where}: the lane holds {key.format} messages but adapter {key.adapter!r} uses {actual} messages"
        )
    return found


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise HistoryError(f"{where}: expected a JSON object, not {json_kind(value)}")
    return value


def _string(
    container: Mapping[str, Any],
    name: str,
    where: str,
    *,
    default: str | None = None,
    empty: bool = False,
) -> str:
    value = container.get(name, default)
    if not isinstance(value, str) or (not empty and not value):
        raise HistoryError(
            f"{where}.{name}: expected a {'' if empty else 'non-empty '}string, not {value!r}"
        )
    return value


def _surrogate_problem(document: Any) -> str:
    """Where `document` holds a string with a lone surrogate, as a sentence ("" if nowhere).

    Iterative: a document may be nested as deeply as the JSON parser allows.
    """
    pending: list[tuple[Any, str]] = [(document, "")]
    while pending:
        value, where = pending.pop()
        if isinstance(value, dict):
            pending.extend((item, f"{where}.{name}") for name, item in value.items())
            pending.extend((name, f"{where} (a key)") for name in value)
        elif isinstance(value, list):
            pending.extend((item, f"{where}[{index}]") for index, item in enumerate(value))
        elif isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as error:
                place = where.lstrip(".") or "the document"
                return f"{place}: the lone surrogate {value[error.start]!r} cannot be saved or loaded (UTF-8 has no form for it)"
    return ""


def json_kind(value: Any) -> str:
    """How an error names the kind of a JSON value (`an object`, `a list`, `null`, ...)."""
    names = {
        dict: "an object",
        list: "a list",
        str: "a string",
        bool: "a boolean",
        type(None): "null",
    }
    return names.get(
        type(value), "a number" if isinstance(value, int | float) else type(value).__name__
    )
