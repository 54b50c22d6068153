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
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from fastapi import Request, Response

T = TypeVar("T")
CLIENT_CLOSED_REQUEST = 499


POLL_S = 0.25
"""How often a running handler checks that its client is still there; the first check is one period in, so a
search that answers sooner (nearly all of them) never pays for one."""


def with_cancellation(handler: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T | Response]]:
    """Decorate a route whose signature has ``raw_request: Request``.

    The handler runs in the request's own task (no task of its own, no ``asyncio.wait`` over two). A timer
    polls the client every :data:`POLL_S` (Starlette exposes disconnection only by polling, as vLLM's
    ``with_cancellation`` does too), each poll a short task of its own; once the client has gone, it cancels
    the request's task and the cancellation becomes the 499. A cancellation from anywhere else (the server
    shutting down) goes on as it came. (The poll was a watcher task started with every request: its start, its
    first sleep and its cancellation cost two loop turns per search that answers within the first period, nearly
    all of them; a timer that never fires costs its handle.)"""

    @functools.wraps(handler)
    async def wrapper(*args: Any, **kwargs: Any) -> T | Response:
        request: Request = kwargs["raw_request"]
        task = asyncio.current_task()
        assert task is not None
        loop = asyncio.get_running_loop()
        gone = False
        poll: asyncio.Task[None] | None = None

        async def check() -> None:
            nonlocal gone, timer
            if await request.is_disconnected():
                gone = True
                task.cancel()
            else:
                timer = loop.call_later(POLL_S, start_check)

        def start_check() -> None:
            nonlocal poll
            poll = loop.create_task(check())

        timer = loop.call_later(POLL_S, start_check)
        try:
            return await handler(*args, **kwargs)
        except asyncio.CancelledError:
            if not gone:
                raise
            if sys.version_info >= (3, 11):
                task.uncancel()  # ours, and handled: timeouts further up must not take it for theirs
            return Response(status_code=CLIENT_CLOSED_REQUEST)  # a Response skips the route's response model
        finally:
            timer.cancel()
            if poll is not None:
                poll.cancel()

    return wrapper
