"""A runner's replicas: who they are now, which are up, and which one a call goes to next.

The pool holds one :class:`~service.upstream.replica.Replica` per address its setting names
(:mod:`service.config.targets`, :mod:`service.upstream.discovery`) and offers them to a call in routing order
(:mod:`service.upstream.routing`), skipping what a replica's breaker does not admit.

A pool of several replicas, or one behind a ``dns+`` name, keeps itself current in a background task started
by its first call: every ``dns_refresh_s`` it resolves the names again (replicas come and go with the
headless Service's ready pods), every ``health_interval_s`` it asks each serving replica's ``/health`` (a
failure counts like a refused connection, so ``breaker_threshold`` of them in a row take the replica out),
and a replica that is out is probed every ``probe_interval_s`` (its breaker's own interval) so that it comes
back, through one trial request, as soon as it answers, even while the others carry all the traffic. A pool
of one plain URL runs no task: its breaker probes on demand, as the single runner always did.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextlib import suppress

import httpx

from service.clock import SYSTEM, Clock
from service.config.targets import Target
from service.deadline import Deadline
from service.security.fetch import Resolver
from service.upstream.discovery import Discovery
from service.upstream.replica import Replica, ReplicaStats
from service.upstream.routing import HashRing, by_affinity, fewest_in_flight, last_if_tried

log = logging.getLogger("ragserve.runners")

PROBE_CONNECTIONS = 8
"""Connections of the pool's own health-check client: checks never queue behind requests for a connection."""


