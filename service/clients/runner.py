"""One HTTP connection pool to one vLLM runner, with bounded concurrency, per-call timeouts and
retries with exponential backoff for idempotent calls.

Retry policy: connection failures, 429 and 5xx are retried (honouring ``Retry-After``, capped)
while the call's deadline allows; a read timeout is not retried, because a runner that did not answer
within the timeout will not answer a copy of the request faster, and the caller must hear back within
its own timeout. Waiting for a concurrency slot is bounded too: past ``acquire_timeout_s`` the call
fails with :class:`~service.errors.Overloaded` (429) instead of queueing without limit.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from service.clients.errors import (
    UpstreamError,
    UpstreamOverloaded,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from service.errors import Overloaded

RETRYABLE_STATUS = {429, 500, 502, 503, 504}
MAX_RETRY_AFTER_S = 5.0


class RunnerClient:
    def __init__(
        self,
        name: str,
        base_url: str,
        *,
        timeout_s: float,
        connect_timeout_s: float = 2.0,
        max_concurrency: int = 16,
        acquire_timeout_s: float = 5.0,
        retries: int = 2,
        backoff_s: float = 0.2,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._retries = retries
        self._backoff_s = backoff_s
        self._acquire_timeout_s = acquire_timeout_s
        self._slots = asyncio.Semaphore(max_concurrency)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=max_concurrency, max_keepalive_connections=max_concurrency),
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def health(self) -> bool:
        try:
            response = await self._http.get("/health", timeout=2.0)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def post_json(
        self, path: str, body: dict[str, Any], *, idempotent: bool = True, timeout_s: float | None = None
    ) -> Any:
        """POST ``body`` and return the decoded JSON answer, or raise an :class:`UpstreamError`.

        ``timeout_s`` replaces the client's timeout for this call (bulk embedding waits longer than a query).
        """
        async with self._slot():
            return await self._post_with_retries(
                path, body, idempotent=idempotent, timeout_s=timeout_s or self.timeout_s
            )

    @asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """One of ``max_concurrency`` slots, or :class:`~service.errors.Overloaded` (429) after waiting
        ``acquire_timeout_s``: saturation answers at once instead of queueing without bound."""
        try:
            await asyncio.wait_for(self._slots.acquire(), self._acquire_timeout_s)
        except asyncio.TimeoutError:
            raise Overloaded(
                f"too many requests in flight to the {self.name} runner", retry_after_s=1.0
            ) from None
        try:
            yield
        finally:
            self._slots.release()

    @asynccontextmanager
    async def stream_post(
        self, path: str, body: dict[str, Any], *, timeout_s: float | None = None
    ) -> AsyncIterator[httpx.Response]:
        """POST ``body`` and hold the streamed answer open (and one slot taken) for the ``async with`` block.

        A 4xx/5xx answer raises the same :class:`UpstreamError` as :meth:`post_json`, before the block runs,
        so the caller can still answer in the error envelope. Streams are not retried. Leaving the block
        (also by cancellation, when the client went away) closes the connection, which makes vLLM abort
        the request and free its slot in the batch.
        """
        async with self._slot():
            timeout = httpx.Timeout(timeout_s or self.timeout_s, connect=self._connect_timeout_s)
            request = self._http.build_request("POST", path, json=body, timeout=timeout)
            try:
                response = await self._http.send(request, stream=True)
            except httpx.TimeoutException as exc:
                raise UpstreamTimeout(self.name, f"no answer within {timeout_s or self.timeout_s:g}s") from exc
            except httpx.TransportError as exc:
                raise UpstreamUnavailable(self.name, f"cannot connect ({type(exc).__name__})") from exc
            try:
                if response.status_code >= 400:
                    await response.aread()
                    raise _status_error(self.name, response, _retry_after(response))
                yield response
            finally:
                await response.aclose()

    async def sse_events(self, response: httpx.Response) -> AsyncIterator[tuple[str, Any]]:
        """The ``data:`` events of a server-sent-events answer as ``(raw, decoded)``; ends at ``[DONE]``.

        Errors while reading become :class:`UpstreamTimeout` / :class:`UpstreamUnavailable`.
        """
        try:
            async for line in response.aiter_lines():
                if not line.startswith("data:"):
                    continue
                raw = line[5:].strip()
                if raw == "[DONE]":
                    return
                try:
                    yield raw, json.loads(raw)
                except ValueError as exc:
                    raise UpstreamError(self.name, "streamed an event that is not JSON") from exc
        except httpx.TimeoutException as exc:
            raise UpstreamTimeout(self.name, "stopped streaming (read timeout)") from exc
        except httpx.HTTPError as exc:
            raise UpstreamUnavailable(self.name, f"stream broken ({type(exc).__name__})") from exc

    async def _post_with_retries(
        self, path: str, body: dict[str, Any], *, idempotent: bool, timeout_s: float
    ) -> Any:
        deadline = time.monotonic() + timeout_s
        attempts = 1 + (self._retries if idempotent else 0)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                timeout = httpx.Timeout(timeout_s, connect=self._connect_timeout_s)
                response = await self._http.post(path, json=body, timeout=timeout)
            except httpx.TimeoutException as exc:
                raise UpstreamTimeout(self.name, f"no answer within {timeout_s:g}s") from exc
            except httpx.TransportError as exc:
                if last or not self._sleep_fits(attempt, deadline, None):
                    raise UpstreamUnavailable(self.name, f"cannot connect ({type(exc).__name__})") from exc
                await asyncio.sleep(self._delay(attempt, None))
                continue
            if response.status_code in RETRYABLE_STATUS:
                retry_after = _retry_after(response)
                if last or not self._sleep_fits(attempt, deadline, retry_after):
                    raise _status_error(self.name, response, retry_after)
                await asyncio.sleep(self._delay(attempt, retry_after))
                continue
            if response.status_code >= 400:
                raise _status_error(self.name, response, None)
            try:
                return response.json()
            except ValueError as exc:
                raise UpstreamError(self.name, "answered with invalid JSON") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, MAX_RETRY_AFTER_S)
        return self._backoff_s * (2**attempt) * (0.5 + random.random())

    def _sleep_fits(self, attempt: int, deadline: float, retry_after: float | None) -> bool:
        return time.monotonic() + self._delay(attempt, retry_after) < deadline


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _upstream_message(response: httpx.Response) -> str:
    try:
        payload = response.json()
    except ValueError:
        return response.text[:300]
    if isinstance(payload, dict):
        err = payload.get("error", payload)
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])[:300]
        if "detail" in payload:
            return str(payload["detail"])[:300]
        if "message" in payload:
            return str(payload["message"])[:300]
    return str(payload)[:300]


def _status_error(runner: str, response: httpx.Response, retry_after: float | None) -> UpstreamError:
    status = response.status_code
    if status == 429:
        return UpstreamOverloaded(runner, "runner is overloaded (429)", retry_after_s=retry_after or 1.0)
    if status >= 500:
        return UpstreamUnavailable(runner, f"runner failed with {status}")
    if status not in (400, 413, 422):  # 401/404/...: a misconfigured runner, not the caller's input
        return UpstreamError(runner, f"runner answered {status}: {_upstream_message(response)}")
    return UpstreamRejected(runner, f"runner refused the input ({status}): {_upstream_message(response)}")
