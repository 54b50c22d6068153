"""A scripted runner's ``httpx.MockTransport`` behind a real loopback HTTP server: the network edge for a ragserve
that runs as its own process (``tests.support.process.ragserve_serve``), which cannot be handed a transport.

Every request is relayed to the transport's handler as it came (method, path, body) and its answer sent back, so
the scripted runner records and answers exactly what it would in-process (``ScriptedEmbedder.inputs()``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.runners import free_port
from tests.support.waiting import until


def _app(transport: httpx.AsyncBaseTransport) -> Starlette:
    async def relay(request: Request) -> Response:
        sent = httpx.Request(request.method, str(request.url), content=await request.body(),
                             headers={k: v for k, v in request.headers.items() if k.lower() == "content-type"})
        answer = await transport.handle_async_request(sent)
        body = await answer.aread()
        return Response(body, status_code=answer.status_code,
                        headers={"content-type": answer.headers.get("content-type", "application/json")})

    return Starlette(routes=[Route("/{path:path}", relay, methods=["GET", "POST"])])


@contextmanager
def served(transport: httpx.AsyncBaseTransport) -> Iterator[str]:
    """Serve ``transport`` on a free loopback port (a thread with its own event loop); its URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(_app(transport), host="127.0.0.1", port=port, log_level="warning",
                                           access_log=False, lifespan="off", loop="asyncio",
                                           timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, name=f"scripted-runner-{port}", daemon=True)
    thread.start()
    until(lambda: server.started, "the scripted runner's server thread started", timeout_s=60, every_s=0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
