"""One replica of a runner: its address, its breaker, and what this process sent it.

A replica is one vLLM server (a pod, or a process on a port). Its :class:`~service.upstream.breaker.Breaker`
takes it out after ``breaker_threshold`` connection failures in a row (requests or health checks) and lets
it back in, one trial request at a time, once its ``/health`` answers. The counters are this process's view:
requests in flight now, requests routed to it, errors by kind; they feed the per-replica Prometheus metrics
(:mod:`service.observability.replica_metrics`).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

from service.clock import SYSTEM, Clock
from service.upstream.breaker import Breaker, State

ErrorKind = str
"""``connect`` (no connection), ``lost`` (dropped mid-request), ``timeout``, ``status`` (429/5xx), ``health``."""


class Replica:
    def __init__(self, url: str, probe_http: httpx.AsyncClient, *, threshold: int, interval_s: float,
                 probe_timeout_s: float, clock: Clock = SYSTEM) -> None:
        self.url = url
        self._probe_http = probe_http
        self._clock = clock
        self.breaker = Breaker(self._probe, threshold=threshold, interval_s=interval_s,
                               probe_timeout_s=probe_timeout_s, clock=clock)
        self.in_flight = 0
        self.chosen = 0
        self.last_chosen = 0
        """The pool's pick number when this replica was last chosen (least recently chosen wins a tie)."""
        self.errors: Counter[ErrorKind] = Counter()

    def __repr__(self) -> str:
        return f"Replica({self.url!r}, {self.breaker.state}, in_flight={self.in_flight})"

    @property
    def eligible(self) -> bool:
        """Whether a request may be routed here: closed, or half-open with its one trial not yet out."""
        return self.breaker.state == "closed" or self.breaker.trial_free

    @contextmanager
    def sending(self) -> Iterator[None]:
        """Count one request in flight for as long as the block runs (a stream: until it is closed)."""
        self.in_flight += 1
        try:
            yield
        finally:
            self.in_flight -= 1

    def failed(self, kind: ErrorKind, *, connection: bool) -> None:
        self.errors[kind] += 1
        self.breaker.failed(connection=connection)

    async def health(self, timeout_s: float) -> bool:
        """``GET /health`` answered 200 within ``timeout_s``."""
        try:
            response = await self._clock.within(self._probe_http.get(f"{self.url}/health", timeout=timeout_s),
                                                timeout_s + 0.1)
        except (httpx.HTTPError, asyncio.TimeoutError):
            return False
        return response.status_code == 200

    async def _probe(self, timeout_s: float) -> bool:
        return await self.health(timeout_s)

    def snapshot(self) -> ReplicaStats:
        return ReplicaStats(self.url, self.breaker.state, self.in_flight, self.chosen, dict(self.errors))


@dataclass(frozen=True)
class ReplicaStats:
    url: str
    state: State
    in_flight: int
    chosen: int
    errors: dict[ErrorKind, int]
