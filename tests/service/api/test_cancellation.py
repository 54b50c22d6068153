"""A client that disconnects mid-request: its handler is cancelled and the answer is an empty 499, not a
500. Driven at the ASGI edge (the client's messages: the body, then ``http.disconnect`` once the handler
has started), through FastAPI's own routing and response-model handling."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from fastapi import FastAPI, Request
from pydantic import BaseModel

from service.api.cancellation import CLIENT_CLOSED_REQUEST, with_cancellation

LIVENESS_S = 60.0
"""A bound on liveness only (a hung handler fails instead of hanging the suite); nothing here is timed."""


class Answer(BaseModel):
    ok: bool


def _scope(path: str) -> dict[str, Any]:
    return {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
            "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
            "headers": [(b"content-type", b"application/json"), (b"content-length", b"0")],
            "client": ("127.0.0.1", 5555), "server": ("127.0.0.1", 8000)}


class _StayingClient:
    """The client's side of one request that stays: the (empty) body, then nothing until the answer; counts
    its ``receive`` calls, sets ``asked`` at the first (the handlers here read no body, so only the watcher's
    ``is_disconnected()`` poll asks), and keeps what was sent."""

    def __init__(self) -> None:
        self.messages = iter([{"type": "http.request", "body": b"", "more_body": False}])
        self.received = 0
        self.asked = asyncio.Event()
        self.sent: list[dict[str, Any]] = []

    async def receive(self) -> dict[str, Any]:
        self.received += 1
        self.asked.set()
        try:
            return next(self.messages)
        except StopIteration:
            await asyncio.sleep(3600)
            raise AssertionError("unreachable") from None

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)


async def test_a_client_that_left_gets_an_empty_499_and_its_work_is_cancelled() -> None:
    app = FastAPI()
    started, cancelled = asyncio.Event(), asyncio.Event()

    @app.post("/slow")
    @with_cancellation
    async def slow(raw_request: Request) -> Answer:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return Answer(ok=True)

    body_sent = False

    async def receive() -> dict[str, Any]:
        nonlocal body_sent
        if not body_sent:
            body_sent = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await started.wait()
        return {"type": "http.disconnect"}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await asyncio.wait_for(app(_scope("/slow"), receive, send), timeout=LIVENESS_S)
    assert cancelled.is_set()
    (start,) = [m for m in sent if m["type"] == "http.response.start"]
    assert start["status"] == CLIENT_CLOSED_REQUEST  # before the fix: None failed the response model, a 500
    assert b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body") == b""


async def test_a_client_that_stays_gets_the_answer() -> None:
    app = FastAPI()

    @app.post("/fast")
    @with_cancellation
    async def fast(raw_request: Request) -> Answer:
        return Answer(ok=True)

    client = _StayingClient()
    await asyncio.wait_for(app(_scope("/fast"), client.receive, client.send), timeout=LIVENESS_S)
    sent = client.sent
    assert [m["status"] for m in sent if m["type"] == "http.response.start"] == [200]
    assert b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body") == b'{"ok":true}'
    assert client.received == 0  # no body to read here, and an answer inside the first poll period never polls


async def test_a_cancellation_from_elsewhere_is_not_taken_for_a_client_that_left() -> None:
    """The server cancelling the request (shutting down) ends it with that cancellation, not with a 499."""
    app = FastAPI()
    started = asyncio.Event()

    @app.post("/slow")
    @with_cancellation
    async def slow(raw_request: Request) -> Answer:
        started.set()
        await asyncio.sleep(30)
        return Answer(ok=True)

    client = _StayingClient()
    request = asyncio.ensure_future(app(_scope("/slow"), client.receive, client.send))
    await asyncio.wait_for(started.wait(), timeout=LIVENESS_S)
    # The watcher's poll reaches the client's receive; when this task wakes, the watcher has already taken
    # the answer (the client is there) and gone back to waiting: the request runs on, nothing sent.
    await asyncio.wait_for(client.asked.wait(), timeout=LIVENESS_S)
    assert not request.done() and client.sent == []
    request.cancel()
    with pytest.raises(asyncio.CancelledError):
        await request
    assert client.sent == []
