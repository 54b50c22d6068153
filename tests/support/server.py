"""The real API under uvicorn on a free loopback port, for tests that go through real HTTP."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import httpx

from service.config import Settings
from service.server import BackgroundServer
from tests.support.runners import free_port


@contextmanager
def live_server(
    settings: Settings, *, with_worker: bool = False, transports: Mapping[str, httpx.AsyncBaseTransport] | None = None
) -> Iterator[str]:
    settings.port = free_port()
    server = BackgroundServer(settings, with_worker=with_worker, transports=transports)
    server.start()
    try:
        yield f"http://{settings.host}:{settings.port}"
    finally:
        server.stop()
