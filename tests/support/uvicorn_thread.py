"""uvicorn in a thread of the test's process: a loopback HTTP server for a test double (a scripted runner, a
proxy, an origin) that a process under test reaches over the network."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn
from starlette.types import ASGIApp

from tests.support.waiting import until


@contextmanager
def uvicorn_thread(app: ASGIApp, port: int, what: str) -> Iterator[None]:
    """Serve ``app`` on 127.0.0.1:``port`` from a daemon thread with its own event loop, from when uvicorn has
    started until the block ends; then stop it (its connections get 5 s to finish). ``what`` names the server in
    the thread's name and in the error when it does not start in 60 s."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False,
                                           lifespan="off", loop="asyncio", timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, name=f"{what}-{port}", daemon=True)
    thread.start()
    try:
        until(lambda: server.started, f"the {what} server thread started", timeout_s=60, every_s=0.02)
        yield
    finally:
        server.should_exit = True
        thread.join(timeout=10)
