"""Conversations, lanes and atomic, source-ordered commits.

A `Conversation` holds all history of one program run (or of an explicit
conversation object an embedder passes to several runs). It is partitioned
into `Lane`s by `LaneKey` (adapter, model, canonical settings, MCP set, tool
contract); messages are never translated between lanes.

Every call that uses a lane takes a *ticket* when it is scheduled (in source
order). Its whole transaction (read the lane, call the model, commit) runs only
when all earlier tickets are finished, so commits land in source order even
when a scheduler overlaps calls. A transaction commits only if the call
succeeded; failure or cancellation releases the ticket and leaves the lane
untouched.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio

from kedi.errors import TurnAbandoned


def canonical_digest(value: Any) -> str:
    """A stable short digest of JSON-like data (sorted keys, normalised numbers)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class LaneKey:
    """What separates lanes: change any part and calls go to another lane."""

    adapter: str
    model: str
    settings: str
    """Digest of the canonical (sorted, normalised) model settings."""
    mcp: str = ""
    """Digest of the MCP server set."""
    tools: str = ""
    """Digest of the tool contract (names plus argument and result schemas)."""

    def label(self) -> str:
        """A short human-readable name for transcripts: `adapter/model#digest`."""
        return f"{self.adapter}/{self.model}#{canonical_digest([self.settings, self.mcp, self.tools])[:8]}"


class LaneView(Sequence[Any]):
    """An immutable view of a lane's first `length` messages (no copying).

    Lanes are append-only within an epoch and a rewrite installs a new list, so
    a view taken before later commits keeps seeing exactly its snapshot.
    """

    __slots__ = ("_items", "_length")

    def __init__(self, items: list[Any], length: int) -> None:
        self._items = items
        self._length = length

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return self._items[: self._length][index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("lane view index out of range")
        return self._items[index]

    def __iter__(self) -> Iterator[Any]:
        items = self._items
        for index in range(self._length):
            yield items[index]

    def __repr__(self) -> str:
        return f"LaneView({self._length} messages)"


class Lane:
    """One adapter/model/settings/tools partition of a conversation."""

    def __init__(self, key: LaneKey, conversation_id: str, messages: Sequence[Any] = (), epoch: int = 0) -> None:
        self.key = key
        self.conversation_id = conversation_id
        self._messages: list[Any] = list(messages)
        self.epoch = epoch
        self._issued = 0
        self._finished = 0
        self._waiters: dict[int, anyio.Event] = {}
        self._done: set[int] = set()
        self._abandoned: set[int] = set()

    # ---------------------------------------------------------------- reading

    @property
    def messages(self) -> LaneView:
        """The committed messages (a snapshot view)."""
        return LaneView(self._messages, len(self._messages))

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def cache_key(self) -> str:
        """Stable opaque cache identity of the current epoch (usable as a prompt-cache key)."""
        return canonical_digest([self.conversation_id, self.key.label(), self.key.settings, self.epoch])

    # ---------------------------------------------------------------- ordering

    def reserve(self) -> int:
        """Take the next ticket (call this in source order, when the call is scheduled)."""
        ticket = self._issued
        self._issued += 1
        return ticket

    @asynccontextmanager
    async def transaction(self, ticket: int) -> AsyncIterator[Transaction]:
        """Wait for the ticket's turn, then yield a transaction; release it on exit.

        If the transaction fails, the tickets already issued after it are
        abandoned: in source order those calls come after the failure, so a
        sequential run would never have made them.
        """
        try:
            while self._finished != ticket:
                event = self._waiters.setdefault(ticket, anyio.Event())
                await event.wait()
            if ticket in self._abandoned:
                raise TurnAbandoned(
                    "an earlier call on this conversation lane failed, so this later call was not sent"
                )
            yield Transaction(self)
        except Exception:
            self._abandoned.update(range(ticket + 1, self._issued))
            raise
        finally:
            self._release(ticket)

    def _release(self, ticket: int) -> None:
        # A cancelled waiter may release before its turn: remember it and let the
        # turn pass over it when the tickets before it finish.
        self._done.add(ticket)
        while self._finished in self._done:
            self._done.discard(self._finished)
            self._finished += 1
        waiter = self._waiters.pop(self._finished, None)
        if waiter is not None:
            waiter.set()

    # ---------------------------------------------------------------- writing

    def append(self, messages: Sequence[Any]) -> None:
        """Append a whole turn at once (used by a committing transaction)."""
        self._messages.extend(messages)

    def replace(self, messages: Sequence[Any], *, generations: int = 1) -> None:
        """Install rewritten history; each rewrite starts a new epoch (new cache identity)."""
        self._messages = list(messages)
        self.epoch += generations


class Transaction:
    """Read the lane, then commit a complete turn exactly once."""

    __slots__ = ("lane", "snapshot", "committed")

    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        self.snapshot = lane.messages
        self.committed = False

    def commit(self, new_messages: Sequence[Any], *, rewritten: Sequence[Any] | None = None, rewrites: int = 0) -> None:
        """Make the turn visible. `rewritten` replaces the prior history (processor edit)."""
        if self.committed:
            raise RuntimeError("a transaction commits once")
        if rewritten is not None:
            self.lane.replace([*rewritten, *new_messages], generations=max(rewrites, 1))
        else:
            self.lane.append(new_messages)
        self.committed = True


class Conversation:
    """All history of one run, or of an embedder's explicit conversation."""

    def __init__(self, conversation_id: str | None = None) -> None:
        if conversation_id is None:
            from kedi.history.identity import new_id

            conversation_id = new_id()
        self.conversation_id = conversation_id
        self._lanes: dict[LaneKey, Lane] = {}

    def lane(self, key: LaneKey) -> Lane:
        """The lane for `key`, created empty the first time."""
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = Lane(key, self.conversation_id)
        return lane

    @property
    def lanes(self) -> dict[LaneKey, Lane]:
        """Every lane used so far, by key."""
        return dict(self._lanes)

    def fork(self, conversation_id: str | None = None) -> Conversation:
        """A copy of every lane under a new conversation id (later turns diverge)."""
        other = Conversation(conversation_id)
        for key, lane in self._lanes.items():
            other._lanes[key] = Lane(key, other.conversation_id, lane.messages, lane.epoch)
        return other
