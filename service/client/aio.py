"""The asyncio client: :mod:`service.client.api`'s operations over ``httpx.AsyncClient``."""

from __future__ import annotations

import asyncio
from typing import Any, TypeVar

import httpx

from service.client.api import ClientBase
from service.client.errors import RagserveClientError
from service.client.protocol import Call, Operation, Sleep, StreamCall, check, request_args, transport_error
from service.client.streaming import AsyncChatStream

T = TypeVar("T")


class AsyncClient(ClientBase):
    """:class:`~service.client.Client`'s operations, each a coroutine (``await client.search(...)``);
    ``chat_stream`` returns an async context manager and iterator. Same arguments as ``Client``,
    ``http_client`` being an ``httpx.AsyncClient``."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, timeout: float = 120.0,
                 max_retries: int = 2, http_client: httpx.AsyncClient | None = None) -> None:
        super().__init__(base_url if http_client is None else str(http_client.base_url), api_key,
                         max_retries=max_retries)
        self._owns_http = http_client is None
        self._http = http_client or httpx.AsyncClient(base_url=self.base_url, timeout=timeout)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def _exchange(self, call: Call) -> httpx.Response:
        try:
            return check(await self._http.request(call.method, call.path, **request_args(call, self._auth)))
        except httpx.TransportError as exc:
            raise transport_error(exc) from exc

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
            request = self._http.build_request(call.method, call.path, **request_args(call, self._auth))
            response = await self._http.send(request, stream=True)
            if response.status_code >= 400:
                await response.aread()
                await response.aclose()
            return check(response)
        except httpx.TransportError as exc:
            raise transport_error(exc) from exc

    def _open_stream(self, call: StreamCall) -> AsyncChatStream:
        return AsyncChatStream(self, call)
