"""Clients an adapter keeps open for the length of one run.

A run (`Program.run`, `@kedi.query`, or a procedure called from Python) opens
a `run_scope`. An adapter that talks HTTP asks the scope for its client, so
every call of the run, parallel ones included, shares one connection pool
(one TCP and TLS handshake per host, not one per call), and the scope closes
the clients when the run ends, on the run's own event loop. A client cannot
outlive its run: its pooled connections belong to that run's event loop.
Outside a scope (an adapter awaited directly) an adapter opens a client per
call.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar

import anyio


class AsyncClosable(Protocol):
    """A client the scope closes when the run ends (e.g. `httpx.AsyncClient`)."""

    async def aclose(self) -> None: ...


ClientT = TypeVar("ClientT", bound=AsyncClosable)


class RunResources:
    """The clients opened during one run, one per owner (usually an adapter)."""

    def __init__(self) -> None:
        # id(owner) -> (owner, client); the owner is kept so its id stays unique.
        self._clients: dict[int, tuple[object, Any]] = {}

    def client(self, owner: object, open_client: Callable[[], ClientT]) -> ClientT:
        """`owner`'s client for this run, opened by `open_client` on first use."""
        entry = self._clients.get(id(owner))
        if entry is None:
            # Synchronous on purpose: no await between the lookup and the store,
            # so parallel calls of one run never open two clients.
            entry = self._clients[id(owner)] = (owner, open_client())
        return entry[1]

    async def aclose(self) -> None:
        """Close every client, even when the run is being cancelled."""
        clients = [client for _, client in self._clients.values()]
        if not clients:
            return  # most runs of a batch: no shield scope to enter
        self._clients.clear()
        with anyio.CancelScope(shield=True):
            for client in reversed(clients):
                await client.aclose()


_current: ContextVar[RunResources | None] = ContextVar("kedi_run_resources", default=None)


def current_resources() -> RunResources | None:
    """The resources of the run in progress, or None outside a run."""
    return _current.get()


@asynccontextmanager
async def run_scope() -> AsyncIterator[RunResources]:
    """Open a run's resources, or join the enclosing run's when one is open."""
    outer = _current.get()
    if outer is not None:
        yield outer
        return
    resources = RunResources()
    token = _current.set(resources)
    try:
        yield resources
    finally:
        _current.reset(token)
        await resources.aclose()
