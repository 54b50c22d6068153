"""The asyncio client: :mod:`service.client.api`'s operations over ``httpx.AsyncClient``."""

from __future__ import annotations

import asyncio
from typing import Any, Literal, TypeVar

import httpx

from .api import ClientBase
from .errors import RagserveClientError
from .loops import PerLoop
from .protocol import check, request_args, transport_error
from .steps import PIECE, Call, Download, Operation, Sleep
from .streaming import AsyncChatStream, StreamCall

T = TypeVar("T")


class AsyncClient(ClientBase):
    """:class:`~service.client.Client`'s operations, each a coroutine (``await client.search(...)``);
    ``chat_stream`` returns an async context manager and iterator. Same arguments as ``Client``,
    ``http_client`` being an ``httpx.AsyncClient``.

    Safe to use from several event loops, one after another (``asyncio.run`` called repeatedly) or at once:
    the client makes one ``httpx.AsyncClient`` per loop, on the loop's first request, and closes it as that
    loop shuts down (:mod:`service.client.loops`); ``aclose()`` closes the current loop's at once. A given
    ``http_client`` is used as it is, on the loop it belongs to."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, timeout: float = 120.0,
                 max_retries: int = 2, http_client: httpx.AsyncClient | None = None) -> None:
        super().__init__(base_url if http_client is None else str(http_client.base_url), api_key,
                         max_retries=max_retries)
        self._given = http_client
        self._per_loop = PerLoop(lambda: httpx.AsyncClient(base_url=self.base_url, timeout=timeout))

    @property
    def blocking(self) -> Literal[False]:
        """False: each operation returns an awaitable (on ``Client``, True: its result)."""
        return False

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close this loop's connections (a given ``http_client`` stays open: it is the caller's)."""
        await self._per_loop.aclose()

    async def _http(self) -> httpx.AsyncClient:
        return self._given if self._given is not None else await self._per_loop.get()

    async def _exchange(self, call: Call) -> httpx.Response:
        if call.download is not None:
            return await self._download(call, call.download)
        try:
            return check(await (await self._http()).request(call.method, call.path, **self._args(call)))
        except httpx.TransportError as exc:
            raise transport_error(exc) from exc

    def _args(self, call: Call) -> dict[str, Any]:
        args = request_args(call, self._auth)
        if call.upload is not None:
            args["content"] = call.upload.apieces()
        return args

    async def _download(self, call: Call, sink: Download) -> httpx.Response:
        """A streamed answer written to its file as it comes; the response is returned closed, body unread."""
        response = await self._open(call)
        try:
            await sink.awrite(response.aiter_raw(PIECE))
        except httpx.TransportError as exc:
            raise transport_error(exc) from exc
        finally:
            await response.aclose()
        return response

    async def _drive(self, op: Operation[T]) -> T:
        value: Any = None
        error: RagserveClientError | None = None
        while True:
            try:
                step = op.throw(error) if error is not None else op.send(value)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            value, error = None, None
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
                continue
            try:
                value = await self._exchange(step)
            except RagserveClientError as exc:
                error = exc

    async def _open(self, call: Call) -> httpx.Response:
        """Send a streamed request; an error answer is read whole and raised."""
        try:
            http = await self._http()
            request = http.build_request(call.method, call.path, **self._args(call))
            response = await http.send(request, stream=True)
            if response.status_code >= 400:
                await response.aread()
                await response.aclose()
            return check(response)
        except httpx.TransportError as exc:
            raise transport_error(exc) from exc

    def _open_stream(self, call: StreamCall) -> AsyncChatStream:
        return AsyncChatStream(self, call)
