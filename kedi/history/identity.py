"""Run and conversation identity (C8): UUIDv7 ids and how a call picks them."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["new_id", "resolve_conversation_id", "resolve_run_id"]

_RAND_BITS = 74
"""Bits after the 48-bit timestamp that are neither version nor variant."""

_lock = threading.Lock()
_last_ms = 0
_last_rand = 0


def _reset_after_fork() -> None:
    # A forked child must not continue the parent's sequence: both would emit
    # the same "next" id in the same millisecond.
    global _last_ms
    _last_ms = 0


if hasattr(os, "register_at_fork"):  # pragma: no branch - absent only on Windows
    os.register_at_fork(after_in_child=_reset_after_fork)


def new_id() -> str:
    """Return a fresh UUIDv7 string (lowercase 8-4-4-4-12), time-ordered.

    Layout (RFC 9562): 48-bit Unix milliseconds, version 7, 12 random bits,
    variant `10`, 62 random bits. Ids made in one process are strictly
    increasing: within one millisecond (or if the clock steps back) the 74
    random bits of the previous id are incremented instead of redrawn.
    """
    global _last_ms, _last_rand
    now_ms = time.time_ns() // 1_000_000
    fresh = int.from_bytes(os.urandom(10), "big") >> (80 - _RAND_BITS)
    with _lock:
        if now_ms > _last_ms:
            ms, rand = now_ms, fresh
        else:
            ms, rand = _last_ms, _last_rand + 1
            if rand >> _RAND_BITS:  # the counter overflowed: borrow the next millisecond
                ms, rand = ms + 1, fresh
        _last_ms, _last_rand = ms, rand
    rand_a = rand >> 62
    rand_b = rand & ((1 << 62) - 1)
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    digits = f"{value:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


def resolve_run_id(explicit: str | None = None) -> str:
    """The run id of a call: `explicit` when non-empty, else a fresh id (never inherited)."""
    return explicit if explicit else new_id()


def _conversation_id_of(message: Any) -> str:
    if isinstance(message, Mapping):
        value = message.get("conversationId") or message.get("conversation_id") or ""
    else:
        value = getattr(message, "conversation_id", "")
    return value if isinstance(value, str) else ""


def resolve_conversation_id(explicit: str | None, history: Iterable[Any] = ()) -> str:
    """The conversation id of a call (C8).

    `explicit` when non-empty; else the `conversationId` of the last message in
    `history` that has one; else a fresh id. Passing a fresh id forks the
    conversation. `history` holds `Message` objects or C1 dicts.
    """
    if explicit:
        return explicit
    ordered = history if isinstance(history, Sequence) else list(history)
    for message in reversed(ordered):
        found = _conversation_id_of(message)
        if found:
            return found
    return new_id()
