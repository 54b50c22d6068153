"""Lanes, one deadline per call, retries, the down-runner breaker and error translation of the runner client,
faults injected at the network edge (``httpx.MockTransport``).

Whatever is about time (a deadline, a probe interval, a slot's wait) runs on a :class:`ManualClock` that the
test moves: the handlers sleep on it too, so each claim is an exact sequence of requests at exact clock times,
whatever the machine's load."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from service.errors import Overloaded
from service.upstream.errors import (
    UpstreamError,
    UpstreamOverloaded,
    UpstreamRejected,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from service.upstream.runner import RunnerClient
from tests.support.clock import ManualClock, settle


def _client(handler, **kw: Any) -> RunnerClient:  # type: ignore[no-untyped-def]
    options: dict[str, Any] = {"timeout_s": 5, "backoff_s": 0.01, **kw}
    return RunnerClient("embedding", "http://runner", transport=httpx.MockTransport(handler), **options)


async def test_retries_then_succeeds() -> None:
    statuses = iter([503, 429, 200])

    def handler(request: httpx.Request) -> httpx.Response:
        status = next(statuses)
        return httpx.Response(status, json={"ok": True} if status == 200 else {}, headers={"Retry-After": "0"})

    client = _client(handler)
    assert await client.post_json("/v1/embeddings", {}) == {"ok": True}
    await client.aclose()


async def test_non_idempotent_calls_are_not_retried() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(503)

    client = _client(handler)
    with pytest.raises(UpstreamUnavailable):
        await client.post_json("/x", {}, idempotent=False)
    await client.aclose()
    assert calls == 1


@pytest.mark.parametrize(("status", "error"), [(400, UpstreamRejected), (404, UpstreamError), (429, UpstreamOverloaded)])
async def test_status_translation(status: int, error: type[Exception]) -> None:
    client = _client(lambda r: httpx.Response(status, json={"error": {"message": "nope"}}), retries=0)
    with pytest.raises(error) as exc:
        await client.post_json("/x", {})
    await client.aclose()
    assert type(exc.value) is error


async def test_retry_after_longer_than_the_deadline_fails_fast() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(429, headers={"Retry-After": "30"})

    client = _client(handler)
    with pytest.raises(UpstreamOverloaded) as exc:
        await client.post_json("/x", {}, timeout_s=1)
    await client.aclose()
    assert calls == 1 and exc.value.retry_after_s == 30


async def test_invalid_json_is_a_bad_response() -> None:
    client = _client(lambda r: httpx.Response(200, content=b"not json"))
    with pytest.raises(UpstreamError, match="invalid JSON"):
        await client.post_json("/x", {})
    await client.aclose()


# --- one deadline per call ---------------------------------------------------------------------------------


async def test_retries_share_one_deadline() -> None:
    """Each answer takes 0.4 s and is a 503: with retries=5 a per-attempt timeout would let a call run for
    6 × 0.4 s; one deadline of 1 s ends it at 1 s, during its third attempt, as a timeout (504)."""
    clock = ManualClock()
    sent: list[float] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        sent.append(clock.now())
        await clock.sleep(0.4)
        return httpx.Response(503)

    client = _client(handler, retries=5, backoff_s=0, clock=clock)
    with pytest.raises(UpstreamTimeout):
        await clock.run(client.post_json("/v1/embeddings", {}, timeout_s=1.0))
    assert clock.now() == pytest.approx(1.0)
    await client.aclose()
    assert sent == pytest.approx([0.0, 0.4, 0.8])


async def test_connect_timeout_is_retried_inside_the_deadline() -> None:
    attempts: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        attempts.append("timeout" if not attempts else "answer")
        if len(attempts) == 1:
            raise httpx.ConnectTimeout("connect timed out", request=request)
        return httpx.Response(200, json={"ok": True})

    client = _client(handler)
    assert await client.post_json("/v1/embeddings", {}) == {"ok": True}
    await client.aclose()
    assert attempts == ["timeout", "answer"]


async def test_connect_errors_are_retried_even_for_non_idempotent_calls() -> None:
    """Nothing was sent when the connection could not be made; a connection lost mid-request is not retried
    for a call that is not idempotent (the runner may have done the work)."""
    refused: list[str] = []

    def refuse_once(request: httpx.Request) -> httpx.Response:
        if not refused:
            refused.append("refused")
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"n": len(refused)})

    client = _client(refuse_once)
    assert await client.post_json("/v1/chat/completions", {}, idempotent=False) == {"n": 1}
    await client.aclose()

    lost = 0

    def lose(request: httpx.Request) -> httpx.Response:
        nonlocal lost
        lost += 1
        raise httpx.RemoteProtocolError("server disconnected", request=request)

    client = _client(lose)
    with pytest.raises(UpstreamUnavailable, match="connection lost"):
        await client.post_json("/v1/chat/completions", {}, idempotent=False)
    await client.aclose()
    assert lost == 1


async def test_a_read_timeout_is_504_at_the_deadline() -> None:
    """An answer that would take 5 s: the call ends at its 0.5 s deadline, and the request is abandoned."""
    clock = ManualClock()
    events: list[tuple[str, float]] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        events.append(("sent", clock.now()))
        try:
            await clock.sleep(5)
        except asyncio.CancelledError:
            events.append(("abandoned", clock.now()))
            raise
        return httpx.Response(200, json={})

    client = _client(handler, clock=clock)
    with pytest.raises(UpstreamTimeout):
        await clock.run(client.post_json("/v1/embeddings", {}, timeout_s=0.5))
    await client.aclose()
    assert events == [("sent", 0.0), ("abandoned", 0.5)]


# --- a runner that is down ---------------------------------------------------------------------------------


class DownRunner:
    """Refuses every connection until ``up()``; records each request path, in order."""

    def __init__(self) -> None:
        self.is_up = False
        self.seen: list[str] = []

    def up(self) -> None:
        self.is_up = True

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request.url.path)
        if not self.is_up:
            raise httpx.ConnectError("connection refused", request=request)
        return httpx.Response(200, json={"ok": True})


async def test_a_down_runner_answers_queries_503_at_once_with_retry_after() -> None:
    clock = ManualClock()
    runner = DownRunner()
    client = _client(runner, retries=2, breaker_threshold=3, probe_interval_s=0.5, unavailable_retry_after_s=4,
                     backoff_s=0, clock=clock)  # no backoff: the breaker opens at 0 s, its probes fall due at 0.5, 1.0
    with pytest.raises(UpstreamUnavailable) as first:
        await clock.instantly(client.post_json("/v1/embeddings", {}))
    assert runner.seen == ["/v1/embeddings"] * 3  # the call and its two retries opened the breaker
    assert first.value.headers == {"Retry-After": "4"}

    with pytest.raises(UpstreamUnavailable, match="runner is down") as fast:
        await clock.instantly(client.post_json("/v1/embeddings", {}))
    assert runner.seen == ["/v1/embeddings"] * 3  # not even a probe: the last failure is that recent
    assert fast.value.headers == {"Retry-After": "4"}

    await clock.advance(0.5)  # a probe is due: the runner is still down, one /health, no request
    with pytest.raises(UpstreamUnavailable, match="runner is down"):
        await clock.instantly(client.post_json("/v1/embeddings", {}))
    assert runner.seen[3:] == ["/health"]

    runner.up()
    await clock.advance(0.5)
    assert await clock.instantly(client.post_json("/v1/embeddings", {})) == {"ok": True}
    assert runner.seen[4:] == ["/health", "/v1/embeddings"]
    await client.aclose()


async def test_an_indexing_call_waits_for_the_runner_to_come_back() -> None:
    """Two refusals open the breaker; the indexing call then asks /health once every probe interval (0.25 s)
    and sends its request after the first probe that answers."""
    clock = ManualClock()
    runner = DownRunner()
    client = _client(runner, breaker_threshold=2, probe_interval_s=0.25, backoff_s=0, clock=clock)
    bulk = asyncio.create_task(client.post_json("/v1/embeddings", {}, lane="bulk", timeout_s=10, wait_while_down=True))
    await clock.advance(1.0)
    assert not bulk.done()
    assert runner.seen == ["/v1/embeddings"] * 2 + ["/health"] * 4  # probes at 0.25, 0.5, 0.75 and 1.0
    with pytest.raises(UpstreamUnavailable):  # meanwhile a query is told at once
        await clock.instantly(client.post_json("/v1/embeddings", {}, lane="query"))
    with pytest.raises(UpstreamUnavailable):  # and so is a bulk call from an HTTP caller (the documents writer)
        await clock.instantly(client.post_json("/v1/embeddings", {}, lane="bulk", timeout_s=10))
    runner.up()
    await clock.advance(0.25)
    assert bulk.done() and bulk.result() == {"ok": True}
    assert runner.seen == ["/v1/embeddings"] * 2 + ["/health"] * 5 + ["/v1/embeddings"]
    await client.aclose()


async def test_an_indexing_call_gives_up_at_its_deadline() -> None:
    """Probing every 0.25 s within a 1 s deadline: after the probe at 0.75 s the next would leave no time for
    the request, so the call gives up then, before its deadline, and never after it."""
    clock = ManualClock()
    runner = DownRunner()
    client = _client(runner, breaker_threshold=2, probe_interval_s=0.25, backoff_s=0, clock=clock)
    with pytest.raises(UpstreamUnavailable, match="runner is down"):
        await clock.run(client.post_json("/v1/embeddings", {}, lane="bulk", timeout_s=1.0, wait_while_down=True))
    assert clock.now() == 0.75
    assert runner.seen == ["/v1/embeddings"] * 2 + ["/health"] * 3
    await client.aclose()


# --- lanes -------------------------------------------------------------------------------------------------


async def test_bulk_requests_in_flight_are_bounded_and_queries_pass_them() -> None:
    """Six bulk calls: never more than two reach the runner at once, and a query sent while they queue is
    answered before the first bulk call finishes."""
    release = asyncio.Event()
    events: list[tuple[str, str]] = []
    in_flight = {"bulk": 0}
    peak = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal peak
        kind = json.loads(request.content)["kind"]
        events.append(("start", kind))
        if kind == "bulk":
            in_flight["bulk"] += 1
            peak = max(peak, in_flight["bulk"])
            await release.wait()
            in_flight["bulk"] -= 1
        events.append(("end", kind))
        return httpx.Response(200, json={"kind": kind})

    client = _client(handler, max_concurrency=4, bulk_max_inflight=2)
    bulk = [asyncio.create_task(client.post_json("/v1/embeddings", {"kind": "bulk"}, lane="bulk")) for _ in range(6)]
    await settle()  # each of the six went as far as it can: two at the runner, four waiting for a bulk slot
    assert client.lanes.in_flight == {"query": 0, "bulk": 2}
    assert await client.post_json("/v1/embeddings", {"kind": "query"}) == {"kind": "query"}
    assert events == [("start", "bulk"), ("start", "bulk"), ("start", "query"), ("end", "query")]
    release.set()
    assert [r["kind"] for r in await asyncio.gather(*bulk)] == ["bulk"] * 6
    await client.aclose()
    assert peak == 2


async def test_full_query_slots_answer_429_while_bulk_has_its_own() -> None:
    release = asyncio.Event()

    async def handler(request: httpx.Request) -> httpx.Response:
        await release.wait()
        return httpx.Response(200, json={})

    clock = ManualClock()
    client = _client(handler, max_concurrency=1, acquire_timeout_s=0.25, bulk_max_inflight=1, clock=clock)
    held = asyncio.create_task(client.post_json("/x", {}))
    bulk = asyncio.create_task(client.post_json("/x", {}, lane="bulk"))
    await settle()
    assert client.lanes.in_flight == {"query": 1, "bulk": 1}
    query = asyncio.create_task(client.post_json("/x", {}))
    await clock.advance(0.125)
    assert not query.done()  # it waits for a query slot up to acquire_timeout_s, not for the bulk one
    await clock.advance(0.125)
    with pytest.raises(Overloaded) as exc:
        await query
    assert exc.value.status_code == 429 and exc.value.headers == {"Retry-After": "1"}
    release.set()
    await asyncio.gather(held, bulk)
    await client.aclose()


async def test_a_runner_coming_back_is_tried_by_one_request_at_a_time() -> None:
    """Its /health answers but its first request is slow: one query tries it (and times out: 504), the
    others are told 503 meanwhile; the next trial's answer lets every query through again."""
    clock = ManualClock()
    state = {"up": False, "slow": True}
    sent: list[float] = []

    async def handler(request: httpx.Request) -> httpx.Response:
        if not state["up"]:
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path == "/health":
            return httpx.Response(200)
        sent.append(clock.now())
        if state["slow"]:
            await clock.sleep(5)
        return httpx.Response(200, json={"ok": True})

    client = _client(handler, retries=0, breaker_threshold=1, probe_interval_s=0.25, clock=clock)
    with pytest.raises(UpstreamUnavailable):
        await clock.instantly(client.post_json("/x", {}))
    assert client.replicas[0].breaker.state == "open"
    state["up"] = True
    await clock.advance(0.25)
    trial = asyncio.create_task(client.post_json("/x", {}, timeout_s=0.5))
    await settle()
    assert client.replicas[0].breaker.state == "half_open"
    with pytest.raises(UpstreamUnavailable, match="one request at a time"):
        await clock.instantly(client.post_json("/x", {}))
    await clock.advance(0.5)
    with pytest.raises(UpstreamTimeout):
        await trial
    assert client.replicas[0].breaker.state == "open" and sent == [0.25]
    state["slow"] = False
    await clock.advance(0.25)
    assert await clock.instantly(client.post_json("/x", {})) == {"ok": True}
    assert client.replicas[0].breaker.state == "closed"
    together = asyncio.gather(*(client.post_json("/x", {}) for _ in range(3)))
    assert await clock.instantly(together) == [{"ok": True}] * 3
    assert sent == [0.25, 1.0, 1.0, 1.0, 1.0]
    await client.aclose()


