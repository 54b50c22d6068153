"""A runner as a pool of replicas, faults injected at the network edge (``httpx.MockTransport``): spread by
load, prefix affinity and its spill, eviction and return, retries on another replica inside one deadline,
DNS re-resolution through an injected resolver."""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import Sequence
from typing import Any

import pytest

from service.clients.errors import UpstreamTimeout, UpstreamUnavailable
from service.clients.routing import HashRing
from service.clients.runner import RunnerClient
from service.security.addresses import IPAddress
from tests.support.replicas import FakeReplicas, eventually

A, B, C = "10.0.0.1:8101", "10.0.0.2:8101", "10.0.0.3:8101"
EMBED = "/v1/embeddings"
CHAT = "/v1/chat/completions"


def pool(fake: FakeReplicas, url: str | None = None, **kw: Any) -> RunnerClient:
    options: dict[str, Any] = {"timeout_s": 5, "backoff_s": 0.01, "probe_interval_s": 0.1, "health_interval_s": 0.1,
                               "breaker_threshold": 2, **kw}
    return RunnerClient("embedding", url or ",".join(f"http://{a}" for a in fake.replicas),
                        transport=fake.transport(), **options)


def owner_of(key: str, addresses: Sequence[str]) -> list[str]:
    """The ring order of ``key`` over these replicas, as addresses."""
    return [u.removeprefix("http://") for u in HashRing(f"http://{a}" for a in addresses).walk(key)]


# --- fewest in flight ------------------------------------------------------------------------------------


async def test_sequential_requests_take_turns() -> None:
    fake = FakeReplicas().add(A, B, C)
    client = pool(fake)
    for _ in range(9):
        await client.post_json(EMBED, {})
    await client.aclose()
    assert fake.counts() == {A: 3, B: 3, C: 3}


async def test_requests_go_where_fewest_are_in_flight() -> None:
    """Twelve at once spread four to each replica; B and C answer, A holds its four: the next eight go to B
    and C, four each, and none to A."""
    fake = FakeReplicas().add(A, B, C)
    fake[A].hold = asyncio.Event()
    fake[B].delay_s = fake[C].delay_s = 0.1
    client = pool(fake)
    first = [asyncio.create_task(client.post_json(EMBED, {"n": i})) for i in range(12)]
    await eventually(lambda: [r.in_flight for r in client.replicas] == [4, 0, 0])
    assert fake.counts() == {B: 4, C: 4}
    second = await asyncio.gather(*(client.post_json(EMBED, {"n": i}) for i in range(8)))
    assert [a["replica"] for a in second].count(B) == 4 and {a["replica"] for a in second} == {B, C}
    assert fake[A].peak == 4
    fake[A].hold.set()
    assert [a["replica"] for a in await asyncio.gather(*first)].count(A) == 4
    await client.aclose()


async def test_a_slow_replica_gets_less_of_a_burst() -> None:
    fake = FakeReplicas().add(A, B)
    fake[A].delay_s, fake[B].delay_s = 0.2, 0.01
    client = pool(fake)
    await asyncio.gather(*(client.post_json(EMBED, {}) for _ in range(40)))
    await client.aclose()
    counts = fake.counts()
    assert counts[B] > 3 * counts[A], counts


# --- prefix affinity -------------------------------------------------------------------------------------


async def test_the_same_prefix_lands_on_one_replica_and_prefixes_spread() -> None:
    fake = FakeReplicas().add(A, B, C)
    client = pool(fake)
    for _ in range(5):
        await client.post_json(CHAT, {}, affinity="system+image+context", idempotent=False)
    assert set(fake.order(CHAT)) == {owner_of("system+image+context", [A, B, C])[0]}
    for i in range(60):
        await client.post_json(CHAT, {}, affinity=f"prefix-{i}", idempotent=False)
    await client.aclose()
    assert set(fake.counts(CHAT)) == {A, B, C}


async def test_a_saturated_owner_spills_to_the_next_on_the_ring() -> None:
    fake = FakeReplicas().add(A, B, C)
    ring = owner_of("hot", [A, B, C])
    fake[ring[0]].hold = asyncio.Event()
    client = pool(fake)
    held = asyncio.create_task(client.post_json(CHAT, {}, affinity="hot", idempotent=False))
    await eventually(lambda: fake[ring[0]].in_flight == 1)
    # one in flight of three replicas: the owner is at its bounded load (ceil(1.25 * 2 / 3) = 1)
    answer = await client.post_json(CHAT, {}, affinity="hot", idempotent=False)
    assert answer["replica"] == ring[1]
    fake[ring[0]].hold.set()
    await held
    assert (await client.post_json(CHAT, {}, affinity="hot", idempotent=False))["replica"] == ring[0]
    await client.aclose()