class ReplicaPool:
    def __init__(
        self,
        name: str,
        targets: Sequence[Target],
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        resolver: Resolver | None = None,
        breaker_threshold: int = 3,
        probe_interval_s: float = 1.0,
        probe_timeout_s: float = 1.0,
        health_interval_s: float = 2.0,
        dns_refresh_s: float = 5.0,
        affinity_load_factor: float = 1.25,
        clock: Clock = SYSTEM,
    ) -> None:
        """``clock`` times the upkeep, the breakers and the probes (:mod:`service.clock`; tests hold it)."""
        self.name = name
        self._clock = clock
        self.discovery = Discovery(targets, resolver=resolver, timeout_s=max(probe_timeout_s, 1.0), clock=clock)
        self._threshold = breaker_threshold
        self._probe_interval_s = probe_interval_s
        self._probe_timeout_s = probe_timeout_s
        self._health_interval_s = health_interval_s
        self._dns_refresh_s = dns_refresh_s
        self._load_factor = affinity_load_factor
        self._probe_http = httpx.AsyncClient(
            timeout=probe_timeout_s, transport=transport,
            limits=httpx.Limits(max_connections=PROBE_CONNECTIONS, max_keepalive_connections=PROBE_CONNECTIONS),
        )
        self.replicas: list[Replica] = []
        self._ring = HashRing([])
        self._picks = 0
        self._resolved = False
        self._resolving = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        static = not self.discovery.dynamic
        if static:  # known without any DNS: ready before the first call
            self._apply([t.url for t in targets])
        self._maintained = self.discovery.dynamic or len(self.replicas) > 1

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
        await self._probe_http.aclose()

    # --- membership ----------------------------------------------------------------------------------------

    async def refresh(self) -> None:
        """Resolve the setting's names again and add or drop replicas to match."""
        async with self._resolving:
            self._apply(await self.discovery.urls())

    def _apply(self, urls: Sequence[str]) -> None:
        self._resolved = True
        current = {r.url: r for r in self.replicas}
        if list(current) == list(urls):
            return
        for url in set(current) - set(urls):
            log.info("%s runner: replica %s left the pool", self.name, url)
        self.replicas = [current.get(url) or self._new_replica(url) for url in urls]
        self._ring = HashRing(urls)

    def _new_replica(self, url: str) -> Replica:
        if self._resolved and self.replicas:
            log.info("%s runner: replica %s joined the pool", self.name, url)
        return Replica(url, self._probe_http, threshold=self._threshold, interval_s=self._probe_interval_s,
                       probe_timeout_s=self._probe_timeout_s, clock=self._clock)

    async def _ready(self) -> None:
        """Before the first call: the names resolved once, and the upkeep task running (if this pool has one)."""
        if self._maintained and self._task is None:
            self._task = asyncio.create_task(self._upkeep(), name=f"ragserve-pool-{self.name}")
        if not self._resolved:
            await self.refresh()

    # --- choosing --------------------------------------------------------------------------------------------

    def order(self, *, affinity: str | None, tried: Sequence[Replica] = ()) -> list[Replica]:
        if affinity is None:
            order = fewest_in_flight(self.replicas)
        else:
            order = by_affinity(self.replicas, self._ring, affinity, load_factor=self._load_factor)
        return last_if_tried(order, tried)

    async def pick(self, deadline: Deadline, *, affinity: str | None = None,
                   tried: Sequence[Replica] = ()) -> tuple[Replica, bool] | None:
        """The first serving replica in routing order, and whether this call is its half-open trial; None when
        no replica admits a call now.

        Replicas that are out are passed over without a probe (the upkeep probes them, off the request's
        path); only when none is serving does the call probe one whose probe is due, as a lone runner's
        breaker always did: at most one short ``/health`` before a 503."""
        await self._ready()
        order = self.order(affinity=affinity, tried=tried)
        for replica in order:
            if replica.eligible and await replica.breaker.admit(deadline):
                return self._chose(replica)
        for replica in order:
            if replica.breaker.state == "open" and replica.breaker.next_probe_in() == 0:
                if await replica.breaker.admit(deadline):
                    return self._chose(replica)
                break
        return None

    def _chose(self, replica: Replica) -> tuple[Replica, bool]:
        self._picks += 1
        replica.chosen += 1
        replica.last_chosen = self._picks
        return replica, replica.breaker.state == "half_open"

    def untried_serving(self, tried: Sequence[Replica]) -> bool:
        """Whether a replica this call has not failed on may take it now (so a retry need not wait)."""
        return any(r.eligible for r in self.replicas if r not in tried)

    def next_chance_in(self) -> float:
        """Seconds until some replica may admit a call again (its probe is due), for a call waiting it out."""
        if not self.replicas:
            return self._dns_refresh_s if self.discovery.dynamic else self._probe_interval_s
        return min(r.breaker.next_probe_in() for r in self.replicas)

    def why_down(self) -> str:
        if not self.replicas:
            return "no replica: its dns+ name resolves to no address (or did not resolve yet)"
        if any(r.breaker.state == "half_open" for r in self.replicas):
            return "coming back: one request at a time tries it"
        return "no replica's /health answers" if len(self.replicas) > 1 else "its /health does not answer"

    async def known_down(self, deadline: Deadline) -> bool:
        """Whether no replica can take a call now (probing those whose probe is due)."""
        await self._ready()
        downs = [await r.breaker.known_down(deadline) for r in self.replicas]
        return all(downs)

    async def health(self, timeout_s: float) -> bool:
        """Whether some replica answers ``/health`` now."""
        await self._ready()
        answers = await asyncio.gather(*(r.health(timeout_s) for r in self.replicas))
        return any(answers)

    def stats(self) -> list[ReplicaStats]:
        return [r.snapshot() for r in self.replicas]

    # --- upkeep ----------------------------------------------------------------------------------------------

    async def _upkeep(self) -> None:
        last_dns = last_health = self._clock.now()
        tick = max(0.05, min(self._probe_interval_s, self._health_interval_s,
                             self._dns_refresh_s if self.discovery.dynamic else float("inf")) / 2)
        while True:
            await self._clock.sleep(tick)
            now = self._clock.now()
            try:
                if self.discovery.dynamic and now - last_dns >= self._dns_refresh_s:
                    last_dns = now
                    await self.refresh()
                checks = now - last_health >= self._health_interval_s
                if checks:
                    last_health = now
                await asyncio.gather(*(self._look_after(r, checks) for r in list(self.replicas)))
            except Exception:  # noqa: BLE001 - the upkeep must outlive any one failure
                log.exception("%s runner: pool upkeep failed", self.name)

    async def _look_after(self, replica: Replica, check: bool) -> None:
        if replica.breaker.state == "open":
            await replica.breaker.known_down(Deadline(self._probe_timeout_s, clock=self._clock))  # probes when due
        elif check and replica.breaker.state == "closed":
            if not await replica.health(self._probe_timeout_s):
                replica.failed("health", connection=True)
                if replica.breaker.open:
                    log.warning("%s runner: replica %s failed its health checks; out of the pool", self.name,
                                replica.url)
