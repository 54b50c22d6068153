"""A scripted vLLM embedding runner at the network edge: an ``httpx.MockTransport`` handler that answers
``GET /health`` and ``POST /v1/embeddings`` in vLLM's shapes with vectors derived from each text alone, records
every embedding request the moment it arrives, and holds the requests a test asks it to hold until the test
releases them.

Why: the claims the load tests make from timings (a query is not queued behind bulk work, a saturated lane answers
429, a runner that does not answer is given up at its deadline) become facts about *which requests reached the
runner, in what order, and what became of them*. A test waits on "this request reached the runner" (an event),
never on a sleep, and nothing it asserts depends on how fast the machine is.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np

from service.config import Settings
from tests.support.app import API_KEY
from tests.support.runners import free_port

MINILM_DIMS = 384
LIVENESS_S = 120.0
"""How long a wait for a request to arrive may take before the test fails instead of hanging: a bound on
liveness only (an arrival that is due comes in milliseconds; one that is not due never comes)."""


def scripted_settings(data_dir: Path, **sections: object) -> Settings:
    """The minilm stack with its runner URL on a loopback port nothing listens on: the scripted transport
    answers in its place (a request that escaped it would be refused, loudly)."""
    return Settings(profile="minilm", data_dir=data_dir, api_keys=[API_KEY],
                    runners={"embed_url": f"http://127.0.0.1:{free_port()}"}, **sections)


def vector(text: str, dimensions: int = MINILM_DIMS) -> np.ndarray:
    """A unit float32 vector that depends on ``text`` only: the same text always lands on the same point, so
    a query equal to a document's text finds that document first."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    v = np.random.default_rng(seed).standard_normal(dimensions).astype("<f4")
    return v / np.linalg.norm(v)


def vector_base64(text: str, dimensions: int = MINILM_DIMS) -> str:
    """:func:`vector` as the API's ``vector_base64`` (and vLLM's ``encoding_format: base64``) carry it."""
    return base64.b64encode(vector(text, dimensions).astype("<f4").tobytes()).decode()


@dataclass
class Arrival:
    """One ``/v1/embeddings`` request as the runner saw it, and what became of it."""

    inputs: tuple[str, ...]
    body: dict[str, object]
    release: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by the test to let a held request be answered."""
    outcome: str = "pending"
    """``pending``, then ``answered`` or ``cancelled`` (the caller gave up on it: its deadline, a disconnect)."""
    settled: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when :attr:`outcome` is no longer ``pending``."""


Script = Callable[[Arrival], httpx.Response | None]
"""Per request: a response to answer instead of vectors (a fault), or None for the vectors."""


class ScriptedEmbedder:
    """``transport`` goes into ``app_client(settings, transports={"embedding": ...})``.

    ``hold`` decides, per request, whether it waits for its :attr:`Arrival.release` before it is answered;
    ``script`` may answer a request with something else (a 503, a 429) instead of vectors.
    """

    def __init__(self, *, dimensions: int = MINILM_DIMS, hold: Callable[[Arrival], bool] = lambda _: False,
                 script: Script = lambda _: None, model: str = "sentence-transformers/all-MiniLM-L6-v2") -> None:
        self.dimensions = dimensions
        self.hold = hold
        self.script = script
        self.model = model
        self.arrivals: list[Arrival] = []
        self.health_checks = 0
        self._arrived = asyncio.Condition()
        self.transport = httpx.MockTransport(self._handle)

    async def reached(self, count: int) -> list[Arrival]:
        """Wait until ``count`` embedding requests have reached the runner; the first ``count``."""
        await self._wait(lambda: len(self.arrivals) >= count, f"{count} requests")
        return self.arrivals[:count]

    async def reached_with(self, text: str) -> Arrival:
        """Wait until a request carrying ``text`` among its inputs has reached the runner; that request."""
        await self._wait(lambda: any(text in a.inputs for a in self.arrivals), f"a request with {text!r}")
        return next(a for a in self.arrivals if text in a.inputs)

    async def _wait(self, arrived: Callable[[], bool], what: str) -> None:
        async with self._arrived:
            try:
                await asyncio.wait_for(self._arrived.wait_for(arrived), LIVENESS_S)
            except asyncio.TimeoutError:
                raise AssertionError(f"{what} never reached the runner; it saw {self.inputs()}") from None

    def inputs(self) -> list[tuple[str, ...]]:
        """What each embedding request carried, in the order they arrived."""
        return [a.inputs for a in self.arrivals]

    def release_all(self) -> None:
        """Let every held request, and every one still to come, be answered."""
        self.hold = lambda _: False
        for arrival in self.arrivals:
            arrival.release.set()

    async def _handle(self, request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/health":
            self.health_checks += 1
            return httpx.Response(200)
        if request.method != "POST" or request.url.path != "/v1/embeddings":
            return httpx.Response(404, json={"error": {"message": f"not scripted: {request.url.path}"}})
        body = json.loads(request.content)
        raw = body["input"]
        arrival = Arrival(tuple([raw] if isinstance(raw, str) else raw), body)
        async with self._arrived:
            self.arrivals.append(arrival)
            self._arrived.notify_all()
        try:
            if self.hold(arrival):
                await arrival.release.wait()
            scripted = self.script(arrival)
        except asyncio.CancelledError:
            arrival.outcome = "cancelled"
            arrival.settled.set()
            raise
        arrival.outcome = "answered"
        arrival.settled.set()
        return scripted if scripted is not None else self._vectors(arrival)

    def _vectors(self, arrival: Arrival) -> httpx.Response:
        """vLLM's answer: one ``embedding`` per input, base64 float32 when asked (as ragserve asks), in order."""
        dims = int(arrival.body.get("dimensions") or self.dimensions)  # type: ignore[call-overload]
        as_base64 = arrival.body.get("encoding_format") == "base64"
        data = [{"object": "embedding", "index": i,
                 "embedding": vector_base64(t, dims) if as_base64 else vector(t, dims).tolist()}
                for i, t in enumerate(arrival.inputs)]
        tokens = sum(len(t.split()) for t in arrival.inputs)
        return httpx.Response(200, json={"id": f"embd-{len(self.arrivals)}", "object": "list", "model": self.model,
                                         "data": data, "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})
