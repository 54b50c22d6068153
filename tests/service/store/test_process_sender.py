"""The store process's pipe: small messages are written from the event loop, those of one turn in one write,
large ones (or what the socket would not take at once) from a thread, and every message arrives whole and in
order, however they interleave."""

from __future__ import annotations

import asyncio
import os
import pickle
import socket
import struct
import threading
from multiprocessing.connection import Connection
from multiprocessing.reduction import ForkingPickler

import pytest

from service.store import framing
from service.store.framing import _Sender


async def test_mixed_sizes_sent_concurrently_arrive_whole() -> None:
    ours, theirs = socket.socketpair()
    sender, receiver = _Sender(Connection(ours.detach())), Connection(theirs.detach())
    sizes = [10, 300_000, 5_000, framing.INLINE_BYTES - 100, 1_000_000, 20] * 20
    messages = [(i, bytes([i % 251]) * n) for i, n in enumerate(sizes)]

    def receive_all() -> list[tuple[int, bytes]]:
        return [receiver.recv() for _ in messages]

    received = asyncio.create_task(asyncio.to_thread(receive_all))
    await asyncio.sleep(0.05)  # the receiver starts late: the socket's buffer fills and small sends go partial
    await asyncio.gather(*(sender.send(m) for m in messages))
    got = await received
    assert sorted(got) == sorted(messages)
    sender.close(wait=True)
    receiver.close()


async def test_a_small_message_does_not_hop_to_the_thread() -> None:
    ours, theirs = socket.socketpair()
    sender, receiver = _Sender(Connection(ours.detach())), Connection(theirs.detach())
    hops = 0
    real = sender._pool.submit

    def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal hops
        hops += 1
        return real(*args, **kwargs)

    sender._pool.submit = counting  # type: ignore[method-assign]
    for i in range(50):
        await sender.send((i, "query", (), {}))
        await asyncio.sleep(0)  # a turn of the loop: the frame is written at its end
    assert [receiver.recv() for _ in range(50)] == [(i, "query", (), {}) for i in range(50)]
    assert hops == 0
    await sender.send((50, b"x" * (framing.INLINE_BYTES + 1)))
    assert receiver.recv() == (50, b"x" * (framing.INLINE_BYTES + 1)) and hops == 1
    sender.close(wait=True)
    receiver.close()


async def _receive(sender: _Sender, receiver_conn: Connection, messages: list, close: bool = True) -> tuple[list, int]:
    """Send ``messages`` through ``sender`` and read them with a :class:`_Receiver` on this loop; what arrived, in
    order, and how many times EOF was reported (after the sender closed when ``close``)."""
    got: list = []
    eofs = 0
    done = asyncio.Event()

    def on_eof() -> None:
        nonlocal eofs
        eofs += 1
        done.set()

    all_in = asyncio.Event()

    def on_message(message: object) -> None:
        got.append(message)
        if len(got) == len(messages):
            all_in.set()

    receiver = framing._Receiver(receiver_conn, on_message, on_eof)
    for m in messages:
        await sender.send(m)
    if close:
        sender.close(wait=True)
        sender._conn.close()  # the sending end closed: the receiver sees EOF
        await asyncio.wait_for(done.wait(), 60)
    else:
        await asyncio.wait_for(all_in.wait(), 60)
    receiver_conn.close()
    receiver.close()
    return got, eofs


async def test_the_receiver_delivers_every_message_whole_and_in_order_then_eof() -> None:
    """Large messages are unpickled in a thread; a small one right behind a large one still waits its turn (the
    child must apply an upsert before a delete sent after it)."""
    ours, theirs = socket.socketpair()
    sender = _Sender(Connection(ours.detach()))
    sizes = [10, framing.INLINE_BYTES + 1, 5, 3_000_000, 0, framing.INLINE_BYTES, 200_000, 7] * 5
    messages = [(i, "m", bytes([i % 251]) * n) for i, n in enumerate(sizes)]
    got, eofs = await _receive(sender, Connection(theirs.detach()), messages)
    assert got == messages
    assert eofs == 1


