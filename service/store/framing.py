"""What crosses the pipe between an API process and the store's process: framed pickles, written and read on
the event loop, the vectors' wire encoding, and failures as they travel.

Protocol: ``(request id, method, args, kwargs)`` one way; ``(request id, ok, value)`` back, where a failure is
the exception's class and state (:func:`_describe_exception`), rebuilt on the other side (:func:`_rebuild`), so a
:class:`StoreFull` or :class:`~service.store.errors.CollectionNotFound` raised in the store's process is raised in
the caller's unchanged. Frames are ``multiprocessing.connection``'s (what ``Connection.send`` and ``recv`` use).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import pickle
import select
import socket
import struct
import threading
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

import numpy as np

from service.store.types import StoredPoint

log = logging.getLogger("ragserve.store")

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



# --- vectors across the pipe ---------------------------------------------------------------------------------

def _f32(vector: Sequence[float]) -> bytes:
    """A query vector as it crosses the pipe: float32 bytes (the engine searches in float32, so nothing is lost),
    which pickle as one string, cheaper for both processes than a list of floats pickled and unpickled float by
    float.

    A list is packed by ``struct``, faster than numpy (which converts each Python float on its own), the same
    bytes; a value float32 cannot hold (``struct`` refuses what numpy makes infinite) and arrays go through
    numpy."""
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
    """:func:`_f32`'s bytes as the store takes them (a list: the binding reads one faster than an array)."""
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

