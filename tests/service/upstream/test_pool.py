"""A runner as a pool of replicas, faults injected at the network edge (``httpx.MockTransport``): spread by
load, prefix affinity and its spill, eviction and return, retries on another replica inside one deadline,
DNS re-resolution through an injected resolver.

The pool and the fake replicas run on a :class:`ManualClock`: its upkeep (health checks, probes, DNS) happens
only when the test moves the clock, and "at once" means the call ended with the clock standing still; so
each claim is an exact sequence, whatever the machine's load."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Sequence
from typing import Any

import pytest

from service.security.addresses import IPAddress
from service.upstream.errors import UpstreamTimeout, UpstreamUnavailable
from service.upstream.routing import HashRing
from service.upstream.runner import RunnerClient
from tests.support.clock import ManualClock, settle
from tests.support.replicas import FakeReplicas

A, B, C = "10.0.0.1:8101", "10.0.0.2:8101", "10.0.0.3:8101"
EMBED = "/v1/embeddings"
CHAT = "/v1/chat/completions"
INTERVAL_S = 0.25
"""The pools' probe, health-check and DNS interval (a binary fraction: clock times add up exactly)."""


def replicas(*addresses: str) -> tuple[FakeReplicas, ManualClock]:
    clock = ManualClock()
    return FakeReplicas(clock=clock).add(*addresses), clock


def pool(fake: FakeReplicas, url: str | None = None, **kw: Any) -> RunnerClient:
    """A client of ``fake``'s replicas on their clock. No backoff: a retry's wait is not what these tests are
    about, and the clock stands still unless the test moves it."""
    options: dict[str, Any] = {"timeout_s": 5, "backoff_s": 0, "probe_interval_s": INTERVAL_S,
                               "health_interval_s": INTERVAL_S, "breaker_threshold": 2, **kw}
    return RunnerClient("embedding", url or ",".join(f"http://{a}" for a in fake.replicas),
                        transport=fake.transport(), clock=fake.clock, **options)


def owner_of(key: str, addresses: Sequence[str]) -> list[str]:
    """The ring order of ``key`` over these replicas, as addresses."""
    return [u.removeprefix("http://") for u in HashRing(f"http://{a}" for a in addresses).walk(key)]


# --- fewest in flight ------------------------------------------------------------------------------------


async def test_sequential_requests_take_turns() -> None:
    fake, clock = replicas(A, B, C)
    client = pool(fake)
    for _ in range(9):
        await clock.instantly(client.post_json(EMBED, {}))
    await client.aclose()
    assert fake.order() == [A, B, C] * 3


async def test_requests_go_where_fewest_are_in_flight() -> None:
    """Twelve at once spread four to each replica; B and C answer, A holds its four: the next eight go to B
    and C, four each, and none to A."""
    fake, clock = replicas(A, B, C)
    at_a = fake[A].hold = asyncio.Event()
    at_b_c = fake[B].hold = fake[C].hold = asyncio.Event()
    client = pool(fake)
    first = [asyncio.create_task(client.post_json(EMBED, {"n": i})) for i in range(12)]
    await settle()
    assert [r.in_flight for r in client.replicas] == [4, 4, 4]
    at_b_c.set()
    await settle()
    assert [r.in_flight for r in client.replicas] == [4, 0, 0] and fake.counts() == {B: 4, C: 4}
    at_b_c = fake[B].hold = fake[C].hold = asyncio.Event()  # B and C hold the next ones: counted in flight
    second = [asyncio.create_task(client.post_json(EMBED, {"n": 12 + i})) for i in range(8)]
    await settle()
    assert [r.in_flight for r in client.replicas] == [4, 4, 4] and fake[A].peak == 4
    at_a.set()
    at_b_c.set()
    answers = await clock.instantly(asyncio.gather(*first, *second))
    assert [a["replica"] for a in answers] == [A, B, C] * 4 + [B, C] * 4
    await client.aclose()


async def test_a_slow_replica_is_passed_over_while_it_holds_a_request() -> None:
    """A takes 1 s to answer: while its one request is in flight, every request goes to B (fewer in flight),
    however many; once A has answered it takes its turn again."""
    fake, clock = replicas(A, B)
    fake[A].delay_s = 1.0
    client = pool(fake)
    slow = asyncio.create_task(client.post_json(EMBED, {"n": 0}))  # both idle: the first in the settings, A
    await settle()
    for i in range(1, 11):
        assert (await clock.instantly(client.post_json(EMBED, {"n": i})))["replica"] == B
    await clock.advance(1.0)
    assert slow.done() and slow.result()["replica"] == A
    fake[A].delay_s = 0
    assert (await clock.instantly(client.post_json(EMBED, {})))["replica"] == A  # least recently chosen
    assert fake.order() == [B] * 10 + [A, A]
    await client.aclose()


