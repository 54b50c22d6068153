"""Routing orders: fewest in flight, the hash ring and its spill under bounded load, retries last."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator

import httpx
import pytest

from service.upstream.replica import Replica
from service.upstream.routing import HashRing, by_affinity, fewest_in_flight, last_if_tried

URLS = [f"http://10.0.0.{i}:8104" for i in range(1, 5)]
KEYS = [f"prefix-{i}" for i in range(2000)]


@pytest.fixture
async def probe_http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(200))) as client:
        yield client


def replicas(probe_http: httpx.AsyncClient, urls: list[str] = URLS) -> list[Replica]:
    return [Replica(u, probe_http, threshold=1, interval_s=1.0, probe_timeout_s=1.0) for u in urls]


def test_the_ring_walks_every_replica_once_from_a_stable_owner() -> None:
    ring = HashRing(URLS)
    walk = ring.walk("system prompt + image + context")
    assert sorted(walk) == sorted(URLS)
    assert HashRing(reversed(URLS)).walk("system prompt + image + context") == walk
    owners = Counter(ring.walk(k)[0] for k in KEYS)
    assert set(owners) == set(URLS) and min(owners.values()) > 2000 / 4 * 0.5  # 64 points each: roughly even


def test_a_replica_joining_or_leaving_moves_only_the_keys_next_to_it() -> None:
    before = {k: HashRing(URLS).walk(k)[0] for k in KEYS}
    grown = {k: HashRing([*URLS, "http://10.0.0.9:8104"]).walk(k)[0] for k in KEYS}
    moved = [k for k in KEYS if grown[k] != before[k]]
    assert all(grown[k] == "http://10.0.0.9:8104" for k in moved)
    assert 0.1 < len(moved) / len(KEYS) < 0.3  # about 1/5 of the keys, all to the newcomer
    shrunk = {k: HashRing(URLS[1:]).walk(k)[0] for k in KEYS}
    assert all(shrunk[k] == before[k] for k in KEYS if before[k] != URLS[0])  # only the leaver's keys move
    assert all(shrunk[k] == HashRing(URLS).walk(k)[1] for k in KEYS if before[k] == URLS[0])  # to the next


def test_fewest_in_flight_then_least_recently_chosen(probe_http: httpx.AsyncClient) -> None:
    a, b, c, d = replicas(probe_http)
    a.in_flight, b.in_flight, c.in_flight, d.in_flight = 2, 0, 1, 0
    b.last_chosen, d.last_chosen = 7, 3
    assert fewest_in_flight([a, b, c, d]) == [d, b, c, a]


def test_a_saturated_owner_spills_to_the_next_on_the_ring(probe_http: httpx.AsyncClient) -> None:
    pool = replicas(probe_http)
    ring = HashRing(URLS)
    walk = ring.walk("k")
    by_url = {r.url: r for r in pool}
    assert [r.url for r in by_affinity(pool, ring, "k", load_factor=1.25)] == walk  # idle: the owner first
    owner = by_url[walk[0]]
    owner.in_flight = 1  # cap = ceil(1.25 * 2 / 4) = 1: the owner is at it
    order = [r.url for r in by_affinity(pool, ring, "k", load_factor=1.25)]
    assert order == [*walk[1:], walk[0]]
    by_url[walk[1]].in_flight = 1  # total 2: cap = ceil(1.25 * 3 / 4) = 1, both full: the third one
    assert [r.url for r in by_affinity(pool, ring, "k", load_factor=1.25)][0] == walk[2]
    owner.in_flight = by_url[walk[1]].in_flight = 0
    assert by_affinity(pool, ring, "k", load_factor=1.25)[0] is owner  # back home once it drained


def test_a_down_replica_does_not_count_toward_the_fair_share(probe_http: httpx.AsyncClient) -> None:
    a, b = replicas(probe_http, URLS[:2])
    ring = HashRing(URLS[:2])
    owner, other = (a, b) if ring.walk("k")[0] == a.url else (b, a)
    other.breaker.failed()  # threshold 1: out
    owner.in_flight = 3
    assert by_affinity([a, b], ring, "k", load_factor=1.25)[0] is owner  # alone serving: never "saturated"


def test_replicas_already_failed_come_last_longest_ago_first(probe_http: httpx.AsyncClient) -> None:
    a, b, c, d = replicas(probe_http)
    assert last_if_tried([a, b, c, d], [b]) == [a, c, d, b]
    assert last_if_tried([a, b, c, d], [c, a, c]) == [b, d, a, c]
