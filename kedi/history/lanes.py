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
untouched. Runs in several threads may share one conversation: tickets are
taken under a lock and each waiter is woken on its own event loop, so their
turns land whole, one after another, in the order the calls took tickets.

The embedding API (`Conversation.seed`, `messages`, `fork`, `dumps`/`loads`,
`save`/`load`) resolves adapters by name through `kedi.adapters`, imported
lazily inside those methods: the adapter registry is the one place that maps
an `(adapter, model)` pair to the adapter a run would use, so the Python API
and the runtime compute lane keys one way (`LaneKey.for_call`).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import os
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import anyio

from kedi.errors import HistoryError, KediUsageError, TurnAbandoned
from kedi.settings import TRANSPORT_SETTINGS

PORTABLE = "portable"
"""The message format of lanes holding kedi's own `Message`s."""


def _canonical(value: Any) -> Any:
    """JSON-like data in one spelling: `1.0` and `1` agree, sets are sorted, mappings are dicts."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, Mapping):
        return {str(key): _canonical(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    if isinstance(value, set | frozenset):
        return sorted((_canonical(item) for item in value), key=repr)
    return value


def canonical_json(value: Any) -> str:
    """JSON-like data as the one compact text `canonical_digest` hashes."""
    return json.dumps(_canonical(value), sort_keys=True, separators=(",", ":"), default=repr)


def canonical_digest(value: Any) -> str:
    """A stable short digest of JSON-like data (sorted keys, normalised numbers)."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()[:16]


class MessageFormat(Protocol):
    """The part of an adapter's profile lanes read."""

    @property
    def message_format(self) -> str: ...


class LaneOwner(Protocol):
    """What lanes need from an adapter: its identity, profile and message serializers.

    Any `kedi.adapters.Adapter` has all of it.
    """

    # Read-only members: an adapter class sets `shortname` and `profile` as class variables.
    @property
    def shortname(self) -> str: ...

    @property
    def model_name(self) -> str: ...

    @property
    def profile(self) -> MessageFormat: ...

    def dump_messages(self, messages: Sequence[Any]) -> list[Any]:
        """Serialize native messages to JSON-compatible data."""

    def load_messages(self, data: Sequence[Any]) -> list[Any]:
        """Inverse of `dump_messages`."""


_NO_SETTINGS = canonical_digest({})


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
    format: str = PORTABLE
    """The message format the lane holds (`portable`, `pydantic-ai`, `langchain`):
    how it is saved and loaded. Set from the adapter's profile."""

    @classmethod
    def for_call(
        cls,
        adapter: LaneOwner,
        settings: Mapping[str, Any],
        *,
        tools_digest: str = "",
        mcp_digest: str = "",
    ) -> LaneKey:
        """The key of the lane a call on `adapter` with `settings` uses (runtime and API alike).

        Transport-only settings (`kedi.settings.TRANSPORT_SETTINGS`: timeout,
        retries, request limit, extra headers) are left out: changing them, or
        rotating a token, continues the same history.
        """
        shaping = {key: value for key, value in settings.items() if key not in TRANSPORT_SETTINGS}
        return cls(
            adapter.shortname,
            adapter.model_name,
            canonical_digest(shaping) if shaping else _NO_SETTINGS,
            mcp=mcp_digest,
            tools=tools_digest,
            format=adapter.profile.message_format,
        )

    def label(self) -> str:
        """A short human-readable name for transcripts: `adapter/model#digest`."""
        return _lane_label(self)


@functools.lru_cache(maxsize=1024)
def _lane_label(key: LaneKey) -> str:
    """`LaneKey.label`, hashed once per key (every recorded call names its lane)."""
    return f"{key.adapter}/{key.model}#{canonical_digest([key.settings, key.mcp, key.tools])[:8]}"


class LaneView(Sequence[Any]):
    """An immutable view of a lane's first `length` messages (no copying).

    Lanes are append-only within an epoch and a rewrite installs a new list, so
    a view taken before later commits keeps seeing exactly its snapshot.

    A portable lane read by `Conversation.loads` holds the validated C1 dicts
    of the document (a third of the memory of `Message`s); the view builds a
    dict's `Message` when it is first read and keeps it in its place, so every
    reader sees `Message`s and the same one each time.
    """

    __slots__ = ("_items", "_length", "_lane")

    def __init__(self, items: list[Any], length: int, lane: Lane | None = None) -> None:
        self._items = items
        self._length = length
        self._lane = lane

    def incremental(self, name: str, factory: Callable[[], Incremental]) -> Any:
        """The lane's incremental state `name` if it covers exactly this view, else None.

        A history operation that would walk the whole lane on every call (the
        in-request repair, token estimates) keeps its state on the lane
        instead: built from the messages on first use, then fed each
        committed turn (`Incremental.extend`), so a call costs O(new messages).
        Portable lanes only; a rewrite or seed drops the states.
        """
        lane = self._lane
        if lane is None or lane.key.format != PORTABLE:
            return None
        with lane._tickets:
            if lane._messages is not self._items or len(self._items) != self._length:
                return None  # an older snapshot: the state has moved past it
            state = lane._derived.get(name)
            if state is None:
                state = lane._derived[name] = factory()
                state.extend(self)
        return state

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: Any) -> Any:
        items = self._items
        if isinstance(index, slice):
            return [_message_at(items, position) for position in range(self._length)[index]]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("lane view index out of range")
        return _message_at(items, index)

    def __iter__(self) -> Iterator[Any]:
        items = self._items
        for index in range(self._length):
            yield _message_at(items, index)

    def __repr__(self) -> str:
        return f"LaneView({self._length} messages)"


