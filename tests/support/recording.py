"""A real network transport that also keeps what the runner answered, to inspect it in tests."""

from __future__ import annotations

import json
from typing import Any

import httpx


class RecordingTransport(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.exchanges: list[tuple[dict[str, Any], dict[str, Any]]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        body = await response.aread()
        sent = json.loads(request.content or b"{}")
        self.exchanges.append((sent, json.loads(body or b"{}")))
        return httpx.Response(response.status_code, headers=response.headers, content=body, request=request)
