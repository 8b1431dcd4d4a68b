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
its owner only (conversations hold user data).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from kedi.errors import HistoryError, KediConfigError, KediUsageError
from kedi.history.lanes import PORTABLE, AdapterRegistry, Conversation, Lane, LaneKey, LaneOwner
from kedi.history.messages import as_messages

__all__ = [
    "FORMAT_VERSION", "dump_conversation", "dump_lane_messages", "dumps", "load_lane_messages",
    "load", "load_conversation", "loads", "save", "write_atomic"]

FORMAT_VERSION = 1
"""The version this kedi writes and the only one it reads."""

_KEY_FIELDS = ("adapter", "model", "settings", "mcp", "tools")
_KEY_DEFAULTS = {"mcp": "", "tools": ""}
"""Key fields a document may leave out (older writers, lanes without MCP or tools)."""
_NON_EMPTY = frozenset({"adapter", "settings"})


# --------------------------------------------------------------------------- writing


def dump_conversation(conversation: Conversation, *, adapters: Iterable[Any] = ()) -> dict[str, Any]:
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
        "messages": messages,
    }


def dump_lane_messages(key: LaneKey, messages: Iterable[Any], adapters: Sequence[Any] = ()) -> list[Any]:
    """Messages of the lane `key` as JSON data: C1 dicts, or the adapter's own dump for a native lane.

    The one encoding of lane messages, shared by `save` and the history store.
    """
    if key.format == PORTABLE:
        return [message.to_json_dict() for message in as_messages(messages)]
    return _serializer(key, adapters, f"lane {key.label()}").dump_messages(list(messages))


def load_lane_messages(key: LaneKey, data: list[Any], adapters: Sequence[Any] = (), where: str = "") -> list[Any]:
    """Inverse of `dump_lane_messages`; raises `HistoryError` naming `where`."""
    try:
        if key.format == PORTABLE:
            return list(as_messages(data))
        return list(_serializer(key, adapters, where or f"lane {key.label()}").load_messages(data))
    except HistoryError as error:
        raise HistoryError(f"{where}.messages: {error}" if where else str(error)) from None


def dumps(conversation: Conversation, *, adapters: Iterable[Any] = ()) -> str:
    """`dump_conversation` as JSON text."""
    return json.dumps(dump_conversation(conversation, adapters=adapters), ensure_ascii=False)


def save(conversation: Conversation, path: str | os.PathLike[str], *, adapters: Iterable[Any] = ()) -> None:
    """Write `dumps(conversation)` to `path` atomically."""
    write_atomic(path, dumps(conversation, adapters=adapters))


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Replace `path` with `text` all at once: a temporary sibling file, then `os.replace`.

    Raises `KediUsageError` naming the path when it cannot be written.
    """
    target = Path(path)
    try:
        handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as error:
        raise KediUsageError(f"cannot save to {os.fspath(path)}: {error.strerror or error}") from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, target)
    except BaseException as error:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise KediUsageError(f"cannot save to {os.fspath(path)}: {error.strerror or error}") from None
        raise


# --------------------------------------------------------------------------- reading


def load_conversation(data: Any, *, adapters: Iterable[Any] = ()) -> Conversation:
    """The conversation a `dump_conversation` document describes.

    Raises `HistoryError` naming the first problem (`lanes[1].key.model: ...`).
    """
    document = _object(data, "the conversation document")
    version = document.get("version")
    if version != FORMAT_VERSION:
        raise HistoryError(
            f"unsupported conversation format version {version!r} (this kedi reads version {FORMAT_VERSION})"
        )
    conversation_id = _string(document, "conversation_id", "the conversation document")
    lanes = document.get("lanes")
    if not isinstance(lanes, list):
        raise HistoryError(f"lanes: expected a list of lanes, not {_kind(lanes)}")
    conversation = Conversation(conversation_id)
    given = tuple(adapters)
    for index, item in enumerate(lanes):
        lane = _load_lane(item, conversation_id, given, f"lanes[{index}]")
        if lane.key in conversation.lanes:
            raise HistoryError(f"lanes[{index}]: a second lane with the key of an earlier one")
        conversation._lanes[lane.key] = lane
    return conversation


def _load_lane(item: Any, conversation_id: str, adapters: Sequence[Any], where: str) -> Lane:
    lane = _object(item, where)
    raw_key = _object(lane.get("key"), f"{where}.key")
    fields = {
        name: _string(raw_key, name, f"{where}.key", default=_KEY_DEFAULTS.get(name), empty=name not in _NON_EMPTY)
        for name in _KEY_FIELDS
    }
    message_format = _string(lane, "format", where)
    key = LaneKey(**fields, format=message_format)
    epoch = lane.get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise HistoryError(f"{where}.epoch: expected an integer >= 0, not {epoch!r}")
    data = lane.get("messages")
    if not isinstance(data, list):
        raise HistoryError(f"{where}.messages: expected a list, not {_kind(data)}")
    messages = load_lane_messages(key, data, adapters, where)
    return Lane(key, conversation_id, messages, epoch)


def loads(text: str | bytes, *, adapters: Iterable[Any] = ()) -> Conversation:
    """The conversation in `dumps` text; raises `HistoryError` on malformed text."""
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise HistoryError(f"a saved conversation must be JSON: {error}") from None
    return load_conversation(data, adapters=adapters)


def load(path: str | os.PathLike[str], *, adapters: Iterable[Any] = ()) -> Conversation:
    """The conversation saved at `path`; `KediUsageError` if the file cannot be read."""
    try:
        text = Path(path).read_bytes()
    except OSError as error:
        raise KediUsageError(f"cannot read conversation file {os.fspath(path)}: {error.strerror or error}") from None
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
        found = found.__new__(found)
    actual = found.profile.message_format
    if actual != key.format:
        raise HistoryError(
            f"{where}: the lane holds {key.format} messages but adapter {key.adapter!r} uses {actual} messages"
        )
    return found  # type: ignore[no-any-return]


def _object(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise HistoryError(f"{where}: expected a JSON object, not {_kind(value)}")
    return value


def _string(container: Mapping[str, Any], name: str, where: str, *, default: str | None = None, empty: bool = False) -> str:
    value = container.get(name, default)
    if not isinstance(value, str) or (not empty and not value):
        raise HistoryError(f"{where}.{name}: expected a {'' if empty else 'non-empty '}string, not {value!r}")
    return value


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number" if isinstance(value, int | float) else type(value).__name__)
