"""One HTTP connection pool to one vLLM runner: two lanes of slots, one deadline per call, retries with
exponential backoff, and a breaker that notices a runner is down.

Each call runs in a lane (:mod:`service.clients.lanes`): ``query`` or ``bulk``. Each call has one deadline
(:mod:`service.deadline`), its timeout, that every wait draws on: the slot, each attempt, each
backoff. Retry policy, inside that deadline:

- a connection that could not be made (refused, connect timeout) is retried for every call, idempotent or
  not: nothing was sent;
- a connection lost mid-request, 429 and 5xx are retried for idempotent calls (honouring ``Retry-After``,
  capped);
- no answer before the deadline is :class:`UpstreamTimeout` (504): there is no time left to retry;
- a call gives up after ``retries`` retries, except one made with ``wait_while_down`` (the indexer's): it
  retries connection failures and waits out a runner that is down for as long as its deadline allows, so an
  indexing job waits for a runner to come back while an HTTP caller hears 503 at once.

A runner that fails ``breaker_threshold`` connections in a row is taken as down (:mod:`service.clients.breaker`):
queries then answer 503 with ``Retry-After`` at once, after at most one short ``/health`` probe.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from service.clients.breaker import Breaker
from service.clients.errors import (
    UpstreamError,
    UpstreamOverloaded,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from service.clients.lanes import Lane, Lanes
from service.deadline import Deadline

RETRYABLE_STATUS = {429, 500, 502, 503, 504}
MAX_RETRY_AFTER_S = 5.0
MAX_BACKOFF_S = 2.0


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
        bulk_max_inflight: int = 2,
        bulk_priority: int = 0,
        breaker_threshold: int = 3,
        probe_interval_s: float = 1.0,
        probe_timeout_s: float = 1.0,
        unavailable_retry_after_s: float = 5.0,
        unavailable_code: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        """``unavailable_code`` replaces ``upstream_unavailable`` in this runner's 503s (the generator's
        say ``generation_unavailable``, so a client can tell which capability is away). ``bulk_priority``,
        when not 0, is sent as vLLM's request ``priority`` with bulk calls (the runner must run
        ``--scheduling-policy priority``): vLLM then schedules waiting queries (priority 0) first."""
        self.name = name
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._retries = retries
        self._backoff_s = backoff_s
        self._retry_after_s = unavailable_retry_after_s
        self._unavailable_code = unavailable_code
        self._bulk_priority = bulk_priority
        self.lanes = Lanes(name, query_slots=max_concurrency, bulk_slots=bulk_max_inflight,
                           acquire_timeout_s=acquire_timeout_s)
        self.breaker = Breaker(self._probe, threshold=breaker_threshold, interval_s=probe_interval_s,
                               probe_timeout_s=probe_timeout_s)
        self._http = httpx.AsyncClient(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=self.lanes.total, max_keepalive_connections=self.lanes.total),
            transport=transport,
        )

    async def aclose(self) -> None:
        await self._http.aclose()

    async def health(self, timeout_s: float = 2.0) -> bool:
        try:
            response = await self._http.get("/health", timeout=timeout_s)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    async def _probe(self, timeout_s: float) -> bool:
        try:
            return await asyncio.wait_for(self.health(timeout_s), timeout_s + 0.1)
        except asyncio.TimeoutError:
            return False

    async def post_json(
        self, path: str, body: dict[str, Any], *, lane: Lane = "query", idempotent: bool = True,
        timeout_s: float | None = None, wait_while_down: bool = False,
    ) -> Any:
        """POST ``body`` and return the decoded JSON answer, or raise an :class:`UpstreamError`.

        ``timeout_s`` replaces the client's timeout as this call's deadline (bulk embedding waits longer than
        a query); the slot, every attempt and every backoff fit in it.
        """
        deadline = Deadline(timeout_s or self.timeout_s)
        if lane == "bulk" and self._bulk_priority:
            body = {**body, "priority": self._bulk_priority}
        async with self.lanes.slot(lane, deadline):
            return await self._post_with_retries(path, body, idempotent=idempotent, deadline=deadline,
                                                 wait_while_down=wait_while_down)

    @asynccontextmanager
    async def stream_post(
        self, path: str, body: dict[str, Any], *, timeout_s: float | None = None
    ) -> AsyncIterator[httpx.Response]:
        """POST ``body`` and hold the streamed answer open (and one query slot taken) for the ``async with``
        block.

        A 4xx/5xx answer raises the same :class:`UpstreamError` as :meth:`post_json`, before the block runs,
        so the caller can still answer in the error envelope. A connection that could not be made is retried
        inside the deadline (nothing was sent); nothing else is. Leaving the block (also by cancellation, when
        the client went away) closes the connection, which makes vLLM abort the request and free its slot in
        the batch.
        """
        timeout_s = timeout_s or self.timeout_s
        deadline = Deadline(timeout_s)
        async with self.lanes.slot("query", deadline):
            attempt = 0
            while True:
                trial = await self._admit(deadline, wait_while_down=False)
                connect = min(self._connect_timeout_s, deadline.remaining())
                request = self._http.build_request(
                    "POST", path, json=body, timeout=httpx.Timeout(timeout_s, connect=connect)
                )
                try:
                    response = await asyncio.wait_for(self._http.send(request, stream=True), deadline.remaining())
                except asyncio.CancelledError:
                    if trial:
                        self.breaker.release_trial()
                    raise
                except (asyncio.TimeoutError, httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout) as exc:
                    self.breaker.failed(connection=False)
                    raise UpstreamTimeout(self.name, f"no answer within {timeout_s:g}s") from exc
                except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                    self.breaker.failed()
                    if not self._may_retry(attempt, deadline, None):
                        raise self._unavailable(f"cannot connect ({type(exc).__name__})") from exc
                    await asyncio.sleep(self._delay(attempt, None))
                    attempt += 1
                    continue
                except httpx.TransportError as exc:
                    self.breaker.failed()
                    raise self._unavailable(f"connection lost ({type(exc).__name__})") from exc
                self.breaker.succeeded()
                break
            try:
                if response.status_code >= 400:
                    await response.aread()
                    raise self._status_error(response, _retry_after(response))
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
            raise self._unavailable(f"stream broken ({type(exc).__name__})") from exc

    async def _post_with_retries(
        self, path: str, body: dict[str, Any], *, idempotent: bool, deadline: Deadline, wait_while_down: bool
    ) -> Any:
        attempt = 0
        while True:
            trial = await self._admit(deadline, wait_while_down=wait_while_down)
            retry_after: float | None = None
            try:
                # The httpx timeouts bound each phase; wait_for bounds the whole attempt by what is left.
                left = deadline.remaining()
                timeout = httpx.Timeout(left, connect=min(self._connect_timeout_s, left))
                response = await asyncio.wait_for(self._http.post(path, json=body, timeout=timeout), left)
            except asyncio.CancelledError:
                if trial:
                    self.breaker.release_trial()
                raise
            except (asyncio.TimeoutError, httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout) as exc:
                self.breaker.failed(connection=False)
                raise UpstreamTimeout(self.name, f"no answer within {deadline.timeout_s:g}s") from exc
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent: safe to send again
                self.breaker.failed()
                failure: UpstreamError = self._unavailable(f"cannot connect ({type(exc).__name__})")
                cause: BaseException | None = exc
                retryable = connection = True
            except httpx.TransportError as exc:  # lost mid-request: the runner may have done the work
                self.breaker.failed()
                failure = self._unavailable(f"connection lost ({type(exc).__name__})")
                cause, retryable, connection = exc, idempotent, True
            else:
                self.breaker.succeeded()
                if response.status_code in RETRYABLE_STATUS:
                    retry_after = _retry_after(response)
                    failure = self._status_error(response, retry_after)
                    cause, retryable, connection = None, idempotent, False
                elif response.status_code >= 400:
                    raise self._status_error(response, None)
                else:
                    try:
                        return response.json()
                    except ValueError as exc:
                        raise UpstreamError(self.name, "answered with invalid JSON") from exc
            outwait = wait_while_down and connection
            if not retryable or not self._may_retry(attempt, deadline, retry_after, outwait=outwait):
                raise failure from cause
            await asyncio.sleep(self._delay(attempt, retry_after))
            attempt += 1

    async def check_available(self) -> None:
        """Raise :class:`UpstreamUnavailable` now when the runner is known down (and a due probe agrees): a
        caller with work to do before its request (retrieval before generation) need not do it in vain."""
        if await self.breaker.known_down(Deadline(self._connect_timeout_s)):
            raise self._unavailable("runner is down (its /health does not answer)")

    async def _admit(self, deadline: Deadline, *, wait_while_down: bool) -> bool:
        """Go ahead unless the runner is known down: then fail now, or with ``wait_while_down`` wait for it
        within the deadline. True when this attempt is the breaker's half-open trial."""
        if wait_while_down:
            admitted = await self.breaker.wait_admitted(deadline)
        else:
            admitted = await self.breaker.admit(deadline)
        if not admitted:
            state = self.breaker.state
            why = "its /health does not answer" if state == "open" else "coming back: one request at a time tries it"
            raise self._unavailable(f"runner is down ({why})")
        return self.breaker.state == "half_open"

    def _may_retry(self, attempt: int, deadline: Deadline, retry_after: float | None, *,
                   outwait: bool = False) -> bool:
        if not deadline.allows(self._delay(attempt, retry_after)):
            return False
        return outwait or attempt < self._retries

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, MAX_RETRY_AFTER_S)
        return min(self._backoff_s * (2 ** min(attempt, 16)), MAX_BACKOFF_S) * (0.5 + random.random())

    def _unavailable(self, message: str) -> UpstreamUnavailable:
        return UpstreamUnavailable(self.name, message, code=self._unavailable_code,
                                   retry_after_s=self._retry_after_s)

    def _status_error(self, response: httpx.Response, retry_after: float | None) -> UpstreamError:
        error = _status_error(self.name, response, retry_after)
        if type(error) is UpstreamUnavailable:
            return self._unavailable(str(error.message).removeprefix(f"{self.name} runner: "))
        return error


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
