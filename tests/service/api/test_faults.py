"""Runner faults at the network edge: the API answers 503/504/429 in the error envelope, after exactly the
attempts its retry policy allows, and leaves nothing running at the runner.

Timeouts and refused connections are real (a loopback server that accepts, reads and never answers, recording
each request and when its connection closes; a closed port); answers (vectors, 5xx, 429) come from the scripted
runner (``tests.support.scripted_embed``). Documents are seeded with their vectors, so the runner sees only the
requests each test is about. What is asserted is what happened (the status, the envelope, which requests reached
the runner and what became of them), never how long it took.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from service.config import Settings
from tests.support.app import app_client
from tests.support.runners import free_port
from tests.support.scripted_embed import ScriptedEmbedder, scripted_settings, vector_base64

TIMEOUT_S = 1.0
"""The query embedding's deadline where a test waits one out (the silent runner): it must pass, once."""


@dataclass
class SilentConnection:
    request: bytes = b""
    closed: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class SilentServer:
    url: str
    connections: list[SilentConnection] = field(default_factory=list)


@pytest.fixture
async def silent_server() -> AsyncIterator[SilentServer]:
    """Accepts connections, reads the request, never answers; sees (EOF) when the caller closes it."""
    conns: list[asyncio.StreamWriter] = []
    server_state = SilentServer("")

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.append(writer)
        conn = SilentConnection()
        server_state.connections.append(conn)
        try:
            while chunk := await reader.read(1 << 16):  # until the caller closes its end
                conn.request += chunk
        except (asyncio.CancelledError, ConnectionError):
            pass
        finally:
            conn.closed.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    server_state.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    yield server_state
    for w in conns:
        w.close()
    server.close()


@pytest.fixture
def fault_settings(tmp_path: Path) -> Settings:
    settings = scripted_settings(tmp_path)
    settings.upstream.embed_timeout_s = TIMEOUT_S
    settings.upstream.backoff_s = 0.05
    return settings


@asynccontextmanager
async def _seeded(settings: Settings, runner: ScriptedEmbedder | None = None) -> AsyncIterator[httpx.AsyncClient]:
    """The app on ``settings`` (and ``runner``, if given), with collection ``c`` holding document ``a``, written
    with its vector: nothing reaches the runner before the test's own request."""
    async with app_client(settings, transports={"embedding": runner.transport} if runner else None) as client:
        assert (await client.post("/v1/collections", json={"name": "c"})).status_code == 201
        r = await client.post("/v1/collections/c/documents", json={"documents": [
            {"id": "a", "text": "hello", "vector_base64": vector_base64("hello")}]})
        assert r.status_code == 200, r.text
        yield client


def _search(client: httpx.AsyncClient, query: str = "hello"):  # type: ignore[no-untyped-def]
    return client.post("/v1/search", json={"collection": "c", "query": query})


async def test_runner_timeout_answers_504_and_closes_the_request(
    fault_settings: Settings, silent_server: SilentServer
) -> None:
    """No answer before the deadline is a 504, with no retry (no time is left for one), and the request is
    closed at the runner rather than left running there."""
    fault_settings.runners.embed_url = silent_server.url
    async with _seeded(fault_settings) as client:
        r = await _search(client)
        (conn,) = silent_server.connections  # one request reached the runner: not retried
        await conn.closed.wait()  # the API closed it (vLLM aborts a request whose connection closes)
        (replica,) = client.services.embedder.runner.replica_stats()  # type: ignore[attr-defined]
    assert r.status_code == 504
    error = r.json()["error"]
    assert (error["type"], error["code"]) == ("upstream_error", "upstream_timeout")
    assert conn.request.startswith(b"POST /v1/embeddings ")
    assert replica.errors == {"timeout": 1} and replica.in_flight == 0


async def test_connection_refused_answers_503_after_the_allowed_attempts(fault_settings: Settings) -> None:
    """A refused connection is retried (nothing was sent) ``retries`` times, then answered 503: the call ends
    on its attempts, not on its deadline (made long here, so only the attempts can end it)."""
    fault_settings.upstream.embed_timeout_s = 60.0
    fault_settings.runners.embed_url = f"http://127.0.0.1:{free_port()}"
    async with _seeded(fault_settings) as client:
        r = await _search(client)
        (replica,) = client.services.embedder.runner.replica_stats()  # type: ignore[attr-defined]
    assert r.status_code == 503
    error = r.json()["error"]
    assert (error["type"], error["code"]) == ("upstream_error", "upstream_unavailable")
    assert replica.errors == {"connect": 1 + fault_settings.upstream.retries}


