"""The embedded Qdrant Edge store in a process of its own, so that its engine calls never hold this process's GIL.

Qdrant Edge's Python binding keeps the GIL for the whole of every engine call. In the API's process an upsert that
grows a segment or rolls its WAL (measured: up to 360 ms), the flush at the end of a job (up to 480 ms) or an
``optimize`` froze the event loop: every request and heartbeat waited. :class:`ProcessStore` runs the same
:class:`~service.store.edge.EdgeStore` in a child process (``python -m service.store.process``; one per data
folder, holding the folder's lock) and forwards each store method over a socket pair; the child's GIL is its own,
so the API's loop only ever waits for pickling its own arguments and results. Dense vectors cross as float32
arrays (a memory copy, not a million floats pickled one by one), a query's one vector as float32 bytes.

Protocol: ``(request id, method, args, kwargs)`` one way; ``(request id, ok, value)`` back, where a failure is
the exception's class and state, rebuilt on this side, so a :class:`StoreFull` or
:class:`~service.store.errors.CollectionNotFound` raised in the child is raised here unchanged. Requests run
concurrently in the child (its EdgeStore bounds and orders them as it does in-process). The child ends when its
pipe closes, so it never outlives its parent: a parent killed with SIGKILL leaves a child that flushes, releases
the folder's lock and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import logging
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

from service.sparse.config import SparseConfig, SparseStats
from service.store.base import VectorStore
from service.store.errors import StoreError
from service.store.snapshots import SnapshotInfo
from service.store.types import (
    INT8,
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
INLINE_BYTES = 32 << 10
"""Messages up to this size (a search, its hits, a describe) are written from the event loop itself when the
socket takes them at once, and unpickled on it when they arrive; larger ones (an upsert's batch, a scroll page)
are written and unpickled in a thread. A search used to cost four thread hops on the way there and back."""
PROTOCOL = pickle.HIGHEST_PROTOCOL
"""Messages are plain pickles (``multiprocessing``'s ``ForkingPickler`` copied its table of reducers for every
message, for socket and connection objects that never cross this pipe)."""
BATCH_FRAMES = 8
"""Small messages written together at most: a turn's ninth goes in a new write. With no bound, a turn of 32
searches wrote all 32 requests at once, the store's process answered all 32 before it wrote a reply, and the two
processes took turns instead of working at once: one API process under `wrk` served 1,635 searches/s against
2,028 with a write per message, and 2,051 with this bound (docs/benchmarks.md, "Stop 32")."""
READ_BYTES = 64 << 10
"""Bytes read from the socket per readiness callback: a large message arrives over many loop turns."""


def _header(size: int) -> bytes:
    """``multiprocessing.connection``'s length prefix (what ``Connection.recv`` reads) for ``size`` bytes."""
    return struct.pack("!iQ", -1, size) if size > 0x7FFFFFFF else struct.pack("!i", size)


def _send_all(sock: socket.socket, data: bytes) -> None:
    """Write all of ``data``, blocking this thread, whether the socket is in blocking mode or not: uvloop's
    ``add_reader`` (the :class:`_Receiver` on the same socket) puts it in non-blocking mode."""
    view = memoryview(data)
    poller = None
    while view:
        try:
            sent = sock.send(view)
        except (BlockingIOError, InterruptedError):
            if poller is None:
                poller = select.poll()
                poller.register(sock.fileno(), select.POLLOUT)
            poller.poll()
            continue
        view = view[sent:]


class _Sender:
    """Writes framed messages (``multiprocessing.connection``'s framing, which ``Connection.recv`` reads) to one
    socket, whole and in the order they were sent.

    Small messages sent in one turn of the event loop are written together, :data:`BATCH_FRAMES` at a time and
    the rest at the end of the turn, in one write each from the loop where the socket takes them at once. With
    many searches in flight, one write and one wake-up of the other process then carry several requests (or
    replies): that cut ragserve's CPU per search by about a fifth (docs/benchmarks.md, "Stop 32"). Large
    messages, and whatever the socket would not take at once, are written from a thread.

    A small message's ``send`` returns before it is written; a write that fails later is reported to
    ``on_error`` (the peer is gone: nothing waiting for a reply on this socket will get one)."""

    def __init__(self, conn: Connection, on_error: Callable[[BaseException], None] | None = None) -> None:
        self._conn = conn
        self._sock = socket.socket(fileno=os.dup(conn.fileno()))
        self._lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="store-send")
        self._in_pool = 0
        """Writes handed to the thread and not finished. Only the loop adds to it (under ``_counter``)."""
        self._counter = threading.Lock()
        self._batch: list[bytes] = []
        """The small frames sent in this turn of the loop, written by :meth:`_flush` at its end."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._on_error = on_error

    async def send(self, message: Any) -> None:
        data = self.batched(message)
        if data is not None:
            await self.send_pickled(data)

    def batched(self, message: Any) -> bytes | None:
        """Queue ``message`` for the end of this turn and return None, where it is small and the thread has
        nothing to write (a write queued there must go out before it); otherwise its pickle, for
        :meth:`send_pickled`."""
        data = pickle.dumps(message, PROTOCOL)
        if len(data) > INLINE_BYTES or self._in_pool:
            return data
        if not self._batch:
            self._loop = asyncio.get_running_loop()
            self._loop.call_soon(self._flush)
        self._batch.append(_header(len(data)) + data)
        if len(self._batch) >= BATCH_FRAMES:
            self._flush()  # the peer starts on these while this turn goes on
        return None

    async def send_pickled(self, data: bytes) -> None:
        """Write a pickled message from the thread, after what was sent before it."""
        self._flush()
        await self._in_thread(self._send_blocking, data)

    def _flush(self) -> None:
        """Write this turn's small frames: from the loop, in one write, where the socket takes them all at once;
        otherwise the rest goes from the thread, which holds the lock until it is written, so that no later write
        gets between."""
        if not self._batch:
            return  # already written: a large message or the close came first
        frames = self._batch[0] if len(self._batch) == 1 else b"".join(self._batch)
        self._batch.clear()
        try:
            if self._in_pool or not self._lock.acquire(blocking=False):
                self._report(self._submit(self._send_frames, frames))
                return
            try:
                sent = self._sock.send(frames, socket.MSG_DONTWAIT)
            except BlockingIOError:
                sent = 0
            except BaseException:
                self._lock.release()
                raise
            if sent == len(frames):
                self._lock.release()
                return
            self._report(self._submit(self._finish, frames[sent:]))
        except (OSError, ValueError, RuntimeError) as exc:  # the socket closed, or the thread's pool shut down
            self._failed(exc)

    def _report(self, future: Future[None]) -> None:
        """Hand a batch's write in the thread to :meth:`_failed` should it fail (on the loop's thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return

        def done(f: Future[None]) -> None:
            exc = f.exception()
            if exc is not None:
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody is waiting
                    loop.call_soon_threadsafe(self._failed, exc)

        future.add_done_callback(done)

    def _failed(self, exc: BaseException) -> None:
        if self._on_error is not None:
            self._on_error(exc)

    def _submit(self, write: Callable[[bytes], None], data: bytes) -> Future[None]:
        with self._counter:
            self._in_pool += 1
        try:
            return self._pool.submit(self._counted, write, data)
        except BaseException:
            with self._counter:
                self._in_pool -= 1
            raise

    async def _in_thread(self, write: Callable[[bytes], None], data: bytes) -> None:
        future = self._submit(write, data)
        # Shielded: a cancelled caller must not cancel a write before it ran (a frame's rest never written, the
        # lock never released); the write goes out whole, and the reply finds no one waiting for it.
        await asyncio.shield(asyncio.wrap_future(future))

    def _counted(self, write: Callable[[bytes], None], data: bytes) -> None:
        try:
            write(data)
        finally:
            with self._counter:
                self._in_pool -= 1

    def _finish(self, rest: bytes) -> None:
        try:
            _send_all(self._sock, rest)
        finally:
            self._lock.release()

    def _send_blocking(self, data: bytes) -> None:
        with self._lock:  # the body is not copied behind its header: it can be an upsert's megabytes
            _send_all(self._sock, _header(len(data)))
            _send_all(self._sock, data)

    def _send_frames(self, frames: bytes) -> None:
        with self._lock:
            _send_all(self._sock, frames)

    def close(self, *, wait: bool) -> None:
        """Write what was sent in this turn, then close; a write failing now is nobody's to hear of."""
        self._on_error = None
        self._flush()
        self._pool.shutdown(wait=wait)
        self._sock.close()


