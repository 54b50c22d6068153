"""The store process's pipe: small messages are written from the event loop, large ones (or what the socket
would not take at once) from a thread, and every message arrives whole, however they interleave."""

from __future__ import annotations

import asyncio
import socket
from multiprocessing.connection import Connection

from service.store import process
from service.store.process import _Sender


async def test_mixed_sizes_sent_concurrently_arrive_whole() -> None:
    ours, theirs = socket.socketpair()
    sender, receiver = _Sender(Connection(ours.detach())), Connection(theirs.detach())
    sizes = [10, 300_000, 5_000, process.INLINE_BYTES - 100, 1_000_000, 20] * 20
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
    assert [receiver.recv() for _ in range(50)] == [(i, "query", (), {}) for i in range(50)]
    assert hops == 0
    await sender.send((50, b"x" * (process.INLINE_BYTES + 1)))
    assert receiver.recv() == (50, b"x" * (process.INLINE_BYTES + 1)) and hops == 1
    sender.close(wait=True)
    receiver.close()