# --- prefix affinity -------------------------------------------------------------------------------------


async def test_the_same_prefix_lands_on_one_replica_and_prefixes_spread() -> None:
    fake, clock = replicas(A, B, C)
    client = pool(fake)
    for _ in range(5):
        await clock.instantly(client.post_json(CHAT, {}, affinity="system+image+context", idempotent=False))
    assert fake.order(CHAT) == [owner_of("system+image+context", [A, B, C])[0]] * 5
    for i in range(60):
        await clock.instantly(client.post_json(CHAT, {}, affinity=f"prefix-{i}", idempotent=False))
    await client.aclose()
    assert fake.order(CHAT)[5:] == [owner_of(f"prefix-{i}", [A, B, C])[0] for i in range(60)]
    assert set(fake.counts(CHAT)) == {A, B, C}


async def test_a_saturated_owner_spills_to_the_next_on_the_ring() -> None:
    fake, clock = replicas(A, B, C)
    ring = owner_of("hot", [A, B, C])
    at_owner = fake[ring[0]].hold = asyncio.Event()
    client = pool(fake)
    held = asyncio.create_task(client.post_json(CHAT, {}, affinity="hot", idempotent=False))
    await settle()
    assert fake[ring[0]].in_flight == 1
    # one in flight of three replicas: the owner is at its bounded load (ceil(1.25 * 2 / 3) = 1)
    answer = await clock.instantly(client.post_json(CHAT, {}, affinity="hot", idempotent=False))
    assert answer["replica"] == ring[1]
    at_owner.set()
    await held
    assert (await clock.instantly(client.post_json(CHAT, {}, affinity="hot", idempotent=False)))["replica"] == ring[0]
    await client.aclose()


async def test_a_down_owner_spills_and_takes_its_keys_back_when_healthy() -> None:
    fake, clock = replicas(A, B, C)
    ring = owner_of("ctx", [A, B, C])
    fake[ring[0]].down = True
    client = pool(fake)
    post = client.post_json(CHAT, {}, affinity="ctx", idempotent=False)  # refused: nothing was sent
    assert (await clock.instantly(post))["replica"] == ring[1]  # at once, no backoff
    assert (await clock.instantly(client.post_json(CHAT, {}, affinity="ctx", idempotent=False)))["replica"] == ring[1]
    owner = next(r for r in client.replicas if r.url == f"http://{ring[0]}")
    assert owner.breaker.state == "open"
    fake[ring[0]].down = False
    await clock.advance(INTERVAL_S / 2)
    assert owner.breaker.state == "open"  # its probe is not due yet
    await clock.advance(INTERVAL_S / 2)
    assert owner.breaker.state == "half_open"  # the pool's own probe found it back, with no request
    assert fake.order(CHAT) == [ring[1]] * 2
    assert (await clock.instantly(client.post_json(CHAT, {}, affinity="ctx", idempotent=False)))["replica"] == ring[0]
    assert owner.breaker.state == "closed"  # the trial answered
    await client.aclose()


# --- eviction and return ---------------------------------------------------------------------------------


async def test_a_replica_failing_health_checks_is_taken_out_and_put_back() -> None:
    fake, clock = replicas(A, B)
    client = pool(fake, breaker_threshold=2)
    await clock.instantly(client.post_json(EMBED, {}))  # the first call starts the pool's upkeep
    fake[A].sick = True
    sick = client.replicas[0]
    await clock.advance(INTERVAL_S)
    assert sick.breaker.state == "closed" and sick.errors["health"] == 1
    await clock.advance(INTERVAL_S)
    assert sick.breaker.state == "open" and sick.errors["health"] == 2  # two checks failed in a row: out
    before = fake.counts()[A]
    for _ in range(6):
        assert (await clock.instantly(client.post_json(EMBED, {})))["replica"] == B
    assert fake.counts()[A] == before
    fake[A].sick = False
    await clock.advance(INTERVAL_S)
    assert sick.breaker.state == "half_open"  # its probe answered
    assert (await clock.instantly(client.post_json(EMBED, {})))["replica"] == A  # the trial: least recently chosen
    assert sick.breaker.state == "closed"
    await client.aclose()


