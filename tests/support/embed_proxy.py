"""A loopback proxy in front of a real embedding runner that records every ``/v1/embeddings`` request (when it
arrived, its texts, when its answer went back) and can hold answers: the network edge where a test sees each
embedding call a worker process makes, and freezes one mid-flight."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.runners import free_port
from tests.support.uvicorn_thread import uvicorn_thread
from tests.support.waiting import until


@dataclass
class Call:
    arrived: float
    """``time.monotonic()`` when the request reached the proxy."""
    texts: list[str]
    answered: float | None = None
    """When the runner's answer was handed back (None: held, or never)."""
    status: int | None = None
    """The runner's status for it (None: no answer came back from the runner)."""
    peer: int | None = None
    """The sender's TCP port: which connection, so which process, the request came over (a request a process
    wrote just before it was killed may be read by the proxy after it is gone)."""


@dataclass
class EmbedProxy:
    url: str
    calls: list[Call] = field(default_factory=list)
    hold_from: int | None = None
    """Requests from this index on (0-based) wait for :meth:`release` before their answer goes back."""
    _gate: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def held(self) -> list[Call]:
        with self._lock:
            return [c for i, c in enumerate(self.calls) if self.hold_from is not None and i >= self.hold_from
                    and c.answered is None]

    def release(self) -> None:
        self._gate.set()

    def texts(self, *, answered_only: bool = False) -> list[str]:
        with self._lock:
            return [t for c in self.calls if not answered_only or c.answered is not None for t in c.texts]

    def wait_for_held(self, timeout_s: float) -> Call:
        held = until(self.held, f"a request held by the proxy ({len(self.calls)} calls so far)", timeout_s, 0.02)
        return held[0]


def _app(proxy: EmbedProxy, upstream: str) -> Starlette:
    async def forward(request: Request) -> Response:
        body = await request.body()
        call = None
        if request.url.path == "/v1/embeddings":
            sent = json.loads(body)
            texts = sent["input"] if isinstance(sent["input"], list) else [sent["input"]]
            call = Call(time.monotonic(), list(texts), peer=request.client.port if request.client else None)
            with proxy._lock:
                index = len(proxy.calls)
                proxy.calls.append(call)
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "accept")}
        async with httpx.AsyncClient(base_url=upstream, timeout=300) as client:
            answer = await client.request(request.method, request.url.path, content=body, headers=headers)
        if call is not None and proxy.hold_from is not None and index >= proxy.hold_from:
            await asyncio.to_thread(proxy._gate.wait)
        if call is not None:
            call.status = answer.status_code
            call.answered = time.monotonic()
        return Response(answer.content, status_code=answer.status_code,
                        headers={"content-type": answer.headers.get("content-type", "application/json")})

    return Starlette(routes=[Route("/{path:path}", forward, methods=["GET", "POST"])])


@contextmanager
def embed_proxy(upstream: str, *, hold_from: int | None = None) -> Iterator[EmbedProxy]:
    port = free_port()
    proxy = EmbedProxy(url=f"http://127.0.0.1:{port}", hold_from=hold_from)
    with uvicorn_thread(_app(proxy, upstream), port, "embed-proxy"):
        try:
            yield proxy
        finally:
            proxy.release()  # a held answer goes back, so the server's stop does not wait on it
