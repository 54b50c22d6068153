"""A scripted runner's ``httpx.MockTransport`` behind a real loopback HTTP server: the network edge for a ragserve
that runs as its own process (``tests.support.process.ragserve_serve``), which cannot be handed a transport.

Every request is relayed to the transport's handler as it came (method, path, body) and its answer sent back, so
the scripted runner records and answers exactly what it would in-process (``ScriptedEmbedder.inputs()``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from tests.support.runners import free_port
from tests.support.uvicorn_thread import uvicorn_thread


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
    with uvicorn_thread(_app(transport), port, "scripted-runner"):
        yield f"http://127.0.0.1:{port}"