def _message_at(items: list[Any], index: int) -> Any:
    """`items[index]`; a C1 dict kept by `loads` (validated there) becomes its `Message`, in place."""
    item = items[index]
    if item.__class__ is dict:
        from kedi.history.messages import Message

        item = items[index] = Message.model_validate(item)
    return item


class Incremental(Protocol):
    """State derived from a lane's messages and kept up to date as turns commit."""

    def extend(self, messages: Sequence[Any]) -> None:
        """Take in messages appended to the lane."""


class Lane:
    """One adapter/model/settings/tools partition of a conversation."""

    def __init__(
        self, key: LaneKey, conversation_id: str, messages: Sequence[Any] = (), epoch: int = 0
    ) -> None:
        """A lane of `conversation_id` holding `messages` (copied into a new list) at `epoch`."""
        self.key = key
        self.conversation_id = conversation_id
        self._messages: list[Any] = list(messages)
        self.epoch = epoch
        self._issued = 0
        self._finished = 0
        self._waiters: dict[int, tuple[asyncio.AbstractEventLoop, anyio.Event]] = {}
        self._done: set[int] = set()
        self._abandoned: set[int] = set()
        # Runs in several threads (each `run_sync` has its own event loop) may share a
        # conversation: the ticket state changes under this lock, and a waiter is woken
        # on its own loop.
        self._tickets = threading.Lock()
        self._derived: dict[str, Incremental] = {}

    def __repr__(self) -> str:
        """`Lane(<label>, <n> messages, epoch <e>)`."""
        return f"Lane({self.key.label()}, {len(self._messages)} messages, epoch {self.epoch})"

    # ---------------------------------------------------------------- reading

    @property
    def messages(self) -> LaneView:
        """The committed messages (a snapshot view)."""
        return LaneView(self._messages, len(self._messages), self)

    def __len__(self) -> int:
        return len(self._messages)

    @property
    def cache_key(self) -> str:
        """Stable opaque cache identity of the current epoch (usable as a prompt-cache key).

        It depends only on the conversation id, the lane key and the epoch, so
        it survives commits, saving and loading, and changes with every rewrite.
        """
        key = self.key
        return canonical_digest(
            [
                self.conversation_id,
                key.adapter,
                key.model,
                key.settings,
                key.mcp,
                key.tools,
                key.format,
                self.epoch,
            ]
        )

    @property
    def busy(self) -> bool:
        """Whether any call holds a ticket on this lane that is not finished yet."""
        return self._finished != self._issued

    # ---------------------------------------------------------------- ordering

    def reserve(self) -> int:
        """Take the next ticket (call this in source order, when the call is scheduled)."""
        with self._tickets:
            ticket = self._issued
            self._issued += 1
        return ticket

    @asynccontextmanager
    async def transaction(self, ticket: int) -> AsyncIterator[Transaction]:
        """Wait for the ticket's turn, then yield a transaction; release it on exit.

        If the transaction fails, the tickets already issued after it are
        abandoned: in source order those calls come after the failure, so a
        sequential run would never have made them. Cancellation abandons
        nothing: the cancelled call just gives up its turn.
        """
        try:
            while True:
                with self._tickets:
                    if self._finished == ticket:
                        break
                    waiter = self._waiters.get(ticket)
                    if waiter is None:
                        waiter = self._waiters[ticket] = (asyncio.get_running_loop(), anyio.Event())
                await waiter[1].wait()
            if ticket in self._abandoned:
                raise TurnAbandoned(
                    "an earlier call on this conversation lane failed, so this later call was not sent"
                )
            yield Transaction(self)
        except Exception:
            with self._tickets:
                self._abandoned.update(range(ticket + 1, self._issued))
            raise
        finally:
            self._release(ticket)

    def _release(self, ticket: int) -> None:
        # A cancelled waiter may release before its turn: remember it and let the
        # turn pass over it when the tickets before it finish.
        with self._tickets:
            self._waiters.pop(ticket, None)
            self._abandoned.discard(ticket)
            self._done.add(ticket)
            while self._finished in self._done:
                self._done.discard(self._finished)
                self._finished += 1
            waiter = self._waiters.pop(self._finished, None)
        if waiter is None:
            return
        loop, event = waiter
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is running:
            event.set()
        else:
            loop.call_soon_threadsafe(event.set)  # an event wakes only tasks of its own loop

    # ---------------------------------------------------------------- writing

    def append(self, messages: Sequence[Any]) -> None:
        """Append a whole turn at once (used by a committing transaction)."""
        with self._tickets:
            self._messages.extend(messages)
            for state in self._derived.values():
                state.extend(messages)

    def replace(self, messages: Sequence[Any], *, generations: int = 1) -> None:
        """Install rewritten history; each rewrite starts a new epoch (new cache identity)."""
        with self._tickets:
            self._messages = list(messages)
            self._derived.clear()
        self.epoch += generations

    def seed(self, messages: Iterable[Any]) -> None:
        """Install `messages` as this lane's history (restoring or chaining a conversation).

        An empty lane takes them as they are (no cache identity existed yet); a
        lane with committed turns is rewritten, which starts a new epoch. A
        portable lane accepts `Message`s or C1 dicts; a native lane accepts only
        its framework's message objects (load serialized data with the adapter's
        `load_messages`). Raises `KediUsageError` while a call holds a ticket.
        """
        if self.busy:
            raise KediUsageError(
                f"cannot seed lane {self.key.label()} while a call on it is in flight; "
                "seed before the run or after it finishes"
            )
        checked = _checked_messages(self.key, messages)
        if self._messages:
            self.replace(checked)
        else:
            with self._tickets:
                self._messages = checked
                self._derived.clear()