def _unpickle(frame: bytes) -> tuple[bool, Any]:
    """``(True, message)``, or ``(False, the error)`` for a frame that does not unpickle."""
    try:
        return True, pickle.loads(frame)
    except Exception as exc:  # noqa: BLE001 - any failure means the same: a broken pipe
        return False, exc


class _Receiver:
    """Reads framed messages (``multiprocessing.connection``'s framing, as ``Connection.send`` writes them) from
    one socket on the event loop, and hands each one, in the order they came, to ``on_message``; then calls
    ``on_eof`` once, when the peer closed its end or the socket failed.

    The loop itself waits for the socket (``add_reader``), so a reply wakes the loop and nothing else: a reader
    thread blocked in ``recv`` had to wake, take the GIL and wake the loop in its turn, two more context
    switches per store call on a machine whose cores are busy. Messages up to :data:`INLINE_BYTES` are
    unpickled in the readiness callback; larger ones in a thread, with later messages held back until they are
    delivered (the child must see an upsert before a delete sent after it).
    """

    def __init__(self, conn: Connection, on_message: Callable[[Any], None], on_eof: Callable[[], None]) -> None:
        self._sock = socket.socket(fileno=os.dup(conn.fileno()))
        self._loop = asyncio.get_running_loop()
        self._on_message = on_message
        self._on_eof = on_eof
        self._buffer = bytearray()
        self._queued: deque[bytes | None] = deque()
        self._pump: asyncio.Task[None] | None = None
        self._reading = True
        self._loop.add_reader(self._sock.fileno(), self._readable)

    def _readable(self) -> None:
        try:
            data = self._sock.recv(READ_BYTES, socket.MSG_DONTWAIT)  # per call: the fd is shared with the sender
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._stop_reading()
            self._push(None)
            return
        buffer = self._buffer
        buffer += data
        while self._reading and len(buffer) >= 4:  # a broken frame stops the reading mid-buffer
            (size,) = struct.unpack_from("!i", buffer)
            head = 4
            if size == -1:  # over 2 GiB: a second, 8-byte length follows
                if len(buffer) < 12:
                    return
                (size,) = struct.unpack_from("!Q", buffer, 4)
                head = 12
            end = head + size
            if len(buffer) < end:
                return
            with memoryview(buffer) as view:
                frame = bytes(view[head:end])
            del buffer[:end]
            self._push(frame)

    def _push(self, frame: bytes | None) -> None:
        if frame is not None and len(frame) <= INLINE_BYTES and not self._queued and self._pump is None:
            self._deliver(frame)
            return
        self._queued.append(frame)
        if self._pump is None:
            self._pump = self._loop.create_task(self._drain())

    def _deliver(self, frame: bytes) -> None:
        self._hand_over(*_unpickle(frame))

    def _hand_over(self, ok: bool, message: Any) -> None:
        if ok:
            self._on_message(message)
            return
        # A frame that does not unpickle: the pipe cannot be trusted after it, so nothing queued behind it is
        # delivered either, and the owner hears of it as the pipe's end.
        log.error("the store pipe carried a message that does not unpickle: %r", message)
        self._queued.clear()
        self._stop_reading()
        self._on_eof()

    async def _drain(self) -> None:
        try:
            while self._queued:
                frame = self._queued.popleft()
                if frame is None:
                    self._on_eof()
                    return
                if len(frame) <= INLINE_BYTES:
                    self._deliver(frame)
                else:
                    self._hand_over(*await asyncio.to_thread(_unpickle, frame))
        finally:
            self._pump = None

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._sock.fileno())

    def close(self) -> None:
        self._stop_reading()
        self._sock.close()


