"""One ``httpx.AsyncClient`` per running event loop, closed on that loop as the loop shuts down.

An ``httpx.AsyncClient``'s pooled connections belong to the loop that opened them: reused from another loop
they fail with ``RuntimeError: Event loop is closed`` (a second ``asyncio.run(...)``, LlamaIndex's
``QueryFusionRetriever(use_async=True)``, which runs each fusion in a fresh loop). :class:`PerLoop` hands each
loop a client of its own, made on the loop's first request.

Closing is the subtle part: once a loop is closed, nothing can be awaited on it, and its sockets would linger
until the garbage collector found them (with a ``ResourceWarning``). So each client is owned by an async
generator started on its loop and parked at a ``yield``; the loop tracks the async generators started on it
and ``loop.shutdown_asyncgens()`` (which ``asyncio.run``, ``asyncio.Runner`` and pytest-asyncio call before
closing) resumes it, and its ``finally`` awaits ``client.aclose()`` on the right loop, while it still runs.
A loop closed without that call (``loop.close()`` alone) leaves its client to the garbage collector.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass

import httpx


async def _owner(client: httpx.AsyncClient) -> AsyncGenerator[httpx.AsyncClient, None]:
    try:
        yield client
    finally:
        await client.aclose()


class PerLoop:
    """``await get()``: this loop's client (made with ``factory`` on first use); ``await aclose()``: close this
    loop's client now (the others close with their loops)."""

    def __init__(self, factory: Callable[[], httpx.AsyncClient]) -> None:
        self._factory = factory
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Owned] = weakref.WeakKeyDictionary()

    async def get(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        for closed in [lp for lp in self._clients if lp.is_closed()]:
            del self._clients[closed]  # closed without shutdown_asyncgens: nothing left to await on
        owned = self._clients.get(loop)
        if owned is None:
            owner = _owner(self._factory())
            owned = _Owned(owner, await owner.__anext__())  # started here: this loop's shutdown closes it
            self._clients[loop] = owned
        return owned.client

    async def aclose(self) -> None:
        owned = self._clients.pop(asyncio.get_running_loop(), None)
        if owned is not None:
            await owned.owner.aclose()


@dataclass(frozen=True)
class _Owned:
    owner: AsyncGenerator[httpx.AsyncClient, None]
    """Holds the generator alive: the loop keeps only a weak reference to the generators it tracks."""
    client: httpx.AsyncClient
