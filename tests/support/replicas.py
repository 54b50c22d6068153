"""Several runner replicas at the network edge (one ``httpx.MockTransport``), each by its ``host:port``.

Each replica answers an embeddings request (one with ``input``) in vLLM's shape and anything else with an echo;
it can be up, refusing connections (``down``), dropping connections mid-request (``drop``),
failing its ``/health`` only (``sick``), or holding its answers until released; every request served is
recorded with the replica that served it. Their delays and stalls pass on the ``clock`` the client under test
runs on (a :class:`~tests.support.clock.ManualClock` in the pool's tests), so the test decides when they end.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from service.clock import SYSTEM, Clock
from tests.support.tiers import patient


@dataclass
class FakeReplica:
    down: bool = False
    drop: bool = False
    sick: bool = False
    stall: bool = False
    """Holds its port and answers nothing, ``/health`` included (a vLLM still loading its model)."""
    stalled: int = 0
    """Requests it holds unanswered now because it stalls."""
    delay_s: float = 0.0
    status: int = 200
    """What it answers requests with (after ``delay_s``): 503 for a runner failing them."""
    hold: asyncio.Event | None = None
    in_flight: int = 0
    peak: int = 0


@dataclass
class FakeReplicas:
    replicas: dict[str, FakeReplica] = field(default_factory=dict)
    served: list[tuple[str, str]] = field(default_factory=list)
    """``(address, path)`` of every request answered, health checks included, in order."""
    received: list[tuple[str, str, float]] = field(default_factory=list)
    """``(address, path, clock time)`` of every request that reached a replica (not refused), in order."""
    clock: Clock = SYSTEM

    def add(self, *addresses: str) -> FakeReplicas:
        for address in addresses:
            self.replicas[address] = FakeReplica()
        return self

    def __getitem__(self, address: str) -> FakeReplica:
        return self.replicas[address]

    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self._handle)

    def counts(self, path: str = "/v1/embeddings") -> Counter[str]:
        return Counter(a for a, p in self.served if p == path)

    def order(self, path: str = "/v1/embeddings") -> list[str]:
        return [a for a, p in self.served if p == path]

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        address = f"{request.url.host}:{request.url.port}"
        replica = self.replicas.get(address)
        if replica is None or replica.down:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        self.received.append((address, path, self.clock.now()))
        if replica.stall:
            replica.stalled += 1
            try:
                await self.clock.sleep(3600)
            finally:
                replica.stalled -= 1
        if path == "/health":
            self.served.append((address, path))
            return httpx.Response(503 if replica.sick else 200)
        if replica.drop:
            raise httpx.RemoteProtocolError("server disconnected without sending a response", request=request)
        replica.in_flight += 1
        replica.peak = max(replica.peak, replica.in_flight)
        try:
            if replica.delay_s:
                await self.clock.sleep(replica.delay_s)
            if replica.hold is not None:
                await replica.hold.wait()
        finally:
            replica.in_flight -= 1
        if replica.down:  # went down while the request was held: the connection is gone
            raise httpx.RemoteProtocolError("server disconnected without sending a response", request=request)
        self.served.append((address, path))
        body = json.loads(request.content or b"{}")
        if replica.status == 200 and path == "/v1/embeddings" and "input" in body:
            return httpx.Response(200, json=_embeddings(address, body))
        return httpx.Response(replica.status, json={"replica": address, "echo": body})


def _embeddings(address: str, body: dict[str, object]) -> dict[str, object]:
    """vLLM's answer to an embeddings request (float vectors of ``dimensions``, 384 when not asked: MiniLM's),
    with the replica that served it beside it, as the pool's tests read it."""
    raw = body["input"]
    texts = [raw] if isinstance(raw, str) else list(raw)  # type: ignore[call-overload]
    dims = int(body.get("dimensions") or 384)  # type: ignore[call-overload]
    data = [{"object": "embedding", "index": i, "embedding": [1.0] + [0.0] * (dims - 1)} for i in range(len(texts))]
    return {"id": f"embd-{address}", "object": "list", "model": str(body.get("model", "")), "data": data,
            "usage": {"prompt_tokens": len(texts), "total_tokens": len(texts)}, "replica": address}


async def eventually(condition: Callable[[], bool], timeout_s: float | None = None) -> None:
    """Wait until ``condition()`` holds (state with no event to wait on), bounded only for liveness: on real
    time, so where the state is the clock's doing, move a :class:`~tests.support.clock.ManualClock` instead.
    ``timeout_s`` defaults to a patient 60 s (:func:`tests.support.tiers.patient`)."""
    deadline = time.monotonic() + (patient(60.0) if timeout_s is None else timeout_s)
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)
