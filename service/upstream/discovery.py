"""The replica addresses a runner setting names now: static URLs as they are, ``dns+`` names resolved.

A ``dns+`` name is resolved with the injected ``resolver`` (the system's by default, the same DNS edge the URL
fetcher uses) to every A/AAAA address, one replica per address. When a resolution fails (no answer, a
timeout) the name keeps the addresses it had: a DNS hiccup must not empty a pool that still serves, and a
replica that really went away is noticed by its breaker first. A name that answers with no address (a
headless Service with no ready pod) empties its part of the pool: there is nothing to send to.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from service.clock import SYSTEM, Clock
from service.config.targets import Target, replica_url
from service.security.fetch import Resolver, system_resolver

log = logging.getLogger("ragserve.runners")


class Discovery:
    def __init__(self, targets: Sequence[Target], *, resolver: Resolver | None = None,
                 timeout_s: float = 2.0, clock: Clock = SYSTEM) -> None:
        self.targets = tuple(targets)
        self._clock = clock
        self._resolver = resolver or system_resolver
        self._timeout_s = timeout_s
        self._known: dict[Target, list[str]] = {}

    @property
    def dynamic(self) -> bool:
        """Whether the set of replicas can change (some target is a DNS name)."""
        return any(t.resolve for t in self.targets)

    async def urls(self) -> list[str]:
        """Every replica URL, in the settings' order, each once (names resolved now, concurrently)."""
        answers = await asyncio.gather(*(self._resolve(t) for t in self.targets))
        return list(dict.fromkeys(url for urls in answers for url in urls))

    async def _resolve(self, target: Target) -> list[str]:
        if not target.resolve:
            return [target.url]
        try:
            addresses = await self._clock.within(self._resolver(target.host, target.port), self._timeout_s)
        except (OSError, asyncio.TimeoutError) as exc:
            kept = self._known.get(target, [])
            log.warning("could not resolve %s (%s); keeping its %d known replicas", target.host, exc, len(kept))
            return kept
        urls = sorted({replica_url(target.scheme, str(a), target.port) for a in addresses})
        if urls != self._known.get(target):
            log.info("%s resolves to %d replicas: %s", target.host, len(urls), ", ".join(urls) or "(none)")
        self._known[target] = urls
        return urls
