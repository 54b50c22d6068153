"""A real network transport that records what the runner answered and can hold one request before it is sent:
a test does something at a known step of a job (kill the runner while batch ``k`` is on its way) instead of
hoping a sleep lands there."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx


class HoldingTransport(httpx.AsyncHTTPTransport):
    """Records ``(sent, answered)`` for every request that got an answer; the ``hold_at``-th request (1-based)
    sets ``reached`` and waits for ``release`` before it goes out."""

    def __init__(self, hold_at: int) -> None:
        super().__init__()
        self.hold_at = hold_at
        self.sent = 0
        self.reached = asyncio.Event()
        self.release = asyncio.Event()
        self.exchanges: list[tuple[dict[str, Any], dict[str, Any]]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        if self.sent == self.hold_at:
            self.reached.set()
            await self.release.wait()
        response = await super().handle_async_request(request)
        body = await response.aread()
        self.exchanges.append((json.loads(request.content or b"{}"), json.loads(body or b"{}")))
        return httpx.Response(response.status_code, headers=response.headers, content=body, request=request)