async def test_a_cancelled_trial_lets_the_next_request_try() -> None:
    clock = ManualClock()
    up = {"v": False}

    async def handler(request: httpx.Request) -> httpx.Response:
        if not up["v"]:
            raise httpx.ConnectError("connection refused", request=request)
        if request.url.path == "/health":
            return httpx.Response(200)
        await clock.sleep(0.25)
        return httpx.Response(200, json={"ok": True})

    client = _client(handler, retries=0, breaker_threshold=1, probe_interval_s=0.125, clock=clock)
    with pytest.raises(UpstreamUnavailable):
        await clock.instantly(client.post_json("/x", {}))
    up["v"] = True
    await clock.advance(0.125)
    trial = asyncio.create_task(client.post_json("/x", {}))
    await settle()
    assert client.replicas[0].breaker.state == "half_open"
    trial.cancel()  # the client went away mid-trial
    with pytest.raises(asyncio.CancelledError):
        await trial
    assert await clock.run(client.post_json("/x", {})) == {"ok": True}  # the next request was the trial
    assert client.replicas[0].breaker.state == "closed"
    await client.aclose()


async def test_bulk_calls_carry_the_configured_vllm_priority() -> None:
    bodies: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        return httpx.Response(200, json={})

    client = _client(handler, bulk_priority=1)
    await client.post_json("/v1/embeddings", {"input": ["q"]})
    await client.post_json("/v1/embeddings", {"input": ["d1", "d2"]}, lane="bulk")
    await client.aclose()
    default = _client(handler)
    await default.post_json("/v1/embeddings", {"input": ["d3"]}, lane="bulk")
    await default.aclose()
    assert bodies == [{"input": ["q"]}, {"input": ["d1", "d2"], "priority": 1}, {"input": ["d3"]}]
