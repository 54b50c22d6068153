"""One HTTP connection pool to one vLLM runner: two lanes of slots, one deadline per call, retries with
exponential backoff, and a breaker that notices a runner is down.

Each call runs in a lane (:mod:`service.upstream.lanes`): ``query`` or ``bulk``. Each call has one deadline
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

A runner is a pool of replicas (:mod:`service.upstream.pool`): one URL, several, or a ``dns+`` name that
resolves to several. Each attempt goes to the replica the routing picks (:mod:`service.upstream.routing`):
fewest in flight, or, for a call with an ``affinity`` key (chat: its prompt prefix), the key's replica on a
hash ring. A replica that fails ``breaker_threshold`` connections in a row is taken out
(:mod:`service.upstream.breaker`, one per replica) until its ``/health`` answers again. A retryable failure
is retried at once on a replica this call has not tried, while there is one that is serving (no backoff:
another server owes nothing to this one's trouble); only then do the backoff and the ``retries`` count apply.
All of it stays inside the call's one deadline. When no replica is serving, queries answer 503 with
``Retry-After`` at once, after at most one short ``/health`` probe.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx

from service.clock import SYSTEM, Clock
from service.config.targets import parse_targets
from service.deadline import Deadline
from service.security.fetch import Resolver
from service.upstream.direct import runner_http
from service.upstream.errors import (
    UpstreamError,
    UpstreamOverloaded,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from service.upstream.lanes import Lane, Lanes
from service.upstream.pool import ReplicaPool
from service.upstream.replica import Replica, ReplicaStats

RETRYABLE_STATUS = {429, 500, 502, 503, 504}
MAX_RETRY_AFTER_S = 5.0
MAX_BACKOFF_S = 2.0


class RunnerClient:
    def __init__(
        self,
        name: str,
        base_url: str | Sequence[str],
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
        health_interval_s: float = 2.0,
        dns_refresh_s: float = 5.0,
        affinity_load_factor: float = 1.25,
        unavailable_retry_after_s: float = 5.0,
        unavailable_code: str | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        resolver: Resolver | None = None,
        clock: Clock = SYSTEM,
    ) -> None:
        """``base_url`` is the runner's URL setting: one URL, several (a comma-separated or JSON list), or
        ``dns+http://name:port`` entries (:mod:`service.config.targets`). ``max_concurrency`` and
        ``bulk_max_inflight`` bound the whole runner (all its replicas), per process.

        ``unavailable_code`` replaces ``upstream_unavailable`` in this runner's 503s (the generator's
        say ``generation_unavailable``, so a client can tell which capability is away). ``bulk_priority``,
        when not 0, is sent as vLLM's request ``priority`` with bulk calls (the runner must run
        ``--scheduling-policy priority``): vLLM then schedules waiting queries (priority 0) first.
        ``transport`` and ``resolver`` replace the network and DNS edges (tests); ``clock`` the time every
        deadline, backoff, probe and health check is measured on (:mod:`service.clock`; tests hold it)."""
        self.name = name
        self._clock = clock
        self.timeout_s = timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._retries = retries
        self._backoff_s = backoff_s
        self._retry_after_s = unavailable_retry_after_s
        self._unavailable_code = unavailable_code
        self._bulk_priority = bulk_priority
        self.lanes = Lanes(name, query_slots=max_concurrency, bulk_slots=bulk_max_inflight,
                           acquire_timeout_s=acquire_timeout_s, clock=clock)
        self.pool = ReplicaPool(
            name, parse_targets(base_url), transport=transport, resolver=resolver,
            breaker_threshold=breaker_threshold, probe_interval_s=probe_interval_s, probe_timeout_s=probe_timeout_s,
            health_interval_s=health_interval_s, dns_refresh_s=dns_refresh_s,
            affinity_load_factor=affinity_load_factor, clock=clock,
        )
        self._http, self._post = runner_http(
            timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
            limits=httpx.Limits(max_connections=self.lanes.total, max_keepalive_connections=self.lanes.total),
            transport=transport,
        )

    @property
    def replicas(self) -> list[Replica]:
        return self.pool.replicas

    def replica_stats(self) -> list[ReplicaStats]:
        """What each replica is doing now (the per-replica metrics)."""
        return self.pool.stats()

    async def aclose(self) -> None:
        await self.pool.aclose()
        await self._http.aclose()

    async def health(self, timeout_s: float = 2.0) -> bool:
        """Whether some replica answers ``/health``."""
        return await self.pool.health(timeout_s)

    async def post_json(
        self, path: str, body: dict[str, Any], *, lane: Lane = "query", idempotent: bool = True,
        timeout_s: float | None = None, wait_while_down: bool = False, affinity: str | None = None,
    ) -> Any:
        """POST ``body`` and return the decoded JSON answer, or raise an :class:`UpstreamError`.

        ``timeout_s`` replaces the client's timeout as this call's deadline (bulk embedding waits longer than
        a query); the slot, every attempt and every backoff fit in it. ``affinity`` (a prompt prefix key)
        routes by consistent hashing instead of to the replica with the fewest requests in flight.
        """
        deadline = Deadline(timeout_s or self.timeout_s, clock=self._clock)
        if lane == "bulk" and self._bulk_priority:
            body = {**body, "priority": self._bulk_priority}
        async with self.lanes.slot(lane, deadline):
            return await self._post_with_retries(path, body, idempotent=idempotent, deadline=deadline,
                                                 wait_while_down=wait_while_down, affinity=affinity)

    @asynccontextmanager
    async def stream_post(
        self, path: str, body: dict[str, Any], *, timeout_s: float | None = None, affinity: str | None = None,
    ) -> AsyncIterator[httpx.Response]:
        """POST ``body`` and hold the streamed answer open (and one query slot taken) for the ``async with``
        block.

        A 4xx/5xx answer raises the same :class:`UpstreamError` as :meth:`post_json`, before the block runs,
        so the caller can still answer in the error envelope. A connection that could not be made is retried
        inside the deadline (nothing was sent), on another replica when there is one; nothing else is. Leaving
        the block (also by cancellation, when the client went away) closes the connection, which makes vLLM
        abort the request and free its slot in the batch.
        """
        timeout_s = timeout_s or self.timeout_s
        deadline = Deadline(timeout_s, clock=self._clock)
        async with self.lanes.slot("query", deadline):
            replica, response = await self._open_stream(path, body, deadline, affinity)
            try:
                if response.status_code >= 400:
                    await response.aread()
                    raise self._status_error(response, _retry_after(response))
                yield response
            finally:
                await response.aclose()
                replica.in_flight -= 1

    async def _open_stream(
        self, path: str, body: dict[str, Any], deadline: Deadline, affinity: str | None
    ) -> tuple[Replica, httpx.Response]:
        """The replica and its answer's head, with one request counted in flight there (the caller ends it)."""
        attempt = 0
        tried: list[Replica] = []
        while True:
            replica, trial = await self._admit(deadline, wait_while_down=False, affinity=affinity, tried=tried)
            connect = min(self._connect_timeout_s, deadline.remaining())
            request = self._http.build_request(
                "POST", replica.url + path, json=body, timeout=httpx.Timeout(deadline.timeout_s, connect=connect)
            )
            replica.in_flight += 1
            try:
                response = await self._clock.within(self._http.send(request, stream=True), deadline.remaining())
            except BaseException as exc:
                replica.in_flight -= 1
                if isinstance(exc, asyncio.CancelledError):
                    if trial:
                        replica.breaker.release_trial()
                    raise
                if isinstance(exc, (asyncio.TimeoutError, httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout)):
                    replica.failed("timeout", connection=False)
                    raise UpstreamTimeout(self.name, f"no answer within {deadline.timeout_s:g}s") from exc
                if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
                    replica.failed("connect", connection=True)
                    tried.append(replica)
                    if self.pool.untried_serving(tried) and deadline.allows(0.0):
                        continue
                    if not self._may_retry(attempt, deadline, None):
                        raise self._unavailable(f"cannot connect ({type(exc).__name__})") from exc
                    await self._clock.sleep(self._delay(attempt, None))
                    attempt += 1
                    continue
                if isinstance(exc, httpx.TransportError):
                    replica.failed("lost", connection=True)
                    raise self._unavailable(f"connection lost ({type(exc).__name__})") from exc
                raise
            replica.breaker.succeeded()
            if response.status_code >= 400:
                replica.errors["status"] += 1
            return replica, response

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
        self, path: str, body: dict[str, Any], *, idempotent: bool, deadline: Deadline, wait_while_down: bool,
        affinity: str | None,
    ) -> Any:
        attempt = 0
        tried: list[Replica] = []
        while True:
            replica, trial = await self._admit(deadline, wait_while_down=wait_while_down, affinity=affinity,
                                               tried=tried)
            retry_after: float | None = None
            with replica.sending():
                try:
                    # The httpx timeouts bound each phase; within() bounds the whole attempt by what is left.
                    left = deadline.remaining()
                    timeout = httpx.Timeout(left, connect=min(self._connect_timeout_s, left))
                    response = await self._clock.within(self._post.post(replica.url + path, body, timeout), left)
                except asyncio.CancelledError:
                    if trial:
                        replica.breaker.release_trial()
                    raise
                except (asyncio.TimeoutError, httpx.ReadTimeout, httpx.WriteTimeout, httpx.PoolTimeout) as exc:
                    replica.failed("timeout", connection=False)
                    raise UpstreamTimeout(self.name, f"no answer within {deadline.timeout_s:g}s") from exc
                except (httpx.ConnectError, httpx.ConnectTimeout) as exc:  # nothing was sent: safe to send again
                    replica.failed("connect", connection=True)
                    failure: UpstreamError = self._unavailable(f"cannot connect ({type(exc).__name__})")
                    cause: BaseException | None = exc
                    retryable = connection = True
                except httpx.TransportError as exc:  # lost mid-request: the runner may have done the work
                    replica.failed("lost", connection=True)
                    failure = self._unavailable(f"connection lost ({type(exc).__name__})")
                    cause, retryable, connection = exc, idempotent, True
                else:
                    replica.breaker.succeeded()
                    if response.status_code in RETRYABLE_STATUS:
                        replica.errors["status"] += 1
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
            if not retryable:
                raise failure from cause
            tried.append(replica)
            if self.pool.untried_serving(tried) and deadline.allows(0.0):
                continue  # another replica, at once
            outwait = wait_while_down and connection
            if not self._may_retry(attempt, deadline, retry_after, outwait=outwait):
                raise failure from cause
            await self._clock.sleep(self._delay(attempt, retry_after))
            attempt += 1

    async def check_available(self) -> None:
        """Raise :class:`UpstreamUnavailable` now when the runner is known down (and a due probe agrees): a
        caller with work to do before its request (retrieval before generation) need not do it in vain."""
        if await self.pool.known_down(Deadline(self._connect_timeout_s, clock=self._clock)):
            raise self._unavailable(f"runner is down ({self.pool.why_down()})")

    async def _admit(self, deadline: Deadline, *, wait_while_down: bool, affinity: str | None,
                     tried: Sequence[Replica]) -> tuple[Replica, bool]:
        """The replica this attempt goes to, unless none is serving: then fail now, or with
        ``wait_while_down`` wait for one within the deadline. The flag: this attempt is the replica's
        half-open trial."""
        while True:
            picked = await self.pool.pick(deadline, affinity=affinity, tried=tried)
            if picked is not None:
                return picked
            wait = self.pool.next_chance_in()
            if not wait_while_down or not deadline.allows(wait):
                raise self._unavailable(f"runner is down ({self.pool.why_down()})")
            await self._clock.sleep(max(wait, 0.05))

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