async def test_a_down_owner_spills_and_takes_its_keys_back_when_healthy() -> None:
    fake = FakeReplicas().add(A, B, C)
    ring = owner_of("ctx", [A, B, C])
    fake[ring[0]].down = True
    client = pool(fake)
    started = time.monotonic()
    answer = await client.post_json(CHAT, {}, affinity="ctx", idempotent=False)  # refused: nothing was sent
    assert answer["replica"] == ring[1] and time.monotonic() - started < 0.1  # at once, no backoff
    assert (await client.post_json(CHAT, {}, affinity="ctx", idempotent=False))["replica"] == ring[1]
    assert client.replicas[[r.url for r in client.replicas].index(f"http://{ring[0]}")].breaker.state == "open"
    fake[ring[0]].down = False
    owner = next(r for r in client.replicas if r.url == f"http://{ring[0]}")
    await eventually(lambda: owner.breaker.state == "half_open")  # the pool's own probe found it back
    assert (await client.post_json(CHAT, {}, affinity="ctx", idempotent=False))["replica"] == ring[0]  # the trial
    assert owner.breaker.state == "closed"
    await client.aclose()


# --- eviction and return ---------------------------------------------------------------------------------


async def test_a_replica_failing_health_checks_is_taken_out_and_put_back() -> None:
    fake = FakeReplicas().add(A, B)
    client = pool(fake, breaker_threshold=2)
    await client.post_json(EMBED, {})  # the first call starts the pool's upkeep
    fake[A].sick = True
    sick = client.replicas[0]
    await eventually(lambda: sick.breaker.state == "open")
    assert sick.errors["health"] >= 2
    before = fake.counts()[A]
    for _ in range(6):
        assert (await client.post_json(EMBED, {}))["replica"] == B
    assert fake.counts()[A] == before
    fake[A].sick = False
    await eventually(lambda: sick.breaker.state == "half_open")
    await asyncio.gather(*(client.post_json(EMBED, {}) for _ in range(6)))
    assert sick.breaker.state == "closed" and fake.counts()[A] > before
    await client.aclose()


async def test_requests_never_wait_on_the_probe_of_a_replica_that_is_out() -> None:
    """A is out and now holds its port without answering (a restarting vLLM): its probes take their whole
    timeout in the pool's upkeep, while every request goes straight to B."""
    fake = FakeReplicas().add(A, B)
    fake[A].down = True
    client = pool(fake, probe_timeout_s=1.0)
    for _ in range(3):
        await client.post_json(EMBED, {})
    assert client.replicas[0].breaker.state == "open"
    fake[A].down, fake[A].stall = False, True
    await asyncio.sleep(0.3)  # probes are due, and under way
    for _ in range(10):
        started = time.monotonic()
        assert (await client.post_json(EMBED, {}))["replica"] == B
        assert time.monotonic() - started < 0.1
    await client.aclose()


async def test_connection_errors_take_a_replica_out_and_retries_go_elsewhere() -> None:
    fake = FakeReplicas().add(A, B, C)
    fake[B].down = True
    client = pool(fake, retries=0)  # no retries at all: moving to another replica is not one
    answers = [await client.post_json(EMBED, {}, idempotent=False) for _ in range(6)]
    assert B not in {a["replica"] for a in answers}
    assert client.replicas[1].breaker.state == "open" and client.replicas[1].errors["connect"] == 2
    await client.aclose()


async def test_a_connection_lost_mid_request_is_retried_elsewhere_only_when_idempotent() -> None:
    fake = FakeReplicas().add(A, B)
    fake[A].drop = True
    client = pool(fake, retries=0)
    assert [(await client.post_json(EMBED, {}))["replica"] for _ in range(4)] == [B] * 4
    fake[A].drop = False
    await client.aclose()

    fake = FakeReplicas().add(A, B)
    fake[A].drop = True
    client = pool(fake, retries=0)
    with pytest.raises(UpstreamUnavailable, match="connection lost"):
        await client.post_json(CHAT, {}, idempotent=False, affinity=None)  # the least loaded first: A
    await client.aclose()
    assert fake.counts(CHAT) == {}


async def test_retries_elsewhere_share_the_calls_one_deadline() -> None:
    """A refuses, B answers after 5 s: the call ends at its 0.5 s deadline, not 0.5 s after moving to B."""
    fake = FakeReplicas().add(A, B)
    fake[A].down = True
    fake[B].delay_s = 5
    client = pool(fake)
    started = time.monotonic()
    with pytest.raises(UpstreamTimeout):
        await client.post_json(EMBED, {}, timeout_s=0.5)
    assert 0.45 < time.monotonic() - started < 0.7
    await client.aclose()