async def test_requests_never_wait_on_the_probe_of_a_replica_that_is_out() -> None:
    """A is out and now holds its port without answering (a restarting vLLM): its probe waits out its whole
    timeout in the pool's upkeep, while every request goes straight to B."""
    fake, clock = replicas(A, B)
    fake[A].down = True
    client = pool(fake, probe_timeout_s=1.0)
    for _ in range(3):
        await clock.instantly(client.post_json(EMBED, {}))
    assert client.replicas[0].breaker.state == "open"
    fake[A].down, fake[A].stall = False, True
    await clock.advance(INTERVAL_S)
    assert fake[A].stalled == 1  # the probe is due, and under way
    for _ in range(10):
        assert (await clock.instantly(client.post_json(EMBED, {})))["replica"] == B
    assert fake[A].stalled == 1 and client.replicas[0].breaker.state == "open"
    await client.aclose()


async def test_connection_errors_take_a_replica_out_and_retries_go_elsewhere() -> None:
    fake, clock = replicas(A, B, C)
    fake[B].down = True
    client = pool(fake, retries=0)  # no retries at all: moving to another replica is not one
    answers = [await clock.instantly(client.post_json(EMBED, {}, idempotent=False)) for _ in range(6)]
    assert B not in {a["replica"] for a in answers}
    assert client.replicas[1].breaker.state == "open" and client.replicas[1].errors["connect"] == 2
    await client.aclose()


async def test_a_connection_lost_mid_request_is_retried_elsewhere_only_when_idempotent() -> None:
    fake, clock = replicas(A, B)
    fake[A].drop = True
    client = pool(fake, retries=0)
    assert [(await clock.instantly(client.post_json(EMBED, {})))["replica"] for _ in range(4)] == [B] * 4
    fake[A].drop = False
    await client.aclose()

    fake, clock = replicas(A, B)
    fake[A].drop = True
    client = pool(fake, retries=0)
    with pytest.raises(UpstreamUnavailable, match="connection lost"):
        await clock.instantly(client.post_json(CHAT, {}, idempotent=False, affinity=None))  # the least loaded: A
    await client.aclose()
    assert fake.counts(CHAT) == {}


async def test_retries_elsewhere_share_the_calls_one_deadline() -> None:
    """A answers 503 after 0.25 s, B would answer after 5 s: the call moves to B at 0.25 s and ends at its 0.5 s
    deadline, not 0.5 s after moving to B."""
    fake, clock = replicas(A, B)
    fake[A].delay_s, fake[A].status = 0.25, 503
    fake[B].delay_s = 5
    client = pool(fake)
    with pytest.raises(UpstreamTimeout):
        await clock.run(client.post_json(EMBED, {}, timeout_s=0.5))
    assert clock.now() == 0.5
    assert [(a, t) for a, path, t in fake.received if path == EMBED] == [(A, 0.0), (B, 0.25)]
    await client.aclose()


async def test_every_replica_down_answers_503_at_once() -> None:
    fake, clock = replicas(A, B)
    fake[A].down = fake[B].down = True
    client = pool(fake, retries=1, unavailable_retry_after_s=3)
    with pytest.raises(UpstreamUnavailable):
        await clock.instantly(client.post_json(EMBED, {}))
    with pytest.raises(UpstreamUnavailable):
        await clock.instantly(client.post_json(EMBED, {}))  # both now out
    assert [r.breaker.state for r in client.replicas] == ["open", "open"]
    with pytest.raises(UpstreamUnavailable, match="no replica's /health answers") as fast:
        await clock.instantly(client.post_json(EMBED, {}))
    assert fast.value.headers == {"Retry-After": "3"}
    assert not await clock.instantly(client.health())
    fake[B].down = False
    await clock.advance(INTERVAL_S)
    assert [r.breaker.state for r in client.replicas] == ["open", "half_open"]
    assert (await clock.instantly(client.post_json(EMBED, {})))["replica"] == B
    assert await clock.instantly(client.health())
    await client.aclose()


