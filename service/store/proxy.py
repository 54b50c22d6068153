"""The embedded Qdrant Edge store in a process of its own, so that its engine calls never hold this process's GIL.

Qdrant Edge's Python binding keeps the GIL for the whole of every engine call. In the API's process an upsert that
grows a segment or rolls its WAL, the flush at the end of a job or an ``optimize`` froze the event loop: every
request and heartbeat waited. :class:`ProcessStore` runs the same :class:`~service.store.edge.EdgeStore` in a
child process (``python -m service.store.child``; one per data folder, holding the folder's lock) and forwards
each store method over a socket pair; the child's GIL is its own, so the API's loop only ever waits for pickling
its own arguments and results. Dense vectors cross as float32 arrays (a memory copy, not a million floats
pickled one by one), a query's one vector as float32 bytes.

The protocol and its framing are :mod:`service.store.framing`'s; the child's side is :mod:`service.store.child`.
A failure raised in the child (:class:`StoreFull`, :class:`~service.store.errors.CollectionNotFound` ...) is
raised here unchanged. Requests run concurrently in the child (its EdgeStore bounds and orders them as it does
in-process). The child ends when its pipe closes, so it never outlives its parent: a parent killed with SIGKILL
leaves a child that flushes, releases the folder's lock and exits.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Sequence
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from service.sparse.config import SparseConfig, SparseStats
from service.store.base import VectorStore
from service.store.errors import StoreError
from service.store.framing import _as_matrix, _f32, _rebuild, _Receiver, _Sender
from service.store.snapshots import SnapshotInfo
from service.store.types import (
    QUANTIZATIONS,
    Chunk,
    CollectionInfo,
    DocState,
    Filter,
    Fusion,
    Hit,
    ModeScores,
    SparseVector,
    StoredPoint,
)

log = logging.getLogger("ragserve.store")

START_TIMEOUT_S = 120.0


class ProcessStore(VectorStore):
    """A :class:`~service.store.edge.EdgeStore` in another process: a child of this one (:meth:`open`), or the
    store owner that several API processes share (:meth:`attach`, :mod:`service.store.owner`)."""

    backend = "edge"
    quantizations = QUANTIZATIONS

    def __init__(self, root: Path, process: Any, conn: Connection, min_free_bytes: int,
                 socket_path: Path | None = None) -> None:
        self.root = root
        self._process = process
        self._socket_path = socket_path
        self._conn = conn
        self._min_free = min_free_bytes
        self._ids = itertools.count()
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._loop = asyncio.get_running_loop()
        self._sender = _Sender(conn, self._unreachable)
        self._describe: dict[str, CollectionInfo] = {}
        self._closed = False
        self._broken = False
        self._reconnecting = asyncio.Lock()
        self._receiver = _Receiver(conn, self._on_reply, self._lost)

    @classmethod
    async def open(cls, root: Path, **kwargs: Any) -> ProcessStore:
        """Start the child, open the store there (its lock, its collections) and wait for it to answer."""
        process, conn = await asyncio.to_thread(spawn_piped, "service.store.child", str(root), json.dumps(kwargs))
        store = cls(root, process, conn, kwargs.get("min_free_bytes", 64 << 20))
        return await store._answering()

    @classmethod
    async def attach(cls, root: Path, socket_path: Path, *, min_free_bytes: int = 64 << 20) -> ProcessStore:
        """Connect to the store owner listening on ``socket_path`` (it holds ``root``'s lock). Where the owner is
        down, a call answers :class:`StoreError` (503) and the next one connects again."""
        store = cls(root, None, _connect(socket_path), min_free_bytes, socket_path)
        return await store._answering()

    async def _answering(self) -> ProcessStore:
        """This store once it answers a ping; where it does not (an error, or nothing in ``START_TIMEOUT_S``),
        close it (the child, or only the connection to the owner) and raise."""
        try:
            await asyncio.wait_for(self._run("ping"), START_TIMEOUT_S)
        except BaseException:
            await self.aclose()
            raise
        return self

    @property
    def shared(self) -> bool:
        """Whether other processes write through the same owner: then nothing read here is cached."""
        return self._socket_path is not None

    # --- the pipe ----------------------------------------------------------------------------------------

    def _on_reply(self, reply: tuple[int, bool, Any]) -> None:
        rid, ok, value = reply
        future = self._pending.pop(rid, None)
        if future is None or future.done():
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(_rebuild(value))

    def _lost(self) -> None:
        self._fail_pending("the embedded store's process ended")

    def _unreachable(self, exc: BaseException) -> None:
        """A batched write failed after its ``send`` had returned: the calls waiting on this connection fail
        now, as a call whose own write fails does, rather than when the receiver sees the end of the pipe."""
        self._fail_pending(f"the embedded store's process cannot be reached: {exc}")

    def _fail_pending(self, message: str) -> None:
        self._broken = True
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(StoreError(message))

    async def _run(self, method: str, *args: Any, **kwargs: Any) -> Any:
        if self._closed and method != "aclose":
            raise StoreError("the embedded store is closed")
        if self._broken and self._socket_path is not None:
            await self._reconnect()
        rid = next(self._ids)
        future: asyncio.Future[Any] = self._loop.create_future()
        self._pending[rid] = future
        try:
            await self._sender.send((rid, method, args, kwargs))
        except (OSError, ValueError) as exc:
            self._pending.pop(rid, None)
            raise StoreError(f"the embedded store's process cannot be reached: {exc}") from exc
        try:
            return await future
        finally:
            self._pending.pop(rid, None)

    async def _reconnect(self) -> None:
        """A new connection to the owner, once per loss however many calls wait for it; :class:`StoreError`
        while the owner is not listening (it died and its supervisor has not started the next one yet)."""
        assert self._socket_path is not None
        async with self._reconnecting:
            if not self._broken:
                return
            conn = _connect(self._socket_path)
            self._receiver.close()
            self._sender.close(wait=False)
            self._conn.close()
            self._conn = conn
            self._sender = _Sender(conn, self._unreachable)
            self._receiver = _Receiver(conn, self._on_reply, self._lost)
            self._describe.clear()
            self._broken = False
            log.info("reconnected to the store owner at %s", self._socket_path)

    # --- lifecycle ---------------------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._closed:
            return
        if self._process is None:  # attached: the owner and its store stay; only this connection ends
            self._closed = True
            self._lost()
            self._receiver.close()
            self._conn.close()
            self._sender.close(wait=False)
            return
        try:
            if self._process.poll() is None:
                await asyncio.wait_for(self._run("aclose"), 120)
        except (StoreError, asyncio.TimeoutError, OSError) as exc:
            log.warning("the embedded store's process did not close cleanly: %s", exc)
        finally:
            self._closed = True
            self._receiver.close()
            self._conn.close()  # the child's reader sees EOF and exits
            try:
                await asyncio.to_thread(self._process.wait, 30)
            except subprocess.TimeoutExpired:
                self._process.kill()
            self._sender.close(wait=False)

    async def flush(self) -> None:
        await self._run("flush")

    async def ping(self) -> bool:
        if self._process is not None and self._process.poll() is not None:
            return False
        if self._process is None:  # attached: an owner that is down (or not yet back) is "down", not an error
            try:
                return bool(await self._run("ping"))
            except StoreError:
                return False
        return bool(await self._run("ping"))

    async def snapshot(self, name: str | None, dest: Path) -> SnapshotInfo:
        """Taken by the child (it holds the shards and their write locks); its searches go on meanwhile."""
        return await self._run("snapshot", name, dest)

    def check_writable(self, need_bytes: int = 0) -> None:
        from service.store.edge_space import check_free_space

        check_free_space(self.root, self._min_free, need_bytes)

    # --- collections ---------------------------------------------------------------------------------------

    async def create_collection(
        self, name: str, *, dimensions: int, model: str, filter_fields: dict[str, str] | None = None,
        sparse: SparseConfig | None = None,
    ) -> CollectionInfo:
        self._describe.pop(name, None)
        info = await self._run("create_collection", name, dimensions=dimensions, model=model,
                               filter_fields=filter_fields, sparse=sparse)
        self._describe[name] = info
        return info

    async def list_collections(self) -> list[CollectionInfo]:
        return await self._run("list_collections")

    async def describe(self, name: str) -> CollectionInfo:
        """From this process's cache: every settings change goes through this object, which keeps it current;
        attached to a shared owner, from the owner each time."""
        if self.shared:  # another API process may have changed it through the owner
            return await self._run("describe", name)
        info = self._describe.get(name)
        if info is None:
            info = self._describe[name] = await self._run("describe", name)
        return info

    async def get_collection(self, name: str) -> CollectionInfo:
        return await self._run("get_collection", name)

    async def build_index(self, name: str) -> CollectionInfo:
        return await self._run("build_index", name)

    async def delete_collection(self, name: str) -> None:
        try:
            await self._run("delete_collection", name)
        finally:
            self._describe.pop(name, None)

    async def ensure_tenant_index(self, name: str, field: str) -> None:
        await self._run("ensure_tenant_index", name, field)

    async def set_sparse_settings(self, name: str, sparse: SparseConfig, stats: SparseStats) -> CollectionInfo:
        self._describe.pop(name, None)
        info = await self._run("set_sparse_settings", name, sparse, stats)
        self._describe[name] = info
        return info

    # --- points --------------------------------------------------------------------------------------------

    async def upsert(
        self, name: str, chunks: Sequence[Chunk], vectors: Sequence[Sequence[float]],
        sparse: Sequence[SparseVector | None] | None = None,
    ) -> None:
        matrix = vectors if isinstance(vectors, np.ndarray) else await asyncio.to_thread(_as_matrix, vectors)
        await self._run("upsert", name, list(chunks), matrix, list(sparse) if sparse is not None else None)

    async def delete(self, name: str, where: Filter) -> None:
        await self._run("delete", name, where)

    async def scroll_states(self, name: str, where: Filter | None) -> dict[str, DocState]:
        return await self._run("scroll_states", name, where)

    async def read_chunks(self, name: str, where: Filter, *, limit: int) -> list[Hit]:
        return await self._run("read_chunks", name, where, limit=limit)

    async def engine_query(
        self, name: str, *, dense: Sequence[float] | None = None, sparse: SparseVector | None = None,
        limit: int, query_filter: Filter | None = None, fusion: Fusion | None = None,
        idf_corpus: Filter | None = None,
    ) -> list[Hit]:
        rows = await self._run("query_rows", name, dense=_f32(dense) if dense is not None else None,
                               sparse=sparse, limit=limit, query_filter=query_filter, fusion=fusion,
                               idf_corpus=idf_corpus)
        return [Hit(*row) for row in rows]

    async def mode_scores(
        self, name: str, ids: Sequence[str], *, dense: Sequence[float], sparse: SparseVector,
        idf_corpus: Filter | None = None,
    ) -> dict[str, ModeScores]:
        # One round trip: the child asks its engine both queries.
        return await self._run("mode_scores", name, list(ids), dense=_f32(dense), sparse=sparse,
                               idf_corpus=idf_corpus)

    async def count(self, name: str, where: Filter | None = None) -> int:
        return await self._run("count", name, where)

    async def scroll_texts(self, name: str, page_size: int = 512) -> AsyncIterator[list[tuple[str, str]]]:
        async for page in self._pages("scroll_texts", name, page_size):
            yield page

    async def export_points(self, name: str, page_size: int = 256) -> AsyncIterator[list[StoredPoint]]:
        async for ids, payloads, matrix, sparse in self._pages("export_points", name, page_size):
            yield [StoredPoint(i, p, matrix[row], s)
                   for row, (i, p, s) in enumerate(zip(ids, payloads, sparse, strict=True))]

    async def _pages(self, method: str, name: str, page_size: int) -> AsyncIterator[Any]:
        """One of the child store's paged iterators, a page per round trip (the child keeps the cursor)."""
        cursor = await self._run("_scroll_open", method, name, page_size)
        try:
            while (page := await self._run("_scroll_next", cursor)) is not None:
                yield page
        finally:
            await self._run("_scroll_close", cursor)

    async def set_importing(self, name: str, export_id: str | None) -> CollectionInfo:
        self._describe.pop(name, None)
        info = await self._run("set_importing", name, export_id)
        self._describe[name] = info
        return info

    async def set_quantization(self, name: str, quantization: str) -> CollectionInfo:
        self._describe.pop(name, None)
        info = await self._run("set_quantization", name, quantization)
        self._describe[name] = info
        return info

    async def set_sparse_vectors(self, name: str, vectors: Sequence[tuple[str, SparseVector]]) -> None:
        await self._run("set_sparse_vectors", name, list(vectors))


def spawn_piped(module: str, *args: str) -> tuple[subprocess.Popen[bytes], Connection]:
    """Start ``python -m module FD *args`` holding one end of a socket pair (its number passed as FD); our end,
    as a :class:`Connection`, is the child's lifeline: it exits when that closes."""
    ours, theirs = socket.socketpair()
    try:
        process = subprocess.Popen([sys.executable, "-m", module, str(theirs.fileno()), *args],
                                   pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
    except BaseException:
        ours.close()
        raise
    finally:
        theirs.close()
    return process, Connection(ours.detach())


def _connect(socket_path: Path) -> Connection:
    """A connection to the owner's Unix socket; :class:`StoreError` where nothing listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(short_path(socket_path))
    except OSError as exc:
        sock.close()
        raise StoreError(f"the embedded store's owner does not answer at {socket_path}: {exc}") from exc
    return Connection(sock.detach())


def short_path(path: Path) -> str:
    """``path`` as a Unix socket address: one over the 107 bytes an address holds is reached through
    ``/proc/self/fd`` of its folder (Linux), so a deep data folder still works."""
    text = str(path)
    if len(os.fsencode(text)) < 100:
        return text
    folder = str(path.parent)
    if folder not in _held_dirs:  # kept open: the address stays valid for this process's later connections
        _held_dirs[folder] = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    return f"/proc/self/fd/{_held_dirs[folder]}/{path.name}"


_held_dirs: dict[str, int] = {}
