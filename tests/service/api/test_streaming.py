"""RelayResponse closes its iterator when the client goes away in the middle of a send, at once: Starlette's
StreamingResponse leaves it suspended at its ``yield`` for the garbage collector (the test holds a reference, so
with StreamingResponse these assertions fail for certain, not by chance)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from starlette.requests import ClientDisconnect
from starlette.types import Message

from service.api.streaming import RelayResponse


class Relay:
    """An endless event stream that records how far it got and whether it was closed."""

    def __init__(self) -> None:
        self.yielded = 0
        self.closed = False

    async def events(self) -> AsyncIterator[bytes]:
        try:
            while True:
                yield f"data: {self.yielded}\n\n".encode()
                self.yielded += 1
        finally:
            self.closed = True


async def test_a_disconnect_while_a_send_is_blocked_closes_the_iterator() -> None:
    """ASGI 2.3 (what uvicorn speaks): the client stops reading, the second send never completes, then the
    disconnect arrives; Starlette cancels the streaming task in that send."""
    relay = Relay()
    events = relay.events()
    blocked = asyncio.Event()

    async def send(message: Message) -> None:
        if message.get("body") == b"data: 1\n\n":
            blocked.set()
            await asyncio.Event().wait()  # a client that stopped reading: this send never completes

    async def receive() -> Message:
        await blocked.wait()
        return {"type": "http.disconnect"}

    await RelayResponse(events, media_type="text/event-stream")({"type": "http", "asgi": {"spec_version": "2.3"}},
                                                               receive, send)
    assert (relay.yielded, relay.closed) == (1, True)


async def test_a_send_that_raises_closes_the_iterator() -> None:
    """ASGI 2.4: the server raises OSError from the send that finds the client gone."""
    relay = Relay()
    events = relay.events()

    async def send(message: Message) -> None:
        if message.get("body") == b"data: 2\n\n":
            raise OSError("client gone")

    async def receive() -> Message:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    with pytest.raises(ClientDisconnect):
        await RelayResponse(events)({"type": "http", "asgi": {"spec_version": "2.4"}}, receive, send)
    assert (relay.yielded, relay.closed) == (2, True)
