"""The blocking client: :mod:`service.client.api`'s operations over ``httpx.Client``."""

from __future__ import annotations

import time
from typing import Any, Literal, TypeVar

import httpx

from .api import ClientBase
from .errors import RagserveClientError
from .protocol import check, request_args, transport_error
from .steps import PIECE, Call, Download, Operation, Sleep
from .streaming import ChatStream, StreamCall

T = TypeVar("T")


class Client(ClientBase):
    """ragserve over HTTP, blocking. ``base_url`` defaults to ``$RAGSERVE_URL`` (else
    ``http://127.0.0.1:8000``), ``api_key`` to ``$RAGSERVE_API_KEY``. ``http_client`` (its base URL and
    transport are used, and it is not closed here) replaces the one the client would make. Requests
    refused for load (429, or 503 with Retry-After) are retried ``max_retries`` times after the wait the
    server names; ``timeout`` is per request, in seconds."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, timeout: float = 120.0,
                 max_retries: int = 2, http_client: httpx.Client | None = None) -> None:
        super().__init__(base_url if http_client is None else str(http_client.base_url), api_key,
                         max_retries=max_retries)
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(base_url=self.base_url, timeout=timeout)

    @property
    def blocking(self) -> Literal[True]:
        """True: each operation returns its result (on ``AsyncClient``, False: an awaitable)."""
        return True

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def _exchange(self, call: Call) -> httpx.Response:
        if call.download is not None:
            return self._download(call, call.download)
        try:
            return check(self._http.request(call.method, call.path, **self._args(call)))
        except httpx.TransportError as exc:
            raise transport_error(exc) from exc

    def _args(self, call: Call) -> dict[str, Any]:
        args = request_args(call, self._auth)
        if call.upload is not None:
            args["content"] = call.upload.pieces()
        return args

    def _download(self, call: Call, sink: Download) -> httpx.Response:
        """A streamed answer written to its file as it comes; the response is returned closed, body unread."""
        response = self._open(call)
        try:
            sink.write(response.iter_raw(PIECE))
        except httpx.TransportError as exc:
            raise transport_error(exc) from exc
        finally:
            response.close()
        return response

    def _drive(self, op: Operation[T]) -> T:
        value: Any = None
        error: RagserveClientError | None = None
        while True:
            try:
                step = op.throw(error) if error is not None else op.send(value)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]
            value, error = None, None
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
                continue
            try:
                value = self._exchange(step)
            except RagserveClientError as exc:
                error = exc

    def _open(self, call: Call) -> httpx.Response:
        """Send a streamed request; an error answer is read whole and raised."""
        try:
            request = self._http.build_request(call.method, call.path, **self._args(call))
            response = self._http.send(request, stream=True)
            if response.status_code >= 400:
                response.read()
                response.close()
            return check(response)
        except httpx.TransportError as exc:
            raise transport_error(exc) from exc

    def _open_stream(self, call: StreamCall) -> ChatStream:
        return ChatStream(self, call)
