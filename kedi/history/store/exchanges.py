"""The `exchanges` column in linear form: each turn stores the messages its requests add.

A turn's exchanges are the transcript records of its model requests. With
history on, each request resends the lane's whole history, so storing them
whole made a session of N turns store O(N^2) messages. The store keeps them
linear instead (`kedi.history.linear`): an exchange that repeats the
previous exchange of its lane holds only its new messages and a reference
`"messages_from": {"index": [seq, position], ...}` to that exchange, the
`position`-th exchange of turn `seq`.

**Scope.** A reference points only at an earlier turn of the same session
*and the same run*, on the same lane (and history flag). Every way the store
deletes turns removes a whole session or a whole run, so a remaining turn
never refers to a deleted one; and a reader of one run's turns
(`Store.turns(run_no=...)`, replay, resume) has every turn its references need.

**Where the bases come from.** The writer remembers, per (session, run, lane,
history), the base of the last exchange this `Store` object committed (a
bounded LRU; a miss only costs one full exchange). A transaction's bases
join that memory only when it commits, so a rolled-back turn (whose `seq`
the next turn reuses) is never referred to; and before referring to a turn
the writer checks, in the same transaction, that its row is still there.
Readers expand the references in `seq` order and return full exchanges,
exactly as they were given; rows written whole (by earlier versions) read
as they are.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from kedi.history.linear import Expander, base_of, shorten

__all__ = ["Bases", "ExchangeBases", "Key", "expand_exchanges", "shorten_exchanges"]

Key = tuple[str, int, str, bool]
"""(session id, run number, encoded lane key, history flag): the scope of a chain of references."""

Bases = tuple[list[int], list[Any]]
"""The `[seq, position]` of an exchange and its base (full messages, then its response)."""


class ExchangeBases:
    """The base of the last exchange committed per `Key` through one store (a bounded LRU, thread-safe)."""

    def __init__(self, capacity: int = 1024) -> None:
        self._capacity = capacity
        self._bases: OrderedDict[Key, Bases] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Key) -> Bases | None:
        """The last committed exchange of `key`, if this store remembers it."""
        with self._lock:
            return self._bases.get(key)

    def committed(self, bases: dict[Key, Bases]) -> None:
        """Remember the bases of a transaction that has committed."""
        with self._lock:
            for key, value in bases.items():
                self._bases[key] = value
                self._bases.move_to_end(key)
            while len(self._bases) > self._capacity:
                self._bases.popitem(last=False)


def shorten_exchanges(
    exchanges: list[Any], seq: int, previous: Bases | None
) -> tuple[list[Any], Bases | None]:
    """Turn `seq`'s exchanges in linear form, and the base its last exchange leaves for the next turn.

    Each exchange refers to the one before it (the previous turn's last, for
    the first). Comparing with the previous base is a list comparison in C
    (O(lane)); what is encoded and written is O(new messages).
    """
    linear: list[Any] = []
    for position, exchange in enumerate(exchanges):
        if not isinstance(exchange, dict) or not isinstance(exchange.get("messages"), list):
            linear.append(exchange)
            continue
        linear.append(shorten(exchange, previous))
        previous = ([seq, position], base_of(exchange))
    return linear, previous


def expand_exchanges(expander: Expander, seq: int, exchanges: list[Any]) -> list[Any]:
    """Turn `seq`'s stored exchanges in full (`expander` has seen the earlier turns, in order).

    Raises `kedi.history.linear.MissingBase` when a reference names a turn
    the expander has not seen.
    """
    return [
        expander.expand(exchange, (seq, position)) if isinstance(exchange, dict) else exchange
        for position, exchange in enumerate(exchanges)
    ]