async def test_a_kill_mid_burst_loses_no_idempotent_request() -> None:
    """Requests held at A when it dies lose their connections and are sent again to B; none fails."""
    fake, clock = replicas(A, B)
    at_a = fake[A].hold = asyncio.Event()
    client = pool(fake)
    burst = [asyncio.create_task(client.post_json(EMBED, {"n": i})) for i in range(20)]
    await settle()
    assert fake[A].in_flight > 0
    fake[A].down = True
    at_a.set()  # its held requests now fail as dropped connections
    answers = await clock.instantly(asyncio.gather(*burst))
    assert sorted(a["echo"]["n"] for a in answers) == list(range(20))
    assert {a["replica"] for a in answers} == {B}
    await client.aclose()


async def test_streams_move_on_when_a_replica_refuses() -> None:
    fake, clock = replicas(A, B)
    fake[owner_of("k", [A, B])[0]].down = True
    client = pool(fake)
    async with client.stream_post(CHAT, {}, affinity="k") as response:
        assert response.json()["replica"] == owner_of("k", [A, B])[1]
        assert sum(r.in_flight for r in client.replicas) == 1
    assert sum(r.in_flight for r in client.replicas) == 0
    await client.aclose()


# --- DNS -------------------------------------------------------------------------------------------------


class Dns:
    """The DNS edge: the addresses a name has now, and failures on demand."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses
        self.failing = False
        self.calls = 0

    async def __call__(self, host: str, port: int) -> list[IPAddress]:
        self.calls += 1
        if self.failing:
            raise OSError("temporary failure in name resolution")
        assert host == "embedding-runner-pool" and port == 8101
        return [ipaddress.ip_address(a) for a in self.addresses]


POOL_NAME = "dns+http://embedding-runner-pool:8101"


async def test_a_dns_name_is_a_pool_of_its_addresses_resolved_again_periodically() -> None:
    fake, clock = replicas(A, B, C)
    dns = Dns(["10.0.0.1", "10.0.0.2"])
    client = pool(fake, POOL_NAME, resolver=dns, dns_refresh_s=INTERVAL_S)
    await clock.instantly(asyncio.gather(*(client.post_json(EMBED, {}) for _ in range(4))))
    assert fake.counts() == {A: 2, B: 2}
    dns.addresses = ["10.0.0.2", "10.0.0.3"]  # a pod replaced: A left, C joined
    await clock.advance(INTERVAL_S)
    assert [r.url for r in client.replicas] == ["http://10.0.0.2:8101", "http://10.0.0.3:8101"]
    fake.served.clear()
    for _ in range(4):
        await clock.instantly(client.post_json(EMBED, {}))
    assert fake.order() == [C, B, C, B]  # the newcomer first: never chosen yet
    dns.failing = True  # a DNS hiccup keeps the replicas it had
    calls = dns.calls
    await clock.advance(2 * INTERVAL_S)
    assert dns.calls == calls + 2 and len(client.replicas) == 2
    dns.failing, dns.addresses = False, []  # no ready pod at all
    await clock.advance(INTERVAL_S)
    assert client.replicas == []
    with pytest.raises(UpstreamUnavailable, match="resolves to no address"):
        await clock.instantly(client.post_json(EMBED, {}))
    await client.aclose()


async def test_an_indexing_call_waits_for_a_replica_to_appear() -> None:
    fake, clock = replicas(A)
    dns = Dns([])
    client = pool(fake, POOL_NAME, resolver=dns, dns_refresh_s=INTERVAL_S)
    call = asyncio.create_task(client.post_json(EMBED, {}, lane="bulk", timeout_s=5, wait_while_down=True))
    await clock.advance(2 * INTERVAL_S)
    assert not call.done() and fake.received == []  # no replica: nothing was sent anywhere
    dns.addresses = ["10.0.0.1"]
    assert (await clock.run(call))["replica"] == A
    assert clock.now() <= 4 * INTERVAL_S  # at its first look after the refresh that found A
    await client.aclose()


async def test_a_replica_that_stays_is_the_same_replica_after_a_refresh() -> None:
    """Its breaker and counters survive re-resolution (only joiners start fresh)."""
    fake, clock = replicas(A, B)
    dns = Dns(["10.0.0.1"])
    client = pool(fake, POOL_NAME, resolver=dns, dns_refresh_s=INTERVAL_S)
    await clock.instantly(client.post_json(EMBED, {}))
    first = client.replicas[0]
    dns.addresses = ["10.0.0.1", "10.0.0.2"]
    await clock.advance(INTERVAL_S)
    assert len(client.replicas) == 2
    assert client.replicas[0] is first and first.chosen == 1
    await client.aclose()
