"""Run and conversation identity (C8): UUIDv7 ids and how a call picks them."""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

__all__ = ["new_id", "resolve_conversation_id", "resolve_run_id"]

_RAND_BITS = 74
"""Bits after the 48-bit timestamp that are neither version nor variant."""

_MS_MASK = (1 << 48) - 1
_RAND_B_BITS = 62
_HEX_BYTE = tuple(f"{byte:02x}" for byte in range(256))
"""The two hex digits of each byte value: the last two digits of an id."""

# The id sequence lives in `_state`: (millisecond, `_high`, `_head`, counter).
# `_head` is the text of the id but for its last two hex digits, which the
# counter supplies: the 74 random bits of an id are `_high << 8 | low`. Ids of
# one millisecond count `low` up and reuse `_head`, so most ids are a clock
# read, a `next` and one concatenation, with no lock: reading the state tuple
# and `next` on an `itertools.count` are each atomic, so concurrent threads
# never draw the same `low` from one state. Everything else (a new
# millisecond, 256 ids in one, a fork) takes `_lock` and swaps in a new state.
# kedi makes an id per model call, and a lock per id cost more than the rest.
_lock = threading.Lock()
_STALE: tuple[int, int, str, Iterator[int]] = (-1, 0, "", iter(()))
_state = _STALE
_random_pool = b""


def _reset_after_fork() -> None:
    # A forked child must neither continue the parent's sequence (both would
    # emit the same "next" id in the same millisecond) nor reuse its random bits.
    global _state, _random_pool
    _state, _random_pool = _STALE, b""


if hasattr(os, "register_at_fork"):  # pragma: no branch - absent only on Windows
    os.register_at_fork(after_in_child=_reset_after_fork)


def new_id() -> str:
    """Return a fresh UUIDv7 string (lowercase 8-4-4-4-12), time-ordered.

    Layout (RFC 9562): 48-bit Unix milliseconds, version 7, 12 random bits,
    variant `10`, 62 random bits. Ids made in one process are strictly
    increasing in each thread and unique across threads: within one
    millisecond (or if the clock steps back) the 74 random bits of the
    previous id are incremented instead of redrawn.
    """
    ms, _, head, counter = _state
    if time.time_ns() // 1_000_000 <= ms:
        low = next(counter)
        if low <= 0xFF:
            return head + _HEX_BYTE[low]
    return _next_state()


def _next_state() -> str:
    """Move to a new millisecond or carry into `_high`; return the first id of the new state."""
    global _state
    with _lock:
        ms, high, _, _ = _state
        now_ms = time.time_ns() // 1_000_000
        if now_ms > ms:
            rand = _random_bits()
            ms, high, low = now_ms, rand >> 8, rand & 0xFF
        elif (high + 1) >> (_RAND_BITS - 8):  # the counter overflowed: borrow the next millisecond
            rand = _random_bits()
            ms, high, low = ms + 1, rand >> 8, rand & 0xFF
        else:
            high, low = high + 1, 0
        head = _format_head(ms, high)
        _state = (ms, high, head, itertools.count(low + 1))
        return head + _HEX_BYTE[low]


def _random_bits() -> int:
    """74 fresh random bits (under `_lock`), from a pool of `os.urandom` bytes.

    Drawn only when a millisecond starts; the pool makes that one system call
    per 400 milliseconds rather than one per millisecond.
    """
    global _random_pool
    if not _random_pool:
        _random_pool = os.urandom(4000)
    chunk, _random_pool = _random_pool[:10], _random_pool[10:]
    return int.from_bytes(chunk, "big") >> (80 - _RAND_BITS)


def _format_head(ms: int, high: int) -> str:
    """The id text of millisecond `ms` and random bits `high << 8`, without its last two hex digits."""
    rand = high << 8
    rand_a, rand_b = rand >> _RAND_B_BITS, rand & ((1 << _RAND_B_BITS) - 1)
    value = (ms & _MS_MASK) << 80 | 0x7 << 76 | rand_a << 64 | 0b10 << 62 | rand_b
    digits = f"{value:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:30]}"


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