async def test_every_replica_down_answers_503_at_once() -> None:
    fake = FakeReplicas().add(A, B)
    fake[A].down = fake[B].down = True
    client = pool(fake, retries=1, unavailable_retry_after_s=3)
    with pytest.raises(UpstreamUnavailable):
        await client.post_json(EMBED, {})
    with pytest.raises(UpstreamUnavailable):
        await client.post_json(EMBED, {})  # both now out
    started = time.monotonic()
    with pytest.raises(UpstreamUnavailable, match="no replica's /health answers") as fast:
        await client.post_json(EMBED, {})
    assert time.monotonic() - started < 0.05 and fast.value.headers == {"Retry-After": "3"}
    assert not await client.health()
    fake[B].down = False
    await eventually(lambda: client.replicas[1].breaker.state != "open")
    assert (await client.post_json(EMBED, {}))["replica"] == B
    assert await client.health()
    await client.aclose()


async def test_a_kill_mid_burst_loses_no_idempotent_request() -> None:
    """Requests held at A when it dies lose their connections and are sent again to B; none fails."""
    fake = FakeReplicas().add(A, B)
    fake[A].hold = asyncio.Event()
    fake[B].delay_s = 0.01
    client = pool(fake)
    burst = [asyncio.create_task(client.post_json(EMBED, {"n": i})) for i in range(20)]
    await eventually(lambda: fake[A].in_flight > 0)
    fake[A].down = True
    fake[A].hold.set()  # its held requests now fail as dropped connections
    answers = await asyncio.gather(*burst)
    assert sorted(a["echo"]["n"] for a in answers) == list(range(20))
    assert {a["replica"] for a in answers} == {B}
    await client.aclose()


async def test_streams_move_on_when_a_replica_refuses() -> None:
    fake = FakeReplicas().add(A, B)
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


async def test_a_dns_name_is_a_pool_of_its_addresses_resolved_again_periodically() -> None:
    fake = FakeReplicas().add(A, B, C)
    dns = Dns(["10.0.0.1", "10.0.0.2"])
    client = pool(fake, "dns+http://embedding-runner-pool:8101", resolver=dns, dns_refresh_s=0.1)
    await asyncio.gather(*(client.post_json(EMBED, {}) for _ in range(4)))
    assert set(fake.counts()) == {A, B}
    dns.addresses = ["10.0.0.2", "10.0.0.3"]  # a pod replaced: A left, C joined
    await eventually(lambda: [r.url for r in client.replicas] == ["http://10.0.0.2:8101", "http://10.0.0.3:8101"])
    fake.served.clear()
    for _ in range(4):
        await client.post_json(EMBED, {})
    assert fake.counts() == {B: 2, C: 2}
    dns.failing = True  # a DNS hiccup keeps the replicas it had
    calls = dns.calls
    await eventually(lambda: dns.calls > calls + 1)
    assert len(client.replicas) == 2
    dns.failing, dns.addresses = False, []  # no ready pod at all
    await eventually(lambda: not client.replicas)
    with pytest.raises(UpstreamUnavailable, match="resolves to no address"):
        await client.post_json(EMBED, {})
    await client.aclose()


async def test_an_indexing_call_waits_for_a_replica_to_appear() -> None:
    fake = FakeReplicas().add(A)
    dns = Dns([])
    client = pool(fake, "dns+http://embedding-runner-pool:8101", resolver=dns, dns_refresh_s=0.1)
    call = asyncio.create_task(client.post_json(EMBED, {}, lane="bulk", timeout_s=5, wait_while_down=True))
    await asyncio.sleep(0.3)
    assert not call.done()
    dns.addresses = ["10.0.0.1"]
    assert (await asyncio.wait_for(call, 2))["replica"] == A
    await client.aclose()


async def test_a_replica_that_stays_is_the_same_replica_after_a_refresh() -> None:
    """Its breaker and counters survive re-resolution (only joiners start fresh)."""
    fake = FakeReplicas().add(A, B)
    dns = Dns(["10.0.0.1"])
    client = pool(fake, "dns+http://embedding-runner-pool:8101", resolver=dns, dns_refresh_s=0.05)
    await client.post_json(EMBED, {})
    first = client.replicas[0]
    dns.addresses = ["10.0.0.1", "10.0.0.2"]
    await eventually(lambda: len(client.replicas) == 2)
    assert client.replicas[0] is first and first.chosen == 1
    await client.aclose()
