"""The store's records and encodings: sessions, runs, turns, lane keys, redaction."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from kedi.errors import KediError, KediUsageError
from kedi.history.lanes import LaneKey

__all__ = [
    "RunInfo",
    "SessionBusyError",
    "SessionInfo",
    "StoreError",
    "TurnRecord",
    "TurnSummary",
    "decode_lane_key",
    "encode_lane_key",
    "mask_dsn",
]


class StoreError(KediError):
    """The history store cannot be opened, read or written (the message says why and what to do)."""


class SessionBusyError(StoreError, KediUsageError):
    """Another run holds the session a run asked to continue (see `Store.hold_session`)."""


_KEY_FIELDS = ("adapter", "model", "settings", "mcp", "tools", "format")


@functools.lru_cache(maxsize=256)
def encode_lane_key(key: LaneKey) -> str:
    """The lane key as canonical JSON text (how the store names a lane).

    Cached: every turn names its lane, and a job's turns name a handful.
    """
    return json.dumps(
        {name: getattr(key, name) for name in _KEY_FIELDS}, sort_keys=True, separators=(",", ":")
    )


@functools.lru_cache(maxsize=256)
def decode_lane_key(text: str) -> LaneKey:
    """Inverse of `encode_lane_key`; raises `StoreError` on malformed text.

    Cached: a session's thousands of turns name a handful of lanes.
    """
    try:
        data = json.loads(text)
        return LaneKey(**{name: str(data[name]) for name in _KEY_FIELDS})
    except (ValueError, KeyError, TypeError) as error:
        raise StoreError(f"malformed lane key in the store: {text[:80]!r} ({error})") from None


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """One stored conversation."""

    id: str
    """The conversation id (UUIDv7)."""
    name: str | None
    program: str
    model: str
    parent: str | None
    """The session this one was forked from."""
    created: float
    updated: float
    turns: int
    """Turns committed so far (also the last turn's sequence number)."""
    status: str = ""
    """The status of the last run: running, ok, failed or interrupted."""

    @property
    def label(self) -> str:
        """The name when there is one, else the id."""
        return self.name or self.id


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One `kedi run` (or API run) recorded in a session."""

    session_id: str
    run_no: int
    program: str
    started: float
    finished: float | None
    status: str
    failure: dict[str, Any] | None = None
    """For a failed or interrupted run: error, location, stage, lane and partial messages."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnRecord:
    """What one model call added, as stored (JSON-ready data, lane format)."""

    session_id: str
    lane: LaneKey
    messages: list[Any]
    """The turn's new messages in the lane's format (portable C1 dicts or the adapter's dump)."""
    run_no: int = 1
    history: bool = True
    """Committed to the lane (history on); `False` for a stateless call, kept for replay."""
    epoch: int = 0
    """The lane's cache epoch after this turn."""
    rewritten: list[Any] | None = None
    """A history processor's accepted rewrite: the lane's whole prior history, replaced."""
    run_id: str = ""
    origin: str = ""
    request: dict[str, Any] = field(default_factory=dict)
    """The rendered request (instructions, prompt, schema, tools, settings, history digest)."""
    value: Any = None
    """The call's result as JSON (captures object or reply text)."""
    usage: dict[str, Any] = field(default_factory=dict)
    exchanges: list[Any] = field(default_factory=list)
    """The transcript records of the call's model requests."""
    seq: int = 0
    """Position in the session (assigned on commit)."""
    created: float = 0.0


class TurnSummary(NamedTuple):
    """A stored turn as a listing shows it (`kedi history show`): the shown fields, nothing else.

    A tuple, not a `TurnRecord`: building 10,000 frozen dataclasses alone took
    longer than reading and decoding the rows.
    """

    seq: int
    run_no: int
    lane: LaneKey
    lane_label: str
    """`lane.label()`, as transcripts name the lane."""
    history: bool
    origin: str
    messages: list[Any]
    value: Any
    usage: dict[str, Any]


# --------------------------------------------------------------------------- redaction

MASK = "***"


def mask_dsn(dsn: str) -> str:
    """A PostgreSQL URL with its password replaced by `***`."""
    try:
        parts = urlsplit(dsn)
    except ValueError:
        return "postgresql://***"
    if parts.password is None:
        return dsn
    netloc = f"{parts.username or ''}:{MASK}@{parts.hostname or ''}" + (
        f":{parts.port}" if parts.port else ""
    )
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
