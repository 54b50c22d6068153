"""Runner faults at the network edge: the API answers 503/504 in the error envelope within its timeout.

Timeouts and refused connections are real (a loopback server that accepts and never answers; a closed
port); 5xx and 429 are injected with ``httpx.MockTransport``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest

from service.config import Settings
from tests.support.app import app_client
from tests.support.runners import free_port

TIMEOUT_S = 1.5


@pytest.fixture
async def silent_server() -> AsyncIterator[str]:
    """Accepts connections, reads, never answers."""
    conns: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.append(writer)
        try:
            await reader.read(1 << 16)
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    yield f"http://127.0.0.1:{port}"
    for w in conns:
        w.close()
    server.close()


@pytest.fixture
def fault_settings(minilm_settings: Settings) -> Settings:
    minilm_settings.upstream.embed_timeout_s = TIMEOUT_S
    minilm_settings.upstream.backoff_s = 0.05
    return minilm_settings


async def _seed_then_break(settings: Settings, transport: httpx.AsyncBaseTransport | None, url: str | None):
    """Seed a collection through the real runner, then reopen the same store with a broken runner."""
    async with app_client(settings) as client:
        await client.post("/v1/collections", json={"name": "c"})
        r = await client.post("/v1/collections/c/documents", json={"documents": [{"id": "a", "text": "hello"}]})
        assert r.status_code == 200
    if url is not None:
        settings.runners.embed_url = url
    return app_client(settings, transports={"embedding": transport} if transport else None)


async def _timed_search(client: httpx.AsyncClient) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    r = await client.post("/v1/search", json={"collection": "c", "query": "hello"})
    return r, time.monotonic() - started


async def test_runner_timeout_answers_504_within_the_timeout(fault_settings: Settings, silent_server: str) -> None:
    async with await _seed_then_break(fault_settings, None, silent_server) as client:
        r, elapsed = await _timed_search(client)
    assert r.status_code == 504
    assert r.json()["error"]["code"] == "upstream_timeout"
    assert elapsed < TIMEOUT_S + 1.0


async def test_connection_refused_answers_503(fault_settings: Settings) -> None:
    async with await _seed_then_break(fault_settings, None, f"http://127.0.0.1:{free_port()}") as client:
        r, elapsed = await _timed_search(client)
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "upstream_unavailable"
    assert elapsed < TIMEOUT_S + 1.0


@pytest.mark.parametrize(
    ("status", "headers", "code"),
    [(500, {}, "upstream_unavailable"), (503, {}, "upstream_unavailable"),
     (429, {"Retry-After": "0"}, "upstream_overloaded")],
)
async def test_runner_errors_are_retried_then_answered_503(
    fault_settings: Settings, status: int, headers: dict[str, str], code: str
) -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(status, headers=headers, json={"error": {"message": "boom"}})

    async with await _seed_then_break(fault_settings, httpx.MockTransport(handler), None) as client:
        r, elapsed = await _timed_search(client)
        metrics = (await client.get("/metrics")).text
    assert r.status_code == 503
    body = r.json()["error"]
    assert body["code"] == code and body["type"] == "upstream_error"
    assert "boom" not in r.text or status == 429  # no upstream internals leak for 5xx
    assert calls == 1 + fault_settings.upstream.retries
    assert elapsed < TIMEOUT_S + 1.0
    if status == 429:
        assert r.headers["Retry-After"] == "1"
    assert f'ragserve_upstream_errors_total{{code="{code}",runner="embedding"}}' in metrics


async def test_transient_error_then_success_is_invisible(fault_settings: Settings) -> None:
    real = httpx.AsyncHTTPTransport()
    calls = 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls == 1:
            return httpx.Response(503)
        return await real.handle_async_request(request)

    async with real, await _seed_then_break(fault_settings, httpx.MockTransport(handler), None) as client:
        r, _ = await _timed_search(client)
    assert r.status_code == 200 and r.json()["hits"][0]["doc_id"] == "a"
    assert calls == 2


async def test_ready_reports_a_down_runner(fault_settings: Settings) -> None:
    async with app_client(fault_settings) as client:
        ok = await client.get("/ready")
    fault_settings.runners.embed_url = f"http://127.0.0.1:{free_port()}"
    async with app_client(fault_settings) as client:
        down = await client.get("/ready")
    assert ok.status_code == 200
    assert ok.json()["checks"] == {"embedding_runner": "ok", "store": "ok", "job_queue": "ok"}
    assert down.status_code == 503 and down.json()["checks"]["embedding_runner"] == "down"
    assert down.json()["capabilities"]["search"] == "down"


async def test_saturated_slots_answer_429(fault_settings: Settings, silent_server: str) -> None:
    fault_settings.upstream.max_concurrency = 1
    fault_settings.upstream.acquire_timeout_s = 0.2
    async with await _seed_then_break(fault_settings, None, silent_server) as client:
        first = asyncio.create_task(client.post("/v1/search", json={"collection": "c", "query": "one"}))
        await asyncio.sleep(0.3)
        second = await client.post("/v1/search", json={"collection": "c", "query": "two"})
        await first
    assert second.status_code == 429
    assert second.headers["Retry-After"] == "1"
    assert second.json()["error"]["code"] == "overloaded"
