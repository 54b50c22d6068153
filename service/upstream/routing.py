"""Which replica a request goes to: the order in which a pool offers its replicas to one call.

Two policies:

- **fewest in flight** (embed, rerank: no state in the runner worth returning to): the replica with the fewest
  of this process's requests in flight; a tie goes to the one chosen least recently, so light sequential load
  is spread round robin;
- **prefix affinity** (chat): consistent hashing of the request's prompt prefix on a ring of replicas
  (:class:`HashRing`, 64 virtual nodes each). With data parallelism every replica has its own prefix cache,
  so the same system prompt, image and retrieved context keep landing where their KV blocks are; a replica
  joining or leaving moves only the keys next to it on the ring. A replica that is saturated spills to the
  next one on the ring, by the bounded-load rule of Mirrokni, Thorup and Zadimoghaddam ("Consistent Hashing
  with Bounded Loads", 2018): a replica is saturated while it holds ``ceil(load_factor × (in flight + 1) / n)``
  requests, so none takes more than ``load_factor`` times its fair share while a hot prefix bursts. A replica
  that is down (its breaker open) spills the same way: the caller skips what its breaker does not admit.

The caller walks the order and takes the first replica its breaker admits; replicas this call already failed on
come last, so a retry goes to another replica whenever there is one.
"""

from __future__ import annotations

import bisect
import hashlib
import math
from collections.abc import Iterable, Sequence

from service.upstream.replica import Replica

VIRTUAL_NODES = 64


def _hash(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class HashRing:
    """Replica URLs placed on a 64-bit ring, ``VIRTUAL_NODES`` points each."""

    def __init__(self, urls: Iterable[str], *, virtual_nodes: int = VIRTUAL_NODES) -> None:
        points = sorted((_hash(f"{url}#{i}"), url) for url in set(urls) for i in range(virtual_nodes))
        self._hashes = [h for h, _ in points]
        self._urls = [u for _, u in points]
        self._distinct = len(set(self._urls))

    def walk(self, key: str) -> list[str]:
        """Every replica once, clockwise from ``key``'s place: the owner first, then where it spills."""
        if not self._urls:
            return []
        start = bisect.bisect(self._hashes, _hash(key))
        seen: dict[str, None] = {}
        for i in range(len(self._urls)):
            seen.setdefault(self._urls[(start + i) % len(self._urls)])
            if len(seen) == self._distinct:
                break
        return list(seen)


def fewest_in_flight(replicas: Sequence[Replica]) -> list[Replica]:
    return sorted(replicas, key=lambda r: (r.in_flight, r.last_chosen))


def by_affinity(replicas: Sequence[Replica], ring: HashRing, key: str, *, load_factor: float) -> list[Replica]:
    """Ring order from ``key``'s owner, the replicas under their bounded load first."""
    by_url = {r.url: r for r in replicas}
    walk = [by_url[u] for u in ring.walk(key) if u in by_url]
    serving = [r for r in walk if r.eligible] or walk
    cap = math.ceil(load_factor * (sum(r.in_flight for r in serving) + 1) / max(1, len(serving)))
    under = [r for r in walk if r.in_flight < cap]
    return under + [r for r in walk if r.in_flight >= cap]


def last_if_tried(order: Sequence[Replica], tried: Sequence[Replica]) -> list[Replica]:
    """``order`` with the replicas this call already failed on moved to the end, the one that failed longest
    ago first among them."""
    last_failure = {id(r): i for i, r in enumerate(tried)}
    fresh = [r for r in order if id(r) not in last_failure]
    return fresh + sorted((r for r in order if id(r) in last_failure), key=lambda r: last_failure[id(r)])
