"""A real network transport that logs when each request to a runner started and ended, and what it carried:
events over time, to check how many requests of a kind were in flight together."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import httpx


@dataclass(frozen=True)
class Exchange:
    path: str
    inputs: tuple[str, ...]
    started: float
    ended: float
    status: int


class TimingTransport(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.exchanges: list[Exchange] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        started = time.monotonic()
        response = await super().handle_async_request(request)
        body = await response.aread()
        sent = json.loads(request.content or b"{}")
        inputs = sent.get("input", [])
        self.exchanges.append(Exchange(request.url.path, tuple([inputs] if isinstance(inputs, str) else inputs),
                                       started, time.monotonic(), response.status_code))
        return httpx.Response(response.status_code, headers=response.headers, content=body, request=request)


def peak_in_flight(exchanges: list[Exchange]) -> int:
    """The most of ``exchanges`` that were in flight at one moment."""
    edges = sorted([(e.started, 1) for e in exchanges] + [(e.ended, -1) for e in exchanges], key=lambda x: (x[0], x[1]))
    peak = now = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak
