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

_MS_MASK = (1 << 48) - 1
_RAND_B_BITS = 62
_HEX_BYTE = tuple(f"{byte:02x}" for byte in range(256))
"""The two hex digits of each byte value: the last two digits of an id."""

# The id sequence: millisecond `_ms`, 74 random bits `_high << 8 | _low`, and
# `_head`, the text of the id but for its last two hex digits (`_low`). Ids of
# one millisecond count `_low` up and reuse `_head`, so most ids are one table
# lookup and one concatenation: formatting 128-bit numbers, done every 256 ids
# or each millisecond, cost about 3x more (and kedi makes an id per call).
_lock = threading.Lock()
_ms = 0
_high = 0
_low = 0
_head = ""


def _reset_after_fork() -> None:
    # A forked child must not continue the parent's sequence: both would emit
    # the same "next" id in the same millisecond.
    global _ms
    _ms = 0


if hasattr(os, "register_at_fork"):  # pragma: no branch - absent only on Windows
    os.register_at_fork(after_in_child=_reset_after_fork)


def new_id() -> str:
    """Return a fresh UUIDv7 string (lowercase 8-4-4-4-12), time-ordered.

    Layout (RFC 9562): 48-bit Unix milliseconds, version 7, 12 random bits,
    variant `10`, 62 random bits. Ids made in one process are strictly
    increasing: within one millisecond (or if the clock steps back) the 74
    random bits of the previous id are incremented instead of redrawn.
    """
    global _low
    now_ms = time.time_ns() // 1_000_000
    with _lock:
        if now_ms > _ms:
            _start(now_ms, _random_bits())
        elif _low < 0xFF:
            _low += 1
        else:
            _carry()
        return _head + _HEX_BYTE[_low]


def _random_bits() -> int:
    # Drawn only when a millisecond starts: ids made within one millisecond
    # count on instead, so most ids make no system call.
    return int.from_bytes(os.urandom(10), "big") >> (80 - _RAND_BITS)


def _start(ms: int, rand: int) -> None:
    """Continue the sequence from `rand` (74 bits) in millisecond `ms` (under `_lock`)."""
    global _ms, _high, _low
    _ms, _high, _low = ms, rand >> 8, rand & 0xFF
    _format_head()


def _carry() -> None:
    """Increment the random bits past a multiple of 256 (under `_lock`)."""
    global _high, _low
    if (_high + 1) >> (_RAND_BITS - 8):  # the counter overflowed: borrow the next millisecond
        _start(_ms + 1, _random_bits())
    else:
        _high, _low = _high + 1, 0
        _format_head()


def _format_head() -> None:
    """Set `_head` to the id text of `_ms` and `_high`, without its last two hex digits."""
    global _head
    rand = _high << 8
    rand_a, rand_b = rand >> _RAND_B_BITS, rand & ((1 << _RAND_B_BITS) - 1)
    value = (_ms & _MS_MASK) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    digits = f"{value:032x}"
    _head = f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:30]}"


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