def _checked_messages(key: LaneKey, messages: Iterable[Any]) -> list[Any]:
    """`messages` in the lane's own format: portable ones validated, native ones type-checked."""
    from kedi.history.messages import Message, as_messages

    if isinstance(messages, str | bytes | Mapping):
        raise HistoryError(f"history must be a sequence of messages, not {type(messages).__name__}")
    if key.format == PORTABLE:
        return list(as_messages(messages))
    items = list(messages)
    for index, item in enumerate(items):
        if isinstance(item, Message | Mapping):
            raise HistoryError(
                f"history message {index}: lane {key.label()} holds {key.format} messages, not "
                f"{'serialized data' if isinstance(item, Mapping) else 'kedi Messages'}; "
                "messages are never translated between formats"
            )
    return items


class Transaction:
    """Read the lane, then commit a complete turn exactly once."""

    __slots__ = ("lane", "snapshot", "committed")

    def __init__(self, lane: Lane) -> None:
        self.lane = lane
        self.snapshot = lane.messages
        self.committed = False

    def commit(
        self,
        new_messages: Sequence[Any],
        *,
        rewritten: Sequence[Any] | None = None,
        rewrites: int = 0,
    ) -> None:
        """Make the turn visible. `rewritten` replaces the prior history (processor edit)."""
        if self.committed:
            raise RuntimeError("a transaction commits once")
        if rewritten is not None:
            self.lane.replace([*rewritten, *new_messages], generations=max(rewrites, 1))
        else:
            self.lane.append(new_messages)
        self.committed = True


class AdapterRegistry:
    """How the history layer finds adapters by name, without importing them.

    `kedi.adapters` registers its `create_adapter` and `adapter_class` here when
    it is imported (which importing any part of kedi does), so history stays
    below adapters in the layering.
    """

    create: Callable[[Any, str | None], LaneOwner] | None = None
    lookup: Callable[[str], Any] | None = None

    @classmethod
    def ensure(cls) -> None:
        """Fill the registry if nothing has yet (`import kedi` alone loads no adapter module).

        Imported by name: the registry module registers itself on import, and
        naming it as a string keeps history below the adapters layer.
        """
        if cls.create is None or cls.lookup is None:
            import importlib

            importlib.import_module("kedi.adapters")


def register_adapters(
    create: Callable[[Any, str | None], Any], lookup: Callable[[str], Any]
) -> None:
    """Called by `kedi.adapters`: the functions that build and find adapters by name."""
    AdapterRegistry.create = create
    AdapterRegistry.lookup = lookup


def resolve_adapter(adapter: Any = None, model: str | None = None) -> LaneOwner:
    """The adapter a run given `adapter=` and `model=` would use (an instance is used as is)."""
    if adapter is not None and not isinstance(adapter, str) and model is None:
        return adapter
    AdapterRegistry.ensure()
    if AdapterRegistry.create is None:  # pragma: no cover - importing kedi registers it
        raise KediUsageError("no adapter registry: import kedi before using conversations")
    return AdapterRegistry.create(adapter, model)


