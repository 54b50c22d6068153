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
    loop = asyncio.get_running_loop()
    ended: asyncio.Future[tuple[Any, ...] | None] = loop.create_future()
    """The peer's ``aclose`` request, or None when its end closed."""

    def dispatch(message: tuple[Any, ...]) -> None:
        # Each request's task starts from the receiver's callback, in the order the requests came (a queue read
        # by a loop of its own cost one more loop turn per request).
        if ended.done():
            return  # after aclose nothing more is served
        rid, method, args, kw = message
        if method == "aclose":
            ended.set_result(message)
            return
        if method == "query_rows" and query_now is not None:
            # A search waits for nothing here: answered at once, its reply written at the end of this turn with
            # the others', and no task of its own (unless its reply is large: then a task writes it).
            rest = sender.batched(answer_now(rid, args, kw))
            if rest is None:
                return
            coro: Coroutine[Any, Any, None] = send_pickled(rest)
        else:
            coro = handle(rid, method, args, kw)
        task = loop.create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    def answer_now(rid: int, args: tuple[Any, ...], kw: dict[str, Any]) -> tuple[int, bool, Any]:
        assert query_now is not None
        try:
            if isinstance(kw.get("dense"), bytes):
                kw["dense"] = _floats(kw["dense"])
            return rid, True, query_now(*args, **kw)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
            return rid, False, _describe_exception(exc)

    def hang_up() -> None:
        if not ended.done():
            ended.set_result(None)

    sender = _Sender(conn)
    # An inline EdgeStore (the child's, the owner's) answers a search without waiting: see ``dispatch``.
    query_now = getattr(store, "query_rows_now", None) if getattr(store, "inline", False) else None

    async def send(reply: tuple[int, bool, Any]) -> None:
        try:
            await sender.send(reply)
        except (OSError, ValueError):
            pass  # the peer is gone: our reader sees EOF and we close

    async def send_pickled(data: bytes) -> None:
        try:
            await sender.send_pickled(data)
        except (OSError, ValueError):
            pass

    cursors: dict[int, AsyncIterator[Any]] = {}
    ids = itertools.count()
    tasks: set[asyncio.Task[None]] = set()

    async def handle(rid: int, method: str, args: tuple[Any, ...], kw: dict[str, Any]) -> None:
        try:
            if method == "ping":
                value: Any = await store.ping()
            elif method == "upsert":
                name, chunks, matrix, sparse = args
                value = await store.upsert(name, chunks, matrix.tolist(), sparse)
            elif method == "_scroll_open":
                cursor = next(ids)
                scroll, rest = args[0], args[1:]
                cursors[cursor] = (aiter(store.scroll_texts(*rest)) if scroll == "scroll_texts"
                                   else _packed(store.export_points(*rest)))
                value = cursor
            elif method == "_scroll_next":
                if args[0] not in cursors:  # a reconnected peer asking for a cursor of its old connection
                    raise StoreError("the embedded store's scroll ended with its connection")
                try:
                    value = await anext(cursors[args[0]])
                except StopAsyncIteration:
                    value = None
            elif method == "_scroll_close":
                it = cursors.pop(args[0], None)
                if it is not None and hasattr(it, "aclose"):
                    await it.aclose()
                value = None
            else:
                if method in ("query_rows", "mode_scores") and isinstance(kw.get("dense"), bytes):
                    kw["dense"] = _floats(kw["dense"])
                value = await getattr(store, method)(*args, **kw)
            reply: tuple[int, bool, Any] = (rid, True, value)
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the caller
            reply = (rid, False, _describe_exception(exc))
        await send(reply)

    receiver = _Receiver(conn, dispatch, hang_up)
    try:
        closing = await ended
        if closing is not None:
            await asyncio.gather(*tasks, return_exceptions=True)
            if not shared:
                await store.aclose()
            await send((closing[0], True, None))
    finally:
        await asyncio.gather(*tasks, return_exceptions=True)
        for it in cursors.values():
            if hasattr(it, "aclose"):
                with contextlib.suppress(Exception):
                    await it.aclose()
        receiver.close()
        sender.close(wait=True)


if __name__ == "__main__":  # the child: python -m service.store.child FD ROOT KWARGS_JSON
    _child_main(Connection(int(sys.argv[1])), sys.argv[2], json.loads(sys.argv[3]))