@pytest.mark.parametrize(
    ("status", "headers", "code"),
    [(500, {}, "upstream_unavailable"), (503, {}, "upstream_unavailable"),
     (429, {"Retry-After": "0"}, "upstream_overloaded")],
)
async def test_runner_errors_are_retried_then_answered_503(
    fault_settings: Settings, status: int, headers: dict[str, str], code: str
) -> None:
    runner = ScriptedEmbedder(script=lambda _: httpx.Response(status, headers=headers,
                                                              json={"error": {"message": "boom"}}))
    async with _seeded(fault_settings, runner) as client:
        r = await _search(client)
        metrics = (await client.get("/metrics")).text
    assert r.status_code == 503
    body = r.json()["error"]
    assert body["code"] == code and body["type"] == "upstream_error"
    assert "boom" not in r.text or status == 429  # no upstream internals leak for 5xx
    # The same request, once and then once per retry, each answered (none abandoned mid-way).
    assert [(a.inputs, a.outcome) for a in runner.arrivals] == \
        [(("hello",), "answered")] * (1 + fault_settings.upstream.retries)
    if status == 429:
        assert r.headers["Retry-After"] == "1"
    assert f'ragserve_upstream_errors_total{{code="{code}",runner="embedding"}}' in metrics


async def test_transient_error_then_success_is_invisible(fault_settings: Settings) -> None:
    runner = ScriptedEmbedder(script=lambda a: httpx.Response(503) if len(runner.arrivals) == 1 else None)
    async with _seeded(fault_settings, runner) as client:
        r = await _search(client)
    assert r.status_code == 200 and r.json()["hits"][0]["doc_id"] == "a"
    assert [a.inputs for a in runner.arrivals] == [("hello",), ("hello",)]


async def test_ready_reports_a_down_runner(fault_settings: Settings) -> None:
    runner = ScriptedEmbedder()
    async with app_client(fault_settings, transports={"embedding": runner.transport}) as client:
        ok = await client.get("/ready")
    fault_settings.runners.embed_url = f"http://127.0.0.1:{free_port()}"
    async with app_client(fault_settings) as client:
        down = await client.get("/ready")
    assert ok.status_code == 200
    assert ok.json()["checks"] == {"embedding_runner": "ok", "store": "ok", "job_queue": "ok"}
    assert runner.health_checks == 1  # "ok" is the runner's own /health answering
    assert down.status_code == 503 and down.json()["checks"]["embedding_runner"] == "down"
    assert down.json()["capabilities"]["search"] == "down"


async def test_saturated_slots_answer_429(fault_settings: Settings) -> None:
    """With the one query slot taken by a search whose embedding the runner is holding, the next search is
    refused 429 with ``Retry-After`` (it never reaches the runner); the held one then answers 200. The
    deterministic form of the load test's claim (tests/load): overload is a 429, not a queue or a 5xx, and
    the request already admitted is served."""
    fault_settings.upstream.max_concurrency = 1
    fault_settings.upstream.acquire_timeout_s = 0.2  # the refused search waits this long for the slot, once
    runner = ScriptedEmbedder(hold=lambda a: a.inputs == ("hello",))
    async with _seeded(fault_settings, runner) as client:
        first = asyncio.create_task(_search(client, "hello"))
        held = await runner.reached_with("hello")  # the first search holds the slot, at the runner
        second = await _search(client, "two")
        arrived_meanwhile = [a.inputs for a in runner.arrivals]
        held.release.set()
        first_r = await first
    assert second.status_code == 429
    assert second.headers["Retry-After"] == "1"
    assert second.json()["error"]["code"] == "overloaded"
    assert arrived_meanwhile == [("hello",)]  # the refused search never reached the runner
    assert first_r.status_code == 200 and first_r.json()["hits"][0]["doc_id"] == "a"