async def test_the_receiver_reads_on_the_loop_without_a_thread_for_small_messages(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    hops = 0
    real = asyncio.to_thread

    async def counting(*args, **kwargs):  # type: ignore[no-untyped-def]
        nonlocal hops
        hops += 1
        return await real(*args, **kwargs)

    monkeypatch.setattr(framing.asyncio, "to_thread", counting)
    ours, theirs = socket.socketpair()
    sender = _Sender(Connection(ours.detach()))
    messages = [(i, True, [("id", 0.5)] * 10) for i in range(100)]
    threads_before = {t.name for t in threading.enumerate()}
    got, _ = await _receive(sender, Connection(theirs.detach()), messages, close=False)
    assert got == messages
    assert hops == 0
    assert {t.name for t in threading.enumerate()} <= threads_before  # no reader thread was started
    sender.close(wait=True)


async def test_a_frame_split_across_reads_is_put_back_together() -> None:
    """The length prefix and the body arrive in pieces (a byte at a time): the receiver waits for the whole frame."""
    ours, theirs = socket.socketpair()
    raw = ours
    got: list = []
    arrived = asyncio.Event()

    def on_message(message: object) -> None:
        got.append(message)
        arrived.set()

    receiver = framing._Receiver(Connection(theirs.detach()), on_message, lambda: None)
    payload = bytes(ForkingPickler.dumps(("split", b"z" * 1000)))
    frame = struct.pack("!i", len(payload)) + payload
    for i in range(len(frame)):
        assert not got  # nothing is delivered before the frame's last byte
        raw.send(frame[i:i + 1])
        await asyncio.sleep(0)  # a turn of the loop: the receiver's readiness callback may run
    await asyncio.wait_for(arrived.wait(), 60)
    assert got == [("split", b"z" * 1000)]
    receiver.close()
    raw.close()


async def test_messages_arrive_whole_when_the_socket_is_in_non_blocking_mode() -> None:
    """uvloop's ``add_reader`` (the API's loop) puts the shared socket in non-blocking mode: the sender's thread
    must still write every byte of a message the socket cannot take at once (it raised EAGAIN: a 503 for every
    prefill request)."""
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    theirs.setblocking(False)
    sender = _Sender(Connection(ours.detach()))
    messages = [(i, "upsert", bytes([i]) * n) for i, n in enumerate([3_000_000, 10, framing.INLINE_BYTES * 3, 5] * 3)]
    got, eofs = await _receive(sender, Connection(theirs.detach()), messages)
    assert got == messages and eofs == 1


@pytest.mark.parametrize("size", [100, framing.INLINE_BYTES + 100])
async def test_a_frame_that_does_not_unpickle_ends_the_pipe_and_nothing_behind_it_is_delivered(size: int) -> None:
    """Inline or in the thread, the same answer: the owner hears of it as the pipe's end, once."""
    ours, theirs = socket.socketpair()
    got: list = []
    ended = asyncio.Event()
    eofs = 0

    def on_eof() -> None:
        nonlocal eofs
        eofs += 1
        ended.set()

    receiver = framing._Receiver(Connection(theirs.detach()), got.append, on_eof)
    garbage = b"\x00not a pickle" + b"x" * size
    good = bytes(ForkingPickler.dumps(("after", 1)))
    ours.sendall(struct.pack("!i", len(garbage)) + garbage + struct.pack("!i", len(good)) + good)
    await asyncio.wait_for(ended.wait(), 60)
    # An absence has no event to wait on: a few turns of the loop let a wrongly delivered message or a second
    # end show up, if the receiver were to produce one.
    await asyncio.sleep(0.05)
    assert (got, eofs) == ([], 1)
    receiver.close()
    ours.close()


async def test_a_small_write_never_overtakes_one_queued_for_the_thread() -> None:
    """The thread is busy elsewhere (as a loaded machine delays it) while a large message waits in its queue;
    a small one sent then, which the socket takes only in part, must not hold the lock that the queued write
    waits for while its own rest waits behind that write in the same queue (a deadlock, seen under load)."""
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # a 20 KB message goes out only in part
    sender, receiver = _Sender(Connection(ours.detach())), Connection(theirs.detach())
    gate = threading.Event()
    sender._pool.submit(gate.wait)  # the sender's thread, occupied until the gate opens
    large, small = (0, b"a" * (framing.INLINE_BYTES + 1)), (1, b"b" * 20_000)
    first = asyncio.create_task(sender.send(large))
    await asyncio.sleep(0)  # the task runs up to its await: the large write is queued behind the gate
    assert sender._pool._work_queue.qsize() == 1
    second = asyncio.create_task(sender.send(small))
    await asyncio.sleep(0)  # the small write has made its choice: inline, or the thread
    gate.set()
    received = asyncio.create_task(asyncio.to_thread(lambda: [receiver.recv(), receiver.recv()]))
    # A liveness bound, not a speed one: the two writes take milliseconds; a deadlock never ends.
    done, _ = await asyncio.wait({first, second, received}, timeout=60)
    if received not in done:  # free the threads, so that the failure is reported and the session can end
        sender._lock.release()
        with socket.socket(fileno=os.dup(receiver.fileno())) as end:
            end.shutdown(socket.SHUT_RDWR)
        await asyncio.wait({first, second, received}, timeout=10)
    assert received in done, "the sender deadlocked: the small write's rest waits behind the large one"
    assert received.result() == [large, small]
    sender.close(wait=True)
    receiver.close()


def _frame(message: object) -> bytes:
    data = pickle.dumps(message, framing.PROTOCOL)
    return struct.pack("!i", len(data)) + data


def _pending_bytes(sock: socket.socket) -> bytes:
    """What the peer has written so far, without waiting for more."""
    try:
        return sock.recv(1 << 20, socket.MSG_DONTWAIT)
    except BlockingIOError:
        return b""


async def test_the_small_messages_of_one_turn_go_out_together_at_its_end() -> None:
    """Nothing is written while the turn runs; at its end, the three frames in the order sent, in one write
    (the socket is watched through ``send``: one call carries all three)."""
    ours, theirs = socket.socketpair()
    sender = _Sender(Connection(ours.detach()))
    writes: list[bytes] = []
    real = sender._sock

    class Watched:
        def send(self, data: bytes, flags: int = 0) -> int:
            writes.append(bytes(data))
            return real.send(data, flags)

        def __getattr__(self, name: str) -> object:
            return getattr(real, name)

    sender._sock = Watched()  # type: ignore[assignment]
    messages = [(0, "query_rows", ("kb",), {"limit": 10}), (1, "ping", (), {}), (2, "describe", ("kb",), {})]
    for m in messages:
        await sender.send(m)
    assert _pending_bytes(theirs) == b"" and writes == []
    await asyncio.sleep(0)
    expected = b"".join(_frame(m) for m in messages)
    assert writes == [expected]
    assert _pending_bytes(theirs) == expected
    sender.close(wait=True)
    real.close()
    theirs.close()


async def test_a_large_message_goes_out_after_the_small_ones_sent_before_it() -> None:
    ours, theirs = socket.socketpair()
    sender, receiver = _Sender(Connection(ours.detach())), Connection(theirs.detach())
    small, large, after = (0, b"s"), (1, b"L" * (framing.INLINE_BYTES + 1)), (2, b"t")
    await sender.send(small)
    await sender.send(large)  # written from the thread, once the small one is out
    await sender.send(after)
    got = await asyncio.to_thread(lambda: [receiver.recv() for _ in range(3)])
    assert got == [small, large, after]
    sender.close(wait=True)
    receiver.close()


async def test_closing_writes_what_this_turn_sent() -> None:
    ours, theirs = socket.socketpair()
    sender, receiver = _Sender(Connection(ours.detach())), Connection(theirs.detach())
    await sender.send((7, True, None))  # the last reply, as the child sends it before it closes
    sender.close(wait=True)
    sender._conn.close()
    assert receiver.recv() == (7, True, None)
    with pytest.raises(EOFError):
        receiver.recv()
    receiver.close()


async def test_a_batched_write_that_fails_is_reported() -> None:
    """The peer is gone: the write at the end of the turn fails, after ``send`` returned, and ``on_error``
    hears of it (a :class:`ProcessStore` then fails the calls that wait for replies)."""
    ours, theirs = socket.socketpair()
    errors: list[BaseException] = []
    reported = asyncio.Event()

    def on_error(exc: BaseException) -> None:
        errors.append(exc)
        reported.set()

    sender = _Sender(Connection(ours.detach()), on_error)
    theirs.close()
    await sender.send((0, "ping", (), {}))
    await asyncio.wait_for(reported.wait(), 60)
    assert len(errors) == 1 and isinstance(errors[0], BrokenPipeError)
    sender.close(wait=True)


async def test_a_full_batch_goes_out_at_once_and_the_rest_at_the_end_of_the_turn() -> None:
    """``BATCH_FRAMES`` messages are written as soon as they are there (the peer starts on them while this turn
    goes on); the next ones wait for the end of the turn."""
    ours, theirs = socket.socketpair()
    sender = _Sender(Connection(ours.detach()))
    messages = [(i, "query_rows", ("kb",), {"limit": 10}) for i in range(framing.BATCH_FRAMES + 2)]
    for m in messages[:framing.BATCH_FRAMES]:
        await sender.send(m)
    first = b"".join(_frame(m) for m in messages[:framing.BATCH_FRAMES])
    assert _pending_bytes(theirs) == first
    for m in messages[framing.BATCH_FRAMES:]:
        await sender.send(m)
    assert _pending_bytes(theirs) == b""
    await asyncio.sleep(0)
    assert _pending_bytes(theirs) == b"".join(_frame(m) for m in messages[framing.BATCH_FRAMES:])
    sender.close(wait=True)
    theirs.close()
