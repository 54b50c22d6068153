"""Retry, backoff and error translation of the runner client, faults injected at the network edge."""

from __future__ import annotations

import httpx
import pytest

from service.clients.errors import UpstreamError, UpstreamOverloaded, UpstreamRejected, UpstreamUnavailable
from service.clients.runner import RunnerClient


def _client(handler, **kw) -> RunnerClient:  # type: ignore[no-untyped-def]
    return RunnerClient("embedding", "http://runner", timeout_s=5, backoff_s=0.01,
                        transport=httpx.MockTransport(handler), **kw)


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