class ProcessStore(VectorStore):
    """A :class:`~service.store.edge.EdgeStore` in another process: a child of this one (:meth:`open`), or the
    store owner that several API processes share (:meth:`attach`, :mod:`service.store.owner`)."""

    backend = "edge"
    quantizations = frozenset({INT8})

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
        process, conn = await asyncio.to_thread(spawn_piped, "service.store.process", str(root), json.dumps(kwargs))
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
        from service.store.edge import check_free_space

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


def _f32(vector: Sequence[float]) -> bytes:
    """A query vector as it crosses the pipe: float32 bytes (the engine searches in float32, so nothing is lost),
    which pickle as one string; a list of 1024 floats pickled and unpickled float by float cost about 50 us of
    the two processes' CPU per search, the bytes and their conversions about 35.

    A list is packed by ``struct`` (6.5 us for 1024 floats, against numpy's 17: numpy converts each Python float
    on its own), the same bytes; a value float32 cannot hold (``struct`` refuses what numpy makes infinite) and
    arrays go through numpy."""
    if not isinstance(vector, np.ndarray):
        try:
            return _packer(len(vector)).pack(*vector)
        except (OverflowError, struct.error, TypeError):
            pass
    return np.asarray(vector, dtype="<f4").tobytes()


@functools.lru_cache(maxsize=16)
def _packer(size: int) -> struct.Struct:
    return struct.Struct(f"<{size}f")