def _key_for(
    adapter: Any, model: str | None, settings: Mapping[str, Any] | None
) -> tuple[LaneOwner, LaneKey]:
    """The adapter and lane key a run with these arguments uses for tool-free calls."""
    if settings is not None and not isinstance(settings, Mapping):
        raise KediUsageError(
            f"settings must be a mapping of model settings, not {type(settings).__name__}"
        )
    owner = resolve_adapter(adapter, model)
    return owner, LaneKey.for_call(owner, settings or {})


class Conversation:
    """All history of one run, or of an embedder's explicit conversation.

    Pass one to several `program.run(conversation=...)` calls to share history
    between them; see `docs/history.md` ("Conversations from Python").
    """

    def __init__(self, conversation_id: str | None = None) -> None:
        """A conversation with no lanes yet; its id is fresh (UUIDv7) unless given."""
        if conversation_id is None:
            from kedi.history.identity import new_id

            conversation_id = new_id()
        if not isinstance(conversation_id, str) or not conversation_id:
            raise KediUsageError(
                f"a conversation id must be a non-empty string, not {conversation_id!r}"
            )
        self.conversation_id = conversation_id
        self._lanes: dict[LaneKey, Lane] = {}

    def __repr__(self) -> str:
        """`Conversation('<id>', <n> lanes)`."""
        return f"Conversation({self.conversation_id!r}, {len(self._lanes)} lanes)"

    def lane(self, key: LaneKey) -> Lane:
        """The lane for `key`, created empty the first time."""
        lane = self._lanes.get(key)
        if lane is None:
            # setdefault: two threads creating the same lane get one lane.
            lane = self._lanes.setdefault(key, Lane(key, self.conversation_id))
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

    # ------------------------------------------------------------ by adapter/model

    def lane_for(
        self,
        *,
        adapter: Any = None,
        model: str | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> Lane:
        """The lane a run's tool-free calls use with this `adapter`, `model` and `settings`.

        Arguments mean what they mean to `program.run` (names, or an adapter
        instance), taken literally: `kedi.configure` defaults do not apply.
        `settings` are the model settings in force for the calls, `effort`
        included when one is set. Calls with tools in scope use other lanes
        (the tool contract is part of the key): find them in `lanes`.
        """
        return self.lane(_key_for(adapter, model, settings)[1])

    def seed(
        self,
        messages: Iterable[Any],
        *,
        adapter: Any = None,
        model: str | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> Lane:
        """Install `messages` as the history of the lane `lane_for(adapter, model, settings)`.

        For chaining runs (pass one run's messages to the next) and resuming
        (pass a failed call's `partial.messages`). A native lane also accepts
        its adapter's serialized form (dicts), loaded with `load_messages`.
        See `Lane.seed` for epochs and validation.
        """
        owner, key = _key_for(adapter, model, settings)
        lane = self.lane(key)
        if lane.key.format != PORTABLE and not isinstance(messages, str | bytes | Mapping):
            messages = list(messages)
            if messages and all(isinstance(item, Mapping) for item in messages):
                messages = owner.load_messages(messages)
        lane.seed(messages)
        return lane

    def messages(
        self,
        *,
        adapter: Any = None,
        model: str | None = None,
        settings: Mapping[str, Any] | None = None,
    ) -> list[Any]:
        """The committed messages of the lane `lane_for(adapter, model, settings)` (empty if unused)."""
        lane = self._lanes.get(_key_for(adapter, model, settings)[1])
        return list(lane.messages) if lane is not None else []

    # ------------------------------------------------------------ persistence

    def dumps(self, *, adapters: Iterable[Any] = ()) -> str:
        """This conversation as versioned JSON text (see `kedi.history.persistence`)."""
        from kedi.history.persistence import dumps

        return dumps(self, adapters=adapters)

    @classmethod
    def loads(cls, text: str | bytes, *, adapters: Iterable[Any] = ()) -> Conversation:
        """A conversation from `dumps` text; raises `HistoryError` on malformed input."""
        from kedi.history.persistence import loads

        return loads(text, adapters=adapters)

    def save(self, path: str | os.PathLike[str], *, adapters: Iterable[Any] = ()) -> None:
        """Write `dumps()` to `path` atomically (a temporary file, then `os.replace`)."""
        from kedi.history.persistence import save

        save(self, path, adapters=adapters)

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, adapters: Iterable[Any] = ()) -> Conversation:
        """A conversation from a file written by `save`."""
        from kedi.history.persistence import load

        return load(path, adapters=adapters)
