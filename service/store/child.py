"""The store's side of the pipe: the child process that runs the embedded store for one parent
(``python -m service.store.child FD ROOT KWARGS_JSON``, started by
:meth:`~service.store.proxy.ProcessStore.open`), and :func:`serve_connection`, which answers one peer's requests,
in that child and in the store owner (:mod:`service.store.owner`) alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import signal
import sys
from collections.abc import AsyncIterator, Coroutine
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from service.store.base import VectorStore
from service.store.errors import StoreError
from service.store.framing import _describe_exception, _floats, _packed, _Receiver, _Sender

log = logging.getLogger("ragserve.store")


def _child_main(conn: Connection, root: str, kwargs: dict[str, Any]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the parent closes us
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(_serve(conn, Path(root), kwargs))
    finally:
        conn.close()


async def _serve(conn: Connection, root: Path, kwargs: dict[str, Any]) -> None:
    """The one-to-one child: open the store, serve its one parent's pipe, close the store when the pipe ends."""
    from service.store.edge import EdgeStore

    try:
        store = await EdgeStore.open(root, **kwargs, inline=True)  # nothing else runs here: see EdgeStore._run
    except BaseException as exc:  # noqa: BLE001 - the parent raises it (StoreLocked, LegacyStoreLayout ...)
        await refuse(conn, exc)
        return
    try:
        await serve_connection(store, conn, shared=False)
    finally:
        try:
            await store.aclose()  # idempotent: flushes and releases the lock when the parent went away
        except Exception as exc:  # noqa: BLE001 - closing must not raise past this point
            log.warning("closing the embedded store: %s", exc)


async def refuse(conn: Connection, exc: BaseException) -> None:
    """Answer the first request on ``conn`` (the opener's ping) with ``exc``: the store could not be opened."""
    inbox: asyncio.Queue[Any] = asyncio.Queue()
    receiver = _Receiver(conn, inbox.put_nowait, lambda: inbox.put_nowait(None))
    sender = _Sender(conn)
    try:
        first = await inbox.get()
        if first is not None:
            with contextlib.suppress(OSError, ValueError):
                await sender.send((first[0], False, _describe_exception(exc)))
    finally:
        receiver.close()
        sender.close(wait=True)


async def serve_connection(store: VectorStore, conn: Connection, *, shared: bool) -> None:
    """Answer one peer's requests on ``conn`` until it closes its end or sends ``aclose``. ``shared`` (the store
    owner, :mod:`service.store.owner`): the store serves other peers too, so this peer's ``aclose`` ends its own
    connection only and never closes the store; its open cursors are closed with it either way."""
    peer = _Peer(store, conn)
    receiver = _Receiver(conn, peer.dispatch, peer.hang_up)
    try:
        closing = await peer.ended
        if closing is not None:
            await asyncio.gather(*peer.tasks, return_exceptions=True)
            if not shared:
                await store.aclose()
            await peer.send((closing[0], True, None))
    finally:
        await asyncio.gather(*peer.tasks, return_exceptions=True)
        await peer.close_cursors()
        receiver.close()
        peer.sender.close(wait=True)


class _Peer:
    """One peer's side of :func:`serve_connection`: its requests as they arrive, their replies, its open cursors."""

    def __init__(self, store: VectorStore, conn: Connection) -> None:
        self._loop = asyncio.get_running_loop()
        self.ended: asyncio.Future[tuple[Any, ...] | None] = self._loop.create_future()
        """The peer's ``aclose`` request, or None when its end closed."""
        self._store = store
        self.sender = _Sender(conn)
        # An inline EdgeStore (the child's, the owner's) answers a search without waiting: see ``dispatch``.
        self._query_now = getattr(store, "query_rows_now", None) if getattr(store, "inline", False) else None
        self._cursors: dict[int, AsyncIterator[Any]] = {}
        self._ids = itertools.count()
        self.tasks: set[asyncio.Task[None]] = set()

    def dispatch(self, message: tuple[Any, ...]) -> None:
        # Each request's task starts from the receiver's callback, in the order the requests came (a queue read
        # by a loop of its own cost one more loop turn per request).
        if self.ended.done():
            return  # after aclose nothing more is served
        rid, method, args, kw = message
        if method == "aclose":
            self.ended.set_result(message)
            return
        if method == "query_rows" and self._query_now is not None:
            # A search waits for nothing here: answered at once, its reply written at the end of this turn with
            # the others', and no task of its own (unless its reply is large: then a task writes it).
            rest = self.sender.batched(self._answer_now(rid, args, kw))
            if rest is None:
                return
            coro: Coroutine[Any, Any, None] = self._send_pickled(rest)
        else:
            coro = self._handle(rid, method, args, kw)
        task = self._loop.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _answer_now(self, rid: int, args: tuple[Any, ...], kw: dict[str, Any]) -> tuple[int, bool, Any]:
        assert self._query_now is not None
        try:
            if isinstance(kw.get("dense"), bytes):
                kw["dense"] = _floats(kw["dense"])
            return rid, True, self._query_now(*args, **kw)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
            return rid, False, _describe_exception(exc)

    def hang_up(self) -> None:
        if not self.ended.done():
            self.ended.set_result(None)

    async def send(self, reply: tuple[int, bool, Any]) -> None:
        try:
            await self.sender.send(reply)
        except (OSError, ValueError):
            pass  # the peer is gone: our reader sees EOF and we close

    async def _send_pickled(self, data: bytes) -> None:
        try:
            await self.sender.send_pickled(data)
        except (OSError, ValueError):
            pass

    async def _handle(self, rid: int, method: str, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
        try:
            reply: tuple[int, bool, Any] = (rid, True, await self._call(method, args, kw))
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
            reply = (rid, False, _describe_exception(exc))
        await self.send(reply)

    async def _call(self, method: str, args: tuple[Any, ...], kw: dict[str, Any]) -> Any:
        store = self._store
        if method == "ping":
            return await store.ping()
        if method == "upsert":
            name, chunks, matrix, sparse = args
            return await store.upsert(name, chunks, matrix.tolist(), sparse)
        if method == "_scroll_open":
            return self._scroll_open(args[0], args[1:])
        if method == "_scroll_next":
            return await self._scroll_next(args[0])
        if method == "_scroll_close":
            return await self._scroll_close(args[0])
        if method in ("query_rows", "mode_scores") and isinstance(kw.get("dense"), bytes):
            kw["dense"] = _floats(kw["dense"])
        return await getattr(store, method)(*args, **kw)

    def _scroll_open(self, scroll: str, rest: tuple[Any, ...]) -> int:
        cursor = next(self._ids)
        self._cursors[cursor] = (aiter(self._store.scroll_texts(*rest)) if scroll == "scroll_texts"
                                 else _packed(self._store.export_points(*rest)))
        return cursor

    async def _scroll_next(self, cursor: int) -> Any:
        if cursor not in self._cursors:  # a reconnected peer asking for a cursor of its old connection
            raise StoreError("the embedded store's scroll ended with its connection")
        try:
            return await anext(self._cursors[cursor])
        except StopAsyncIteration:
            return None

    async def _scroll_close(self, cursor: int) -> None:
        it = self._cursors.pop(cursor, None)
        if it is not None and hasattr(it, "aclose"):
            await it.aclose()

    async def close_cursors(self) -> None:
        for it in self._cursors.values():
            if hasattr(it, "aclose"):
                with contextlib.suppress(Exception):
                    await it.aclose()


if __name__ == "__main__":  # the child: python -m service.store.child FD ROOT KWARGS_JSON
    _child_main(Connection(int(sys.argv[1])), sys.argv[2], json.loads(sys.argv[3]))