def _floats(data: bytes) -> list[float]:
    """:func:`_f32`'s bytes as the store takes them (a list: the binding reads one 5x faster than an array)."""
    return np.frombuffer(data, dtype="<f4").tolist()  # type: ignore[no-any-return]


def _as_matrix(vectors: Sequence[Sequence[float]], rows: int = 64) -> np.ndarray:
    """float32 rows, converted a slice at a time: one conversion of thousands of lists would hold the GIL for
    tens of milliseconds in a single call."""
    if not vectors:
        return np.zeros((0, 0), dtype=np.float32)
    return np.concatenate([np.asarray(vectors[i:i + rows], dtype=np.float32) for i in range(0, len(vectors), rows)])


async def _packed(pages: AsyncIterator[list[StoredPoint]]) -> AsyncIterator[tuple[Any, ...]]:
    """Export pages as they cross the pipe: the dense vectors as one float32 matrix (a memory copy, not a
    thousand floats per point pickled one by one), the rest as lists."""
    async for page in pages:
        matrix = np.asarray([p.dense for p in page], dtype=np.float32) if page else np.zeros((0, 0), np.float32)
        yield [p.id for p in page], [p.payload for p in page], matrix, [p.sparse for p in page]


# --- failures across the pipe ---------------------------------------------------------------------------------

def _describe_exception(exc: BaseException) -> tuple[type[BaseException], str, dict[str, Any]]:
    state = {k: v for k, v in vars(exc).items() if not k.startswith("__")} if hasattr(exc, "__dict__") else {}
    return type(exc), str(exc), state


def _rebuild(described: tuple[type[BaseException], str, dict[str, Any]]) -> BaseException:
    """The child's exception as it was: same class, message and attributes (``code``, ``param`` ...)."""
    cls, message, state = described
    exc = cls.__new__(cls)
    BaseException.__init__(exc, message)
    exc.__dict__.update(state)
    return exc


# --- the child --------------------------------------------------------------------------------------------

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


if __name__ == "__main__":  # the child: python -m service.store.process FD ROOT KWARGS_JSON
    _child_main(Connection(int(sys.argv[1])), sys.argv[2], json.loads(sys.argv[3]))
