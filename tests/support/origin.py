"""A local HTTP origin on 127.0.0.1 that records every request it gets: the stand-in for "a web server
an image URL points at". Tests set what each path answers, then check which requests arrived (and that
none arrived where ragserve must not connect)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from tests.support.runners import free_port
from tests.support.uvicorn_thread import uvicorn_thread


@dataclass
class Answer:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    stream_chunks: int = 0
    """When > 0: send ``body`` this many times, chunked, with no Content-Length."""
    delay_s: float = 0.0


@dataclass
class Origin:
    url: str
    answers: dict[str, Answer] = field(default_factory=dict)
    requests: list[tuple[str, str, str]] = field(default_factory=list)
    """(method, path, Host header) of every request received."""

    def paths(self) -> list[str]:
        return [path for _, path, _ in self.requests]


def _app(origin: Origin) -> Starlette:
    async def handle(request: Request) -> Response:
        origin.requests.append((request.method, request.url.path, request.headers.get("host", "")))
        answer = origin.answers.get(request.url.path)
        if answer is None:
            return Response(b"not found", status_code=404)
        if answer.delay_s:
            await asyncio.sleep(answer.delay_s)
        if answer.stream_chunks:
            async def chunks():  # type: ignore[no-untyped-def]
                for _ in range(answer.stream_chunks):
                    yield answer.body

            return StreamingResponse(chunks(), status_code=answer.status, headers=answer.headers)
        return Response(answer.body, status_code=answer.status, headers=answer.headers)

    return Starlette(routes=[Route("/{path:path}", handle, methods=["GET", "POST", "HEAD"])])


@contextmanager
def running_origin() -> Iterator[Origin]:
    port = free_port()
    origin = Origin(url=f"http://127.0.0.1:{port}")
    with uvicorn_thread(_app(origin), port, "origin"):
        yield origin
