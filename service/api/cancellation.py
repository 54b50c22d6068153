"""Cancel a handler's work when the client disconnects (after vLLM's ``with_cancellation``).

A search fans out to two runners and the store; if the caller has gone, finishing it only takes slots
from callers who are still waiting. The answer to a caller that has gone is an empty 499 (nginx's "client
closed request"): nobody reads it, but the access log, the metrics and the trace say what happened. (It was
``None``, which FastAPI validated against the route's response model: an ERROR traceback and a 500 for every
client that gave up, as many as a load test's client timeouts.)
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import Request, Response

T = TypeVar("T")
CLIENT_CLOSED_REQUEST = 499


async def _wait_for_disconnect(request: Request) -> None:
    # Starlette exposes disconnection only by polling (vLLM's with_cancellation does the same).
    while not await request.is_disconnected():  # noqa: ASYNC110
        await asyncio.sleep(0.25)


def with_cancellation(handler: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T | Response]]:
    """Decorate a route whose signature has ``raw_request: Request``."""

    @functools.wraps(handler)
    async def wrapper(*args: Any, **kwargs: Any) -> T | Response:
        request: Request = kwargs["raw_request"]
        work = asyncio.ensure_future(handler(*args, **kwargs))
        watcher = asyncio.ensure_future(_wait_for_disconnect(request))
        done, _ = await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if work in done:
            watcher.cancel()
            return work.result()
        work.cancel()
        return Response(status_code=CLIENT_CLOSED_REQUEST)  # a Response skips the route's response model

    return wrapper
